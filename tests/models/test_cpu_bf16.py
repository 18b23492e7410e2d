"""bf16 and fp16 on the CPU backend (--precision bf16|fp16 with the default backend).

bf16: Conv (GEMM paths), Gemm and MatMul with constant weights store them in bf16 and run the
bf16 GEMM (activations rounded as they are packed, fp32 accumulation and epilogue); depthwise
convs, products of two activations, softmax and layer norm stay fp32, with the reason shown.
fp16: the weights are stored in fp16 and widened at load. Each is checked against onnxruntime
in fp32 on ResNet-mini and the transformer encoder, on both bf16 paths (AVX512-BF16 where the
CPU has it, and the portable one that KILN_BF16_PORTABLE=1 forces); single layers on odd shapes
against onnxruntime fed the same bf16-rounded operands, which the bf16 GEMM must match to fp32
rounding. With AMX tiles, regions of convs whose work pays for the Casts at their edges read
and write bf16 activations stored NHWC instead (nn/conv_bf16.c): checked on a ResNet-like stack
against onnxruntime on every path, and on a MobileNet block that must keep fp32 activations."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")

with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = {m["name"]: m for m in json.load(_f)["models"]}

PORTABLE = {"KILN_BF16_PORTABLE": "1"}


def has_avx512_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512_bf16" in f.read()
    except OSError:
        return False


# The default path is AVX512-BF16 where the CPU has it, the portable one elsewhere.
PATHS = [("default", {}), ("portable", PORTABLE)]


def kiln(*args, env=None, check=True):
    e = dict(os.environ)
    e.pop("KILN_BF16_PORTABLE", None)
    e.update(env or {})
    p = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=300, env=e)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    if check:
        assert p.returncode == 0, f"kiln {' '.join(args)}: {err}"
    return p.returncode, out, err


def run_plan(plan, inputs, out_dir, env=None):
    os.makedirs(out_dir, exist_ok=True)
    args = ["run", plan, "--output-dir", out_dir]
    for name, arr in inputs.items():
        path = os.path.join(out_dir, f"in_{name}.npy")
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    kiln(*args, env=env)
    with open(os.path.join(out_dir, "outputs.json")) as f:
        return {k: np.load(os.path.join(out_dir, v)) for k, v in json.load(f).items()}


def layers(plan):
    return json.loads(kiln("inspect", plan, "--json")[1])["layers"]


def weight_bytes(plan):
    return json.loads(kiln("inspect", plan, "--json")[1])["weight_bytes"]


def round_bf16(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def rel_err(got, ref):
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-6))


def build(model, plan, precision, *extra, env=None):
    shapes = [a for s in MANIFEST[model]["shapes"] for a in ("--shapes", s)]
    return kiln("build", os.path.join(HERE, MANIFEST[model]["model"]), "-o", plan,
                "--precision", precision, *shapes, *extra, env=env)


def case_inputs(model):
    for case in MANIFEST[model]["cases"]:
        yield case["name"], {k: np.load(os.path.join(HERE, v)) for k, v in case["inputs"].items()}


def products_with_weights(plan_layers):
    return [l for l in plan_layers
            if l["op"] in ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul")
            and "precision_reason" not in l]


@pytest.mark.parametrize("path,env", PATHS, ids=[p for p, _ in PATHS])
@pytest.mark.parametrize("model", ["resnet_mini", "transformer_encoder"])
def test_bf16_matches_onnxruntime_fp32(model, path, env, tmp_path):
    plan, plan32 = str(tmp_path / "bf16.plan"), str(tmp_path / "fp32.plan")
    _, _, err = build(model, plan, "bf16", env=env)
    if path == "portable" or not has_avx512_bf16():  # one line naming the slower path
        assert err.count("\n") == 1 and "portable path" in err, err
    else:
        assert err == "", err
    build(model, plan32, "fp32")
    # the products' weights stored once, in bf16 (embeddings, norms and biases stay fp32)
    assert weight_bytes(plan) < 0.65 * weight_bytes(plan32)
    info = layers(plan)
    prods = products_with_weights(info)
    assert prods and all(l["precision"] == "bf16" and l["weights"] == "bf16" for l in prods), prods
    for l in info:
        if l["op"] in ("Softmax", "LayerNormalization", "ReduceMean", "GlobalAveragePool"):
            assert l["precision"] == "fp32", l
        if "precision_reason" in l:
            assert l["precision"] == "fp32", l
    if model == "transformer_encoder":  # attention's Q.K^T and P.V multiply two activations
        reasons = [l for l in info if "precision_reason" in l]
        assert reasons and all("two activations" in l["precision_reason"] for l in reasons)
    sess = ort.InferenceSession(os.path.join(HERE, MANIFEST[model]["model"]))
    for name, inputs in case_inputs(model):
        ref = sess.run(None, inputs)
        got = run_plan(plan, inputs, str(tmp_path / name), env=env)
        out = list(got.values())[0]
        assert out.shape == ref[0].shape
        e = rel_err(out, ref[0])
        assert 0 < e <= 2e-2, f"{name}: bf16 error {e:.3g} of the output's max"


NO_AMX = {"KILN_CPU_AMX": "0"}


def test_bf16_paths_agree(tmp_path):
    """The AVX512-BF16 and portable paths multiply the same bf16 values and accumulate in fp32
    in the same order: on the same plan their outputs differ by fp32 rounding alone (on a CPU
    without AVX512-BF16 both runs take the portable path). The AMX tiles sum each block in
    another order, so their fp32 results differ in the last bits, and every layer's input is
    rounded to bf16 again: a bit flips the rounding of a few inputs to the next layer, and by
    the logits the two paths differ by bf16's error, not fp32's (resnet_mini: 4.5e-3 of the
    output's max). The AMX path is checked layer by layer instead
    (test_single_layer_amx_matches_portable) and against onnxruntime like the others."""
    plan = str(tmp_path / "bf16.plan")
    build("resnet_mini", plan, "bf16")
    for name, inputs in case_inputs("resnet_mini"):
        a = list(run_plan(plan, inputs, str(tmp_path / f"n{name}"), env=NO_AMX).values())[0]
        b = list(run_plan(plan, inputs, str(tmp_path / f"p{name}"), env=PORTABLE).values())[0]
        assert rel_err(a, b) < 1e-4, name


def test_single_layer_amx_matches_portable(tmp_path):
    """One layer, so no bf16 rounding between layers: the AMX tiles (where the CPU has them),
    the AVX512-BF16 kernel and the portable one give the same outputs to fp32 rounding, for a
    3x3 / 2 conv over a batch of three with bias and Relu (K 72: the tiles' K padding), a 3x3
    conv with a residual, and a 1x1 conv whose K (8 values, 4 pairs) is a quarter of one tile
    block's 16 pairs."""
    rng = np.random.default_rng(5)
    cases = [("s2", 8, 16, 3, 2, 3, True, False), ("res", 16, 16, 3, 1, 3, True, True),
             ("pw", 8, 32, 1, 1, 1, False, False)]
    for tag, cin, cout, k, stride, batch, relu, residual in cases:
        x = np.maximum(rng.standard_normal((batch, cin, 12, 20)), 0).astype(np.float32)
        w = (rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32)
        bias = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[k, k],
                                  pads=[k // 2] * 4, strides=[stride, stride])]
        last = "c"
        if residual:
            nodes.append(helper.make_node("Add", [last, "x"], ["s"]))
            last = "s"
        if relu:
            nodes.append(helper.make_node("Relu", [last], ["r"]))
            last = "r"
        nodes.append(helper.make_node("Identity", [last], ["y"]))
        path = str(tmp_path / f"{tag}.onnx")
        save_model(nodes, [f32("x", list(x.shape))], [f32("y")],
                   [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")], path)
        plan = str(tmp_path / f"{tag}.plan")
        kiln("build", path, "-o", plan, "--precision", "bf16")
        outs = [list(run_plan(plan, {"x": x}, str(tmp_path / f"{tag}{i}"), env=env).values())[0]
                for i, env in enumerate([None, NO_AMX, PORTABLE])]
        assert np.abs(outs[2]).max() > 0, tag
        for out in outs[:2]:
            assert rel_err(out, outs[2]) < 1e-5, tag


@pytest.mark.parametrize("model", ["resnet_mini", "transformer_encoder"])
def test_fp16_storage_matches_onnxruntime_fp32(model, tmp_path):
    plan, plan32 = str(tmp_path / "fp16.plan"), str(tmp_path / "fp32.plan")
    build(model, plan, "fp16")
    build(model, plan32, "fp32")
    assert weight_bytes(plan) < 0.65 * weight_bytes(plan32)
    prods = products_with_weights(layers(plan))
    assert prods and all(l["weights"] == "fp16" for l in prods), prods
    _, text, _ = kiln("inspect", plan)
    assert "fp16 weights" in text
    sess = ort.InferenceSession(os.path.join(HERE, MANIFEST[model]["model"]))
    for name, inputs in case_inputs(model):
        ref = sess.run(None, inputs)[0]
        got = list(run_plan(plan, inputs, str(tmp_path / name)).values())[0]
        assert rel_err(got, ref) <= 1e-2, name


def test_layer_override_keeps_a_layer_fp32(tmp_path):
    plan = str(tmp_path / "p.plan")
    build("resnet_mini", plan, "bf16", "--layer-precision", "/fc/*=fp32",
          "--layer-precision", "/stem/*=fp32")
    by_name = {l["name"]: l for l in layers(plan)}
    for name in ("/fc/Gemm", "/stem/stem.0/Conv"):
        assert by_name[name]["precision"] == "fp32" and "weights" not in by_name[name]
    assert by_name["/layers/layers.0/conv1/Conv"]["precision"] == "bf16"
    sess = ort.InferenceSession(os.path.join(HERE, MANIFEST["resnet_mini"]["model"]))
    for name, inputs in case_inputs("resnet_mini"):
        got = list(run_plan(plan, inputs, str(tmp_path / name)).values())[0]
        assert rel_err(got, sess.run(None, inputs)[0]) <= 2e-2


def save_model(nodes, inputs, outputs, inits, path, opset=13):
    g = helper.make_graph(nodes, "m", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)
    return m


def f32(name, shape=None):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def reference_on_rounded(model, weight_names, feeds):
    """onnxruntime in fp32 on the model with its weights and inputs rounded to bf16: what the
    bf16 GEMM computes, up to fp32 rounding of the sums."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name in weight_names:
            t.CopyFrom(numpy_helper.from_array(round_bf16(numpy_helper.to_array(t)), t.name))
    sess = ort.InferenceSession(m.SerializeToString())
    return sess.run(None, {k: round_bf16(v) for k, v in feeds.items()})[0]


CONVS = [  # c_in, c_out, h, w, kernel, stride, pad, group, dilation, fused activation
    (8, 16, 9, 11, 3, 1, 1, 1, 1, None),
    (8, 16, 9, 11, 3, 2, 1, 1, 1, "Relu"),     # stride 2: even/odd column split
    (8, 17, 9, 11, 1, 2, 0, 1, 1, None),       # strided 1x1: subsampled copy
    (5, 19, 9, 11, 1, 1, 0, 1, 1, "Relu"),     # 1x1: the image read as B in place
    (12, 18, 10, 7, 3, 1, 1, 3, 1, None),      # grouped
    (8, 16, 9, 11, 3, 1, 2, 1, 2, None),       # dilated
    (3, 8, 33, 31, 7, 2, 3, 1, 1, "Relu"),     # stem-like 7x7 stride 2, K = 147 (odd)
    (7, 9, 5, 40, 5, 1, 2, 1, 1, None),        # odd channels, wide rows
]


@pytest.mark.parametrize("path,env", PATHS, ids=[p for p, _ in PATHS])
@pytest.mark.parametrize("cfg", CONVS, ids=[str(i) for i in range(len(CONVS))])
def test_conv_bf16_on_odd_shapes(cfg, path, env, tmp_path):
    ci, co, h, w, k, s, p, g, d, act = cfg
    rng = np.random.default_rng(sum(cfg[:9]))
    W = rng.standard_normal((co, ci // g, k, k)).astype(np.float32)
    B = rng.standard_normal(co).astype(np.float32)
    R = rng.standard_normal((2, co, (h + 2 * p - d * (k - 1) - 1) // s + 1,
                             (w + 2 * p - d * (k - 1) - 1) // s + 1)).astype(np.float32)
    x = rng.standard_normal((2, ci, h, w)).astype(np.float32)
    # conv + residual Add (+ activation): the residual and activation join the fp32 epilogue
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], strides=[s, s], pads=[p] * 4,
                              group=g, dilations=[d, d], name="conv"),
             helper.make_node("Add", ["c", "r"], ["y" if act is None else "a"], name="add")]
    if act:
        nodes.append(helper.make_node(act, ["a"], ["y"], name="act"))
    model = save_model(nodes, [f32("x", list(x.shape)), f32("r", list(R.shape))], [f32("y")],
                       [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")],
                       str(tmp_path / "m.onnx"))
    plan = str(tmp_path / "p.plan")
    kiln("build", str(tmp_path / "m.onnx"), "-o", plan, "--precision", "bf16", env=env)
    conv = [l for l in layers(plan) if l["name"] == "conv"][0]
    assert conv["precision"] == "bf16", conv
    got = run_plan(plan, {"x": x, "r": R}, str(tmp_path / "o"), env=env)["y"]
    # the residual joins the fp32 epilogue unrounded: only x and W are rounded
    m2 = onnx.ModelProto()
    m2.CopyFrom(model)
    for t in m2.graph.initializer:
        if t.name == "W":
            t.CopyFrom(numpy_helper.from_array(round_bf16(W), "W"))
    want = ort.InferenceSession(m2.SerializeToString()).run(None, {"x": round_bf16(x), "r": R})[0]
    assert got.shape == want.shape
    assert rel_err(got, want) < 2e-6, rel_err(got, want)
    # and against plain fp32: bf16's rounding, no more
    exact = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "r": R})[0]
    assert 0 < rel_err(got, exact) < 2e-2


GEMMS = [  # m, k, n, transB, alpha, beta, C shape (None: no C)
    (1, 7, 5, 0, 1.0, 1.0, (5,)),
    (3, 33, 17, 1, 1.0, 1.0, (17,)),
    (13, 64, 40, 1, 1.0, 1.0, (1, 40)),
    (5, 9, 33, 0, 0.5, 2.0, (5, 33)),    # alpha, beta and a full C: the general path
    (9, 300, 65, 1, 1.0, 0.0, None),
]


@pytest.mark.parametrize("path,env", PATHS, ids=[p for p, _ in PATHS])
@pytest.mark.parametrize("cfg", GEMMS, ids=[str(i) for i in range(len(GEMMS))])
def test_gemm_bf16_on_odd_shapes(cfg, path, env, tmp_path):
    m, k, n, tb, alpha, beta, cshape = cfg
    rng = np.random.default_rng(m * 1000 + k + n)
    Bw = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    inits = [numpy_helper.from_array(Bw, "B")]
    ins = ["a", "B"]
    if cshape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(cshape).astype(np.float32), "C"))
        ins.append("C")
    node = helper.make_node("Gemm", ins, ["y"], transB=tb, alpha=alpha, beta=beta, name="gemm")
    model = save_model([node], [f32("a", [m, k])], [f32("y")], inits, str(tmp_path / "m.onnx"))
    a = rng.standard_normal((m, k)).astype(np.float32)
    plan = str(tmp_path / "p.plan")
    kiln("build", str(tmp_path / "m.onnx"), "-o", plan, "--precision", "bf16", env=env)
    assert [l for l in layers(plan) if l["name"] == "gemm"][0]["precision"] == "bf16"
    got = run_plan(plan, {"a": a}, str(tmp_path / "o"), env=env)["y"]
    want = reference_on_rounded(model, {"B"}, {"a": a})
    assert rel_err(got, want) < 2e-6


@pytest.mark.parametrize("path,env", PATHS, ids=[p for p, _ in PATHS])
@pytest.mark.parametrize("ashape,n", [((2, 3, 37), 19), ((37,), 8), ((4, 130), 33)])
def test_matmul_bf16_with_constant_weights(ashape, n, path, env, tmp_path):
    rng = np.random.default_rng(n)
    k = ashape[-1]
    W = rng.standard_normal((k, n)).astype(np.float32)
    node = helper.make_node("MatMul", ["a", "W"], ["y"], name="mm")
    model = save_model([node], [f32("a", list(ashape))], [f32("y")],
                       [numpy_helper.from_array(W, "W")], str(tmp_path / "m.onnx"))
    a = rng.standard_normal(ashape).astype(np.float32)
    plan = str(tmp_path / "p.plan")
    kiln("build", str(tmp_path / "m.onnx"), "-o", plan, "--precision", "bf16", env=env)
    assert [l for l in layers(plan) if l["name"] == "mm"][0]["precision"] == "bf16"
    got = run_plan(plan, {"a": a}, str(tmp_path / "o"), env=env)["y"]
    assert rel_err(got, reference_on_rounded(model, {"W"}, {"a": a})) < 2e-6


def test_depthwise_stays_fp32_with_its_reason(tmp_path):
    rng = np.random.default_rng(5)
    dw = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    pw = rng.standard_normal((24, 16, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "dw"], ["h"], pads=[1] * 4, group=16, name="dw"),
             helper.make_node("Conv", ["h", "pw"], ["y"], name="pw")]
    model = save_model(nodes, [f32("x", [1, 16, 12, 12])], [f32("y")],
                       [numpy_helper.from_array(dw, "dw"), numpy_helper.from_array(pw, "pw")],
                       str(tmp_path / "m.onnx"))
    plan = str(tmp_path / "p.plan")
    kiln("build", str(tmp_path / "m.onnx"), "-o", plan, "--precision", "bf16")
    by_name = {l["name"]: l for l in layers(plan)}
    assert by_name["dw"]["precision"] == "fp32"
    assert "depthwise" in by_name["dw"]["precision_reason"]
    assert by_name["pw"]["precision"] == "bf16"
    _, text, _ = kiln("inspect", plan)
    assert "(fp32: depthwise conv" in text
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    got = run_plan(plan, {"x": x}, str(tmp_path / "o"))["y"]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert rel_err(got, want) < 2e-2


def test_python_build_precision_bf16(tmp_path):
    sys.path.insert(0, os.path.join(REPO, "python"))
    os.environ.setdefault("KILN_LIBRARY", os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(KILN))), "lib", "libkiln.so"))
    import kiln as k
    path = os.path.join(HERE, MANIFEST["resnet_mini"]["model"])
    shapes = {"input": [(1, 3, 32, 32), (2, 3, 64, 64), (4, 3, 96, 96)]}
    plan32 = k.build(path, shapes=shapes)
    plan16 = k.build(path, shapes=shapes, precision="bf16")
    assert len(plan16) < 0.6 * len(plan32)
    sess = ort.InferenceSession(path)
    for name, inputs in case_inputs("resnet_mini"):
        got = k.run(plan16, inputs)["logits"]
        assert 0 < rel_err(got, sess.run(None, inputs)[0]) <= 2e-2, name


@pytest.mark.parametrize("ci,co,h,w", [(20, 24, 29, 30), (48, 48, 7, 7)], ids=["4x4", "2x2"])
def test_winograd_conv_keeps_bf16_weights_and_computes_fp32(tmp_path, ci, co, h, w):
    """A 3x3 stride-1 conv with enough channels and tiles runs fp32 Winograd where it beats the
    bf16 GEMM (a quarter of the multiplies with 4x4 tiles; the 2x2 tiles of a 7x7 map, 1 /
    2.25, only against the portable bf16 path): its weights are stored in bf16 and widened at
    load, its activations stay fp32, and inspect says so. With AMX tiles, or AVX512-BF16 on a
    7x7 map, the bf16 GEMM takes it."""
    rng = np.random.default_rng(9)
    W = rng.standard_normal((co, ci, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "W"], ["y"], pads=[1] * 4, name="conv")
    model = save_model([node], [f32("x", [1, ci, h, w])], [f32("y")],
                       [numpy_helper.from_array(W, "W")], str(tmp_path / "m.onnx"))
    plan, plan32 = str(tmp_path / "p.plan"), str(tmp_path / "f.plan")
    # the build names the bf16 path; on AMX tiles the bf16 GEMM beats Winograd and takes it
    path = kiln("build", str(tmp_path / "m.onnx"), "-o", plan, "--precision", "bf16",
                "--verbose")[2]
    amx = "AMX-BF16 tiles" in path
    native = "AVX512-BF16 dot products" in path
    kiln("build", str(tmp_path / "m.onnx"), "-o", plan32)
    conv = [l for l in layers(plan) if l["name"] == "conv"][0]
    if amx or (native and h == 7):
        assert conv["precision"] == "bf16", conv
        return
    assert conv["precision"] == "fp32" and conv["weights"] == "bf16", conv
    assert "Winograd" in conv["precision_reason"]
    assert weight_bytes(plan) < 0.55 * weight_bytes(plan32)
    x = rng.standard_normal((1, ci, h, w)).astype(np.float32)
    got = run_plan(plan, {"x": x}, str(tmp_path / "o"))["y"]
    m2 = onnx.ModelProto()
    m2.CopyFrom(model)
    m2.graph.initializer[0].CopyFrom(numpy_helper.from_array(round_bf16(W), "W"))
    want = ort.InferenceSession(m2.SerializeToString()).run(None, {"x": x})[0]
    assert rel_err(got, want) < 1e-5


def test_stem_conv_in_bf16(tmp_path):
    """A stride-2 conv of few inputs (a ResNet stem, 3 -> 64, 7x7, pads 3) takes the bf16 GEMM
    on every path: its input split into even and odd columns, the im2col written straight into
    bf16 pairs. Odd sizes put taps past every edge. The output matches onnxruntime within bf16's
    rounding, and differs from it (the products did round)."""
    rng = np.random.default_rng(11)
    W = (rng.standard_normal((64, 3, 7, 7)) * 0.1).astype(np.float32)
    node = helper.make_node("Conv", ["x", "W"], ["y"], pads=[3] * 4, strides=[2, 2], name="stem")
    model = save_model([node], [f32("x", [1, 3, 61, 67])], [f32("y")],
                       [numpy_helper.from_array(W, "W")], str(tmp_path / "m.onnx"))
    plan = str(tmp_path / "p.plan")
    kiln("build", str(tmp_path / "m.onnx"), "-o", plan, "--precision", "bf16")
    conv = [l for l in layers(plan) if l["name"] == "stem"][0]
    assert conv["precision"] == "bf16", conv
    x = rng.standard_normal((1, 3, 61, 67)).astype(np.float32)
    got = run_plan(plan, {"x": x}, str(tmp_path / "o"))["y"]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert got.shape == want.shape == (1, 64, 31, 34)
    assert 0 < rel_err(got, want) < 2e-2


def bottleneck_stack(rng, cin=3, c=256, blocks=3, tail=40):
    """A ResNet-like stack: a 7x7 / 2 stem from cin to c channels (a multiple of 32), a 3x3 / 2
    max pool, blocks of 1x1 -> 3x3 -> 1x1 with a residual and Relu, one block strided (3x3 / 2 and a 1x1 / 2 shortcut), one
    3x3 dilated, then a 3x3 conv to `tail` channels (not a multiple of 32) as the output."""
    nodes, inits = [], []

    def conv(x, cin, cout, k, name, stride=1, dil=1, act=True):
        w = (rng.standard_normal((cout, cin, k, k)) * (1.5 / np.sqrt(cin * k * k)))
        b = rng.standard_normal(cout) * 0.1
        inits.extend([numpy_helper.from_array(w.astype(np.float32), name + "_w"),
                      numpy_helper.from_array(b.astype(np.float32), name + "_b")])
        pad = dil * (k // 2)
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name + "_c"],
                                      kernel_shape=[k, k], pads=[pad] * 4,
                                      strides=[stride] * 2, dilations=[dil] * 2, name=name))
        if not act:
            return name + "_c"
        nodes.append(helper.make_node("Relu", [name + "_c"], [name + "_r"]))
        return name + "_r"

    x = conv("x", cin, c, 7, "stem", stride=2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], pads=[1] * 4,
                                  strides=[2, 2], name="pool"))
    x = "pool"
    for i in range(blocks):
        stride, dil = (2, 1) if i == 1 else (1, 2 if i == 2 else 1)
        h = conv(x, c, c // 2, 1, f"b{i}a")
        h = conv(h, c // 2, c // 2, 3, f"b{i}b", stride=stride, dil=dil)
        h = conv(h, c // 2, c, 1, f"b{i}c", act=False)
        short = conv(x, c, c, 1, f"b{i}s", stride=2, act=False) if stride == 2 else x
        nodes.append(helper.make_node("Add", [h, short], [f"b{i}_sum"]))
        nodes.append(helper.make_node("Relu", [f"b{i}_sum"], [f"b{i}_out"]))
        x = f"b{i}_out"
    y = conv(x, c, tail, 3, "head", act=False)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    return nodes, inits


def test_bf16_region_reads_bf16_activations_nhwc(tmp_path):
    """With AMX tiles, a stack of convs of 32k input channels (and a 3-channel stem, whose kernel
    rows fold into 32 values) that does enough work for the Casts at its edges runs in bf16
    activations stored NHWC: the convs read them in place and write bf16, the max pool between
    them pools NHWC pixels, a Cast at each edge reorders and converts. The outputs match onnxruntime's fp32
    within bf16's rounding at two batch sizes of one plan, on the AMX path and on the paths a
    machine without AMX takes (AVX512-BF16 or portable). Built without AMX, the same model
    keeps fp32 activations and bf16 weights."""
    rng = np.random.default_rng(21)
    nodes, inits = bottleneck_stack(rng)
    path = str(tmp_path / "stack.onnx")
    model = save_model(nodes, [f32("x", ["n", 3, 50, 55])], [f32("y")], inits, path)
    plan = str(tmp_path / "p.plan")
    shapes = ["--shapes", "x:1x3x50x55,2x3x50x55,3x3x50x55"]
    # the build names the bf16 path
    amx = "AMX-BF16 tiles" in kiln("build", path, "-o", plan, "--precision", "bf16", *shapes,
                                   "--verbose")[2]
    info = layers(plan)
    convs = [l for l in info if l["op"] in ("Conv", "FusedConv")]
    assert len(convs) == 12, convs
    if amx:
        assert all(l["precision"] == "bf16" and "weights" not in l for l in convs), convs
        assert all(l.get("nhwc", {}).get("outputs") == 1 for l in convs), convs
        casts = [l for l in info if l["op"] == "Cast"]
        assert len(casts) == 2, casts  # the input's and the output's
        pool = [l for l in info if l["op"] == "MaxPool"][0]
        assert pool["precision"] == "bf16" and pool["nhwc"]["outputs"] == 1, pool
        _, text, _ = kiln("inspect", plan)
        assert "from NHWC" in text and "bf16 NHWC" in text
    else:
        assert all(l["weights"] == "bf16" and "nhwc" not in l for l in convs), convs
    sess = ort.InferenceSession(model.SerializeToString())
    for n in (1, 3):
        x = rng.standard_normal((n, 3, 50, 55)).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        outs = [run_plan(plan, {"x": x}, str(tmp_path / f"o{n}{i}"), env=env)["y"]
                for i, env in enumerate([None, NO_AMX, PORTABLE])]
        for out in outs:
            assert out.shape == want.shape == (n, 40, 7, 7)
            assert 0 < rel_err(out, want) < 2e-2, n
        # the paths round each layer's output to bf16 after sums in other orders
        assert rel_err(outs[0], outs[2]) < 1e-2
    plan_no_amx = str(tmp_path / "n.plan")
    kiln("build", path, "-o", plan_no_amx, "--precision", "bf16", *shapes, env=NO_AMX)
    convs = [l for l in layers(plan_no_amx) if l["op"] in ("Conv", "FusedConv")]
    assert all(l["weights"] == "bf16" and "nhwc" not in l for l in convs), convs


def test_bf16_region_too_small_for_its_casts_keeps_fp32_activations(tmp_path):
    """1x1 convs between depthwise convs (a MobileNet block: the depthwise ones stay fp32) would
    need a Cast on each side for little work: they keep fp32 activations and bf16 weights, with
    or without AMX."""
    rng = np.random.default_rng(22)
    dw = rng.standard_normal((192, 1, 3, 3)).astype(np.float32)
    pw1 = (rng.standard_normal((192, 64, 1, 1)) * 0.1).astype(np.float32)
    pw2 = (rng.standard_normal((64, 192, 1, 1)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "pw1"], ["e"], name="expand"),
             helper.make_node("Relu", ["e"], ["er"]),
             helper.make_node("Conv", ["er", "dw"], ["d"], pads=[1] * 4, group=192, name="dw"),
             helper.make_node("Conv", ["d", "pw2"], ["y"], name="project")]
    inits = [numpy_helper.from_array(a, n) for a, n in ((dw, "dw"), (pw1, "pw1"), (pw2, "pw2"))]
    path = str(tmp_path / "m.onnx")
    model = save_model(nodes, [f32("x", [1, 64, 28, 28])], [f32("y")], inits, path)
    plan = str(tmp_path / "p.plan")
    kiln("build", path, "-o", plan, "--precision", "bf16")
    by_name = {l["name"]: l for l in layers(plan)}
    for name in ("expand", "project"):
        assert by_name[name]["weights"] == "bf16" and "nhwc" not in by_name[name], by_name[name]
    assert not any(l["op"] == "Cast" for l in by_name.values())
    x = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    got = run_plan(plan, {"x": x}, str(tmp_path / "o"))["y"]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert 0 < rel_err(got, want) < 2e-2
