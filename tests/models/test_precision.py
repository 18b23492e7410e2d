"""Reduced precision (--precision fp16|bf16, --layer-precision): every model of manifest.json
built in fp16 and bf16 matches its fp32 reference within 1e-2 (bf16: 5e-2) of the output's
largest magnitude; layers lowered are shown by inspect and carry Casts only at precision
boundaries; a per-layer override restores float32 where a planted fp16 overflow sits; the
CLI refuses bad precision arguments in one line; a float16 fused element-wise program is
refused on the CPU, whose kernel computes in float32 only."""

import json
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")

with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = json.load(_f)["models"]


def kiln(*args, check=True):
    p = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=300)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    if check:
        assert p.returncode == 0, f"kiln {' '.join(args)}: {err}"
    return p.returncode, out, err


def shape_args(model):
    return [a for s in model["shapes"] for a in ("--shapes", s)]


def outputs(plan, inputs, out_dir):
    args = ["run", plan, "--output-dir", out_dir]
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    kiln(*args)
    with open(os.path.join(out_dir, "outputs.json")) as f:
        return {k: np.load(os.path.join(out_dir, v)) for k, v in json.load(f).items()}


# bf16 on the CPU rounds every product's weights and activations to 8-bit mantissas (2^-9 a
# rounding); through ShuffleNetV2-mini's products to its small logits (max 0.66) that is 3.5 %
# of the output's magnitude and MobileNetV3-mini's 2.8 %, the others stay under 2 %.
@pytest.mark.parametrize("precision,tol", [("fp16", 1e-2), ("bf16", 5e-2)])
@pytest.mark.parametrize("model", MANIFEST, ids=[m["name"] for m in MANIFEST])
def test_model_in_reduced_precision_matches_fp32(model, precision, tol, tmp_path):
    plan = str(tmp_path / "p.plan")
    kiln("build", os.path.join(HERE, model["model"]), "-o", plan, "--precision", precision,
         *shape_args(model))
    info = json.loads(kiln("inspect", plan, "--json")[1])
    for layer in info["layers"]:
        assert layer["precision"] in ("fp32", precision, "-"), layer
    for case in model["cases"]:
        inputs = {k: os.path.join(HERE, v) for k, v in case["inputs"].items()}
        got = outputs(plan, inputs, str(tmp_path / case["name"]))
        for name, ref_file in case["outputs"].items():
            ref = np.load(os.path.join(HERE, ref_file))
            assert got[name].dtype == ref.dtype
            if ref.dtype.kind in "biu":
                continue  # indices (NonZero, TopK) may legitimately move with rounding
            assert got[name].shape == ref.shape
            scale = max(float(np.abs(ref).max()), 1e-6)
            err = float(np.abs(got[name].astype(np.float64) - ref).max())
            assert err <= tol * scale, f"{name}: max error {err:.3g} > {tol} x {scale:.3g}"


def overflow_model(path):
    """y = T(T(x * 300) * 300) + 1 on a 2x2 x: the second product overflows float16 (> 65504)
    for |x| > 0.73. The Transposes keep the Muls apart, so each is a layer of its own."""
    c = [helper.make_tensor(n, TensorProto.FLOAT, [1], [v]) for n, v in
         (("k1", 300.0), ("k2", 300.0), ("one", 1.0))]
    nodes = [helper.make_node("Mul", ["x", "k1"], ["a"], name="mul1"),
             helper.make_node("Transpose", ["a"], ["at"], name="t1", perm=[1, 0]),
             helper.make_node("Mul", ["at", "k2"], ["b"], name="mul2"),
             helper.make_node("Transpose", ["b"], ["bt"], name="t2", perm=[1, 0]),
             helper.make_node("Add", ["bt", "one"], ["y"], name="add")]
    g = helper.make_graph(nodes, "overflow",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], c)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def test_layer_override_fixes_planted_fp16_overflow(tmp_path):
    model = overflow_model(str(tmp_path / "m.onnx"))
    x = np.array([[0.1, -0.5], [1.0, 2.0]], np.float32)
    xp = str(tmp_path / "x.npy")
    np.save(xp, x)
    want = (x * np.float32(300)) * np.float32(300) + np.float32(1)
    kiln("build", model, "-o", str(tmp_path / "a.plan"), "--precision", "fp16")
    got = outputs(str(tmp_path / "a.plan"), {"x": xp}, str(tmp_path / "a"))["y"]
    assert np.isinf(got[1]).all() and np.isfinite(got[0]).all(), got  # the planted overflow
    for spec in ("mul2=fp32", "mul*=fp32"):
        plan = str(tmp_path / "b.plan")
        kiln("build", model, "-o", plan, "--precision", "fp16", "--layer-precision", spec,
             "--layer-precision", "add=fp32")
        got = outputs(plan, {"x": xp}, str(tmp_path / "b"))["y"]
        np.testing.assert_allclose(got, want, rtol=2e-3)
        layers = {l["name"]: l["precision"] for l in json.loads(kiln("inspect", plan, "--json")[1])["layers"]}
        assert layers["mul2"] == "fp32" and layers["add"] == "fp32"
    listing = tmp_path / "layers.txt"
    listing.write_text("# kept in fp32\nmul2=fp32\n\nadd=fp32\n")
    kiln("build", model, "-o", str(tmp_path / "e.plan"), "--precision", "fp16",
         "--layer-precision", f"@{listing}")
    got = outputs(str(tmp_path / "e.plan"), {"x": xp}, str(tmp_path / "e"))["y"]
    np.testing.assert_allclose(got, want, rtol=2e-3)
    # everything pinned to fp32 gives the fp32 plan's results bit for bit
    kiln("build", model, "-o", str(tmp_path / "c.plan"), "--precision", "fp16",
         "--layer-precision", "*=fp32")
    kiln("build", model, "-o", str(tmp_path / "d.plan"))
    c = outputs(str(tmp_path / "c.plan"), {"x": xp}, str(tmp_path / "c"))["y"]
    d = outputs(str(tmp_path / "d.plan"), {"x": xp}, str(tmp_path / "d"))["y"]
    assert np.array_equal(c, d)


def test_constant_beyond_fp16_range_keeps_its_layer_in_fp32(tmp_path):
    """A layer reading a finite float32 constant float16 cannot hold (an attention mask's
    -3.4e38 scale) stays float32 under --precision fp16, so 0 * c is 0 and not 0 * -inf = NaN;
    its neighbour with a small constant is lowered."""
    c = [helper.make_tensor("big", TensorProto.FLOAT, [1], [-3.0e38]),
         helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])]
    nodes = [helper.make_node("Mul", ["x", "big"], ["a"], name="mask"),
             helper.make_node("Transpose", ["a"], ["at"], name="t", perm=[1, 0]),
             helper.make_node("Mul", ["at", "two"], ["y"], name="small")]
    g = helper.make_graph(nodes, "mask",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], c)
    model = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    x = np.array([[0.0, 1.0], [0.0, 0.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    plan = str(tmp_path / "p.plan")
    kiln("build", model, "-o", plan, "--precision", "fp16")
    layers = {l["name"]: l["precision"] for l in json.loads(kiln("inspect", plan, "--json")[1])["layers"]}
    assert layers["mask"] == "fp32" and layers["small"] == "fp16", layers
    got = outputs(plan, {"x": str(tmp_path / "x.npy")}, str(tmp_path / "o"))["y"]
    assert not np.isnan(got).any(), got
    # y = T(x * big) * 2: the zeros stay zeros; the one product past float16's range (and
    # float32's, once doubled) is -inf
    assert got[0, 0] == 0 and got[0, 1] == 0 and got[1, 1] == 0 and np.isneginf(got[1, 0]), got


def fused_relu_model(path, elem_type):
    """y = kiln.FusedElementwise(x) with the program LOAD r0 <- x; r1 = Relu(r0); STORE r1 (the
    encoding of src/ops/fused_elementwise.h), on a 2x3 x of elem_type."""
    node = helper.make_node("FusedElementwise", ["x"], ["y"], domain="kiln", name="fused",
                            program=[0, 0, 0, 0, 0, 2, 22, 1, 0, 0, 4, 0, 0, 1, 0],
                            constants=[0.0])
    g = helper.make_graph([node], "fused",
                          [helper.make_tensor_value_info("x", elem_type, [2, 3])],
                          [helper.make_tensor_value_info("y", elem_type, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("kiln", 1)])
    onnx.save(m, path)
    return path


def test_fused_elementwise_takes_16_bit_types_only_where_a_backend_runs_them(tmp_path):
    """kiln.FusedElementwise infers float16/bfloat16 (the precision pass lowers it on the CUDA
    backend), but the CPU's kernel computes in float32 only: a float16 program placed on the CPU
    is refused at build with the reason, where the float32 one runs."""
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    f32 = fused_relu_model(str(tmp_path / "f32.onnx"), TensorProto.FLOAT)
    np.save(tmp_path / "x32.npy", x)
    got = outputs(f32, {"x": str(tmp_path / "x32.npy")}, str(tmp_path / "o32"))["y"]
    assert np.array_equal(got, np.maximum(x, 0))
    f16 = fused_relu_model(str(tmp_path / "f16.onnx"), TensorProto.FLOAT16)
    np.save(tmp_path / "x16.npy", x.astype(np.float16))
    rc, _, err = kiln("run", f16, "--input", f"x={tmp_path / 'x16.npy'}", "--output-dir",
                      str(tmp_path / "o16"), check=False)
    assert rc != 0 and err.count("\n") == 1, err
    assert "runs FusedElementwise in float32 only (input 0 is float16)" in err, err


@pytest.mark.parametrize("args,words", [
    (["--precision", "fp8"], "--precision 'fp8': expected fp32, tf32, fp16 or bf16"),
    (["--layer-precision", "conv"], "expected PATTERN=fp32|tf32|fp16|bf16"),
    (["--layer-precision", "conv=half"], "--layer-precision 'half'"),
    (["--layer-precision", "@/nonexistent/list.txt"], "--layer-precision @/nonexistent/list.txt"),
])
def test_bad_precision_arguments(tmp_path, args, words):
    model = overflow_model(str(tmp_path / "m.onnx"))
    rc, out, err = kiln("build", model, "-o", str(tmp_path / "x.plan"), *args, check=False)
    assert rc != 0 and words in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "x.plan")


def test_python_precision_argument(tmp_path):
    import sys
    sys.path.insert(0, os.path.join(REPO, "python"))
    os.environ.setdefault("KILN_LIBRARY", os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(KILN))), "lib", "libkiln.so"))
    import kiln as k
    model = overflow_model(str(tmp_path / "m.onnx"))
    x = np.array([[0.1, -0.5], [1.0, 2.0]], np.float32)
    want = (x * np.float32(300)) * np.float32(300) + np.float32(1)
    got = k.run(k.build(model, precision="fp16"), {"x": x})["y"]
    assert np.isinf(got[1]).all()
    got = k.run(k.build(model, precision={"*": "fp16", "mul2": "fp32", "add": "fp32"}), {"x": x})
    np.testing.assert_allclose(got["y"], want, rtol=2e-3)
    with pytest.raises(k.KilnError, match="precision 'fp8'"):
        k.build(model, precision="fp8")


def test_debug_precision_finds_the_layers_a_native_fp16_build_must_keep(tmp_path):
    """kiln debug precision, judging with real fp16 builds: it names exactly the layers that
    overflow (mul2, and add, which reads 9e4), and building with its list meets the tolerance."""
    model = overflow_model(str(tmp_path / "m.onnx"))
    x = np.array([[0.1, -0.5], [1.0, 2.0]], np.float32)
    xp = str(tmp_path / "x.npy")
    np.save(xp, x)
    listing = str(tmp_path / "layers.txt")
    rc, out, err = kiln("debug", "precision", model, "--precision", "fp16", "-o", listing,
                        "--input", f"x={xp}", "--rtol", "1e-2", "--atol", "1e-2")
    assert "all 5 layers at fp16: FAILS" in out, out
    with open(listing) as f:
        assert sorted(f.read().split()) == ["add=fp32", "mul2=fp32"]
    plan = str(tmp_path / "p.plan")
    kiln("build", model, "-o", plan, "--precision", "fp16", "--layer-precision", f"@{listing}")
    got = outputs(plan, {"x": xp}, str(tmp_path / "o"))["y"]
    want = (x * np.float32(300)) * np.float32(300) + np.float32(1)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    layers = {l["name"]: l["precision"] for l in json.loads(kiln("inspect", plan, "--json")[1])["layers"]}
    assert layers["mul1"] == "fp16" and layers["mul2"] == "fp32"


def test_debug_reduce_fails_compare_against_fp16(tmp_path):
    """debug reduce --fails-compare with --target-precision fp16: the overflow model reduces to
    at most 3 nodes that still fail the comparison, as a valid ONNX model."""
    model = overflow_model(str(tmp_path / "m.onnx"))
    xp = str(tmp_path / "x.npy")
    np.save(xp, np.array([[0.1, -0.5], [1.0, 2.0]], np.float32))
    out = str(tmp_path / "min.onnx")
    kiln("debug", "reduce", model, "-o", out, "--fails-compare", "--target-precision", "fp16",
         "--input", f"x={xp}", "--rtol", "1e-2", "--atol", "1e-2")
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    assert 1 <= len(m.graph.node) <= 3
    assert "mul2" in [n.name for n in m.graph.node]
