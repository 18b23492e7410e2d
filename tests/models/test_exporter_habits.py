"""Habits of other projects' exporters that kiln must read as onnxruntime does.

Paddle2ONNX and older exporters write a dynamic dim as `dim_value: -1` on graph inputs,
outputs and value_info (and 0 on outputs and value_info) instead of a `dim_param`. kiln reads
them as unnamed dynamic dims: the model builds with a profile and runs at several shapes,
matching onnxruntime at each.
"""

import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")


def kiln(*args):
    proc = subprocess.run([KILN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return proc


def minus_one_model():
    rng = np.random.RandomState(0)
    w = numpy_helper.from_array(rng.randn(4, 3, 3, 3).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.randn(4).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "paddle_style",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, -1, -1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, 0, 0])], [w, b],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [-1, 4, -1, -1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("form", ["onnx", "plan"])
def test_minus_one_dims_run_at_two_shapes(tmp_path, form):
    path = tmp_path / "model.onnx"
    onnx.save(minus_one_model(), path)
    target = path
    if form == "plan":
        target = tmp_path / "model.plan"
        kiln("build", path, "-o", target, "--shapes", "x:1x3x4x4,2x3x8x8,4x3x16x16", "--quiet")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.RandomState(1)
    for i, shape in enumerate([(1, 3, 5, 6), (3, 3, 16, 9)]):
        x = rng.randn(*shape).astype(np.float32)
        np.save(tmp_path / f"x{i}.npy", x)
        out = tmp_path / f"out{i}"
        kiln("run", target, "--input", f"x={tmp_path / f'x{i}.npy'}", "--output-dir", out)
        got = np.load(out / "y.npy")
        want = sess.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_inspect_names_the_unnamed_dims(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(minus_one_model(), path)
    out = kiln("inspect", path, "--shapes", "x:1x3x4x4,2x3x8x8,4x3x16x16").stdout.decode()
    assert "x_dim0" in out
