"""Model-local functions (ModelProto.functions): each call is inlined at import (src/onnx/
functions.c). Models built here with onnx.helper, run by kiln and by onnxruntime on the same
inputs; the cases kiln refuses end in one line naming the function."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper

import kiln

F = TensorProto.FLOAT
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def model(nodes, inputs, outputs, functions, opsets=OPSETS):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, None) for n in outputs])
    m = helper.make_model(graph, opset_imports=opsets, functions=functions)
    m.ir_version = 9
    return m.SerializeToString()


def check(onnx_bytes, feeds):
    got = kiln.run(kiln.build(onnx_bytes), feeds)
    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)


def scaled_gelu():
    """y = LeakyRelu(x * x + x, alpha) with alpha by reference (default 0.25), and a second
    output the callers may leave unused."""
    alpha = helper.make_attribute_ref("alpha", AttributeProto.FLOAT)
    alpha.ref_attr_name = "alpha"
    body = [helper.make_node("Mul", ["x", "x"], ["x2"]),
            helper.make_node("Add", ["x2", "x"], ["s"]),
            helper.make_node("LeakyRelu", ["s"], ["y"]),
            helper.make_node("Neg", ["s"], ["aux"])]
    body[2].attribute.append(alpha)
    f = helper.make_function("local", "ScaledGelu", ["x"], ["y", "aux"], body,
                             opset_imports=[helper.make_opsetid("", 17)],
                             attributes=[])
    f.attribute_proto.append(helper.make_attribute("alpha", 0.25))
    return f


def test_calls_with_and_without_the_attribute_and_unused_outputs():
    f = scaled_gelu()
    nodes = [helper.make_node("ScaledGelu", ["a"], ["b", "unused"], domain="local", name="c1"),
             helper.make_node("ScaledGelu", ["b"], ["c", ""], domain="local", alpha=0.01),
             helper.make_node("ScaledGelu", ["c"], ["d", "e"], domain="local")]
    x = np.linspace(-3, 2, 12).astype(np.float32).reshape(3, 4)
    check(model(nodes, [("a", [3, 4])], ["d", "e"], [f]), {"a": x})


def test_a_function_calling_a_function():
    inner = scaled_gelu()
    outer = helper.make_function(
        "local", "Twice", ["x", "bias"], ["y"],
        [helper.make_node("ScaledGelu", ["x"], ["t", ""], domain="local"),
         helper.make_node("Add", ["t", "bias"], ["u"]),
         helper.make_node("ScaledGelu", ["u"], ["y", ""], domain="local")],
        opset_imports=OPSETS)
    nodes = [helper.make_node("Twice", ["a", "b"], ["y"], domain="local")]
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 5)).astype(np.float32),
             "b": rng.standard_normal((2, 5)).astype(np.float32)}
    check(model(nodes, [("a", [2, 5]), ("b", [2, 5])], ["y"], [inner, outer]), feeds)


def test_an_optional_input_left_out():
    f = helper.make_function("local", "ClipOpt", ["x", "lo", "hi"], ["y"],
                             [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                             opset_imports=[helper.make_opsetid("", 17)])
    lo = helper.make_tensor("lo", F, [], [-0.5])
    nodes = [helper.make_node("ClipOpt", ["a", "lo"], ["y"], domain="local")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", F, [6])],
                              [helper.make_tensor_value_info("y", F, None)], [lo])
    m = helper.make_model(graph, opset_imports=OPSETS, functions=[f])
    m.ir_version = 9
    check(m.SerializeToString(), {"a": np.linspace(-2, 2, 6).astype(np.float32)})


def test_a_recursive_function_is_refused_in_one_line():
    f = helper.make_function("local", "Loopy", ["x"], ["y"],
                             [helper.make_node("Loopy", ["x"], ["y"], domain="local")],
                             opset_imports=OPSETS)
    nodes = [helper.make_node("Loopy", ["a"], ["y"], domain="local")]
    with pytest.raises(kiln.KilnError, match="Loopy.*more than 16 deep"):
        kiln.build(model(nodes, [("a", [2])], ["y"], [f]))


def test_a_function_of_another_opset_is_refused_in_one_line():
    f = helper.make_function("local", "Old", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                             opset_imports=[helper.make_opsetid("", 13)])
    nodes = [helper.make_node("Old", ["a"], ["y"], domain="local")]
    with pytest.raises(kiln.KilnError, match="opset 13.*the model 17"):
        kiln.build(model(nodes, [("a", [2])], ["y"], [f]))


def test_a_call_with_too_many_inputs_is_refused_in_one_line():
    f = helper.make_function("local", "One", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                             opset_imports=[helper.make_opsetid("", 17)])
    nodes = [helper.make_node("One", ["a", "a"], ["y"], domain="local")]
    with pytest.raises(kiln.KilnError, match="takes 1"):
        kiln.build(model(nodes, [("a", [2])], ["y"], [f]))
