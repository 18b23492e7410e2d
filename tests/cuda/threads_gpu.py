#!/usr/bin/env python3
"""Four contexts on four threads of one CUDA engine give bit-identical outputs.

For every model of tests/models/manifest.json a plan is built with `kiln build --backend
cuda,cpu` (and, with --precision, once more in each reduced precision). One engine is loaded;
a reference context runs every case once, alone. Then four threads each take their own context
of the same engine and run every case of the model several times in a thread-specific order
(so the contexts are at different shapes at the same moment, and each context records and
replays its own stream graphs). Every output of every run must equal the reference output bit
for bit (NaN in the same places): contexts share weights and nothing else, so a race on a
shared buffer, a stream that is not the context's, or a graph replayed against another
context's arena shows up as a difference.

Needs a GPU. Exits non-zero on any difference or error.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import kiln  # noqa: E402


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes()


def check_model(kiln_bin, base, model, precision, contexts, rounds, device):
    cases = model["cases"]
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "m.plan")
        cmd = [kiln_bin, "build", os.path.join(base, model["model"]), "-o", plan,
               "--backend", f"{device},cpu", "--quiet"]
        for spec in model.get("shapes", []):
            cmd += ["--shapes", spec]
        if precision != "fp32":
            cmd += ["--precision", precision]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            return f"build failed: {p.stderr.strip()}", 0
        engine = kiln.Engine(plan)
    feeds = [{k: np.load(os.path.join(base, v)) for k, v in c["inputs"].items()} for c in cases]
    ref_ctx = engine.context()
    refs = [ref_ctx.run(f) for f in feeds]
    del ref_ctx
    errors = []
    runs = [0] * contexts

    def worker(tid):
        ctx = engine.context()
        order = [i for _ in range(rounds) for i in range(len(cases))]
        random.Random(tid).shuffle(order)
        for n, i in enumerate(order):
            try:
                got = ctx.run(feeds[i])
                runs[tid] += 1
            except Exception as e:  # noqa: BLE001 - reported by the main thread
                errors.append(f"thread {tid} run {n}: {e}")
                return
            for name, want in refs[i].items():
                if not same_bits(want, got.get(name)):
                    diff = np.max(np.abs(np.asarray(want, np.float64) -
                                         np.asarray(got.get(name), np.float64)))
                    errors.append(f"thread {tid} run {n} ({cases[i]['name']}) {name}: "
                                  f"differs from the lone context (max |diff| {diff:.3g})")
                    return

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(contexts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not errors and sum(runs) != contexts * rounds * len(cases):
        errors.append(f"only {sum(runs)} of {contexts * rounds * len(cases)} runs completed")
    return "; ".join(errors[:3]), sum(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build-cuda/bin/kiln"))
    ap.add_argument("--manifest", default=os.path.join(REPO, "tests/models/manifest.json"))
    ap.add_argument("--models", nargs="*", default=[], help="only these models")
    ap.add_argument("--precision", nargs="*", default=["fp32"],
                    choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--contexts", type=int, default=4, help="contexts, one thread each")
    ap.add_argument("--rounds", type=int, default=4, help="runs of every case per thread")
    ap.add_argument("--device", default="cuda",
                    help="the device backend (testdev checks this script without a GPU)")
    a = ap.parse_args()
    with open(a.manifest) as f:
        manifest = json.load(f)
    base = os.path.dirname(a.manifest)
    failed = total = 0
    for precision in a.precision:
        for model in manifest["models"]:
            if (a.models and model["name"] not in a.models) or not model["cases"]:
                continue
            total += 1
            why, runs = check_model(a.kiln, base, model, precision, a.contexts, a.rounds, a.device)
            failed += bool(why)
            print(f"threads {precision} {model['name']:26s} "
                  f"{'FAILED ' + why if why else 'identical'} ({runs} runs)", flush=True)
    print(f"{total - failed}/{total} model x precision pairs bit-identical over "
          f"{a.contexts} contexts x {a.contexts} threads")
    return 1 if failed or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
