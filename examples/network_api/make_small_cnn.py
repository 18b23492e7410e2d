"""Write small_cnn.onnx and its weights (weights/*.npy) for the small_cnn examples.

The model is the one small_cnn.c and small_cnn.py build layer by layer, with the same tensor
names, layer names, attribute order, graph name ("network"), ir_version and opset, so that the
two routes can produce byte-identical plans:

    input [1,3,16,16] -> conv1 (8x3x3x3, pad 1) -> relu1 -> pool1 (max 2x2/2)
      -> conv2 (16x8x3x3, pad 1) -> gap (global average) -> flatten -> fc (Gemm 16->10, transB)
      -> softmax -> probs [1,10]

Weights come from numpy's RandomState(2024), so rerunning this script gives the same files.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHTS = [  # in initializer order, which is also the order the examples add constants
    ("conv1.weight", (8, 3, 3, 3)),
    ("conv1.bias", (8,)),
    ("conv2.weight", (16, 8, 3, 3)),
    ("conv2.bias", (16,)),
    ("fc.weight", (10, 16)),
    ("fc.bias", (10,)),
]


def make_weights():
    rng = np.random.RandomState(2024)
    out = {}
    for name, shape in WEIGHTS:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        out[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return out


def node(op, inputs, outputs, name, **attrs):
    """A node with its attributes in the order given (helper.make_node sorts them by name;
    kiln's typed layer helpers add them in a fixed order, and a plan keeps the order)."""
    n = helper.make_node(op, inputs, outputs, name=name)
    n.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    return n


def make_model(w):
    nodes = [
        node(
            "Conv",
            ["input", "conv1.weight", "conv1.bias"],
            ["conv1_out"],
            "conv1",
            strides=[1, 1],
            pads=[1, 1, 1, 1],
            dilations=[1, 1],
            group=1,
        ),
        helper.make_node("Relu", ["conv1_out"], ["relu1_out"], name="relu1"),
        node(
            "MaxPool",
            ["relu1_out"],
            ["pool1_out"],
            "pool1",
            kernel_shape=[2, 2],
            strides=[2, 2],
            pads=[0, 0, 0, 0],
        ),
        node(
            "Conv",
            ["pool1_out", "conv2.weight", "conv2.bias"],
            ["conv2_out"],
            "conv2",
            strides=[1, 1],
            pads=[1, 1, 1, 1],
            dilations=[1, 1],
            group=1,
        ),
        helper.make_node("GlobalAveragePool", ["conv2_out"], ["gap_out"], name="gap"),
        helper.make_node("Flatten", ["gap_out"], ["flatten_out"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flatten_out", "fc.weight", "fc.bias"], ["fc_out"], name="fc",
                         transB=1),
        helper.make_node("Softmax", ["fc_out"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "network",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializer=[numpy_helper.from_array(w[name], name) for name, _ in WEIGHTS],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    w = make_weights()
    os.makedirs(os.path.join(HERE, "weights"), exist_ok=True)
    for name, _ in WEIGHTS:
        np.save(os.path.join(HERE, "weights", name + ".npy"), w[name])
    onnx.save(make_model(w), os.path.join(HERE, "small_cnn.onnx"))
    print("wrote small_cnn.onnx and weights/*.npy")


if __name__ == "__main__":
    main()
