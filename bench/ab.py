"""A/B two kiln binaries, or one binary under two environments, on the same models, alternating,
for before/after figures of a change.

    python3 bench/ab.py --a OLD/bin/kiln --b build/bin/kiln [--rounds 5] [--threads 1]
                        [--precision bf16] [--only resnet50,resnet50.qdq] [--model FILE]...
                        [--env-a 'NAME=VALUE ...'] [--env-b 'NAME=VALUE ...'] [--layers N]
                        [--batch N]

Each binary builds its own plan of each model (plans are not portable across plan formats), then
the two run `kiln bench --json` in turns, --rounds times, the side that goes first alternating;
the table gives each side's best median and the ratio A/B (> 1: B is faster), then the medians
of the rounds' medians and their ratio, the rounds in which B was faster than A in the same
round ("B ahead", k of n), and every round's medians. The models are the bundled tests/models
networks plus any ONNX files under bench/models/, or the --model files alone.

--env-a / --env-b set environment variables for one side's runs (its build too), so that one
binary can be compared with itself under a switch: `--a build/bin/kiln --env-b
KILN_CPU_CONV_PIXELS=0` (--b defaults to --a). --layers N also runs each side once a round with
`--profile` (apart from the timed runs, so the whole-model figures carry no profiler) and prints,
per model, each side's sum of per-layer minimums over the rounds and the N layers whose minimum
moved most either way: a change's effect on the layers it touches, and on those it does not,
which is the noise to read it against. --batch N runs each model on N images: a copy whose
inputs' and outputs' leading dim is N (as bench.py's --batch makes, but fixed, so that each
plan knows its shapes when it is built), the --shapes of a bundled model given N images too.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODELS = os.path.join(REPO, "tests", "models")


def bundled():
    with open(os.path.join(MODELS, "manifest.json")) as f:
        for m in json.load(f)["models"]:
            yield m["name"], os.path.join(MODELS, m["model"]), m["shapes"]
    for path in sorted(glob.glob(os.path.join(HERE, "models", "*.onnx"))):
        yield os.path.basename(path)[:-5], path, []


def parse_env(text, flag):
    """'A=1 B=2' as a dict; exits with a one-line error on a word without '='."""
    env = {}
    for word in (text or "").split():
        name, eq, value = word.partition("=")
        if not eq or not name:
            sys.exit(f"ab.py: {flag}: '{word}' is not NAME=VALUE")
        env[name] = value
    return env


def run(cmd, env, what):
    """A kiln command's stdout; a failure ends the comparison with kiln's own one-line error."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=600, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        sys.exit(f"ab.py: {what} failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return proc.stdout


def bench(kiln, env, plan, threads, iterations, warmup=5, profile=False, what="kiln bench"):
    cmd = [kiln, "bench", plan, "--json", "--threads", str(threads), "--warmup", str(warmup),
           "--iterations", str(iterations)] + (["--profile"] if profile else [])
    return json.loads(run(cmd, env, what))


def with_batch(spec, batch):
    """A --shapes spec (NAME:DIMS or NAME:MIN,OPT,MAX) with every leading dim set to batch."""
    name, _, dims = spec.rpartition(":")
    return name + ":" + ",".join("x".join([str(batch)] + d.split("x")[1:])
                                 for d in dims.split(","))


def batched(path, shapes, batch, tmp):
    """The model and its shapes for `batch` images: a copy in tmp with that leading dim."""
    if batch == 1:
        return path, shapes
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    from bench import batched_model  # onnx and numpy: only needed here
    return batched_model(path, batch, tmp, fixed=True), [with_batch(s, batch) for s in shapes]


def print_layers(name, best, count):
    """Each side's sum of per-layer minimums and the layers that moved most, both ways."""
    common = [n for n in best["a"] if n in best["b"]]
    sums = {side: sum(best[side][n] for n in common) for side in best}
    print(f"  {name}: sum of per-layer minimums over {len(common)} layers, A {sums['a']:.3f} ms,"
          f" B {sums['b']:.3f} ms (A/B {sums['a'] / sums['b']:.2f})")
    moved = sorted(common, key=lambda n: best["b"][n] - best["a"][n])
    shown = moved[:count] + [n for n in moved[-count:][::-1] if n not in moved[:count]]
    for n in shown:
        a, b = best["a"][n], best["b"][n]
        print(f"    {a:9.4f} {b:9.4f} {b - a:+9.4f}  {n}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the baseline kiln binary")
    ap.add_argument("--b", help="the kiln binary under test (default: --a, with --env-b)")
    ap.add_argument("--env-a", help="'NAME=VALUE ...' set for A's builds and runs")
    ap.add_argument("--env-b", help="'NAME=VALUE ...' set for B's builds and runs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", help="kiln build --precision for both plans (fp16, bf16)")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--model", action="append", default=[],
                    help="an .onnx file to compare instead of the bundled models (repeatable)")
    ap.add_argument("--batch", type=int, default=1, metavar="N",
                    help="images a run: a copy of each model with a leading dim of N")
    ap.add_argument("--layers", type=int, default=0, metavar="N",
                    help="also profile each side once a round and show the N layers that "
                    "moved most each way")
    args = ap.parse_args()
    if args.batch < 1:
        sys.exit(f"ab.py: --batch: {args.batch}: give a count of images of 1 or more")
    kilns = {"a": args.a, "b": args.b or args.a}
    envs = {"a": parse_env(args.env_a, "--env-a"), "b": parse_env(args.env_b, "--env-b")}
    if kilns["a"] == kilns["b"] and envs["a"] == envs["b"]:
        sys.exit("ab.py: A and B are the same binary with the same environment: nothing to "
                 "compare (give --b, or --env-a / --env-b)")
    for side, kiln in kilns.items():
        if not os.access(kiln, os.X_OK):
            sys.exit(f"ab.py: --{side}: {kiln}: not an executable kiln binary")
    for path in args.model:
        if not os.path.isfile(path):
            sys.exit(f"ab.py: --model: {path}: no such file")
    full_env = {side: dict(os.environ, **envs[side]) for side in kilns}
    only = set(args.only.split(",")) if args.only else None
    models = ([(os.path.basename(p)[:-5] if p.endswith(".onnx") else os.path.basename(p), p, [])
               for p in args.model] if args.model else list(bundled()))
    with tempfile.TemporaryDirectory(prefix="kiln-ab-") as tmp:
        compare(args, kilns, full_env, models, only, tmp)


def compare(args, kilns, full_env, models, only, tmp):
    """Each model: both sides' plans in tmp, the rounds in turns, the rows."""
    print(f"{'model':24} {'A ms':>9} {'B ms':>9} {'A/B':>6} {'A med':>9} {'B med':>9} {'A/B':>6}"
          f" {'B ahead':>8}  rounds A | B")
    for name, path, shapes in models:
        if only and name not in only:
            continue
        path, shapes = batched(path, shapes, args.batch, tmp)
        plans = {}
        for side, kiln in kilns.items():
            plans[side] = os.path.join(tmp, f"{name}.{side}.plan")
            cmd = [kiln, "build", path, "-o", plans[side]]
            if args.precision:
                cmd += ["--precision", args.precision]
            for s in shapes:
                cmd += ["--shapes", s]
            run(cmd, full_env[side], f"{name}: {side.upper()}'s kiln build")
        runs = {"a": [], "b": []}
        best_layers = {"a": {}, "b": {}}
        for r in range(args.rounds):
            # which side goes first alternates, so that neither always meets the other's caches
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                kiln = kilns[side]
                what = f"{name}: {side.upper()}'s kiln bench"
                res = bench(kiln, full_env[side], plans[side], args.threads, args.iterations,
                            args.warmup, what=what)
                runs[side].append(res["latency_ms"]["median"])
                if args.layers > 0:
                    prof = bench(kiln, full_env[side], plans[side], args.threads,
                                 args.iterations, args.warmup, profile=True, what=what)
                    for layer in prof["layers"]:
                        ms, seen = layer["median_ms"], best_layers[side].get(layer["name"])
                        best_layers[side][layer["name"]] = ms if seen is None else min(seen, ms)
        best = {side: min(v) for side, v in runs.items()}
        med = {side: statistics.median(v) for side, v in runs.items()}
        rounds = " ".join(f"{v:.3f}" for v in runs["a"]) + " | " + " ".join(
            f"{v:.3f}" for v in runs["b"])
        # a round's two turns ran next to each other: B ahead in k of n rounds by its own pair
        ahead = f"{sum(b < a for a, b in zip(runs['a'], runs['b']))}/{len(runs['a'])}"
        print(f"{name:24} {best['a']:9.3f} {best['b']:9.3f} {best['a'] / best['b']:6.2f} "
              f"{med['a']:9.3f} {med['b']:9.3f} {med['a'] / med['b']:6.2f} {ahead:>8}  {rounds}",
              flush=True)
        if args.layers > 0:
            print_layers(name, best_layers, args.layers)


if __name__ == "__main__":
    main()
