"""The network API examples in examples/network_api: the Python ones run as scripts (and their
claims are checked here too); the C ones, when built next to the library, run as programs."""

import os
import subprocess
import sys

import numpy as np
import pytest
from pykiln_helpers import EXAMPLES, REPO

import kiln


def _script(name):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + [p for p in [env.get("PYTHONPATH")] if p]
    )
    env.setdefault("KILN_LIBRARY", kiln.LIBRARY_PATH)
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_relu_plugin_py():
    r = _script("relu_plugin.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exactly: True" in r.stdout and "PASS" in r.stdout


def test_small_cnn_py():
    r = _script("small_cnn.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout


def test_small_cnn_by_code_equals_onnx():
    sys.path.insert(0, EXAMPLES)
    try:
        import small_cnn
    finally:
        sys.path.remove(EXAMPLES)
    w = small_cnn.load_weights()
    by_code = kiln.build(small_cnn.build_network(w))
    from_onnx = kiln.build(os.path.join(EXAMPLES, "small_cnn.onnx"))
    assert kiln.plan_layers(by_code) == kiln.plan_layers(from_onnx)
    assert [op for _, op, _ in kiln.plan_layers(by_code)] == [
        "FusedConv", "MaxPool", "Conv", "GlobalAveragePool", "Flatten", "Gemm", "Softmax"
    ]
    assert by_code == from_onnx, "same names, order and weights give byte-identical plans"
    x = np.random.RandomState(3).randn(1, 3, 16, 16).astype(np.float32)
    y = kiln.run(by_code, {"input": x})["probs"]
    np.testing.assert_allclose(y, small_cnn.reference(w, x), rtol=1e-5, atol=1e-7)


def _c_example(name):
    lib_dir = os.path.dirname(kiln.LIBRARY_PATH)
    path = os.path.join(os.path.dirname(lib_dir), "examples", name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not built")
    return path


@pytest.mark.parametrize("name, args", [("relu_plugin", []), ("small_cnn", [EXAMPLES])])
def test_c_examples(name, args):
    r = subprocess.run([_c_example(name)] + args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout
