#!/usr/bin/env python3
"""The model tests on CUDA under NVIDIA's compute-sanitizer.

Every model of tests/models/manifest.json runs its first case through `kiln run --backend cuda`
from .onnx under `compute-sanitizer --tool memcheck` (out-of-bounds and misaligned device
accesses, invalid frees, leaks of device memory at exit, errors returned by CUDA calls), in
fp32 and in each --precision given. With --racecheck, the models named by --race-models also
run under `--tool racecheck` (shared-memory hazards inside kiln's own kernels). A run passes
when the sanitizer reports no error and kiln exits 0; the outputs themselves are checked by
diff_backends.py.

Needs a GPU and compute-sanitizer (CUDA toolkit: on PATH, or under $CUDA_HOME/bin or
/usr/local/cuda/bin). Exits non-zero on any report.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def find_sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        path = os.path.join(root, "bin", "compute-sanitizer")
        if root and os.access(path, os.X_OK):
            return path
    return None


def sanitize(sanitizer, tool, kiln, base, model, precision):
    case = model["cases"][0]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sanitizer, "--tool", tool, "--error-exitcode", "86"]
        if tool == "memcheck":
            cmd += ["--leak-check", "full"]
        cmd += [kiln, "run", os.path.join(base, model["model"]), "--backend", "cuda",
                "--output-dir", tmp]
        for spec in model.get("shapes", []):
            cmd += ["--shapes", spec]
        if precision != "fp32":
            cmd += ["--precision", precision]
        for name, f in case["inputs"].items():
            cmd += ["--input", f"{name}={os.path.join(base, f)}"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    # memcheck ends with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: N hazards
    # displayed (E errors, W warnings)": every count must be zero
    counts = [int(c) for c in re.findall(r"(\d+) (?:errors?|hazards?|warnings?)\b", out)]
    summary = "ERROR SUMMARY" in out or "RACECHECK SUMMARY" in out
    if p.returncode == 0 and summary and not any(counts):
        return ""
    lines = [ln for ln in out.splitlines() if "=========" in ln and ln.strip("= ")]
    return f"exit {p.returncode}: " + " | ".join(lines[:4] or out.strip().splitlines()[-2:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build-cuda/bin/kiln"))
    ap.add_argument("--manifest", default=os.path.join(REPO, "tests/models/manifest.json"))
    ap.add_argument("--models", nargs="*", default=[], help="only these models")
    ap.add_argument("--precision", nargs="*", default=["fp32"],
                    choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--racecheck", action="store_true", help="also run racecheck")
    ap.add_argument("--race-models", nargs="*",
                    default=["resnet_mini", "transformer_encoder", "detection_head"])
    a = ap.parse_args()
    sanitizer = find_sanitizer()
    if sanitizer is None:
        print("sanitize_gpu: compute-sanitizer not found (install the CUDA toolkit or set "
              "CUDA_HOME)", file=sys.stderr)
        return 2
    with open(a.manifest) as f:
        manifest = json.load(f)
    base = os.path.dirname(a.manifest)
    runs = [("memcheck", p, m) for p in a.precision for m in manifest["models"]]
    if a.racecheck:
        runs += [("racecheck", "fp32", m) for m in manifest["models"]
                 if m["name"] in a.race_models]
    failed = total = 0
    for tool, precision, model in runs:
        if (a.models and model["name"] not in a.models) or not model["cases"]:
            continue
        total += 1
        why = sanitize(sanitizer, tool, a.kiln, base, model, precision)
        failed += bool(why)
        print(f"{tool} {precision} {model['name']:26s} {'FAILED ' + why if why else 'clean'}",
              flush=True)
    print(f"{total - failed}/{total} sanitizer runs clean")
    return 1 if failed or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
