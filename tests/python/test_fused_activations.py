"""Activations fused into Conv, Gemm and MatMul epilogues, against onnxruntime: each one must
leave a single layer in the plan and give onnxruntime's outputs, on inputs wide enough to reach
the saturating and the tiny tails of every function."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pykiln_helpers import make_model

import kiln

F = TensorProto.FLOAT

# (label, op, attributes, opset)
ACTIVATIONS = [
    ("hard_sigmoid", "HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 17),
    ("hard_swish", "HardSwish", {}, 17),
    ("gelu", "Gelu", {}, 20),
    ("gelu_tanh", "Gelu", {"approximate": "tanh"}, 20),
    ("mish", "Mish", {}, 18),
    ("tanh", "Tanh", {}, 17),
    ("sigmoid", "Sigmoid", {}, 17),
]


def producer(kind, rng):
    """The product node, its initializers, input and output shapes."""
    if kind == "conv":
        w = rng.standard_normal((24, 8, 3, 3)).astype(np.float32)
        b = rng.standard_normal(24).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w", "b"], ["p"], kernel_shape=[3, 3], pads=[1] * 4)
        return node, [w, b], [2, 8, 11, 13], [2, 24, 11, 13]
    w = rng.standard_normal((40, 70)).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    if kind == "gemm":
        return helper.make_node("Gemm", ["x", "w", "b"], ["p"]), [w, b], [9, 40], [9, 70]
    return helper.make_node("MatMul", ["x", "w"], ["p"]), [w], [3, 9, 40], [3, 9, 70]


@pytest.mark.parametrize("kind", ["conv", "gemm", "matmul"])
@pytest.mark.parametrize("label,op,attrs,opset", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_fused_activation_matches_onnxruntime(kind, label, op, attrs, opset):
    rng = np.random.default_rng(len(label) * 7 + len(kind))
    node, weights, x_shape, y_shape = producer(kind, rng)
    names = ["w", "b"][: len(weights)]
    inits = [numpy_helper.from_array(a, n) for a, n in zip(weights, names)]
    nodes = [node, helper.make_node(op, ["p"], ["y"], **attrs)]
    model = make_model(nodes, [("x", F, x_shape)], [("y", F, y_shape)], inits,
                       opsets=(("", opset),))
    # Products reach about +-40 here: the tails where exp underflows and tanh saturates.
    x = (3.0 * rng.standard_normal(x_shape)).astype(np.float32)
    plan = kiln.build(model)
    assert len(kiln.plan_layers(plan)) == 1, f"{op} was not fused into {node.op_type}"
    got = kiln.run(plan, {"x": x})["y"]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
