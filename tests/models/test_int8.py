"""int8 on the CPU: models quantized by onnxruntime.quantization.quantize_static (QDQ format,
per-channel int8 weights, uint8 or int8 activations) run their Conv / MatMul / Gemm as kiln's
int8 products (inspect says int8) and match onnxruntime's own output on the QDQ model within two
steps of the output's quantization; a product that does not fit stays fp32 with its reason."""

import json
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")


def kiln(*args, check=True):
    p = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=300)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    if check:
        assert p.returncode == 0, f"kiln {' '.join(args)}: {err}"
    return p.returncode, out, err


class Reader(CalibrationDataReader):
    def __init__(self, name, shape, n=8):
        rng = np.random.default_rng(0)
        self.data = iter([{name: rng.standard_normal(shape).astype(np.float32)}
                          for _ in range(n)])

    def get_next(self):
        return next(self.data, None)


def quantize(src, dst, shape, act):
    pre = str(dst) + ".pre.onnx"
    # The quantizer leaves temporary files in the working directory.
    here = os.getcwd()
    os.chdir(os.path.dirname(str(dst)))
    try:
        quant_pre_process(str(src), pre)
        name = onnx.load(pre).graph.input[0].name
        quantize_static(pre, str(dst), Reader(name, shape), quant_format=QuantFormat.QDQ,
                        per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8 if act == "u8" else QuantType.QInt8)
    finally:
        os.chdir(here)
    return name


def output_step(model_path):
    """The scale of the DequantizeLinear that makes the graph's first output."""
    m = onnx.load(model_path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out = m.graph.output[0].name
    node = next(n for n in m.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear"
    return float(inits[node.input[1]])


def run_both(qdq, name, shape, tmp_path, shapes_arg):
    plan = str(tmp_path / "q.plan")
    kiln("build", str(qdq), "-o", plan, *shapes_arg)
    info = json.loads(kiln("inspect", plan, "--json")[1])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kiln("run", plan, "--input", f"{name}={tmp_path / 'x.npy'}", "--output-dir",
         str(tmp_path / "out"))
    with open(tmp_path / "out" / "outputs.json") as f:
        outs = json.load(f)
    got = np.load(tmp_path / "out" / list(outs.values())[0])
    sess = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {name: x})[0]
    return info, got, ref


def assert_same_at_threads(name, tmp_path, want, counts):
    """run_both's plan (q.plan) on its input (x.npy) at each thread count gives want's bytes."""
    plan = str(tmp_path / "q.plan")
    for threads in counts:
        out = tmp_path / f"out{threads}"
        kiln("run", plan, "--threads", str(threads), "--input", f"{name}={tmp_path / 'x.npy'}",
             "--output-dir", str(out))
        with open(out / "outputs.json") as f:
            y = np.load(out / list(json.load(f).values())[0])
        assert np.array_equal(y, want), threads


def matmul_model(path):
    """A small MLP over [4, 37]: MatMul + bias Add + Relu, MatMul + Clip, and a Gemm (transB)."""
    rng = np.random.default_rng(3)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"]),
        helper.make_node("Add", ["h1", "b1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["h4"]),
        helper.make_node("Clip", ["h4", "lo", "hi"], ["h5"]),
        helper.make_node("Gemm", ["h5", "w3", "b3"], ["y"], transB=1),
    ]
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 37])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 19])],
        [init("w1", 37, 50), init("b1", 50), init("w2", 50, 45),
         numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
         numpy_helper.from_array(np.array(2.0, np.float32), "hi"), init("w3", 19, 45),
         init("b3", 19)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_qdq_resnet_matches_onnxruntime(act, tmp_path):
    shape = [1, 3, 64, 64]
    qdq = tmp_path / "r.onnx"
    name = quantize(os.path.join(HERE, "resnet_mini", "model.onnx"), qdq, shape, act)
    info, got, ref = run_both(qdq, name, shape, tmp_path, ["--shapes", f"{name}:1x3x64x64"])
    ops = [(l["op"], l["precision"]) for l in info["layers"]]
    n_conv = sum(1 for n in onnx.load(qdq).graph.node if n.op_type == "Conv")
    assert ops.count(("QConv", "int8")) == n_conv, ops
    assert ("QMatMul", "int8") in ops  # the classifier's Gemm
    step = output_step(qdq)
    assert np.abs(got - ref).max() <= 2 * step + 1e-6, (np.abs(got - ref).max(), step)


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_qdq_matmul_gemm_matches_onnxruntime(act, tmp_path):
    fp32 = tmp_path / "mlp.onnx"
    matmul_model(str(fp32))
    qdq = tmp_path / "mlp_q.onnx"
    name = quantize(fp32, qdq, [4, 37], act)
    info, got, ref = run_both(qdq, name, [4, 37], tmp_path, [])
    ops = [(l["op"], l["precision"]) for l in info["layers"]]
    assert ops.count(("QMatMul", "int8")) == 3, ops
    step = output_step(qdq)
    assert np.abs(got - ref).max() <= 2 * step + 1e-6, (np.abs(got - ref).max(), step)


def test_unfit_product_stays_fp32_with_reason(tmp_path):
    """A grouped convolution keeps the float path; inspect says why, and the result still
    matches onnxruntime."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal([8, 2, 3, 3]) * 0.3).astype(np.float32),
                                "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])], "grouped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])], [w])
    fp32 = tmp_path / "g.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    qdq = tmp_path / "g_q.onnx"
    name = quantize(fp32, qdq, [1, 8, 10, 10], "u8")
    info, got, ref = run_both(qdq, name, [1, 8, 10, 10], tmp_path, [])
    conv = next(l for l in info["layers"] if l["op"] == "Conv")
    assert conv["precision"] == "fp32"
    assert "ungrouped" in conv["int8_reason"]
    assert np.abs(got - ref).max() <= 2 * output_step(qdq) + 1e-6


def test_qdq_conv_geometry_matches_onnxruntime(tmp_path):
    """The int8 Conv's im2col and panel at batch 2 over strided, dilated, asymmetrically padded
    and 1x1 convolutions, channel counts that are no multiple of 4 or 16, and an image too small
    to split by pixels (its output channels are split across threads instead)."""
    rng = np.random.default_rng(8)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 1], dilations=[1, 2],
                         pads=[1, 0, 2, 3], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
    ]
    g = helper.make_graph(
        nodes, "geometry", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 13, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [init("w1", 7, 5, 3, 3), init("b1", 7), init("w2", 90, 7, 1, 1), init("w3", 19, 90, 3, 3),
         init("b3", 19)])
    fp32 = tmp_path / "geo.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    for act in ("u8", "s8"):
        qdq = tmp_path / f"geo_{act}.onnx"
        name = quantize(fp32, qdq, [2, 5, 13, 11], act)
        info, got, ref = run_both(qdq, name, [2, 5, 13, 11], tmp_path, [])
        assert [l["precision"] for l in info["layers"] if l["op"] == "QConv"] == ["int8"] * 3
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 2 * output_step(qdq) + 1e-6, act


def test_qdq_1x1_conv_packs_from_the_image_matches_onnxruntime(tmp_path):
    """1x1 stride-1 unpadded int8 Convs pack their panel straight from the image's rows: full
    pixel chunks (256 and 144 of a 20x20 map) do, a partial last chunk (164 of 20x21, padded to
    176 columns) goes through the im2col copy; 13 input channels leave padding rows in the
    panel's last group of four, 20 output channels a partial tile of six."""
    rng = np.random.default_rng(9)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    for h, w in ((20, 20), (20, 21)):
        nodes = [
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], kernel_shape=[1, 1]),
        ]
        g = helper.make_graph(
            nodes, "pointwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [2, 13, h, w])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [init("w1", 20, 13, 1, 1), init("b1", 20), init("w2", 13, 20, 1, 1), init("b2", 13)])
        fp32 = tmp_path / f"pw_{h}x{w}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
        qdq = tmp_path / f"pw_{h}x{w}_u8.onnx"
        name = quantize(fp32, qdq, [2, 13, h, w], "u8")
        info, got, ref = run_both(qdq, name, [2, 13, h, w], tmp_path, [])
        assert [l["precision"] for l in info["layers"] if l["op"] == "QConv"] == ["int8"] * 2
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 2 * output_step(qdq) + 1e-6, (h, w)


def test_qdq_stride1_conv_padded_copy_matches_onnxruntime(tmp_path):
    """Stride-1 int8 Convs other than the unpadded 1x1 pack their panel from a padded copy of the
    image whose rows are W + max(pad left, pad right) apart, computing and dropping the columns
    past each output row: 3x3 with pads 1 over two pixel chunks (20 rows of 22 columns, a chunk
    ending mid-row), a right pad wider than the left, a dilated 3x3, a 5x5 and an unpadded 3x3,
    at batch 2. A 1x1 with pads 1 (its output rows wider than the copy's) keeps the im2col."""
    rng = np.random.default_rng(10)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[0, 0, 1, 2], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], dilations=[2, 2], pads=[2, 2, 2, 2],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "w4", "b4"], ["c4"], pads=[2, 2, 2, 2],
                         kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c4"], ["r4"]),
        helper.make_node("Conv", ["r4", "w5", "b5"], ["c5"], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c5"], ["r5"]),
        helper.make_node("Conv", ["r5", "w6", "b6"], ["y"], pads=[1, 1, 1, 1],
                         kernel_shape=[1, 1]),
    ]
    g = helper.make_graph(
        nodes, "stride1", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 20, 21])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [init("w1", 9, 5, 3, 3), init("b1", 9), init("w2", 11, 9, 3, 3), init("w3", 8, 11, 3, 3),
         init("b3", 8), init("w4", 7, 8, 5, 5), init("b4", 7), init("w5", 13, 7, 3, 3),
         init("b5", 13), init("w6", 6, 13, 1, 1), init("b6", 6)])
    fp32 = tmp_path / "s1.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    for act in ("u8", "s8"):
        qdq = tmp_path / f"s1_{act}.onnx"
        name = quantize(fp32, qdq, [2, 5, 20, 21], act)
        info, got, ref = run_both(qdq, name, [2, 5, 20, 21], tmp_path, [])
        assert [l["precision"] for l in info["layers"] if l["op"] == "QConv"] == ["int8"] * 6
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 2 * output_step(qdq) + 1e-6, act


def test_qdq_strided_conv_phase_planes_matches_onnxruntime(tmp_path):
    """Strided int8 Convs pack their panel from phase planes of the padded image (plane (py, px)
    holds its pixels (sy r + py, sx q + px)), so a tap is a plain run of one plane: a 7x7 stride 2
    with pads 3 (ResNet's stem) on an odd-sized map, a 3x3 stride 2, a 1x1 stride 2 (one phase
    read), stride (3, 2) with a dilation of 2 and asymmetric pads, at batch 2."""
    rng = np.random.default_rng(11)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[3, 3, 3, 3],
                         kernel_shape=[7, 7]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r1", "w3"], ["c3"], strides=[2, 2], kernel_shape=[1, 1]),
        helper.make_node("Add", ["r2", "c3"], ["a"]),
        helper.make_node("Conv", ["a", "w4", "b4"], ["y"], strides=[3, 2], dilations=[2, 2],
                         pads=[2, 1, 0, 3], kernel_shape=[3, 3]),
    ]
    g = helper.make_graph(
        nodes, "strided", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 61, 67])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [init("w1", 10, 3, 7, 7), init("b1", 10), init("w2", 12, 10, 3, 3), init("b2", 12),
         init("w3", 12, 10, 1, 1), init("w4", 7, 12, 3, 3), init("b4", 7)])
    fp32 = tmp_path / "s2.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    for act in ("u8", "s8"):
        qdq = tmp_path / f"s2_{act}.onnx"
        name = quantize(fp32, qdq, [2, 3, 61, 67], act)
        info, got, ref = run_both(qdq, name, [2, 3, 61, 67], tmp_path, [])
        assert [l["precision"] for l in info["layers"] if l["op"] == "QConv"] == ["int8"] * 4
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 2 * output_step(qdq) + 1e-6, act
        # two images: the grid at more threads than chunks splits both images' chunks
        assert_same_at_threads(name, tmp_path, got, (1, 5, 16))


def test_qdq_conv_partitions_agree_across_thread_counts(tmp_path):
    """The int8 conv splits its work by thread count: chunks of pixels split evenly by pairs of
    16-column blocks (and rounded to a multiple of the threads), or, with few chunks, output
    channels too, the panels then packed once up front by groups of blocks and shared. Each
    output is the same sum however the work is cut, so every thread count gives the same
    bytes, and they match onnxruntime: 1x1 at 28x28 (784 columns), 3x3 stride 2 to 14x14
    (phase planes), 1x1 at 14x14 with 192 output channels (a partial last block, rows split),
    3x3 pads 1 at 14x14 (the padded copy, rows split), 1x1 stride 2 to 7x7 (a phase plane whose
    pitch is the output's width, requantized as whole chunks; rows split)."""
    rng = np.random.default_rng(11)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32),
                                       name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "w4", "b4"], ["c4"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c4"], ["r4"]),
        helper.make_node("Conv", ["r4", "w5", "b5"], ["y"], kernel_shape=[1, 1], strides=[2, 2]),
    ]
    shape = [1, 48, 28, 28]
    g = helper.make_graph(
        nodes, "partitions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [init("w1", 96, 48, 1, 1), init("b1", 96), init("w2", 128, 96, 3, 3), init("b2", 128),
         init("w3", 192, 128, 1, 1), init("b3", 192), init("w4", 144, 192, 3, 3),
         init("b4", 144), init("w5", 288, 144, 1, 1), init("b5", 288)])
    fp32 = tmp_path / "partitions.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    qdq = tmp_path / "partitions_u8.onnx"
    name = quantize(fp32, qdq, shape, "u8")
    info, got, ref = run_both(qdq, name, shape, tmp_path, [])
    assert [l["precision"] for l in info["layers"] if l["op"] == "QConv"] == ["int8"] * 5
    assert np.abs(got - ref).max() <= 2 * output_step(qdq) + 1e-6
    assert_same_at_threads(name, tmp_path, got, (1, 2, 3, 5, 8, 16))


def test_qdq_conv_chunks_rounded_to_threads_stay_in_the_image(tmp_path):
    """A 3x3 conv of 256 channels at 14x14 (ResNet-50's conv_125 shape, fewer outputs): its
    padded copy's 210 columns are 14 blocks, seven chunks of 32 columns; at 2 and 3 threads the
    count rounded up to a multiple of the threads (8, 9) passed the image's seven pairs of
    blocks, and the tasks past them read and wrote a second image that is not there (a crash in
    a plan of this layer alone)."""
    rng = np.random.default_rng(12)
    shape = [1, 256, 14, 14]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "chunks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array((rng.standard_normal((32, 256, 3, 3)) * 0.05).astype(np.float32),
                                 "w"),
         numpy_helper.from_array((rng.standard_normal(32) * 0.1).astype(np.float32), "b")])
    fp32 = tmp_path / "chunks.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    qdq = tmp_path / "chunks_u8.onnx"
    name = quantize(fp32, qdq, shape, "u8")
    info, got, ref = run_both(qdq, name, shape, tmp_path, [])
    assert [l["precision"] for l in info["layers"] if l["op"] == "QConv"] == ["int8"]
    assert np.abs(got - ref).max() <= 2 * output_step(qdq) + 1e-6
    assert_same_at_threads(name, tmp_path, got, (2, 3, 4, 16))


def encoder_layer_model(path, seq=16, d=32, heads=2, ff=64):
    """One BERT encoder layer on float input [1, seq, d]: Q/K/V MatMul + bias, Reshape and
    Transpose into heads, the two attention MatMuls between activations, the Div by sqrt(dh),
    Softmax, the output projection, residual Adds, LayerNorms and the exact GELU (Div, Erf,
    Add, Mul, Mul)."""
    rng = np.random.default_rng(21)
    dh = d // heads
    inits = []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))

    for n, shape in (("wq", [d, d]), ("wk", [d, d]), ("wv", [d, d]), ("wo", [d, d]),
                     ("w1", [d, ff]), ("w2", [ff, d])):
        init(n, rng.standard_normal(shape) * 0.2)
        init("b" + n[1:], rng.standard_normal(shape[1]) * 0.1)
    for n in ("g1", "g2"):
        init(n, 1.0 + rng.standard_normal(d) * 0.1)
    for n in ("e1", "e2"):
        init(n, rng.standard_normal(d) * 0.1)
    inits.append(numpy_helper.from_array(np.array([1, seq, heads, dh], np.int64), "split"))
    inits.append(numpy_helper.from_array(np.array([1, seq, d], np.int64), "merge"))
    init("sqrt_dh", np.sqrt(dh))
    init("sqrt2", np.sqrt(2.0))
    init("one", 1.0)
    init("half", 0.5)
    nodes = []
    for h in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["x", "w" + h], [h + "m"]),
                  helper.make_node("Add", [h + "m", "b" + h], [h + "a"]),
                  helper.make_node("Reshape", [h + "a", "split"], [h + "r"])]
    nodes += [
        helper.make_node("Transpose", ["qr"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["kr"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["vr"], ["vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"]),
        helper.make_node("Div", ["s", "sqrt_dh"], ["sd"]),
        helper.make_node("Softmax", ["sd"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vt"], ["c"]),
        helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ct", "merge"], ["cr"]),
        helper.make_node("MatMul", ["cr", "wo"], ["om"]),
        helper.make_node("Add", ["om", "bo"], ["oa"]),
        helper.make_node("Add", ["oa", "x"], ["r1"]),
        helper.make_node("LayerNormalization", ["r1", "g1", "e1"], ["n1"], axis=-1),
        helper.make_node("MatMul", ["n1", "w1"], ["f1"]),
        helper.make_node("Add", ["f1", "b1"], ["f1b"]),
        helper.make_node("Div", ["f1b", "sqrt2"], ["gd"]),
        helper.make_node("Erf", ["gd"], ["ge"]),
        helper.make_node("Add", ["ge", "one"], ["ga"]),
        helper.make_node("Mul", ["f1b", "ga"], ["gm"]),
        helper.make_node("Mul", ["gm", "half"], ["gelu"]),
        helper.make_node("MatMul", ["gelu", "w2"], ["f2"]),
        helper.make_node("Add", ["f2", "b2"], ["f2b"]),
        helper.make_node("Add", ["f2b", "n1"], ["r2"]),
        helper.make_node("LayerNormalization", ["r2", "g2", "e2"], ["y"], axis=-1),
    ]
    g = helper.make_graph(nodes, "encoder",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_qdq_encoder_layer_matches_onnxruntime(act, tmp_path):
    """A QDQ transformer layer: the QuantizeLinear of a DequantizeLinear on the same grid,
    through Reshape and Transpose, becomes those moves on the int8 tensor (no float copy and
    no QuantizeLinear left after a Reshape or Transpose), and the QuantizeLinear ->
    DequantizeLinear pairs after Div, Softmax, the residual Adds and the GELU's steps become
    float roundings fused with those ops. The oracle is onnxruntime running the QDQ model node
    by node (graph optimizations off: every QuantizeLinear and DequantizeLinear as written),
    which kiln matches within one output step (it did to the bit when this was written);
    onnxruntime's own int8 fusions differ from that by up to three steps here, so against them
    the check is the cosine."""
    fp32 = tmp_path / "enc.onnx"
    encoder_layer_model(str(fp32))
    qdq = tmp_path / f"enc_{act}.onnx"
    shape = [1, 16, 32]
    name = quantize(fp32, qdq, shape, act)
    info, got, ref = run_both(qdq, name, shape, tmp_path, [])
    layers = info["layers"]
    ops = [l["op"] for l in layers]
    assert ops.count("QMatMul") == 6, ops
    # Every Reshape / Transpose runs on int8 (their outputs are quantized in the model).
    moves = [l for l in layers if l["op"] in ("Reshape", "Transpose")]
    assert moves and all(l["name"].endswith("/int8") for l in moves), moves
    model_q = sum(1 for n in onnx.load(qdq).graph.node if n.op_type == "QuantizeLinear")
    assert ops.count("QuantizeLinear") < model_q // 2, (ops.count("QuantizeLinear"), model_q)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = np.load(tmp_path / "x.npy")
    literal = ort.InferenceSession(str(qdq), so, providers=["CPUExecutionProvider"]).run(
        None, {name: x})[0]
    step = output_step(qdq)
    assert np.abs(got - literal).max() <= step + 1e-6, (np.abs(got - literal).max(), step)
    cos = float(got.ravel() @ ref.ravel() / (np.linalg.norm(got) * np.linalg.norm(ref)))
    assert cos > 0.999, cos


@pytest.mark.parametrize("second", [(0.05, 128), (0.05, 120), (0.07, 128)])
def test_qdq_around_moves_matches_onnxruntime(second, tmp_path):
    """QuantizeLinear(Transpose(Reshape(DequantizeLinear(x_q)))) is the moves on x_q only
    when the two grids are the same; another scale or zero point keeps the requantization.
    The reference is onnxruntime with graph optimizations off, to the bit."""
    s2, z2 = second
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s1"),
             numpy_helper.from_array(np.array(128, np.uint8), "z1"),
             numpy_helper.from_array(np.array(s2, np.float32), "s2"),
             numpy_helper.from_array(np.array(z2, np.uint8), "z2"),
             numpy_helper.from_array(np.array([6, 4, 5], np.int64), "shape")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s1", "z1"], ["xd"]),
             helper.make_node("Reshape", ["xd", "shape"], ["xr"]),
             helper.make_node("Transpose", ["xr"], ["xt"], perm=[2, 0, 1]),
             helper.make_node("QuantizeLinear", ["xt", "s2", "z2"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "s2", "z2"], ["y"])]
    g = helper.make_graph(nodes, "moves",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 30])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 6, 4])],
                          inits)
    path = tmp_path / "moves.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = (np.random.default_rng(2).standard_normal([4, 30]) * 4).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    plan = str(tmp_path / "m.plan")
    kiln("build", str(path), "-o", plan)
    kiln("run", plan, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
         str(tmp_path / "out"))
    got = np.load(tmp_path / "out" / "y.npy")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert np.array_equal(got, ref), np.abs(got - ref).max()


@pytest.mark.parametrize("act", [np.uint8, np.int8])
def test_qdq_pairs_after_float_ops_match_onnxruntime(act, tmp_path):
    """QuantizeLinear -> DequantizeLinear pairs after float ops (Div, Erf, Add) and one alone
    on a graph input: on the CPU each pair is one rounding instruction of a fused program,
    nearbyint(clip(x / s, lo - z, hi - z)) * s, which must give QuantizeLinear's bytes:
    quotients exactly halfway between two integers round to even, values past the int8 range
    saturate. The reference is onnxruntime with graph optimizations off, to the bit."""
    z = 128 if act is np.uint8 else 3
    zt = TensorProto.UINT8 if act is np.uint8 else TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(1.4142135, np.float32), "c"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    for i, s in enumerate([0.125, 0.0173, 1 / 127, 0.0291]):
        inits += [numpy_helper.from_array(np.array(s, np.float32), f"s{i}"),
                  numpy_helper.from_array(np.array(z, act), f"z{i}")]

    def pair(i, src, dst):
        return [helper.make_node("QuantizeLinear", [src, f"s{i}", f"z{i}"], [dst + "_q"]),
                helper.make_node("DequantizeLinear", [dst + "_q", f"s{i}", f"z{i}"], [dst])]

    nodes = (pair(0, "x", "xd") + [helper.make_node("Div", ["xd", "c"], ["a"])] +
             pair(1, "a", "ad") + [helper.make_node("Erf", ["ad"], ["e"])] + pair(2, "e", "ed") +
             [helper.make_node("Add", ["ed", "one"], ["f"])] + pair(3, "f", "y") +
             pair(0, "x2", "y2"))
    g = helper.make_graph(nodes, "pairs",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64]),
                           helper.make_tensor_value_info("x2", TensorProto.FLOAT, [4, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4, 64])],
                          inits)
    path = tmp_path / "pairs.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    rng = np.random.default_rng(5)
    # Multiples of half the grid step 0.125: every other quotient is a tie; the ends pass the
    # int8 range on both sides.
    feeds = {"x": (np.arange(256, dtype=np.float32).reshape(4, 64) - 128) * 0.0625 * 3,
             "x2": np.concatenate([(np.arange(128, dtype=np.float32) - 64) * 0.0625,
                                   rng.standard_normal(128).astype(np.float32) * 40]
                                  ).reshape(4, 64)}
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
    plan = str(tmp_path / "p.plan")
    kiln("build", str(path), "-o", plan)
    ops = [l["op"] for l in json.loads(kiln("inspect", plan, "--json")[1])["layers"]]
    assert ops == ["FusedElementwise", "FusedElementwise"], ops
    kiln("run", plan, *[a for k in feeds for a in ("--input", f"{k}={tmp_path / k}.npy")],
         "--output-dir", str(tmp_path / "out"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    refs = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, feeds)
    for name, ref in zip(("y", "y2"), refs):
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert np.array_equal(got, ref), (name, np.abs(got - ref).max())


@pytest.mark.parametrize("act", [np.uint8, np.int8])
def test_qmatmul_writes_its_dequantized_output(act, tmp_path):
    """An int8 product (kiln.QMatMul, of a Gemm) whose output only a DequantizeLinear on its
    grid reads, directly or through a Reshape, writes that DequantizeLinear's float32 values
    itself: no DequantizeLinear layer is left. Its bytes are numpy's DequantizeLinear of the int8 output
    of the same model with that output also a graph output (which keeps the DequantizeLinear),
    to the bit, and within one output step of onnxruntime running the QDQ model as written."""
    rng = np.random.default_rng(7)
    z = 131 if act is np.uint8 else -5
    w = rng.integers(-127, 128, [48, 40]).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(0.031, np.float32), "xs"),
             numpy_helper.from_array(np.array(z, act), "xz"),
             numpy_helper.from_array(w, "wq"),
             numpy_helper.from_array(np.array(0.0021, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(rng.standard_normal(40).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(0.047, np.float32), "ys"),
             numpy_helper.from_array(np.array(z, act), "yz"),
             numpy_helper.from_array(np.array([2, 5, 40], np.int64), "shape")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             helper.make_node("Gemm", ["xd", "wd", "b"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "ys", "yz"], ["hq"]),
             helper.make_node("Reshape", ["hq", "shape"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "ys", "yz"], ["y"])]

    def save(name, outs):
        g = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 48])],
                              outs, inits)
        path = tmp_path / f"{name}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
        return path

    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 40])
    folded = save("folded", [y_info])
    kept = save("kept", [y_info, helper.make_tensor_value_info(
        "hq", TensorProto.UINT8 if act is np.uint8 else TensorProto.INT8, [10, 40])])
    x = (rng.standard_normal([10, 48]) * 2).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for path in (folded, kept):
        plan = str(tmp_path / f"{path.stem}.plan")
        kiln("build", str(path), "-o", plan)
        ops = [l["op"] for l in json.loads(kiln("inspect", plan, "--json")[1])["layers"]]
        assert "QMatMul" in ops, ops
        assert ("DequantizeLinear" in ops) == (path is kept), ops
        out = tmp_path / f"out_{path.stem}"
        kiln("run", plan, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out))
        outs[path.stem] = {n: np.load(out / f"{n}.npy") for n in ("y", "hq") if
                           (out / f"{n}.npy").exists()}
    q = outs["kept"]["hq"]
    want = ((q.astype(np.float32) - np.float32(z)) * np.float32(0.047)).reshape(2, 5, 40)
    assert np.array_equal(outs["kept"]["y"], want)
    assert np.array_equal(outs["folded"]["y"], want), np.abs(outs["folded"]["y"] - want).max()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(str(folded), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert np.abs(outs["folded"]["y"] - ref).max() <= 0.047 + 1e-6


@pytest.mark.parametrize("act", [np.uint8, np.int8])
def test_float_ops_ending_in_quantize_match_onnxruntime(act, tmp_path):
    """Float ops whose result only a QuantizeLinear reads (a bias Add, an Erf after a Div) run
    as one fused program that stores QuantizeLinear's bytes: no QuantizeLinear layer is left
    for them, while one reading a graph input alone stays. Halfway quotients round to even and
    values past the range saturate; onnxruntime with graph optimizations off gives the same
    bytes."""
    z = 128 if act is np.uint8 else -3
    zt = TensorProto.UINT8 if act is np.uint8 else TensorProto.INT8
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array((np.arange(64, dtype=np.float32) - 32) / 16, "b"),
             numpy_helper.from_array(np.array(0.7, np.float32), "c"),
             numpy_helper.from_array(np.array(0.125, np.float32), "s"),
             numpy_helper.from_array(np.array(0.0113, np.float32), "s2"),
             numpy_helper.from_array(np.array(z, act), "z")]
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]),
             helper.make_node("QuantizeLinear", ["a", "s", "z"], ["y1"]),
             helper.make_node("Div", ["x", "c"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("QuantizeLinear", ["e", "s2", "z"], ["y2"]),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y3"])]
    g = helper.make_graph(nodes, "q_store",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info(n, zt, [8, 64])
                           for n in ("y1", "y2", "y3")], inits)
    path = tmp_path / "q_store.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    # Multiples of 1/32: so are the sums with b, and a quarter of a / 0.125 are halves; the last
    # rows pass the range on both sides.
    x = np.concatenate([(np.arange(384, dtype=np.float32) - 192) / 32,
                        rng.standard_normal(128).astype(np.float32) * 40]).reshape(8, 64)
    np.save(tmp_path / "x.npy", x)
    plan = str(tmp_path / "q.plan")
    kiln("build", str(path), "-o", plan)
    ops = [l["op"] for l in json.loads(kiln("inspect", plan, "--json")[1])["layers"]]
    assert sorted(ops) == ["FusedElementwise", "FusedElementwise", "QuantizeLinear"], ops
    kiln("run", plan, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
         str(tmp_path / "out"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    refs = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    for name, ref in zip(("y1", "y2", "y3"), refs):
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert got.dtype == ref.dtype and np.array_equal(got, ref), (
            name, np.abs(got.astype(np.int32) - ref.astype(np.int32)).max())
