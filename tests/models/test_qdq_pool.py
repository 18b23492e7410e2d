"""MaxPool between int8 layers of a QDQ model: DequantizeLinear -> MaxPool -> QuantizeLinear on
the same grid runs as MaxPool on the quantized tensor (the largest dequantized value is the
dequantized largest integer when the scale is positive). The plan names the pool '/int8', and its
output is onnxruntime's, with graph optimizations off, to the bit; another grid after the pool
keeps the float pool and its requantization."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln_cli import kiln

GEOMETRIES = [
    ("stem 3x3 s2 p1", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     [2, 5, 23, 30]),
    ("3x3 s2 ceil", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), [1, 3, 16, 17]),
    ("2x2 s2", dict(kernel_shape=[2, 2], strides=[2, 2]), [1, 4, 12, 9]),
    ("5x5 s1 p2 (SPPF)", dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]),
     [1, 3, 10, 11]),
    ("3x2 s(1,2) p(0,1,2,0)", dict(kernel_shape=[3, 2], strides=[1, 2], pads=[0, 1, 2, 0]),
     [1, 2, 7, 9]),
    ("dilated 2x2 d2", dict(kernel_shape=[2, 2], dilations=[2, 2]), [1, 2, 8, 8]),
    ("1-D k3 s2", dict(kernel_shape=[3], strides=[2], pads=[1, 1]), [2, 3, 19]),
]


def pool_model(path, attrs, shape, dtype, zero, second_grid, opset=17):
    s1 = np.array(0.043, np.float32)
    z1 = np.array(zero, dtype)
    s2 = np.array(0.051 if second_grid else 0.043, np.float32)
    inits = [numpy_helper.from_array(s1, "s1"), numpy_helper.from_array(z1, "z1"),
             numpy_helper.from_array(s2, "s2"), numpy_helper.from_array(z1, "z2")]
    pool = helper.make_node("MaxPool", ["xd"], ["p"], **attrs)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s1", "z1"], ["xd"]),
             pool,
             helper.make_node("QuantizeLinear", ["p", "s2", "z2"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s2", "z2"], ["y"])]
    g = helper.make_graph(nodes, "qpool", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)


def run_both(path, shape, tmp_path):
    plan = str(tmp_path / "p.plan")
    kiln("build", str(path), "-o", plan)
    layers = json.loads(kiln("inspect", plan, "--json"))["layers"]
    x = (np.random.default_rng(7).standard_normal(shape) * 3).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kiln("run", plan, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "o"))
    got = np.load(tmp_path / "o" / "y.npy")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    return layers, got, ref


@pytest.mark.parametrize("dtype,zero", [(np.uint8, 128), (np.uint8, 0), (np.int8, -3)])
@pytest.mark.parametrize("geom", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
def test_maxpool_runs_on_the_quantized_tensor(geom, dtype, zero, tmp_path):
    _, attrs, shape = geom
    path = tmp_path / "m.onnx"
    pool_model(path, attrs, shape, dtype, zero, second_grid=False)
    layers, got, ref = run_both(path, shape, tmp_path)
    pools = [l for l in layers if l["op"] == "MaxPool"]
    assert len(pools) == 1 and pools[0]["name"].endswith("/int8"), layers
    assert not any(l["op"] == "QuantizeLinear" and "p" in l["name"] for l in layers[1:]), layers
    assert got.shape == ref.shape and np.array_equal(got, ref), np.abs(got - ref).max()


def test_older_opset_keeps_the_float_pool(tmp_path):
    """MaxPool takes 8-bit integers from opset 12: an opset-11 model keeps the float pool."""
    path = tmp_path / "m.onnx"
    attrs, shape = GEOMETRIES[0][1], GEOMETRIES[0][2]
    pool_model(path, attrs, shape, np.uint8, 128, second_grid=False, opset=11)
    layers, got, ref = run_both(path, shape, tmp_path)
    assert not any(l["name"].endswith("/int8") for l in layers), layers
    assert np.array_equal(got, ref), np.abs(got - ref).max()


def test_another_grid_keeps_the_float_pool(tmp_path):
    path = tmp_path / "m.onnx"
    attrs, shape = GEOMETRIES[0][1], GEOMETRIES[0][2]
    pool_model(path, attrs, shape, np.uint8, 128, second_grid=True)
    layers, got, ref = run_both(path, shape, tmp_path)
    assert not any(l["name"].endswith("/int8") for l in layers), layers
    assert np.array_equal(got, ref), np.abs(got - ref).max()


def test_calibrated_pools_take_their_input_grid(tmp_path):
    """kiln build --int8 --calibration: two MaxPools in a row between int8 convs take the grid of
    the first one's input, so they run on the int8 tensor; the output stays close to
    onnxruntime's float32 one."""
    rng = np.random.default_rng(4)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["p1"], ["p2"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
             helper.make_node("Conv", ["p2", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["y"])]
    g = helper.make_graph(nodes, "cal", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [1, 3, 20, 22])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 6, 8, 1, 1), w("b2", 6),
                           w("w3", 5, 6, 1, 1)])
    path = tmp_path / "cal.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    cal = tmp_path / "samples"
    cal.mkdir()
    for i in range(4):
        np.save(cal / f"s{i}.npy", rng.standard_normal([1, 3, 20, 22]).astype(np.float32))
    plan = str(tmp_path / "cal.plan")
    kiln("build", str(path), "-o", plan, "--int8", "--calibration", str(cal))
    layers = json.loads(kiln("inspect", plan, "--json"))["layers"]
    pools = [l for l in layers if l["op"] == "MaxPool"]
    assert len(pools) == 2 and all(l["name"].endswith("/int8") for l in pools), layers
    assert not any(l["op"] in ("QuantizeLinear", "DequantizeLinear") and "p1" in l["name"]
                   for l in layers), layers
    x = rng.standard_normal([1, 3, 20, 22]).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kiln("run", plan, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "o"))
    got = np.load(tmp_path / "o" / "y.npy").ravel().astype(np.float64)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0].ravel().astype(np.float64)
    cos = got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref))
    assert cos > 0.99, cos
