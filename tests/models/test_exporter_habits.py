"""Habits of other projects' exporters that kiln must read as onnxruntime does.

Models stamped with opsets 1-6 run where their semantics are known; the legacy broadcast
attributes of binary ops are honoured where numpy broadcasting computes the same and refused
with a message where it does not.

Paddle2ONNX and older exporters write a dynamic dim as `dim_value: -1` on graph inputs,
outputs and value_info (and 0 on outputs and value_info) instead of a `dim_param`. kiln reads
them as unnamed dynamic dims: the model builds with a profile and runs at several shapes,
matching onnxruntime at each.

BatchNormalization's forms from opsets 1-8 (consumed_inputs, is_test, spatial=1) run;
spatial=0 is refused in one line. Reshape-1 (shape attribute), Pad-1 (paddings attribute)
and Upsample-1 (height_scale/width_scale) run. value_info (or an output type) that inference proves wrong
is a warning naming the tensor, and the model runs with the inferred type.
"""

import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")


def kiln(*args):
    proc = subprocess.run([KILN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return proc


def minus_one_model():
    rng = np.random.RandomState(0)
    w = numpy_helper.from_array(rng.randn(4, 3, 3, 3).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.randn(4).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "paddle_style",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, -1, -1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, 0, 0])], [w, b],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [-1, 4, -1, -1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("form", ["onnx", "plan"])
def test_minus_one_dims_run_at_two_shapes(tmp_path, form):
    path = tmp_path / "model.onnx"
    onnx.save(minus_one_model(), path)
    target = path
    if form == "plan":
        target = tmp_path / "model.plan"
        kiln("build", path, "-o", target, "--shapes", "x:1x3x4x4,2x3x8x8,4x3x16x16", "--quiet")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.RandomState(1)
    for i, shape in enumerate([(1, 3, 5, 6), (3, 3, 16, 9)]):
        x = rng.randn(*shape).astype(np.float32)
        np.save(tmp_path / f"x{i}.npy", x)
        out = tmp_path / f"out{i}"
        kiln("run", target, "--input", f"x={tmp_path / f'x{i}.npy'}", "--output-dir", out)
        got = np.load(out / "y.npy")
        want = sess.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_inspect_names_the_unnamed_dims(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(minus_one_model(), path)
    out = kiln("inspect", path, "--shapes", "x:1x3x4x4,2x3x8x8,4x3x16x16").stdout.decode()
    assert "x_dim0" in out


def legacy_add(tmp_path, b_shape, **attrs):
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], **attrs)], "opset6",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "legacy.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)],
                                ir_version=3), path)
    rng = np.random.RandomState(2)
    a, b = rng.randn(2, 3, 4).astype(np.float32), rng.randn(*b_shape).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    args = [KILN, "run", path, "--input", f"a={tmp_path / 'a.npy'}", "--input",
            f"b={tmp_path / 'b.npy'}", "--output-dir", tmp_path / "out"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=120)
    return proc, a, b


@pytest.mark.parametrize("b_shape,attrs", [([3, 4], {"broadcast": 1}),
                                           ([3, 4], {"broadcast": 1, "axis": 1}),
                                           ([1], {"broadcast": 1, "axis": 0}),
                                           ([2, 3, 4], {})])
def test_opset6_broadcast_that_numpy_computes_runs(tmp_path, b_shape, attrs):
    proc, a, b = legacy_add(tmp_path, b_shape, **attrs)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), a + b, rtol=1e-6)


@pytest.mark.parametrize("b_shape,attrs,words", [
    ([2, 3], {"broadcast": 1, "axis": 0}, "along axis 0"),
    ([3, 4], {}, "need broadcast=1 before opset 7"),
    ([3, 5], {"broadcast": 1}, "does not match")])
def test_opset6_broadcast_kiln_cannot_compute_is_refused(tmp_path, b_shape, attrs, words):
    proc, _, _ = legacy_add(tmp_path, b_shape, **attrs)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert words in lines[0] and "opset 6" in lines[0]


def legacy_batchnorm(tmp_path, opset, **attrs):
    rng = np.random.RandomState(3)
    x = rng.randn(2, 3, 4, 5).astype(np.float32)
    scale, bias, mean = (rng.randn(3).astype(np.float32) for _ in range(3))
    var = rng.rand(3).astype(np.float32) + 0.5
    inits = [numpy_helper.from_array(v, n) for v, n in
             [(scale, "s"), (bias, "b"), (mean, "m"), (var, "v")]]
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], **attrs)],
        "old_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 5])], inits)
    path = tmp_path / "bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                ir_version=3), path)
    np.save(tmp_path / "x.npy", x)
    args = [KILN, "run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
            tmp_path / "out"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=120)
    c = (slice(None), None, None)
    want = (x - mean[c]) / np.sqrt(var[c] + attrs.get("epsilon", 1e-5)) * scale[c] + bias[c]
    return proc, want


@pytest.mark.parametrize("opset,attrs", [
    (1, {"consumed_inputs": [0, 0, 0, 1, 1], "is_test": 1}),
    (1, {"consumed_inputs": [0, 0, 0, 1, 1]}),
    (6, {"consumed_inputs": [0, 0, 0, 1, 1], "is_test": 1, "epsilon": 1e-3}),
    (6, {"is_test": 1, "spatial": 1}),
    (7, {"spatial": 1, "epsilon": 1e-4}),
    (9, {})])
def test_old_batchnorm_forms_run(tmp_path, opset, attrs):
    proc, want = legacy_batchnorm(tmp_path, opset, **attrs)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-5, atol=1e-5)


def test_batchnorm_spatial_0_is_refused_in_one_line(tmp_path):
    proc, _ = legacy_batchnorm(tmp_path, 7, spatial=0)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "spatial = 0" in lines[0]


def declared_model(tmp_path, declared_type, declared_shape):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])], "vi",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        value_info=[helper.make_tensor_value_info("r", declared_type, declared_shape)])
    path = tmp_path / "vi.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    x = np.random.RandomState(4).randn(2, 3).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    args = [KILN, "run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
            tmp_path / "out"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=120)
    return proc, -np.maximum(x, 0)


@pytest.mark.parametrize("declared_type,declared_shape,words", [
    (TensorProto.FLOAT, [4, 5], "declares float32 4x5, inference gives float32 2x3"),
    (TensorProto.INT64, [2, 3], "declares int64 2x3, inference gives float32 2x3"),
    (TensorProto.FLOAT, [2, 3, 1], "declares float32 2x3x1")])
def test_value_info_that_contradicts_inference_warns_and_runs(tmp_path, declared_type,
                                                              declared_shape, words):
    proc, want = declared_model(tmp_path, declared_type, declared_shape)
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "tensor 'r'" in warnings[0] and words in warnings[0], proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), want)


@pytest.mark.parametrize("declared_shape", [[2, 3], ["n", 3], [-1, 3], None])
def test_value_info_that_agrees_or_is_open_gives_no_warning(tmp_path, declared_shape):
    proc, want = declared_model(tmp_path, TensorProto.FLOAT, declared_shape)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), want)


def run_legacy(tmp_path, node, opset, x):
    graph = helper.make_graph([node], "legacy",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "legacy.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                ir_version=3), path)
    np.save(tmp_path / "x.npy", x)
    kiln("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    return np.load(tmp_path / "out" / "y.npy")


LEGACY_X = np.random.RandomState(5).randn(2, 3, 2, 3).astype(np.float32)


@pytest.mark.parametrize("name,opset,node,want", [
    ("upsample1_nearest", 1,
     helper.make_node("Upsample", ["x"], ["y"], height_scale=2.0, width_scale=3.0),
     LEGACY_X.repeat(2, 2).repeat(3, 3)),
    ("reshape1", 1, helper.make_node("Reshape", ["x"], ["y"], shape=[6, -1]),
     LEGACY_X.reshape(6, -1)),
    ("reshape1_consumed_inputs", 4,
     helper.make_node("Reshape", ["x"], ["y"], shape=[0, 9, 2], consumed_inputs=[0]),
     LEGACY_X.reshape(2, 9, 2)),
    ("pad1_constant", 1,
     helper.make_node("Pad", ["x"], ["y"], paddings=[0, 0, 1, 2, 0, 0, 2, 1], value=1.5),
     np.pad(LEGACY_X, [(0, 0), (0, 0), (1, 2), (2, 1)], constant_values=1.5)),
    ("pad1_reflect", 1,
     helper.make_node("Pad", ["x"], ["y"], paddings=[0, 0, 1, 2, 0, 0, 1, 2], mode="reflect"),
     np.pad(LEGACY_X, [(0, 0), (0, 0), (1, 1), (2, 2)], mode="reflect"))],
    ids=lambda v: v if isinstance(v, str) else "")
def test_older_upsample_reshape_pad_forms_run(tmp_path, name, opset, node, want):
    np.testing.assert_array_equal(run_legacy(tmp_path, node, opset, LEGACY_X), want)


def test_upsample1_bilinear_matches_onnxruntime_upsample9(tmp_path):
    got = run_legacy(tmp_path, helper.make_node("Upsample", ["x"], ["y"], mode="bilinear",
                                                height_scale=2.0, width_scale=2.0), 1, LEGACY_X)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    graph = helper.make_graph(
        [helper.make_node("Upsample", ["x", "scales"], ["y"], mode="linear")], "up9",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, LEGACY_X.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scales])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"x": LEGACY_X})[0], rtol=1e-5, atol=1e-6)
