"""The backend seam, proven with testdev (tests/testdev/testdev.c): a device backend module with
its own poisoned memory space, a worker thread as its stream and the host's kernels for a subset
of ops. Every model of tests/models is built with `--backend testdev`, so it splits between the
device and the host with copies both ways, and must match the host-only build bit for bit.

$KILN is the kiln binary (default build/bin/kiln); $KILN_BACKEND_PATH the folder holding
libkiln_testdev.so (default build/tests/lib); $KILN_TEST_PLUGIN the TestScale plugin.
"""

import json
import os
import subprocess
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(REPO, "tests", "models")
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(KILN)))
BACKEND_PATH = os.environ.get("KILN_BACKEND_PATH") or os.path.join(BUILD, "tests", "lib")
PLUGIN = os.environ.get("KILN_TEST_PLUGIN") or os.path.join(
    BACKEND_PATH, "libkiln_test_scale_plugin.so")

with open(os.path.join(MODELS, "manifest.json")) as _f:
    MANIFEST = json.load(_f)["models"]


def kiln(*args, env_extra=None, check=True):
    env = dict(os.environ, KILN_BACKEND_PATH=BACKEND_PATH)
    env.update(env_extra or {})
    proc = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=300, env=env)
    out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    if check:
        assert proc.returncode == 0, f"kiln {' '.join(args)} failed: {err}"
    return proc.returncode, out, err


def shape_args(model):
    args = []
    for spec in model["shapes"]:
        args += ["--shapes", spec]
    return args


def run_plan(plan, inputs, out_dir, extra=()):
    args = ["run", plan, "--output-dir", out_dir, *extra]
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    kiln(*args)
    with open(os.path.join(out_dir, "outputs.json")) as f:
        index = json.load(f)
    return {k: np.load(os.path.join(out_dir, v)) for k, v in index.items()}


def inspect(plan):
    return json.loads(kiln("inspect", plan, "--json")[1])


@pytest.mark.parametrize("model", MANIFEST, ids=[m["name"] for m in MANIFEST])
def test_model_split_matches_host_bit_for_bit(model, tmp_path):
    onnx_path = os.path.join(MODELS, model["model"])
    host_plan, dev_plan = str(tmp_path / "host.plan"), str(tmp_path / "dev.plan")
    # The host's channel-scale fusion (kiln.ScaledConv) rounds differently from Mul + Conv and
    # applies only where both nodes stay on the host, so both plans are built without it.
    plain = {"KILN_FUSE_CHANNEL_SCALE": "0"}
    kiln("build", onnx_path, "-o", host_plan, *shape_args(model), env_extra=plain)
    kiln("build", onnx_path, "-o", dev_plan, "--backend", "testdev,cpu", *shape_args(model),
         env_extra=plain)
    info = inspect(dev_plan)
    backends = {layer["backend"] for layer in info["layers"]}
    assert "testdev" in backends, f"nothing was placed on testdev: {backends}"
    assert info["copies"], "a split model needs copies"
    assert any(c["direction"] == "to_host" for c in info["copies"])
    assert any(c["direction"] == "to_device" for c in info["copies"])
    for layer in info["layers"]:
        if layer["backend"] == "cpu" and not layer["kernel"].startswith("plugin"):
            assert layer.get("placement_reason"), f"{layer['name']} on the host without a reason"
    # testdev runs the host's kernels on its stream's one thread; on more threads some host
    # kernels sum in another order (products split by depth on 2 threads, pixel-row convs from
    # 8), so both plans run on one thread here and must give the same bits.
    one = ["--threads", "1"]
    for case in model["cases"]:
        inputs = {k: os.path.join(MODELS, v) for k, v in case["inputs"].items()}
        want = run_plan(host_plan, inputs, str(tmp_path / f"h_{case['name']}"), one)
        got = run_plan(dev_plan, inputs, str(tmp_path / f"d_{case['name']}"), one)
        assert sorted(got) == sorted(want)
        for name in want:
            assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
            assert np.array_equal(got[name], want[name], equal_nan=True), (
                f"{model['name']}/{case['name']}/{name}: max diff "
                f"{np.abs(got[name].astype(np.float64) - want[name]).max()}")


def save(model, path):
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def conv_erf_conv(path):
    """Conv -> Erf -> Conv: with Erf denied to testdev, the middle op runs on the host."""
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Erf", ["a"], ["b"], name="erf"),
             helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "mixed",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, "h", "w"])], [w1, w2])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_middle_op_on_host_copies_both_ways_across_the_profile(tmp_path):
    model = conv_erf_conv(str(tmp_path / "m.onnx"))
    shapes = ["--shapes", "x:1x3x4x4,2x3x8x8,3x3x16x12"]
    host_plan, dev_plan = str(tmp_path / "h.plan"), str(tmp_path / "d.plan")
    kiln("build", model, "-o", host_plan, *shapes)
    env = {"KILN_TESTDEV_DENY": "Erf"}
    kiln("build", model, "-o", dev_plan, "--backend", "testdev", *shapes, env_extra=env)
    info = inspect(dev_plan)
    placed = {layer["name"]: layer["backend"] for layer in info["layers"]}
    assert placed["conv1"] == "testdev" and placed["conv2"] == "testdev"
    assert placed["erf"] == "cpu"
    dirs = sorted(c["direction"] for c in info["copies"])
    assert dirs == ["to_device", "to_device", "to_host", "to_host"], dirs
    rng = np.random.default_rng(0)
    for shape in [(1, 3, 4, 4), (2, 3, 8, 8), (3, 3, 16, 12), (2, 3, 5, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        xp = str(tmp_path / "x.npy")
        np.save(xp, x)
        want = run_plan(host_plan, {"x": xp}, str(tmp_path / "oh"))["y"]
        got = run_plan(dev_plan, {"x": xp}, str(tmp_path / "od"))["y"]
        assert np.array_equal(got, want), f"shape {shape}"


def scale_model(path, op="TestScale"):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node(op, ["a"], ["b"], name="scale", factor=2.5),
             helper.make_node("Sigmoid", ["b"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "plugin",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("backends,where", [("cpu", "cpu"), ("testdev", "testdev")])
def test_plugin_on_each_backend(tmp_path, backends, where):
    model = scale_model(str(tmp_path / "p.onnx"))
    plan = str(tmp_path / "p.plan")
    kiln("build", model, "-o", plan, "--plugins", PLUGIN, "--backend", backends)
    info = json.loads(kiln("inspect", plan, "--json", "--plugins", PLUGIN)[1])
    placed = {layer["name"]: layer["backend"] for layer in info["layers"]}
    assert placed["scale"] == where and placed["relu"] == where
    x = np.linspace(-2, 2, 10, dtype=np.float32).reshape(2, 5)
    xp = str(tmp_path / "x.npy")
    np.save(xp, x)
    got = run_plan(plan, {"x": xp}, str(tmp_path / "o"), extra=["--plugins", PLUGIN])["y"]
    want = 1 / (1 + np.exp(-np.maximum(x, 0) * np.float32(2.5)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def scale_want(x):
    return 1 / (1 + np.exp(-np.maximum(x, 0) * np.float32(2.5)))


def build_and_run(tmp_path, op, backends):
    """Build the scale model with plugin `op` for `backends`; (placement, output)."""
    model = scale_model(str(tmp_path / "p.onnx"), op)
    plan = str(tmp_path / "p.plan")
    kiln("build", model, "-o", plan, "--plugins", PLUGIN, "--backend", backends)
    info = json.loads(kiln("inspect", plan, "--json", "--plugins", PLUGIN)[1])
    placed = {layer["name"]: layer for layer in info["layers"]}
    x = np.linspace(-2, 2, 10, dtype=np.float32).reshape(2, 5)
    xp = str(tmp_path / "x.npy")
    np.save(xp, x)
    got = run_plan(plan, {"x": xp}, str(tmp_path / "o"), extra=["--plugins", PLUGIN])["y"]
    return placed, got, scale_want(x)


@pytest.mark.parametrize("backends", ["cpu", "testdev"])
def test_abi_v1_plugin_still_runs_on_the_host(tmp_path, backends):
    """A plugin table compiled against ABI v1 (no supports_backend, no flags in struct_size):
    it loads, stays on the host even when a device is asked for, and computes the right thing;
    the host never reads the members past its struct_size."""
    placed, got, want = build_and_run(tmp_path, "TestScaleV1", backends)
    assert placed["scale"]["backend"] == "cpu"
    if backends == "testdev":
        assert placed["relu"]["backend"] == "testdev"
        assert "does not run on testdev" in json.dumps(placed["scale"]), placed["scale"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_device_only_plugin_is_placed_on_its_device(tmp_path):
    placed, got, want = build_and_run(tmp_path, "TestScaleDevOnly", "testdev")
    assert placed["scale"]["backend"] == "testdev"
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_device_only_plugin_is_refused_on_the_host(tmp_path):
    """A plugin that declares only a device backend, in a build that has only the CPU: one
    line naming the node and the plugin, and no plan written."""
    model = scale_model(str(tmp_path / "p.onnx"), "TestScaleDevOnly")
    plan = tmp_path / "p.plan"
    for extra in ([], ["--backend", "cpu"]):
        rc, out, err = kiln("build", model, "-o", str(plan), "--plugins", PLUGIN, *extra,
                            check=False)
        assert rc != 0 and err.count("\n") == 1, err
        assert "node 'scale': plugin 'TestScaleDevOnly' does not run on the cpu" in err, err
        assert not plan.exists()


def test_unknown_and_unavailable_backends_are_one_line(tmp_path):
    model = conv_erf_conv(str(tmp_path / "m.onnx"))
    for backend, words in [("nosuch", "unknown backend 'nosuch'"),
                           ("Bad Name", "backend names are lowercase"),
                           ("cpu,cpu", "listed twice")]:
        rc, out, err = kiln("build", model, "-o", str(tmp_path / "x.plan"), "--backend",
                            backend, "--shapes", "x:1x3x4x4", check=False)
        assert rc != 0 and words in err and err.count("\n") == 1, err
        assert not os.path.exists(tmp_path / "x.plan")
    rc, out, err = kiln("build", model, "-o", str(tmp_path / "x.plan"), "--backend", "testdev",
                        "--shapes", "x:1x3x4x4", env_extra={"KILN_TESTDEV_ABSENT": "1"},
                        check=False)
    assert rc != 0 and "backend 'testdev' is unavailable: no testdev device" in err, err
    assert err.count("\n") == 1


def test_device_plan_without_its_backend_is_refused(tmp_path):
    model = conv_erf_conv(str(tmp_path / "m.onnx"))
    plan = str(tmp_path / "d.plan")
    kiln("build", model, "-o", plan, "--backend", "testdev", "--shapes", "x:1x3x4x4")
    x = str(tmp_path / "x.npy")
    np.save(x, np.zeros((1, 3, 4, 4), np.float32))
    env = dict(os.environ, KILN_BACKEND_PATH=str(tmp_path))  # no module there
    proc = subprocess.run([KILN, "run", plan, "--input", f"x={x}"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "on backend 'testdev', which cannot run here" in err, err
    assert err.count("\n") == 1


def test_python_build_with_backends_matches_host(tmp_path):
    """kiln.build(..., backends=[...]) places as the CLI does; outputs equal the host plan's."""
    import sys
    sys.path.insert(0, os.path.join(REPO, "python"))
    os.environ.setdefault("KILN_LIBRARY", os.path.join(BUILD, "lib", "libkiln.so"))
    os.environ["KILN_BACKEND_PATH"] = BACKEND_PATH
    import kiln as k
    model = os.path.join(MODELS, "resnet_mini", "model.onnx")
    shapes = {"input": ((1, 3, 32, 32), (2, 3, 64, 64), (4, 3, 96, 96))}
    dev = k.build(model, shapes=shapes, backends=["testdev", "cpu"])
    host = k.build(model, shapes=shapes)
    x = np.random.default_rng(1).standard_normal((3, 3, 48, 80)).astype(np.float32)
    got, want = k.run(dev, {"input": x}), k.run(host, {"input": x})
    assert np.array_equal(got["logits"], want["logits"])
    path = str(tmp_path / "d.plan")
    with open(path, "wb") as f:
        f.write(dev)
    placed = {layer["backend"] for layer in inspect(path)["layers"]}
    assert "testdev" in placed
    with pytest.raises(k.KilnError, match="unknown backend 'nosuch'"):
        k.build(model, shapes=shapes, backends="nosuch")


def test_fused_attention_projections_merge_into_one_product(tmp_path):
    """A 16-bit plan on a device fuses attention (kiln.Attention) and each layer's Q, K and V
    products of one input become one product of the concatenated weights, which the attention
    reads packed (fuse_attention.c); KILN_MERGE_QKV=0 keeps them apart. Both match the host's float32 plan
    (testdev runs the host's kernels, so the plan's layers stay float32 there)."""
    model = os.path.join(MODELS, "bert_attention", "model.onnx")
    ids = np.random.default_rng(3).integers(0, 50, size=(2, 12)).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    outs, layers = {}, {}
    for label, env in (("merged", {}), ("apart", {"KILN_MERGE_QKV": "0"}), ("host", None)):
        plan = str(tmp_path / f"{label}.plan")
        extra = ["--backend", "testdev,cpu", "--precision", "fp16"] if env is not None else []
        kiln("build", model, "-o", plan, "--shapes", "ids:2x12", *extra, env_extra=env)
        layers[label] = inspect(plan)["layers"]
        out = run_plan(plan, {"ids": str(tmp_path / "ids.npy")}, str(tmp_path / label))
        outs[label] = next(iter(out.values())).astype(np.float64)
    ops = {k: [(layer["op"], layer["backend"]) for layer in v] for k, v in layers.items()}
    for label in ("merged", "apart"):
        assert ops[label].count(("Attention", "testdev")) == 2, ops[label]
    # two layers: one product for Q, K and V each, read by the attention in place (no Split, no
    # Reshapes of the three), against three products and three Reshapes
    n_reshapes = {k: sum(op == "Reshape" for op, _ in v) for k, v in ops.items()}
    assert n_reshapes["apart"] - n_reshapes["merged"] == 6, n_reshapes
    assert ("Split", "testdev") not in ops["merged"], ops["merged"]
    n_products = {k: sum(op in ("MatMul", "FusedMatMul") for op, _ in v) for k, v in ops.items()}
    assert n_products["apart"] - n_products["merged"] == 4, n_products
    ref = outs["host"]
    for label in ("merged", "apart"):
        assert np.abs(outs[label] - ref).max() <= 1e-5 * np.abs(ref).max(), label


def test_profile_times_device_layers_by_events(tmp_path):
    """bench --profile on a split plan: device layers are timed by the backend's events (the
    device's time), not by how long their enqueue took: with every testdev job made 3 ms slow,
    each device layer reads >= 3 ms while host layers stay fast."""
    model = conv_erf_conv(str(tmp_path / "m.onnx"))
    plan = str(tmp_path / "d.plan")
    env = {"KILN_TESTDEV_DENY": "Erf"}
    kiln("build", model, "-o", plan, "--backend", "testdev", "--shapes", "x:1x3x8x8",
         env_extra=env)
    out = kiln("bench", plan, "--profile", "--json", "--warmup", "1", "--iterations", "3",
               env_extra={"KILN_TESTDEV_LAG_US": "3000"})[1]
    layers = {l["name"]: l for l in json.loads(out)["layers"]}
    placed = {l["name"]: l["backend"] for l in inspect(plan)["layers"]}
    for name, backend in placed.items():
        if backend == "testdev":
            assert layers[name]["median_ms"] >= 2.9, (name, layers[name])
    assert layers["erf"]["median_ms"] < 2.0, layers["erf"]


@pytest.fixture
def dw_input(monkeypatch):
    """testdev's kiln.FusedDepthwiseConv (off by default: see testdev.c)."""
    monkeypatch.setenv("KILN_TESTDEV_DW_INPUT", "1")


def expand_then_depthwise(path, act, k=3, stride=1, shared=False):
    """x [1, 4, 9, 11] -> 1x1 Conv to 8 channels (bias) -> act -> depthwise kxk Conv (bias,
    pads k // 2) -> y; with shared, the activation's output is a graph output too."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w1", rng.normal(size=(8, 4, 1, 1))), ("b1", rng.normal(size=8)),
        ("w2", rng.normal(size=(8, 1, k, k))), ("b2", rng.normal(size=8)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["e"])]
    if act == "Clip":
        inits += [numpy_helper.from_array(np.array(v, np.float32), n)
                  for n, v in (("lo", 0.0), ("hi", 6.0))]
        nodes.append(helper.make_node("Clip", ["e", "lo", "hi"], ["a"]))
    elif act == "Swish":
        nodes += [helper.make_node("Sigmoid", ["e"], ["s"]),
                  helper.make_node("Mul", ["e", "s"], ["a"])]
    else:
        nodes.append(helper.make_node(act, ["e"], ["a"]))
    nodes.append(helper.make_node("Conv", ["a", "w2", "b2"], ["y"], group=8, kernel_shape=[k, k],
                                  pads=[k // 2] * 4, strides=[stride, stride]))
    oh, ow = (9 - 1) // stride + 1, (11 - 1) // stride + 1
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, oh, ow])]
    if shared:
        outputs.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8, 9, 11]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 9, 11])], outputs, inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.mark.parametrize("act,k,stride", [("HardSigmoid", 3, 1), ("Clip", 5, 2), ("Swish", 3, 2),
                                          ("Sigmoid", 5, 1), ("Relu", 3, 1)])
def test_depthwise_takes_the_expansion_activation_on_a_device(tmp_path, dw_input, act, k,
                                                                  stride):
    """On a device backend with kiln.FusedDepthwiseConv the expansion conv's bias and a clamp
    activation (Relu, Clip) move into the depthwise conv's loads (fuse_depthwise_input.c); other
    activations (HardSigmoid, Swish, Sigmoid) stay in the expansion conv's epilogue. Outputs
    match onnxruntime and the host plan."""
    import onnxruntime as ort
    model = str(tmp_path / "m.onnx")
    expand_then_depthwise(model, act, k, stride)
    x = np.random.default_rng(5).normal(size=(1, 4, 9, 11)).astype(np.float32) * 2
    np.save(tmp_path / "x.npy", x)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = {}
    for label, extra in (("device", ["--backend", "testdev,cpu"]), ("host", [])):
        plan = str(tmp_path / f"{label}.plan")
        kiln("build", model, "-o", plan, *extra)
        ops = [(layer["op"], layer["backend"]) for layer in inspect(plan)["layers"]
               if not layer["op"].startswith("Memcpy")]
        if label == "device" and act in ("Relu", "Clip"):
            assert ops == [("FusedConv", "testdev"), ("FusedDepthwiseConv", "testdev")], ops
        elif label == "device":
            assert ops[0] == ("FusedConv", "testdev") and len(ops) == 2, ops
            assert ops[1][0] != "FusedDepthwiseConv" and ops[1][1] == "testdev", ops
        else:
            assert ("FusedDepthwiseConv", "cpu") not in ops, ops
        got[label] = run_plan(plan, {"x": str(tmp_path / "x.npy")}, str(tmp_path / label))["y"]
    for label, y in got.items():
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=label)


def test_depthwise_input_stays_apart_when_the_activation_is_read_elsewhere(tmp_path, dw_input):
    """The activation's output is a graph output too: nothing moves."""
    model = str(tmp_path / "m.onnx")
    expand_then_depthwise(model, "Relu", shared=True)
    plan = str(tmp_path / "d.plan")
    kiln("build", model, "-o", plan, "--backend", "testdev,cpu")
    ops = [layer["op"] for layer in inspect(plan)["layers"]]
    assert "FusedDepthwiseConv" not in ops, ops


@pytest.mark.parametrize("name,moved", [("mobilenetv2_mini", 2), ("efficientnet_mini", 0)])
def test_depthwise_input_fusion_on_the_mini_cnns(tmp_path, dw_input, name, moved):
    """The expansion convs of MobileNetV2 hand their ReLU6 to the depthwise conv after them on
    testdev; EfficientNet's keep their SiLU (not a clamp). The outputs match the host plan."""
    model = next(m for m in MANIFEST if m["name"] == name)
    src = os.path.join(MODELS, name, "model.onnx")
    inputs = {k: os.path.join(MODELS, v) for k, v in model["cases"][-1]["inputs"].items()}
    outs = {}
    for label, extra in (("device", ["--backend", "testdev,cpu"]), ("host", [])):
        plan = str(tmp_path / f"{label}.plan")
        kiln("build", src, "-o", plan, *shape_args(model), *extra)
        ops = [layer["op"] for layer in inspect(plan)["layers"]]
        if label == "device" and moved:
            assert ops.count("FusedDepthwiseConv") >= moved, ops
        elif label == "device":
            assert "FusedDepthwiseConv" not in ops and "FusedConv" in ops, ops
        outs[label] = run_plan(plan, inputs, str(tmp_path / label))
    for k, ref in outs["host"].items():
        np.testing.assert_allclose(outs["device"][k], ref, rtol=1e-5,
                                   atol=1e-5 * np.abs(ref).max(), err_msg=k)


def fused_depthwise_model(path, computed=True):
    """y = kiln.FusedDepthwiseConv(x' , w, b, -, xb) with the HardSigmoid input prologue, x' =
    Neg(x) (computed) or x itself, and the same network in ONNX's own ops for onnxruntime."""
    rng = np.random.default_rng(2)
    w, b, xb = (rng.normal(size=s).astype(np.float32) for s in ((6, 1, 3, 3), (6,), (6,)))
    src = "n" if computed else "x"
    pre = [helper.make_node("Neg", ["x"], ["n"])] if computed else []
    conv = dict(group=6, pads=[1, 1, 1, 1], strides=[2, 2], kernel_shape=[3, 3])
    kiln_nodes = pre + [helper.make_node("FusedDepthwiseConv", [src, "w", "b", "", "xb"], ["y"],
                                         domain="kiln", kiln_input_activation="HardSigmoid",
                                         kiln_input_alpha=0.3, kiln_input_beta=0.4,
                                         kiln_activation="Relu", **conv)]
    onnx_nodes = pre + [helper.make_node("Add", [src, "xb4"], ["s"]),
                        helper.make_node("HardSigmoid", ["s"], ["h"], alpha=0.3, beta=0.4),
                        helper.make_node("Conv", ["h", "w", "b"], ["c"], **conv),
                        helper.make_node("Relu", ["c"], ["y"])]
    inits = [numpy_helper.from_array(a, n) for n, a in (("w", w), ("b", b), ("xb", xb),
                                                          ("xb4", xb.reshape(1, 6, 1, 1)))]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 7, 9])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 4, 5])])
    for nodes, p, extra in ((kiln_nodes, path, [helper.make_opsetid("kiln", 1)]),
                            (onnx_nodes, path + ".ref.onnx", [])):
        g = helper.make_graph(nodes, "g", *io, inits)
        save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), *extra]), p)


def test_fused_depthwise_conv_from_a_model_runs_on_the_host(tmp_path):
    """kiln.FusedDepthwiseConv written in a model runs on the CPU (its prologue, padding zero
    where HardSigmoid(0) is not) and matches onnxruntime on the same network in ONNX ops."""
    import onnxruntime as ort
    model = str(tmp_path / "m.onnx")
    fused_depthwise_model(model)
    x = np.random.default_rng(4).normal(size=(2, 6, 7, 9)).astype(np.float32) * 3
    np.save(tmp_path / "x.npy", x)
    want = ort.InferenceSession(model + ".ref.onnx",
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    plan = str(tmp_path / "m.plan")
    kiln("build", model, "-o", plan)
    got = run_plan(plan, {"x": str(tmp_path / "x.npy")}, str(tmp_path / "out"))["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_fused_depthwise_conv_on_a_graph_input_is_refused(tmp_path):
    """Its input would be rewritten in place: a graph input is refused at build, one line."""
    model = str(tmp_path / "m.onnx")
    fused_depthwise_model(model, computed=False)
    rc, _, err = kiln("build", model, "-o", str(tmp_path / "m.plan"), check=False)
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "computed by the network for this node alone" in lines[0], err
