"""Shared by the tests of kiln's Polygraphy- and graphsurgeon-like verbs."""

import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
PLUGINS = os.environ.get("KILN_PLUGINS") or os.path.join(REPO, "build", "plugins")
MODELS = os.path.join(REPO, "tests", "models")


def kiln(*args, check=True, timeout=300):
    if not os.access(KILN, os.X_OK):
        pytest.fail(f"kiln binary not found at {KILN} (set KILN)")
    proc = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"kiln {args[0]} failed: {proc.stderr.strip()}"
    return proc


def check_full(path):
    """The model passes onnx.checker's full check (strict shape inference included)."""
    onnx.checker.check_model(onnx.load(path), full_check=True)


def run_ort(path, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def swish_model(path, rows=4, cols=8):
    """x -> MatMul -> x*sigmoid(x) + b -> * (2*3) -> Identity -> Relu -> y, plus a dead Exp."""
    rs = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rs.randn(cols, cols).astype(np.float32), "W"),
             numpy_helper.from_array(rs.randn(cols).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([2.0], np.float32), "c1"),
             numpy_helper.from_array(np.array([3.0], np.float32), "c2")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Sigmoid", ["mm"], ["sg"], name="sig"),
             helper.make_node("Mul", ["mm", "sg"], ["sw"], name="mul"),
             helper.make_node("Add", ["sw", "b"], ["y0"], name="addb"),
             helper.make_node("Mul", ["c1", "c2"], ["c12"], name="cmul"),
             helper.make_node("Mul", ["y0", "c12"], ["y1"], name="scale"),
             helper.make_node("Identity", ["y1"], ["y2"], name="ident"),
             helper.make_node("Relu", ["y2"], ["y"], name="relu"),
             helper.make_node("Exp", ["x"], ["dead"], name="deadexp")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path
