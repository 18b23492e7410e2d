#!/usr/bin/env python3
"""bf16 on the CPU: kiln --precision bf16 against onnxruntime fp32 and kiln fp32, batch 1, the
three engines alternating in rounds in one run, with the accuracy of kiln bf16 against
onnxruntime fp32: top-1 agreement over --samples random inputs (CNNs) and the mean and lowest
cosine similarity of the outputs (the transformer encoder's). The fp16 row (storage: weights
in fp16, widened at load) reports its plan size and accuracy only; it runs as fp32 does.

    python3 bench/bench_bf16.py                          # ResNet-50 and the transformer encoder,
                                                         # 1 and 2 threads
    python3 bench/bench_bf16.py --threads 1,2,16 --models resnet50,transformer

KILN_BF16_PORTABLE=1 measures the portable path on a CPU with AVX512-BF16; --bf16-env
KILN_CPU_AMX=0 builds and times a second bf16 plan with that variable set, in the same rounds
(on a CPU with AMX: kiln as it is on a CPU without, against the AMX path), and adds its
columns. Models come from
bench.py's cache (bench/models/, exported from torchvision when torch is there, else built with
onnx.helper).
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402


@contextlib.contextmanager
def env_set(var, value):
    saved = os.environ.get(var)
    os.environ[var] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[var]
        else:
            os.environ[var] = saved


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def build(kiln, model, plan, threads, specs, precision):
    shapes = [a for spec in specs for a in ("--shapes", spec)]
    p = subprocess.run([kiln, "build", model, "-o", plan, "--threads", str(threads),
                        "--precision", precision, *shapes], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"kiln build {model} --precision {precision}: {p.stderr.strip()}")
    return p.stderr.strip()  # the bf16 path line, where the build printed one


def inspect_precisions(kiln, plan):
    info = json.loads(bench.kiln_cmd(kiln, "inspect", plan, "--json"))
    counts = {}
    for layer in info["layers"]:
        counts[layer["precision"]] = counts.get(layer["precision"], 0) + 1
    return counts, info["weight_bytes"]


def accuracy(kiln, plan, ref, name, shape, samples, work):
    rng = np.random.default_rng(11)
    agree, cos = 0, []
    for s in range(samples):
        x = rng.standard_normal(shape).astype(np.float32)
        path = os.path.join(work, f"s{s}.npy")
        np.save(path, x)
        r = ref.run(None, {name: x})[0]
        k = list(bench.kiln_outputs(kiln, plan, {name: path}, work).values())[0]
        cos.append(cosine(k, r))
        agree += int(np.argmax(k.reshape(k.shape[0], -1)[0]) ==
                     np.argmax(r.reshape(r.shape[0], -1)[0]))
    return agree, cos


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,transformer")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--samples", type=int, default=8, help="inputs for the accuracy check")
    ap.add_argument("--kiln", default=bench.default_kiln())
    ap.add_argument("--bf16-env", default="", metavar="VAR=VALUE",
                    help="also build and time a bf16 plan with this environment variable set")
    ap.add_argument("--profile-dir", default="", metavar="DIR",
                    help="write kiln bench --profile of each bf16 plan to DIR")
    args = ap.parse_args()
    extra = None
    if args.bf16_env:
        var, _, value = args.bf16_env.partition("=")
        extra = (f"kiln bf16 {args.bf16_env}", var, value)
    threads = [int(t) for t in args.threads.split(",")]
    rows, sizes = [], []
    path_line = ""
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            fp32, _ = bench.ensure_full_model(name, "auto")
            _, files, specs = bench.make_inputs(fp32, work)
            inp = onnx.load(fp32, load_external_data=False).graph.input[0]
            shape = list(np.load(files[inp.name]).shape)
            feeds = {inp.name: np.load(files[inp.name])}
            ref = bench.ort_session(fp32, 2)
            acc = {}
            for prec in ("bf16", "fp16"):
                plan = os.path.join(work, f"{name}.{prec}.acc.plan")
                line = build(args.kiln, fp32, plan, max(threads), specs, prec)
                path_line = path_line or line
                acc[prec] = accuracy(args.kiln, plan, ref, inp.name, shape, args.samples, work)
                counts, wbytes = inspect_precisions(args.kiln, plan)
                sizes.append((name, prec, os.path.getsize(plan), wbytes, counts, acc[prec]))
            del ref  # its workers must not spin through the timed rounds
            plan32 = os.path.join(work, f"{name}.fp32.acc.plan")
            build(args.kiln, fp32, plan32, max(threads), specs, "fp32")
            counts, wbytes = inspect_precisions(args.kiln, plan32)
            sizes.append((name, "fp32", os.path.getsize(plan32), wbytes, counts, None))
            for t in threads:
                plans = {}
                for prec in ("fp32", "bf16"):
                    plans[prec] = os.path.join(work, f"{name}.{prec}.{t}.plan")
                    build(args.kiln, fp32, plans[prec], t, specs, prec)
                if extra:
                    plans[extra[0]] = os.path.join(work, f"{name}.bf16-env.{t}.plan")
                    with env_set(extra[1], extra[2]):
                        build(args.kiln, fp32, plans[extra[0]], t, specs, "bf16")
                lat = {"ort fp32": [], "kiln fp32": [], "kiln bf16": []}
                if extra:
                    lat[extra[0]] = []
                for _ in range(args.rounds):
                    lat["ort fp32"].append(
                        bench.ort_turn(fp32, t, feeds, args.warmup, args.iterations))
                    for prec in ("fp32", "bf16"):
                        lat[f"kiln {prec}"].append(bench.kiln_bench(
                            args.kiln, plans[prec], files, t, args.warmup, args.iterations))
                    if extra:
                        with env_set(extra[1], extra[2]):
                            lat[extra[0]].append(bench.kiln_bench(args.kiln, plans[extra[0]],
                                                                  files, t, args.warmup,
                                                                  args.iterations))
                # the median of the rounds' medians, and the lowest time seen (steadier on a
                # shared machine)
                med = {k: statistics.median(r["median"] for r in v) for k, v in lat.items()}
                low = {k: min(r["min"] for r in v) for k, v in lat.items()}
                rows.append((name, t, med, low, acc["bf16"], args.samples))
                if args.profile_dir:
                    os.makedirs(args.profile_dir, exist_ok=True)
                    with open(os.path.join(args.profile_dir, f"{name}.bf16.{t}.txt"), "w") as f:
                        f.write(bench.kiln_cmd(args.kiln, "bench", plans["bf16"], "--threads", t,
                                               "--warmup", args.warmup, "--iterations",
                                               args.iterations, "--profile",
                                               *[a for n, p in files.items()
                                                 for a in ("--input", f"{n}={p}")]))
                bench.log(f"{name}, {t} threads: median ms " +
                          ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    if path_line:
        print(f"build: {path_line}")
    print("| model | threads | ORT fp32 ms | kiln fp32 ms | kiln bf16 ms | ORT fp32 / kiln bf16 | "
          "kiln fp32 / kiln bf16 | min ms: ORT fp32 / kiln fp32 / kiln bf16 | "
          "ORT / kiln bf16 (min) | top-1 agree bf16 vs ORT fp32 | cosine mean / min |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, t, m, lo, (agree, cos), n in rows:
        print(f"| {name} | {t} | {m['ort fp32']:.2f} | {m['kiln fp32']:.2f} | "
              f"{m['kiln bf16']:.2f} | {m['ort fp32'] / m['kiln bf16']:.2f} | "
              f"{m['kiln fp32'] / m['kiln bf16']:.2f} | "
              f"{lo['ort fp32']:.2f} / {lo['kiln fp32']:.2f} / {lo['kiln bf16']:.2f} | "
              f"{lo['ort fp32'] / lo['kiln bf16']:.2f} | {agree}/{n} | "
              f"{statistics.fmean(cos):.5f} / {min(cos):.5f} |")
    if extra:
        print()
        print(f"| model | threads | kiln bf16 ms | {extra[0]} ms | {extra[0]} / kiln bf16 | "
              f"min ms: kiln bf16 / {extra[0]} |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, t, m, lo, _, _ in rows:
            print(f"| {name} | {t} | {m['kiln bf16']:.2f} | {m[extra[0]]:.2f} | "
                  f"{m[extra[0]] / m['kiln bf16']:.2f} | "
                  f"{lo['kiln bf16']:.2f} / {lo[extra[0]]:.2f} |")
    print()
    print("| model | precision | plan bytes | weight bytes | layers by precision | "
          "top-1 agree vs ORT fp32 | cosine mean / min |")
    print("|---|---|---:|---:|---|---:|---:|")
    for name, prec, size, wbytes, counts, a in sizes:
        c = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        ac = "-" if a is None else f"{a[0]}/{args.samples}"
        co = "-" if a is None else f"{statistics.fmean(a[1]):.5f} / {min(a[1]):.5f}"
        print(f"| {name} | {prec} | {size} | {wbytes} | {c} | {ac} | {co} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
