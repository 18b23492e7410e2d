"""float8 and 4-bit tensors (the types of FP8/INT4-quantized models) through kiln.

Models built with onnx's helpers quantize to and from float8e4m3fn, int4, uint4 and float4e2m1
(per-tensor, per-axis and blocked), move the quantized tensors through the data-movement ops,
and read packed 4-bit initializers of odd length. Outputs come back as .npy records named after
the ml_dtypes type and are compared, code for code, with onnx's reference evaluator, from .onnx
and through a plan.
"""

import json
import os
import subprocess

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")


def kiln(*args):
    proc = subprocess.run([KILN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return proc


def load_output(out_dir, name):
    with open(os.path.join(out_dir, "outputs.json")) as f:
        index = json.load(f)
    arr = np.load(os.path.join(out_dir, index[name]), allow_pickle=False)
    field = arr.dtype.names[0] if arr.dtype.names else None
    return arr[field].view(getattr(ml_dtypes, field)) if field else arr


def quantized_model(qtype):
    """x -> QuantizeLinear(qtype) -> Transpose, Reshape, Slice, Gather, Concat, Pad, Expand,
    Flatten, Squeeze/Unsqueeze -> the moved codes as one output and DequantizeLinear of them as
    another; plus a blocked DequantizeLinear of a packed initializer of odd length."""
    fp = qtype not in (TensorProto.INT4, TensorProto.UINT4)
    zero = helper.make_tensor("zp", qtype, [], [0])
    wvals = np.linspace(-3, 3, 15).astype(np.float32)
    if not fp:
        wvals = np.clip(np.round(wvals), 0 if qtype == TensorProto.UINT4 else -8, 7)
    w = helper.make_tensor("w", qtype, [3, 5], wvals.ravel().tolist())
    inits = [
        zero, w,
        helper.make_tensor("scale", TensorProto.FLOAT, [], [0.25]),
        helper.make_tensor("wscale", TensorProto.FLOAT, [3, 2], [0.5, 1, 2, 0.25, 1.5, 3]),
        helper.make_tensor("shape", TensorProto.INT64, [2], [6, 4]),
        helper.make_tensor("starts", TensorProto.INT64, [1], [1]),
        helper.make_tensor("ends", TensorProto.INT64, [1], [5]),
        helper.make_tensor("idx", TensorProto.INT64, [3], [2, 0, 3]),
        helper.make_tensor("pads", TensorProto.INT64, [4], [0, 1, 0, 0]),
        helper.make_tensor("eshape", TensorProto.INT64, [3], [2, 3, 5]),
        helper.make_tensor("ax0", TensorProto.INT64, [1], [0]),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"]),
        helper.make_node("Transpose", ["q"], ["t"], perm=[1, 0]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("Slice", ["r", "starts", "ends"], ["s"]),
        helper.make_node("Gather", ["s", "idx"], ["g"], axis=1),
        helper.make_node("Concat", ["g", "g"], ["c"], axis=0),
        helper.make_node("Pad", ["c", "pads"], ["p"]),
        helper.make_node("Identity", ["p"], ["moved"]),
        helper.make_node("DequantizeLinear", ["moved", "scale", "zp"], ["deq"]),
        helper.make_node("Expand", ["w", "eshape"], ["we"]),
        helper.make_node("Flatten", ["we"], ["wf"], axis=2),
        helper.make_node("Unsqueeze", ["wf", "ax0"], ["wu"]),
        helper.make_node("Squeeze", ["wu", "ax0"], ["ws"]),
        helper.make_node("DequantizeLinear", ["w", "wscale"], ["wdeq"], axis=1, block_size=3),
    ]
    graph = helper.make_graph(
        nodes, "narrow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info("moved", qtype, None),
         helper.make_tensor_value_info("deq", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("ws", qtype, None),
         helper.make_tensor_value_info("wdeq", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


QTYPES = {"float8e4m3fn": TensorProto.FLOAT8E4M3FN, "float8e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
          "int4": TensorProto.INT4, "uint4": TensorProto.UINT4,
          "float4e2m1": TensorProto.FLOAT4E2M1}


@pytest.mark.parametrize("form", ["onnx", "plan"])
@pytest.mark.parametrize("qname", sorted(QTYPES))
def test_quantized_data_movement_matches_reference(tmp_path, qname, form):
    model = quantized_model(QTYPES[qname])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    target = path
    if form == "plan":
        target = tmp_path / "model.plan"
        kiln("build", path, "-o", target, "--quiet")
    x = (np.random.RandomState(3).randn(4, 6) * 4).astype(np.float32)
    x[0, :3] = [1e6, -1e6, 0.13]  # saturation and rounding
    np.save(tmp_path / "x.npy", x)
    kiln("run", target, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    for name, want in zip(["moved", "deq", "ws", "wdeq"], ref):
        got = load_output(tmp_path / "out", name)
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        if want.dtype == np.float32:
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:  # codes compared bit for bit (NaN included)
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=name)


def test_narrow_npy_input_round_trips(tmp_path):
    """A float8 graph input read from kiln's own .npy record comes back unchanged."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "id",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [5])])
    path = tmp_path / "id.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    codes = np.array([0x00, 0x7f, 0x80, 0x3c, 0xfe], dtype=np.uint8)
    np.save(tmp_path / "x.npy", codes.view([("float8_e4m3fn", "u1")]))
    kiln("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    np.testing.assert_array_equal(load_output(tmp_path / "out", "y").view(np.uint8), codes)


def test_unknown_record_npy_is_refused(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "id",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [2])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2])])
    path = tmp_path / "id.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    np.save(tmp_path / "x.npy", np.zeros(2, dtype=[("float9", "u1")]))
    proc = subprocess.run([KILN, "run", str(path), "--input", f"x={tmp_path / 'x.npy'}",
                           "--output-dir", str(tmp_path / "out")], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert b"float9" in proc.stderr and len(proc.stderr.decode().strip().splitlines()) == 1


def test_edit_writes_packed_4bit_initializers(tmp_path):
    """kiln edit re-exports 4-bit initializers packed two per byte, as ONNX stores them."""
    model = quantized_model(TensorProto.INT4)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    kiln("edit", path, "-o", tmp_path / "out.onnx", "--cleanup")
    out = onnx.load(tmp_path / "out.onnx")
    got = {t.name: onnx.numpy_helper.to_array(t) for t in out.graph.initializer}
    want = onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w"))
    assert got["w"].dtype == want.dtype
    np.testing.assert_array_equal(got["w"].view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("to,attrs", [
    (TensorProto.FLOAT8E8M0, {"round_mode": "nearest"}),
    (TensorProto.FLOAT8E8M0, {"round_mode": "down", "saturate": 0}),
    (TensorProto.FLOAT8E4M3FNUZ, {"saturate": 0}),
    (TensorProto.FLOAT8E5M2, {}),
    (TensorProto.BFLOAT16, {}),
])
def test_cast_matches_reference(tmp_path, to, attrs):
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)], "cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12])],
        [helper.make_tensor_value_info("y", to, [12])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    path = tmp_path / "cast.onnx"
    onnx.save(model, path)
    x = np.array([0, -0.0, 0.1, 0.75, 1.5, 3, -7.25, 300, 1e38, 3e38, np.inf, np.nan],
                 dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    kiln("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = load_output(tmp_path / "out", "y")
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
