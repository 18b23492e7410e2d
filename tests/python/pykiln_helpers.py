"""Helpers shared by the Python binding tests (a module of its own, not conftest, so that a
conftest.py elsewhere in a combined pytest run cannot shadow it)."""

import os
import sys

from onnx import helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
EXAMPLES = os.path.join(REPO, "examples", "network_api")


def make_model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),), name="g"):
    """An ONNX model (bytes). inputs/outputs: [(name, elem_type, shape)]."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]
    )
    model.ir_version = 8
    return model.SerializeToString()
