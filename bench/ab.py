"""A/B two kiln binaries on the same models, alternating, for before/after figures of a change.

    python3 bench/ab.py --a OLD/bin/kiln --b build/bin/kiln [--rounds 5] [--threads 1]
                        [--precision bf16] [--only resnet50,resnet50.qdq]

Each binary builds its own plan of each model (plans are not portable across plan formats), then
the two run `kiln bench --json` in turns, --rounds times; the table gives each side's best
median and the ratio A/B (> 1: B is faster), then the medians of the rounds' medians and their
ratio, and every round's medians. The models are the bundled tests/models networks
plus any ONNX files under bench/models/.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
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


def bench(kiln, plan, threads, iterations, warmup=5):
    out = subprocess.run([kiln, "bench", plan, "--json", "--threads", str(threads), "--warmup",
                          str(warmup), "--iterations", str(iterations)], check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600).stdout
    return json.loads(out)["latency_ms"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the baseline kiln binary")
    ap.add_argument("--b", required=True, help="the kiln binary under test")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", help="kiln build --precision for both plans (fp16, bf16)")
    ap.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    tmp = tempfile.mkdtemp()
    print(f"{'model':24} {'A ms':>9} {'B ms':>9} {'A/B':>6} {'A med':>9} {'B med':>9} {'A/B':>6}"
          "  rounds A | B")
    for name, path, shapes in bundled():
        if only and name not in only:
            continue
        plans = {}
        for side, kiln in (("a", args.a), ("b", args.b)):
            plans[side] = os.path.join(tmp, f"{name}.{side}.plan")
            cmd = [kiln, "build", path, "-o", plans[side]]
            if args.precision:
                cmd += ["--precision", args.precision]
            for s in shapes:
                cmd += ["--shapes", s]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
        runs = {"a": [], "b": []}
        for _ in range(args.rounds):
            for side, kiln in (("a", args.a), ("b", args.b)):
                runs[side].append(bench(kiln, plans[side], args.threads, args.iterations,
                                        args.warmup))
        best = {side: min(v) for side, v in runs.items()}
        med = {side: statistics.median(v) for side, v in runs.items()}
        rounds = " ".join(f"{v:.3f}" for v in runs["a"]) + " | " + " ".join(
            f"{v:.3f}" for v in runs["b"])
        print(f"{name:24} {best['a']:9.3f} {best['b']:9.3f} {best['a'] / best['b']:6.2f} "
              f"{med['a']:9.3f} {med['b']:9.3f} {med['a'] / med['b']:6.2f}  {rounds}", flush=True)


if __name__ == "__main__":
    main()
