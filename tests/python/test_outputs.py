"""Outputs on the host: returned as new arrays (large ones written by their layer in place),
or bound to numpy arrays the caller gives. Every arrangement is checked against onnxruntime:
an output also read by later layers, a view of it that is an output too, a graph input that is
an output, an output whose shape depends on data, misaligned arrays, a dynamic batch."""

import ctypes

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln import _lib


def _model():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 16, 1, 1)).astype(np.float32) * 0.3
    b = rng.standard_normal(32).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),  # output, read again below
        helper.make_node("Reshape", ["y", "flat"], ["z"]),  # a view of y, also an output
        helper.make_node("Add", ["y", "one"], ["u"]),
        helper.make_node("Greater", ["x", "half"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),  # shape known only from the data
    ]
    graph = helper.make_graph(
        nodes, "outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32, 32, 32]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 32768]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, ["n", 32, 32, 32]),
         helper.make_tensor_value_info("nz", TensorProto.INT64, [4, "k"]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16, 32, 32])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array([0, -1], np.int64), "flat"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(1.5, np.float32), "half")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m.SerializeToString()


@pytest.fixture(scope="module")
def model():
    data = _model()
    engine = kiln.Engine(kiln.build(data, shapes={"x": ((1, 16, 32, 32), (2, 16, 32, 32),
                                                        (4, 16, 32, 32))}))
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return engine, sess


def _x(n, seed):
    return np.random.default_rng(seed).standard_normal((n, 16, 32, 32)).astype(np.float32)


def _check(got, sess, x):
    names = [o.name for o in sess.get_outputs()]
    want = dict(zip(names, sess.run(None, {"x": x})))
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].shape == v.shape and got[k].dtype == v.dtype, k
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5, err_msg=k)


def test_returned_outputs_match_and_outlive_the_next_run(model):
    engine, sess = model
    ctx = engine.context()
    runs = []
    for n, seed in [(1, 0), (3, 1), (1, 2), (2, 3)]:  # a shape change each time
        x = _x(n, seed)
        got = ctx.run({"x": x})
        _check(got, sess, x)
        runs.append((x, {k: v.copy() for k, v in got.items()}, got))
    for x, kept, got in runs:  # no later run wrote into an array returned before
        for k in kept:
            np.testing.assert_array_equal(got[k], kept[k], err_msg=k)
    x, _, got = runs[-1]
    assert got["x"] is not x and not np.shares_memory(got["x"], x)
    view = _lib.TensorView()  # a large output is in the array returned
    _lib.check(_lib.lib.kiln_context_get_output(ctx._h, b"y", ctypes.byref(view)))
    assert view.data == got["y"].ctypes.data


def test_an_input_returned_as_an_output_is_a_copy():
    """An output not bound is read where the context holds it, except a graph input that is
    also an output: that one is copied, as the caller may reuse the input's buffer."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "io",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ctx = kiln.Engine(kiln.build(m.SerializeToString())).context()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    got = ctx.run({"x": x})
    np.testing.assert_array_equal(got["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(got["x"], x)
    view = _lib.TensorView()
    _lib.check(_lib.lib.kiln_context_get_output(ctx._h, b"x", ctypes.byref(view)))
    assert view.data != x.ctypes.data


def test_numpy_arrays_given_are_written_and_returned(model):
    engine, sess = model
    ctx = engine.context()
    x = _x(2, 4)
    y = np.full((2, 32, 32, 32), np.nan, np.float32)
    u = np.empty(2 * 32 * 32 * 32 + 1, np.float32)[1:].reshape(2, 32, 32, 32)  # misaligned
    assert u.ctypes.data % 64 != 0 and u.flags["C_CONTIGUOUS"]
    got = ctx.run({"x": x}, outputs={"y": y, "u": u})
    assert got["y"] is y and got["u"] is u
    _check(got, sess, x)
    # the same arrays again for new data: rewritten
    x2 = _x(2, 5)
    got = ctx.run({"x": x2}, outputs={"y": y, "u": u})
    assert got["y"] is y
    _check(got, sess, x2)
    # then not given: new arrays, the given ones keep the last run's values
    before = y.copy()
    got = ctx.run({"x": _x(2, 6)})
    assert got["y"] is not y
    np.testing.assert_array_equal(y, before)


def test_arrays_that_cannot_be_bound_are_refused_by_name(model):
    engine, _ = model
    ctx = engine.context()
    x = _x(2, 7)
    cases = [
        ({"y": np.zeros((2, 32, 32, 32), np.float64)}, "output 'y' is float32"),
        ({"y": np.zeros((1, 32, 32, 32), np.float32)}, "output 'y' is (2, 32, 32, 32)"),
        ({"y": np.zeros((2, 32, 32, 64), np.float32)[..., ::2]}, "C-contiguous and writable"),
        ({"nz": np.zeros((4, 10), np.int64)}, "output 'nz' has a data-dependent shape"),
        ({"y": [0.0]}, "binds numpy arrays or CUDA arrays, not list"),
        ({"v": np.zeros(3, np.float32)}, "no output named 'v'"),
    ]
    readonly = np.zeros((2, 32, 32, 32), np.float32)
    readonly.flags["WRITEABLE"] = False
    cases.append(({"y": readonly}, "C-contiguous and writable"))
    for outputs, message in cases:
        with pytest.raises(kiln.KilnError) as ei:
            ctx.run({"x": x}, outputs=outputs)
        assert message in ei.value.message, (outputs.keys(), ei.value.message)
    _check(ctx.run({"x": x}), model[1], x)  # the context still runs after each refusal
