"""The squeeze-and-excitation multiply folded into the projection conv (kiln.ScaledConv).

Mul(x [N, C, H, W], s [N, C, 1, 1]) read only by a 1x1 conv becomes kiln.ScaledConv on the CPU
(src/passes/fuse_channel_scale.c), which scales the conv's packed weights per image instead of
making a scaled copy of x. Checked against onnxruntime: a squeeze-and-excitation block at batch 1
and at a dynamic batch of 3 (a scale per image), with a bias, a residual and an activation after
the conv; the cases the pass leaves alone (more output channels than pixels, a second reader of
the product, a 3x3 conv, KILN_FUSE_CHANNEL_SCALE=0, a bf16 plan); the op written in a model;
and an S of the wrong shape refused in one line.
"""

import json
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


def kiln(*args, env=None, check=True):
    proc = subprocess.run([KILN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=120,
                          env=dict(os.environ, **(env or {})))
    if check:
        assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return proc


def se_block(c=16, cout=8, hw=8, batch=1, kernel=1, residual=True, tap=False):
    """x -> GlobalAveragePool -> 1x1 reduce -> Relu -> 1x1 expand -> Sigmoid -> Mul(x, s)
    -> conv (kernel x kernel) + bias [+ x0 residual] -> Relu."""
    rng = np.random.default_rng(7)

    def const(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [const("w1", (4, c, 1, 1)), const("b1", (4,)), const("w2", (c, 4, 1, 1)),
             const("b2", (c,)), const("w3", (cout, c, kernel, kernel)), const("b3", (cout,)),
             const("wr", (cout, c, 1, 1))]
    pad = [kernel // 2] * 4
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["p"]),
        helper.make_node("Conv", ["p", "w1", "b1"], ["r1"]),
        helper.make_node("Relu", ["r1"], ["r2"]),
        helper.make_node("Conv", ["r2", "w2", "b2"], ["e1"]),
        helper.make_node("Sigmoid", ["e1"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["xs"]),
        helper.make_node("Conv", ["xs", "w3", "b3"], ["c3"], pads=pad),
    ]
    last = "c3"
    if residual:
        nodes += [helper.make_node("Conv", ["x", "wr"], ["x0"]),
                  helper.make_node("Add", ["c3", "x0"], ["sum"])]
        last = "sum"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    n = "N" if batch is None else batch
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, cout, hw, hw])]
    if tap:
        outputs.append(helper.make_tensor_value_info("xs", TensorProto.FLOAT, [n, c, hw, hw]))
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
        outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def layers(plan):
    info = json.loads(kiln("inspect", plan, "--json").stdout)
    return [ly["op"] for ly in info["layers"]]


def run(plan, x, tmp_path):
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    kiln("run", plan, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", out)
    index = json.loads((out / "outputs.json").read_text())
    return {name: np.load(out / f) for name, f in index.items()}


def check_against_ort(model_path, plan, x, tmp_path):
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = dict(zip(names, sess.run(None, {"x": x})))
    got = run(plan, x, tmp_path)
    for name in names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5)


def build(model, tmp_path, *extra, env=None):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    plan = tmp_path / "model.plan"
    kiln("build", path, "-o", plan, "--quiet", *extra, env=env)
    return path, plan


@pytest.mark.parametrize("residual", [True, False])
def test_se_block_folds_into_the_projection(tmp_path, residual):
    path, plan = build(se_block(residual=residual), tmp_path)
    ops = layers(plan)
    assert "ScaledConv" in ops and "Mul" not in ops, ops
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    check_against_ort(path, plan, x, tmp_path)


@pytest.mark.parametrize("shape", [(16, 32, 4), (48, 40, 7), (300, 8, 5)])
def test_packed_input_rows_scaled(tmp_path, shape):
    """More than 24 output channels (or more than 256 inputs): the GEMM packs x and scales its
    rows as it packs them, so the fold is taken even where the weights outnumber the pixels;
    two images with different scales."""
    c, cout, hw = shape
    path, plan = build(se_block(c=c, cout=cout, hw=hw, batch=None), tmp_path, "--shapes",
                       f"x:1x{c}x{hw}x{hw},2x{c}x{hw}x{hw},2x{c}x{hw}x{hw}")
    ops = layers(plan)
    assert "ScaledConv" in ops and "Mul" not in ops, ops
    x = np.random.default_rng(6).standard_normal((2, c, hw, hw)).astype(np.float32)
    x[1] *= 2.5
    check_against_ort(path, plan, x, tmp_path)


def test_dynamic_batch_scales_each_image(tmp_path):
    path, plan = build(se_block(batch=None), tmp_path, "--shapes", "x:1x16x8x8,2x16x8x8,4x16x8x8")
    assert "ScaledConv" in layers(plan)
    # images that differ make scales that differ: one scale for all would fail this
    x = np.random.default_rng(2).standard_normal((3, 16, 8, 8)).astype(np.float32)
    x[1] *= 3.0
    x[2] -= 1.0
    check_against_ort(path, plan, x, tmp_path)


@pytest.mark.parametrize("case", ["wide_output", "second_reader", "conv3x3", "switched_off",
                                  "bf16"])
def test_left_alone(tmp_path, case):
    kw, extra, env = {}, [], None
    if case == "wide_output":
        # 20 output channels > 16 pixels, and the GEMM reads x in place (<= 24 rows over 16):
        # scaling the weights would cost more than the multiply
        kw = {"cout": 20, "hw": 4}
    elif case == "second_reader":
        kw = {"tap": True}
    elif case == "conv3x3":
        kw = {"kernel": 3}
    elif case == "switched_off":
        env = {"KILN_FUSE_CHANNEL_SCALE": "0"}
    else:
        extra = ["--precision", "bf16"]
    path, plan = build(se_block(**kw), tmp_path, *extra, env=env)
    ops = layers(plan)
    assert "ScaledConv" not in ops and "Mul" in ops, ops
    hw = kw.get("hw", 8)
    x = np.random.default_rng(3).standard_normal((1, 16, hw, hw)).astype(np.float32)
    if case != "bf16":
        check_against_ort(path, plan, x, tmp_path)


def scaled_conv_model(s_shape, n=2):
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((6, 5, 1, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")
    node = helper.make_node("ScaledConv", ["x", "w", "b", "", "s"], ["y"], domain="kiln",
                            kiln_activation="Relu")
    graph = helper.make_graph(
        [node], "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 5, 3, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, s_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 6, 3, 4])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("kiln", 1)])


def test_the_op_in_a_model(tmp_path):
    model = scaled_conv_model([2, 5, 1, 1])
    path = tmp_path / "op.onnx"
    onnx.save(model, path)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    s = rng.standard_normal((2, 5, 1, 1)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "s.npy", s)
    out = tmp_path / "out"
    kiln("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--input",
         f"s={tmp_path / 's.npy'}", "--output-dir", out)
    got = np.load(out / json.loads((out / "outputs.json").read_text())["y"])
    w = numpy_helper.to_array(model.graph.initializer[0])[:, :, 0, 0]
    b = numpy_helper.to_array(model.graph.initializer[1])
    want = np.maximum(np.einsum("oc,nchw->nohw", w, x * s) + b[None, :, None, None], 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_scale_of_the_wrong_shape_is_refused(tmp_path):
    path = tmp_path / "bad.onnx"
    onnx.save(scaled_conv_model([2, 4, 1, 1]), path)
    proc = kiln("build", path, "-o", tmp_path / "bad.plan", "--quiet", check=False)
    err = proc.stderr.decode()
    assert proc.returncode != 0 and len(err.strip().splitlines()) == 1, err
    assert "input 4 (S)" in err and "[2 or 1, 5, 1, 1]" in err, err
    assert not (tmp_path / "bad.plan").exists()


def test_weights_that_are_not_constant_are_refused_at_build(tmp_path):
    model = scaled_conv_model([2, 5, 1, 1])
    w = model.graph.initializer[0]
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.dims)))
    del model.graph.initializer[0]
    path = tmp_path / "w_input.onnx"
    onnx.save(model, path)
    proc = kiln("build", path, "-o", tmp_path / "w.plan", "--quiet", check=False)
    err = proc.stderr.decode()
    assert proc.returncode != 0 and len(err.strip().splitlines()) == 1, err
    assert "constant float32 weights" in err, err
    assert not (tmp_path / "w.plan").exists()
