"""Batched MatMul (attention's per-head products) split over threads: small products run one
a thread, and when there are fewer than four a thread each is cut into slices of rows. Every
thread count, batch count, broadcast and fused epilogue must give onnxruntime's result."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln_cli import kiln

CASES = [
    # (A shape, B shape): heads fewer than threads, rows not a multiple of the slice
    ([1, 12, 128, 64], [1, 12, 64, 128]),
    ([2, 3, 45, 24], [2, 3, 24, 33]),
    ([3, 17, 9], [3, 9, 50]),
    ([5, 2, 70, 16], [2, 16, 20]),  # B broadcast over the first batch dim
    ([1, 7, 5], [4, 5, 6]),  # A broadcast
]


@pytest.mark.parametrize("a_shape,b_shape", CASES, ids=[f"{a}x{b}" for a, b in CASES])
@pytest.mark.parametrize("bias_relu", [False, True])
def test_batched_matmul_across_threads(a_shape, b_shape, bias_relu, tmp_path):
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    n = b_shape[-1]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p" if bias_relu else "y"])]
    inits = []
    if bias_relu:  # fused into the product as its epilogue
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c"))
        nodes += [helper.make_node("Add", ["p", "c"], ["q"]),
                  helper.make_node("Relu", ["q"], ["y"])]
    g = helper.make_graph(nodes, "bmm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b})[0]
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    outs = []
    for threads in (1, 3, 8, 16, 37):
        plan = tmp_path / f"t{threads}.plan"
        kiln("build", str(path), "-o", str(plan), "--threads", str(threads))
        out = tmp_path / f"o{threads}"
        kiln("run", str(plan), "--threads", str(threads), "--input", f"a={tmp_path / 'a.npy'}",
             "--input", f"b={tmp_path / 'b.npy'}", "--output-dir", str(out))
        got = np.load(out / "y.npy")
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
        outs.append(got)
    for got in outs[1:]:  # every thread count the same bytes
        assert np.array_equal(got, outs[0])
