"""kiln alone at several thread counts on the same plans, in turns: does any model get slower when
threads are added?

    python3 bench/thread_scaling.py [--kiln build/bin/kiln] [--models resnet50,mobilenetv2]
                                    [--threads 1,2,4,8,12,16] [--rounds 2] [--iterations 30]
                                    [--warmup 10] [--tolerance 0.02] [--shapes SPEC]...
                                    [--json-out FILE]

Each model (a bench/models/NAME.onnx, as bench.py caches them, or an .onnx path) is built once
with `kiln build`; then every round runs `kiln bench PLAN --threads T --json` for each T in turn,
so the thread counts see the same machine state. The table gives each count's best median over
the rounds and names each step up in threads whose median is more than --tolerance (a fraction)
above the step before: those are the places where adding threads costs time. The exit status is
0 even then (a measurement, not a test); 1 on a missing model or a failed kiln call.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_MODELS = "resnet50,mobilenetv2,efficientnet_b0,yolov8n_320,yolov8n_640,transformer,bert"


def model_path(name):
    if name.endswith(".onnx"):
        return name
    return os.path.join(HERE, "models", f"{name}.onnx")


def thread_counts(text):
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a list like 1,2,4,8")
    if not counts or min(counts) < 1 or counts != sorted(set(counts)):
        raise argparse.ArgumentTypeError(f"'{text}': thread counts must be >= 1 and increasing")
    return counts


def kiln_call(kiln, *args):
    p = subprocess.run([kiln, *args], capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        sys.exit(f"thread_scaling.py: kiln {args[0]} failed: {msg}")
    return p.stdout


def slower_steps(threads, medians, tolerance):
    """The steps T1->T2 (consecutive counts) whose median rises by more than `tolerance`."""
    return [f"{threads[i]}->{threads[i + 1]}" for i in range(len(threads) - 1)
            if medians[i + 1] > medians[i] * (1 + tolerance)]


def measure(args, name, work):
    path = model_path(name)
    if not os.path.exists(path):
        sys.exit(f"thread_scaling.py: no model '{path}' (bench.py --models {name} caches it)")
    plan = os.path.join(work, os.path.basename(path)[:-5] + ".plan")
    shapes = [a for spec in args.shapes for a in ("--shapes", spec)]
    kiln_call(args.kiln, "build", path, "-o", plan, "--quiet", *shapes)
    runs = {t: [] for t in args.threads}
    for _ in range(args.rounds):
        for t in args.threads:
            out = kiln_call(args.kiln, "bench", plan, "--threads", str(t), "--warmup",
                            str(args.warmup), "--iterations", str(args.iterations), "--json")
            runs[t].append(json.loads(out)["latency_ms"]["median"])
    return [min(runs[t]) for t in args.threads], runs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "bin", "kiln"))
    ap.add_argument("--models", default=DEFAULT_MODELS,
                    help="names under bench/models/ or .onnx paths, comma-separated")
    ap.add_argument("--threads", type=thread_counts, default=thread_counts("1,2,4,8,12,16"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="a step counts as slower above this fraction (default 0.02)")
    ap.add_argument("--shapes", action="append", default=[], metavar="SPEC",
                    help="kiln build --shapes for a model with dynamic inputs (repeatable)")
    ap.add_argument("--json-out", help="write every round's medians here")
    args = ap.parse_args()
    if args.rounds < 1 or args.iterations < 1 or args.warmup < 0:
        ap.error("--rounds and --iterations must be >= 1, --warmup >= 0")
    print("| model | " + " | ".join(f"{t} thr ms" for t in args.threads) + " | slower |")
    print("|---|" + "---:|" * len(args.threads) + "---|")
    report = {}
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            best, runs = measure(args, name, work)
            steps = slower_steps(args.threads, best, args.tolerance)
            name = os.path.basename(name)[:-5] if name.endswith(".onnx") else name
            report[name] = {"threads": args.threads, "best_median_ms": best,
                            "round_medians_ms": {str(t): runs[t] for t in args.threads},
                            "slower_steps": steps}
            print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in best) +
                  f" | {' '.join(steps) or '-'} |", flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
