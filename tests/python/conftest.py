"""Fixtures: small ONNX models written with onnx.helper. The kiln package comes from python/
(pykiln_helpers puts it on sys.path; PYTHONPATH=python works too)."""

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from pykiln_helpers import make_model  # noqa: E402


@pytest.fixture
def relu_add_model():
    """y = relu(a + b), a and b float32 [batch, 4] with a dynamic batch."""
    return make_model(
        [
            helper.make_node("Add", ["a", "b"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        [("a", TensorProto.FLOAT, ["batch", 4]), ("b", TensorProto.FLOAT, ["batch", 4])],
        [("y", TensorProto.FLOAT, ["batch", 4])],
    )


@pytest.fixture
def fixed_model():
    """y = x * 2 + 1 over float32 [2, 3]; z = cast(x) to int64."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    return make_model(
        [
            helper.make_node("Mul", ["x", "two"], ["m"], name="mul"),
            helper.make_node("Add", ["m", "one"], ["y"], name="add"),
            helper.make_node("Cast", ["x"], ["z"], name="cast", to=TensorProto.INT64),
        ],
        [("x", TensorProto.FLOAT, [2, 3])],
        [("y", TensorProto.FLOAT, [2, 3]), ("z", TensorProto.INT64, [2, 3])],
        initializers=[two, one],
    )


@pytest.fixture
def int_model():
    """y = i + j over int64 [3]."""
    return make_model(
        [helper.make_node("Add", ["i", "j"], ["y"], name="add")],
        [("i", TensorProto.INT64, [3]), ("j", TensorProto.INT64, [3])],
        [("y", TensorProto.INT64, [3])],
    )


@pytest.fixture
def rng():
    return np.random.RandomState(0)
