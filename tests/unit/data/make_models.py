"""Regenerates the small ONNX/npy files the importer and file-io unit tests read.

Run from anywhere: python3 tests/unit/data/make_models.py (needs onnx and numpy).
The expected values the tests check are written out here and in the C tests by hand.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def external_model():
    # y = MatMul(x, W) + B with W stored in onnx_ext.bin.
    w = np.arange(6, dtype=np.float32).reshape(3, 2)  # [[0,1],[2,3],[4,5]]
    b = np.array([0.5, -0.5], dtype=np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "B"], ["y"]),
        ],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    path = os.path.join(HERE, "onnx_ext.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="onnx_ext.bin", size_threshold=0)


def typed_model():
    # Initializers in the typed fields (raw=False), one per dtype that travels in int32_data
    # and friends, all consumed by Identity nodes so the graph is valid.
    tensors = [
        helper.make_tensor("f16", TensorProto.FLOAT16, [3], [1.0, -2.0, 0.5]),
        helper.make_tensor("i8", TensorProto.INT8, [3], [-128, 0, 127]),
        helper.make_tensor("u8", TensorProto.UINT8, [3], [0, 7, 255]),
        helper.make_tensor("b", TensorProto.BOOL, [3], [True, False, True]),
        helper.make_tensor("i64", TensorProto.INT64, [2], [-(2**40), 5]),
        helper.make_tensor("f64", TensorProto.DOUBLE, [2], [0.25, -1e300]),
        helper.make_tensor("u32", TensorProto.UINT32, [2], [4000000000, 1]),
    ]
    nodes = [helper.make_node("Identity", [t.name], [t.name + "_out"]) for t in tensors]
    outs = [helper.make_tensor_value_info(t.name + "_out", t.data_type, list(t.dims))
            for t in tensors]
    graph = helper.make_graph(nodes, "typed", [], outs, tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(HERE, "onnx_typed.onnx"))


def tensor_file():
    t = numpy_helper.from_array(np.array([[1, -2, 3], [4, 5, -6]], np.int64), "ids")
    with open(os.path.join(HERE, "tensor_int64.pb"), "wb") as f:
        f.write(t.SerializeToString())


def npy_files():
    np.save(os.path.join(HERE, "npy_f32_2x3.npy"),
            np.array([[1.5, 2, 3], [4, 5, -6]], np.float32))
    np.save(os.path.join(HERE, "npy_bool_4.npy"), np.array([True, False, False, True]))
    np.save(os.path.join(HERE, "npy_f16_scalar.npy"), np.float16(-0.75))
    np.save(os.path.join(HERE, "npy_i64_be.npy"), np.array([1, 2], ">i8"))
    np.save(os.path.join(HERE, "npy_f32_fortran.npy"),
            np.asfortranarray(np.ones((2, 3), np.float32)))


if __name__ == "__main__":
    external_model()
    typed_model()
    tensor_file()
    npy_files()
