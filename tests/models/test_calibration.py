"""int8 calibration of float32 models (kiln build --int8 --calibration DIR): a small CNN
(tests/models/resnet_mini, batch norm folded into its convolutions, residual Adds) and a
MatMul/Gemm network calibrated over a handful of random .npy samples, with min-max and entropy,
run their Conv / Gemm / MatMul layers in int8 (inspect says so) and stay within a stated
tolerance of onnxruntime's float32 output on four inputs calibration did not see: mean cosine
similarity >= 0.97, none below 0.9, and max |kiln - ort| <= 0.5 * max |ort| on each. (For
scale: onnxruntime's own quantize_static, symmetric int8, on resnet_mini and the same six
samples reaches a mean cosine of 0.988, min 0.968; kiln 0.994 / 0.977 with min-max and
0.982 / 0.937 with entropy, which clips the tails of random data that has no outliers.) The calibration cache gives a
byte-identical plan without calibration runs; a cache of another model or method, and bad
calibration folders, are refused in one line."""

import json
import os
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
RESNET = os.path.join(HERE, "resnet_mini", "model.onnx")
VGG = os.path.join(HERE, "vgg_mini", "model.onnx")
SHAPE = (1, 3, 64, 64)
SHAPES = ["--shapes", "input:1x3x64x64"]


def kiln(*args, check=True):
    p = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=300)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    if check:
        assert p.returncode == 0, f"kiln {' '.join(args)}: {err}"
    return p.returncode, out, err


def samples(root, name="input", shape=SHAPE, n=6, folders=True):
    rng = np.random.default_rng(0)
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        x = rng.standard_normal(shape).astype(np.float32)
        if folders:
            os.makedirs(os.path.join(root, f"s{i}"), exist_ok=True)
            np.save(os.path.join(root, f"s{i}", f"{name}.npy"), x)
        else:
            np.save(os.path.join(root, f"s{i}.npy"), x)
    return str(root)


def precisions(plan):
    info = json.loads(kiln("inspect", plan, "--json")[1])
    return {layer["name"]: layer.get("precision") for layer in info["layers"]}


def run_plan(plan, feeds, tmp_path):
    args = []
    for name, x in feeds.items():
        path = tmp_path / f"feed_{name}.npy"
        np.save(path, x)
        args += ["--input", f"{name}={path}"]
    out = tmp_path / "out"
    kiln("run", plan, *args, "--output-dir", str(out))
    with open(out / "outputs.json") as f:
        outs = json.load(f)
    return np.load(out / list(outs.values())[0])


def assert_close(model, plan, name, shape, tmp_path):
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(42)
    cos, err = [], []
    for _ in range(4):
        x = rng.standard_normal(shape).astype(np.float32)
        g = run_plan(plan, {name: x}, tmp_path).ravel().astype(np.float64)
        r = sess.run(None, {name: x})[0].ravel().astype(np.float64)
        cos.append(g @ r / (np.linalg.norm(g) * np.linalg.norm(r)))
        err.append(np.abs(g - r).max() / np.abs(r).max())
    assert np.mean(cos) >= 0.97 and min(cos) >= 0.9 and max(err) <= 0.5, (cos, err)


@pytest.mark.parametrize("method", ["minmax", "entropy"])
def test_resnet_calibrated_matches_fp32(tmp_path, method):
    data = samples(tmp_path / "cal", folders=method == "minmax")
    plan = str(tmp_path / "q.plan")
    _, _, err = kiln("build", RESNET, "-o", plan, *SHAPES, "--int8", "--calibration", data,
                     "--calibration-method", method, "--verbose")
    runs = 2 if method == "entropy" else 1
    assert f"calibrating (run {runs} of {runs}) (100%)" in err
    prec = precisions(plan)
    # Every convolution runs in int8 (the stem, 16 in the blocks, 3 downsampling); the last
    # Gemm makes the graph's output and stays float32.
    assert sum(p == "int8" for p in prec.values()) == 20, prec
    assert_close(RESNET, plan, "input", SHAPE, tmp_path)


def mlp(path):
    """MatMul -> Add -> Relu -> Gemm(transB) -> Relu -> MatMul: the weights of a MatMul and of
    a transposed Gemm quantize along their output channels."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((32, 64)).astype(np.float32) * 0.2
    b1 = rng.standard_normal(64).astype(np.float32) * 0.1
    w2 = rng.standard_normal((48, 64)).astype(np.float32) * 0.2
    b2 = rng.standard_normal(48).astype(np.float32) * 0.1
    w3 = rng.standard_normal((48, 10)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "b1"], ["h1b"], name="bias1"),
        helper.make_node("Relu", ["h1b"], ["a1"], name="relu1"),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"], name="fc2", transB=1),
        helper.make_node("Relu", ["h2"], ["a2"], name="relu2"),
        helper.make_node("MatMul", ["a2", "w3"], ["h3"], name="fc3"),
        helper.make_node("Relu", ["h3"], ["y"], name="relu3"),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"))]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 32])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [4, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return str(path)


@pytest.mark.parametrize("method", ["minmax", "entropy"])
def test_matmul_gemm_calibrated(tmp_path, method):
    model = mlp(tmp_path / "mlp.onnx")
    data = samples(tmp_path / "cal", name="x", shape=(4, 32), n=8)
    plan = str(tmp_path / "q.plan")
    kiln("build", model, "-o", plan, "--int8", "--calibration", data, "--calibration-method",
         method)
    prec = precisions(plan)
    assert prec["fc1"] == "int8" and prec["fc2"] == "int8", prec
    assert prec["fc3"] != "int8", prec  # its Relu writes the graph's output
    assert_close(model, plan, "x", (4, 32), tmp_path)


def test_cache_round_trip_and_stale(tmp_path):
    data = samples(tmp_path / "cal")
    cache = str(tmp_path / "scales.txt")
    first, again, cached = (str(tmp_path / f"{n}.plan") for n in ("first", "again", "cached"))
    kiln("build", RESNET, "-o", first, *SHAPES, "--int8", "--calibration", data,
         "--calibration-cache", cache)
    with open(cache) as f:
        lines = f.read().splitlines()
    assert lines[0].startswith("kiln-int8-calibration 1 method=entropy model=")
    scale, kind, name = lines[1].split(" ", 2)
    assert float(scale) > 0 and kind == "int8" and name == "input"
    assert any(line.endswith(" uint8 /stem/stem.2/Relu_output_0") for line in lines)
    # From the cache: no calibration runs, no samples needed, the same plan to the byte.
    _, _, err = kiln("build", RESNET, "-o", cached, *SHAPES, "--int8", "--calibration-cache",
                     cache, "--verbose")
    assert "calibrating" not in err and "tensor scales from" in err
    kiln("build", RESNET, "-o", again, *SHAPES, "--int8", "--calibration", data,
         "--calibration-cache", cache)
    with open(first, "rb") as a, open(cached, "rb") as b, open(again, "rb") as c:
        one = a.read()
        assert one == b.read() and one == c.read()

    def refused(*args):
        rc, _, err = kiln("build", *args, "-o", str(tmp_path / "no.plan"), "--int8",
                          "--calibration-cache", cache, check=False)
        assert rc == 1 and err.count("\n") == 1 and "kiln: error:" in err, err
        return err

    assert "made for another model" in refused(VGG, "--shapes", "input:1x3x32x32")
    assert "made with method entropy and this build asks for minmax" in refused(
        RESNET, *SHAPES, "--calibration-method", "minmax")
    with open(cache, "w") as f:
        f.write("\n".join(lines[:5]) + "\n")
    assert "has no scale for tensor" in refused(RESNET, *SHAPES)
    with open(cache, "w") as f:
        f.write("not a cache\n")
    assert "is not a kiln int8 calibration cache" in refused(RESNET, *SHAPES)
    with open(cache, "w") as f:
        f.write(lines[0] + "\n-1 int8 input\n")
    assert "line 2" in refused(RESNET, *SHAPES)


def qdq_model(path):
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.int8), "w")
    s = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    z = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, 8, 8])], [w, s, z])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return str(path)


def relu_model(path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return str(path)


def test_bad_calibration_refused(tmp_path):
    def refused(model, data, *extra, shapes=SHAPES):
        args = ["build", model, "-o", str(tmp_path / "no.plan"), *shapes, "--int8"]
        args += ["--calibration", str(data)] if data is not None else []
        rc, _, err = kiln(*args, *extra, check=False)
        assert rc == 1 and err.count("\n") == 1 and "kiln: error:" in err, err
        assert not os.path.exists(tmp_path / "no.plan")
        return err

    os.makedirs(tmp_path / "empty")
    assert "holds no samples" in refused(RESNET, tmp_path / "empty")
    assert "cannot be opened as a folder" in refused(RESNET, tmp_path / "missing")
    wrong = samples(tmp_path / "wrong_name", name="image")
    assert "has no file for model input 'input'" in refused(RESNET, wrong)
    f64 = tmp_path / "f64"
    os.makedirs(f64)
    np.save(f64 / "a.npy", np.zeros(SHAPE, np.float64))
    assert "is float64 but the model expects float32" in refused(RESNET, f64)
    small = samples(tmp_path / "small", shape=(1, 3, 32, 32), folders=False)
    assert "outside the profile range" in refused(RESNET, small)
    rank = samples(tmp_path / "rank", shape=(3, 64, 64))
    assert "has rank 3 but the model expects rank 4" in refused(RESNET, rank)
    junk = tmp_path / "junk"
    os.makedirs(junk)
    (junk / "a.npy").write_bytes(b"not numpy")
    assert "calibration sample" in refused(RESNET, junk)
    assert "--int8 needs --calibration" in refused(RESNET, None)
    assert "expected entropy or minmax" in refused(RESNET, tmp_path / "empty",
                                                   "--calibration-method", "kl")
    assert "already quantized" in refused(qdq_model(tmp_path / "qdq.onnx"), small, shapes=[])
    assert "no float32 Conv, Gemm or MatMul" in refused(relu_model(tmp_path / "relu.onnx"),
                                                        small, shapes=[])
    rc, _, err = kiln("build", RESNET, "-o", str(tmp_path / "no.plan"), *SHAPES, "--calibration",
                      str(small), check=False)
    assert rc == 1 and "need --int8" in err


def test_python_build_int8(tmp_path):
    import sys
    sys.path.insert(0, os.path.join(REPO, "python"))
    import kiln as k

    data = samples(tmp_path / "cal")
    cache = tmp_path / "py.txt"
    stages = []
    plan = k.build(RESNET, shapes={"input": SHAPE}, int8=True,
                   calibration=k.Calibration(data, "minmax", cache),
                   progress=lambda stage, f: stages.append(stage))
    assert "calibrating (run 1 of 1)" in stages
    again = k.build(RESNET, shapes={"input": SHAPE}, int8=True,
                    calibration=k.Calibration(cache=cache, method="minmax"))
    assert plan == again
    with pytest.raises(k.KilnError, match="holds no samples"):
        os.makedirs(tmp_path / "empty")
        k.build(RESNET, shapes={"input": SHAPE}, int8=True, calibration=tmp_path / "empty")
