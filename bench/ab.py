"""A/B two kiln binaries on the same models, alternating, for before/after figures of a change.

    python3 bench/ab.py --a OLD/bin/kiln --b build/bin/kiln [--rounds 5] [--threads 1]

Each binary builds its own plan of each model (plans are not portable across plan formats), then
the two run `kiln bench --json` in turns, --rounds times; the table gives each side's best
median and the ratio A/B (> 1: B is faster). The models are the bundled tests/models networks
plus any ONNX files under bench/models/.
"""

import argparse
import glob
import json
import os
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


def bench(kiln, plan, threads, iterations):
    out = subprocess.run([kiln, "bench", plan, "--json", "--threads", str(threads), "--warmup",
                          "5", "--iterations", str(iterations)], check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600).stdout
    return json.loads(out)["latency_ms"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the baseline kiln binary")
    ap.add_argument("--b", required=True, help="the kiln binary under test")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    tmp = tempfile.mkdtemp()
    print(f"{'model':24} {'A ms':>9} {'B ms':>9} {'A/B':>6}")
    for name, path, shapes in bundled():
        if only and name not in only:
            continue
        plans = {}
        for side, kiln in (("a", args.a), ("b", args.b)):
            plans[side] = os.path.join(tmp, f"{name}.{side}.plan")
            cmd = [kiln, "build", path, "-o", plans[side]]
            for s in shapes:
                cmd += ["--shapes", s]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
        best = {"a": float("inf"), "b": float("inf")}
        for _ in range(args.rounds):
            for side, kiln in (("a", args.a), ("b", args.b)):
                best[side] = min(best[side], bench(kiln, plans[side], args.threads,
                                                   args.iterations))
        print(f"{name:24} {best['a']:9.3f} {best['b']:9.3f} {best['a'] / best['b']:6.2f}")


if __name__ == "__main__":
    main()
