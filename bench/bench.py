#!/usr/bin/env python3
"""kiln against onnxruntime on the CPU, side by side on one machine.

    python3 bench/bench.py                  # every full-size model at 1 and 2 threads; a table
                                            # on stdout (--out PAGE.md writes a markdown page)
    python3 bench/bench.py --quick          # the small bundled models, 1 thread, a table on stdout
    python3 bench/bench.py --model m.onnx   # any model (fixed input shapes)

For every model and thread count the two engines take turns (--rounds times): kiln through
`kiln bench PLAN --json` in a child process, onnxruntime in this process with
intra_op_num_threads set and sequential execution. Both get the same random input; each turn
starts with --warmup untimed runs, or as many as last --warmup-seconds (0.5 s; a turn is a fresh
process or session, whose first runs can be slow); reported figures are medians over rounds of
each round's median latency, and each row counts the rounds kiln was faster in by that round's
own two turns (with those ratios' range), which tells a tie on a noisy machine from a gap. Before
timing, one `kiln run`
output is compared with onnxruntime's, so a fast wrong answer cannot pass unnoticed.

The full-size models are exported from torchvision with random weights (by whichever Python has
torch: this one, or /usr/bin/python3) or, without torch, built with onnx.helper; either way they
are cached under bench/models/, which is not committed.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CACHE = os.path.join(HERE, "models")

FULL_MODELS = {
    "resnet50": "ResNet-50 (torchvision, 1×3×224×224)",
    "mobilenetv2": "MobileNetV2 (torchvision, 1×3×224×224)",
    "efficientnet_b0": "EfficientNet-B0 (torchvision, 1×3×224×224)",
    "yolov8n_320": "YOLOv8n-style detector at 320 (C2f, SPPF, DFL head, 1×3×320×320)",
    "yolov8n_640": "YOLOv8n-style detector at 640 (C2f, SPPF, DFL head, 1×3×640×640)",
    "transformer": "Transformer encoder (4 layers, d=256, 4 heads, ff=1024, 1×128 tokens)",
    "bert": "BERT-base-sized encoder (12 layers, d=768, 12 heads, ff=3072, 1×128 tokens)",
}
# The models bench/export_torch.py knows; the others are always built with onnx.helper.
TORCH_EXPORTS = {"resnet50", "mobilenetv2", "efficientnet_b0", "transformer"}
QUICK_MODELS = ["resnet_mini", "mobilenetv2_mini", "transformer_encoder"]


def default_kiln():
    return os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Models


def torch_python():
    """An interpreter that can import torch and torchvision, or None."""
    candidates = [sys.executable, "/usr/bin/python3", shutil.which("python3")]
    for py in dict.fromkeys(c for c in candidates if c):
        try:
            ok = subprocess.run([py, "-c", "import torch, torchvision"], capture_output=True,
                                timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return py
    return None


def ensure_full_model(name, source):
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"{name}.onnx")
    if os.path.exists(path):
        return path, describe_source(path)
    py = torch_python() if source in ("auto", "torch") and name in TORCH_EXPORTS else None
    if py:
        log(f"exporting {name} from torchvision with {py}")
        subprocess.run([py, os.path.join(HERE, "export_torch.py"), CACHE, name], check=True)
        with open(path + ".source", "w") as f:
            f.write("torch")
    elif source == "torch" and name in TORCH_EXPORTS:
        sys.exit("no Python with torch and torchvision found (--source torch)")
    else:
        log(f"building {name} with onnx.helper")
        sys.path.insert(0, HERE)
        import onnx_models

        onnx_models.build(name, path)
        with open(path + ".source", "w") as f:
            f.write("onnx.helper")
    return path, describe_source(path)


def describe_source(path):
    try:
        with open(path + ".source") as f:
            return f.read().strip()
    except OSError:
        return "cached"


def quick_models():
    """The small bundled examples and the small test models, which are always present, each with
    the inputs shipped beside it when there are some."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "examples", "**", "*.onnx"), recursive=True)):
        if uses_custom_ops(path):
            continue  # a plugin model: onnxruntime cannot run it, so there is nothing to compare
        folder = os.path.dirname(path)
        found.append((os.path.relpath(folder, REPO), path, shipped_inputs(path, folder)))
    with open(os.path.join(REPO, "tests", "models", "manifest.json")) as f:
        manifest = {m["name"]: m for m in json.load(f)["models"]}
    for name in QUICK_MODELS:
        if name in manifest:
            m = manifest[name]
            base = os.path.join(REPO, "tests", "models")
            inputs = {k: os.path.join(base, v) for k, v in m["cases"][0]["inputs"].items()}
            found.append((name, os.path.join(base, m["model"]), inputs))
    return found


def uses_custom_ops(model_path):
    model = onnx.load(model_path, load_external_data=False)
    return any(n.domain not in ("", "ai.onnx") for n in model.graph.node)


def shipped_inputs(model_path, folder):
    """<input name>.npy files beside a model, if there is one for every input."""
    model = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    files = {vi.name: os.path.join(folder, f"{vi.name}.npy") for vi in model.graph.input
             if vi.name not in inits}
    return files if all(os.path.exists(p) for p in files.values()) else {}


def batched_model(model_path, batch, folder, fixed=False):
    """A copy of the model for `batch` images: the leading dim of its inputs and outputs made the
    symbol "batch" (fixed: the number `batch`, so that a plan knows every shape when it is built),
    and every Reshape to a constant shape that starts with 1 made to keep its input's leading dim
    (0) instead, as the bench models' heads and attention reshape for one image. Returns the
    copy's path."""
    model = onnx.load(model_path)
    inits = {t.name: t for t in model.graph.initializer}
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) > 0:
            dims[0].Clear()
            if fixed:
                dims[0].dim_value = batch
            else:
                dims[0].dim_param = "batch"
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in inits:
            continue
        if any(a.name == "allowzero" and a.i != 0 for a in node.attribute):
            continue
        t = inits[node.input[1]]
        shape = onnx.numpy_helper.to_array(t).copy()
        if shape.ndim == 1 and shape.size > 1 and shape[0] == 1:
            shape[0] = 0
            t.CopyFrom(onnx.numpy_helper.from_array(shape.astype(np.int64), t.name))
    del model.graph.value_info[:]
    out = os.path.join(folder, f"{os.path.splitext(os.path.basename(model_path))[0]}.b{batch}.onnx")
    onnx.save(model, out)
    return out


def make_inputs(model_path, folder, given=None, batch=1):
    """Inputs for every graph input: the given .npy files, else random data, with a dynamic
    leading dim set to `batch` and other dynamic dims to 64. Returns ({name: array},
    {name: .npy path}, [--shapes specs for inputs with dynamic dims])."""
    model = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    arrays, files, specs = {}, {}, []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim)
        static = all(d.HasField("dim_value") and d.dim_value > 0 for d in dims)
        if given and vi.name in given:
            path = given[vi.name]
            arr = np.load(path)
        else:
            shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0
                     else (batch if i == 0 else 64) for i, d in enumerate(dims)]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
            if dtype.kind in "iu":
                arr = rng.integers(1, 10, size=shape).astype(dtype)
            elif dtype == np.bool_:
                arr = rng.random(shape) > 0.5
            else:
                arr = rng.standard_normal(shape).astype(dtype)
            path = os.path.join(folder, f"in{len(files)}.npy")
            np.save(path, arr)
        arrays[vi.name], files[vi.name] = arr, path
        if not static:
            specs.append(f"{vi.name}:{'x'.join(map(str, arr.shape))}")
    return arrays, files, specs


# ---------------------------------------------------------------------------------------------
# Engines


def kiln_cmd(kiln, *args):
    proc = subprocess.run([kiln, *map(str, args)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"kiln {args[0]} failed: {proc.stderr.strip()}")
    return proc.stdout


TIMING_CACHE = None  # --timing-cache: per-layer thread counts timed and kept there


def kiln_build(kiln, model_path, plan_path, threads, specs):
    start = time.monotonic()
    shapes = [a for spec in specs for a in ("--shapes", spec)]
    cache = ["--timing-cache", TIMING_CACHE] if TIMING_CACHE else []
    kiln_cmd(kiln, "build", model_path, "-o", plan_path, "--quiet", "--threads", threads, *shapes,
             *cache)
    return time.monotonic() - start


def kiln_bench(kiln, plan, files, threads, warmup, iterations):
    args = ["bench", plan, "--warmup", warmup, "--iterations", iterations, "--threads", threads,
            "--json"]
    for name, path in files.items():
        args += ["--input", f"{name}={path}"]
    out = kiln_cmd(kiln, *args)
    return json.loads(out.strip().splitlines()[-1])["latency_ms"]


def kiln_outputs(kiln, plan, files, folder):
    out_dir = os.path.join(folder, "out")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    args = ["run", plan, "--output-dir", out_dir]
    for name, path in files.items():
        args += ["--input", f"{name}={path}"]
    kiln_cmd(kiln, *args)
    with open(os.path.join(out_dir, "outputs.json")) as f:
        index = json.load(f)
    return {name: np.load(os.path.join(out_dir, file)) for name, file in index.items()}


def ort_session(model_path, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])


def ort_turn(model_path, threads, feeds, warmup, iterations):
    """onnxruntime's turn of a round: a session made, timed (ort_bench) and released. Its idle
    workers spin for work after a run; a session kept alive through kiln's turns took kiln's
    cores on a machine with none spare (kiln at 16 threads measured 2-2.6x slower beside one
    than alone on the 16-core host)."""
    sess = ort_session(model_path, threads)
    try:
        return ort_bench(sess, feeds, warmup, iterations)
    finally:
        del sess


def ort_bench(sess, feeds, warmup, iterations):
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1000.0)
    times.sort()
    return {"min": times[0], "median": statistics.median(times), "mean": statistics.fmean(times),
            "p90": times[min(len(times) - 1, int(0.9 * len(times)))], "max": times[-1]}


def max_rel_diff(kiln_out, ort_out, names):
    worst = 0.0
    for name, ref in zip(names, ort_out):
        got = kiln_out.get(name)
        if got is None or got.shape != ref.shape:
            return float("inf")
        ref = ref.astype(np.float64)
        scale = max(1e-6, float(np.abs(ref).max()))
        worst = max(worst, float(np.abs(got.astype(np.float64) - ref).max()) / scale)
    return worst


# ---------------------------------------------------------------------------------------------
# The comparison


def warmup_runs(sess, arrays, args):
    """Untimed runs each engine's turn starts with: --warmup, or more so that they last about
    --warmup-seconds (estimated from one warm run of onnxruntime). Every turn is a fresh kiln
    process or onnxruntime session, and at 16 threads on a 16-core host kiln's first runs of a
    process took 1.5-5x its steady time: 3 warm-up runs left medians of 8 runs 1.5-3x too slow
    (docs/benchmarks.md, "The 16-core host, 2026-12-07")."""
    if args.warmup_seconds <= 0:
        return args.warmup
    sess.run(None, arrays)
    start = time.perf_counter()
    sess.run(None, arrays)
    per_run = max(time.perf_counter() - start, 1e-5)
    return max(args.warmup, min(2000, int(args.warmup_seconds / per_run + 0.999)))


def compare_model(kiln, label, model_path, given, threads_list, args, work):
    if args.batch > 1:
        model_path = batched_model(model_path, args.batch, work)
        label = f"{label}, batch {args.batch}"
    arrays, files, specs = make_inputs(model_path, work, given, args.batch)
    rows = []
    for threads in threads_list:
        plan = os.path.join(work, f"t{threads}.plan")
        build_s = kiln_build(kiln, model_path, plan, threads, specs)
        sess = ort_session(model_path, threads)
        out_names = [o.name for o in sess.get_outputs()]
        try:
            diff = max_rel_diff(kiln_outputs(kiln, plan, files, work),
                                sess.run(out_names, arrays), out_names)
        except RuntimeError as exc:
            log(f"{label}: kiln run failed: {exc}")
            diff = float("nan")
        warmup = warmup_runs(sess, arrays, args)
        del sess
        k_rounds, o_rounds = [], []
        for r in range(args.rounds):
            # Alternate which engine goes first so that neither always meets a cold cache.
            order = ("kiln", "ort") if r % 2 == 0 else ("ort", "kiln")
            for engine in order:
                if engine == "kiln":
                    k_rounds.append(kiln_bench(kiln, plan, files, threads, warmup,
                                               args.iterations))
                else:
                    o_rounds.append(ort_turn(model_path, threads, arrays, warmup,
                                             args.iterations))
        row = {
            "model": label, "threads": threads, "build_s": build_s, "max_rel_diff": diff,
            "kiln_ms": statistics.median(r["median"] for r in k_rounds),
            "ort_ms": statistics.median(r["median"] for r in o_rounds),
            "kiln_p90": statistics.median(r["p90"] for r in k_rounds),
            "ort_p90": statistics.median(r["p90"] for r in o_rounds),
            "kiln_min": min(r["min"] for r in k_rounds),
            "ort_min": min(r["min"] for r in o_rounds),
            "paired": paired_ratios(k_rounds, o_rounds),
        }
        row["speedup"] = row["ort_ms"] / row["kiln_ms"] if row["kiln_ms"] > 0 else float("nan")
        log(f"{label:<28} {threads} thr  kiln {row['kiln_ms']:8.3f} ms  onnxruntime "
            f"{row['ort_ms']:8.3f} ms  ×{row['speedup']:.2f}  min {row['kiln_min']:.3f} / "
            f"{row['ort_min']:.3f} ms ×{row['ort_min'] / row['kiln_min']:.2f}  rounds ahead "
            f"{rounds_cell(row)}  (rel diff {diff:.1e})")
        rows.append(row)
    return rows


def paired_ratios(k_rounds, o_rounds):
    """ORT / kiln of each round: the two turns of a round ran next to each other, so a slow
    minute of a shared machine moves both and leaves their ratio."""
    return [o["median"] / k["median"] if k["median"] > 0 else float("nan")
            for k, o in zip(k_rounds, o_rounds)]


def rounds_cell(row):
    """'4/6 (0.97-1.12)': the rounds kiln was faster in, of all, and the paired ratios' range;
    '-' for a run saved before the rounds were kept."""
    paired = row.get("paired")
    if not paired:
        return "-"
    ahead = sum(1 for x in paired if x > 1.0)
    return f"{ahead}/{len(paired)} ({min(paired):.2f}-{max(paired):.2f})"


def machine():
    info = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
        info["cpu"] = fields.get("Model name", "?").strip()
        info["cpus"] = fields.get("CPU(s)", "?").strip()
        flags = fields.get("Flags", "")
        info["isa"] = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile")
                               if f in flags.split())
    except OSError:
        info["cpu"] = platform.processor()
    import onnxruntime as ort

    info["onnxruntime"] = ort.__version__
    info["onnx"] = onnx.__version__
    return info


def table(rows):
    lines = ["| model | threads | kiln median ms | onnxruntime median ms | ORT / kiln | "
             "rounds kiln ahead | kiln p90 ms | ORT p90 ms | kiln build s | max rel diff |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['threads']} | {r['kiln_ms']:.3f} | {r['ort_ms']:.3f} | "
                     f"{r['speedup']:.2f}× | {rounds_cell(r)} | {r['kiln_p90']:.3f} | "
                     f"{r['ort_p90']:.3f} | {r['build_s']:.2f} | {r['max_rel_diff']:.1e} |")
    return "\n".join(lines)


SOURCE_TEXT = {"torch": "exported from PyTorch with seeded random weights",
               "onnx.helper": "built with onnx.helper with seeded random weights"}


def git_commit():
    """The commit measured: $KILN_COMMIT where the tree travels without .git, else git's."""
    if os.environ.get("KILN_COMMIT"):
        return os.environ["KILN_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def write_doc(path, run):
    rows, info, kiln_version, sources = run["rows"], run["machine"], run["kiln"], run["sources"]
    args = argparse.Namespace(**run["protocol"])
    today, commit = run["date"], run["commit"]
    text = f"""# Benchmarks: kiln against onnxruntime (CPU)

Measured {today} by `python3 bench/bench.py` on one machine, both engines taking turns in one
process tree: kiln through `kiln bench PLAN --json` (plan built beforehand with the same
`--threads`), onnxruntime in-process (`intra_op_num_threads` = threads, sequential execution, all
graph optimizations). float32, batch {getattr(args, "batch", 1)}, random weights and inputs. Each figure is the median over
{args.rounds} alternating rounds of that round's median of {args.iterations} timed runs (after
{args.warmup} warm-up runs, or as many as last {getattr(args, "warmup_seconds", 0)} s). **ORT / kiln > 1 means kiln is faster.** "max rel diff" is the
largest difference between kiln's and onnxruntime's outputs, relative to the output's largest
magnitude. "rounds kiln ahead" counts the rounds whose ORT / kiln, from that round's two turns
(run next to each other), is above 1, and gives those ratios' range: a median ratio near 1 with
the rounds split both ways is a tie within the machine's noise.

{table(rows)}

Models: {"; ".join(f"{FULL_MODELS.get(k, k)}, {SOURCE_TEXT.get(v, v)}" for k, v in sources.items())}.

## Machine

- CPU: {info.get('cpu', '?')} ({info.get('cpus', '?')} logical CPUs; {info.get('isa', '')})
- OS: {info['platform']}
- kiln {kiln_version} (commit {commit}), onnxruntime {info['onnxruntime']}, onnx {info['onnx']}, Python {info['python']}
{run.get("note") and "- " + run["note"] or ""}

On a machine shared with other work the figures are noisy; the ratios less so, because the
engines alternate.

Reproduce: `python3 bench/bench.py` (models are cached under bench/models/, not committed;
`--rounds`, `--iterations`, `--warmup`, `--warmup-seconds` and `--threads` change the protocol).
"""
    tmp = path + ".tmp"  # a failed write leaves the page as it was
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description="kiln against onnxruntime on the CPU")
    ap.add_argument("--kiln", default=default_kiln())
    ap.add_argument("--quick", action="store_true",
                    help="small bundled models, 1 thread, few runs; table on stdout only")
    ap.add_argument("--model", action="append", default=[],
                    help="benchmark this .onnx file instead (repeatable)")
    ap.add_argument("--models", default=",".join(FULL_MODELS),
                    help="full-size models to run (default: all)")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--warmup-seconds", type=float, default=None,
                    help="at least this long of untimed runs a turn (default 0.5; --quick 0)")
    ap.add_argument("--source", choices=("auto", "torch", "helper"), default="auto",
                    help="how to make the full-size models when they are not cached")
    ap.add_argument("--out", default=None,
                    help="also write the run as a markdown page to this file (none by default: "
                    "docs/benchmarks.md is curated by hand from such runs)")
    ap.add_argument("--json-out", help="also write the rows as JSON")
    ap.add_argument("--note", default="", help="a line about the machine for the document")
    ap.add_argument("--batch", type=int, default=1,
                    help="images per run: the models' leading dim made dynamic and run at N "
                         "(a Reshape to a constant shape starting with 1 keeps its input's "
                         "leading dim instead)")
    ap.add_argument("--timing-cache", default=None,
                    help="build kiln's plans with this timing cache file: layers faster on "
                         "fewer threads get per-layer thread counts (timed once, kept in FILE)")
    ap.add_argument("--from-json", help="only render a run saved with --json-out (e.g. on "
                    "another machine) as the markdown page --out, or on stdout")
    args = ap.parse_args()
    global TIMING_CACHE
    TIMING_CACHE = args.timing_cache

    if args.from_json:
        with open(args.from_json) as f:
            run = json.load(f)
        if args.out:
            write_doc(args.out, run)
        else:
            print(table(run["rows"]))
        return 0
    quick = args.quick
    args.rounds = args.rounds or (2 if quick else 5)
    args.iterations = args.iterations or (10 if quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (2 if quick else 5)
    if args.warmup_seconds is None:
        args.warmup_seconds = 0.0 if quick else 0.5
    threads = [int(t) for t in (args.threads or ("1" if quick else "1,2")).split(",")]

    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        sys.exit("onnxruntime is not installed: pip install onnxruntime numpy onnx")
    if not os.access(args.kiln, os.X_OK):
        sys.exit(f"kiln binary not found at {args.kiln} (build it, or pass --kiln / set KILN)")
    kiln = os.path.abspath(args.kiln)
    kiln_version = kiln_cmd(kiln, "--version").strip().replace("kiln ", "")

    sources = {}
    if args.model:
        models = [(os.path.basename(p), os.path.abspath(p), None) for p in args.model]
    elif quick:
        models = quick_models()
    else:
        models = []
        for name in args.models.split(","):
            path, source = ensure_full_model(name, args.source)
            models.append((FULL_MODELS[name].split(" (")[0], path, None))
            sources[name] = source

    rows = []
    work = tempfile.mkdtemp(prefix="kiln-bench-")
    try:
        for label, path, given in models:
            try:
                rows += compare_model(kiln, label, path, given, threads, args, work)
            except Exception as exc:  # one model that either engine rejects skips that model
                log(f"{label}: skipped: {exc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(table(rows))
    run = {"date": datetime.date.today().isoformat(), "commit": git_commit(),
           "kiln": kiln_version, "machine": machine(), "sources": sources, "rows": rows,
           "note": args.note, "protocol": {"rounds": args.rounds, "iterations": args.iterations,
                        "warmup": args.warmup, "warmup_seconds": args.warmup_seconds,
                        "batch": args.batch}}
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(run, f, indent=1)
    if args.out:
        write_doc(args.out, run)
        log(f"wrote {os.path.relpath(args.out)}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
