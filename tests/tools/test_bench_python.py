"""bench/bench_python.py: kiln's Context.run against onnxruntime's InferenceSession.run on one
model in one process, with the two results compared."""

import os
import re
import subprocess
import sys

from tools_helpers import REPO

SCRIPT = os.path.join(REPO, "bench", "bench_python.py")


def run(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_table_and_agreement():
    model = os.path.join(REPO, "tests", "models", "resnet_mini", "model.onnx")
    r = run("--model", model, "--batch", "2", "--rounds", "2", "--runs", "5", "--warmup", "1")
    assert r.returncode == 0, r.stderr
    diff = float(re.search(r"largest difference (\S+) of the output's max", r.stdout).group(1))
    assert diff < 1e-4
    rows = [l for l in r.stdout.splitlines() if l.startswith("| median") or l.startswith("| best")]
    assert len(rows) == 2
    for row in rows:
        kiln_ms, ort_ms, ratio = (float(x) for x in row.strip("|").split("|")[1:])
        assert kiln_ms > 0 and ort_ms > 0 and abs(ratio - ort_ms / kiln_ms) < 0.01 + 0.01 * ratio


def test_missing_model_fails():
    r = run("--model", "no_such.onnx")
    assert r.returncode == 2
    assert "no model file no_such.onnx" in r.stderr and "Traceback" not in r.stderr
