"""bench/layer_compare.py: kiln's per-layer profile beside onnxruntime's, matched node for node
(by name, by the tensor an NCHWc conv writes, by the outputs of a fused node in the graph
onnxruntime ran)."""

import os
import re
import subprocess
import sys

from tools_helpers import KILN, MODELS, REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import layer_compare  # noqa: E402


def test_owner_of_onnxruntime_names():
    nodes = {"/stem/stem.0/Conv", "/stem/stem.2/Relu", "conv_3"}
    producers = {"/stem/stem.2/Relu_output_0": "/stem/stem.2/Relu", "conv_3_out": "conv_3"}
    own = lambda name: layer_compare.ort_owner(name, nodes, producers)  # noqa: E731
    assert own("/stem/stem.0/Conv") == "/stem/stem.0/Conv"
    # NCHWc convs are named for the tensor they write (torch's exporter names start with "/")
    assert own("/stem/stem.2/Relu_output_0_nchwc") == "/stem/stem.2/Relu"
    assert own("conv_3_nchwc") == "conv_3"
    assert own("conv_3_token_12") == "conv_3"
    assert own("ReorderOutput_token_5") is None
    # fused nodes named for their kind: the producer of their output in the model
    producers["/ln/LayerNormalization_output_0"] = "/ln/LayerNormalization"
    outputs = {"SkipLayerNormalization_token_7": ["/ln/LayerNormalization_output_0", "extra"],
               "BiasGelu": ["/ffn/Mul_1_output_0"]}
    assert layer_compare.ort_owner("SkipLayerNormalization_token_7", nodes, producers,
                                   outputs) == "/ln/LayerNormalization"
    assert layer_compare.ort_owner("BiasGelu", nodes, producers, outputs) is None


def test_geometry_of_convs_and_products():
    from onnx import helper

    shapes = {"x": [1, 32, 56, 56], "w": [64, 32, 3, 3], "y": [1, 64, 28, 28],
              "dw": [32, 1, 5, 5], "z": [1, 32, 56, 56], "a": [8, 196, 1024], "b": [1024, 256],
              "c": [8, 196, 256], "g": [1, 768], "gw": [3072, 768], "go": [1, 3072]}
    describe = layer_compare.describe_node
    conv = helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
    assert describe(conv, shapes) == "3x3 s2 32->64 56x56->28x28"
    dw = helper.make_node("Conv", ["x", "dw"], ["z"], group=32, pads=[2, 2, 2, 2])
    assert describe(dw, shapes) == "5x5 32->32 g32 56x56->56x56"
    assert describe(helper.make_node("MatMul", ["a", "b"], ["c"]), shapes) == \
        "8 196x1024 @ 1024x256"
    assert describe(helper.make_node("Gemm", ["g", "gw"], ["go"], transB=1), shapes) == \
        "1x768 @ 768x3072"
    # unknown shapes or other ops: nothing rather than a guess
    assert describe(helper.make_node("Conv", ["x", "unknown"], ["y"]), shapes) == ""
    assert describe(helper.make_node("Relu", ["x"], ["z"]), shapes) == ""
    assert describe(helper.make_node("Constant", [], ["k"]), shapes) == ""


def compare(model):
    """layer_compare's rows (kiln ms, ORT ms, gap, layer, op, ORT nodes) and its whole output."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "layer_compare.py"),
                           os.path.join(MODELS, model, "model.onnx"), "--kiln", KILN, "--rounds",
                           "1", "--iterations", "3", "--top", "500"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [re.match(r"\s*([\d.]+)\s+(\S+)\s+([-\d.]+)\s+(\S+) \((\w+), .*\) <- (.*)$", line)
            for line in proc.stdout.splitlines()]
    return [r for r in rows if r], proc


def test_every_conv_layer_has_its_onnxruntime_nodes():
    rows, proc = compare("resnet_mini")
    # the whole model timed without the profilers, its ratio beside it
    whole = re.search(r"whole model median, no profilers: kiln ([\d.]+) ms, onnxruntime "
                      r"([\d.]+) ms \(ORT / kiln ([\d.]+)\); under the profilers", proc.stdout)
    assert whole, proc.stdout
    k, o, ratio = (float(g) for g in whole.groups())
    assert k > 0 and o > 0 and abs(ratio - o / k) < 0.01 + 0.01 * ratio
    convs = [r for r in rows if r.group(5) == "FusedConv"]
    assert len(convs) >= 10
    for r in convs:
        assert r.group(6) != "-", f"{r.group(4)} matched no onnxruntime node"
        assert r.group(2) != "nan"
    # each conv row gives the conv's geometry (kernel, stride, channels, map sizes)
    geometries = [re.search(r"\(FusedConv, \S+, (\d+x\d+( s\d+)? \d+->\d+ \d+x\d+->\d+x\d+)\)",
                            r.group(0)) for r in convs]
    assert all(geometries), [r.group(0) for r, g in zip(convs, geometries) if not g]
    assert any(" s2 " in g.group(1) for g in geometries)
    assert "7x7 s2 3->8 64x64->32x32" in [g.group(1) for g in geometries]  # the stem at 64x64
    # what onnxruntime ran outside kiln's layers is its layout reorders and reshapes
    rest = re.search(r"onnxruntime nodes with no kiln layer: [\d.]+ ms, largest (.*)", proc.stdout)
    if rest:
        assert "Conv" not in rest.group(1) and "_nchwc" not in rest.group(1)


def test_transformer_layers_have_their_onnxruntime_nodes():
    """onnxruntime's fused nodes (SkipLayerNormalization, BiasGelu, MatMul fusions) are named for
    their kind; they are found by their outputs in the graph onnxruntime ran."""
    rows, proc = compare("transformer_encoder")
    for r in rows:
        if r.group(5) in ("FusedMatMul", "LayerNormalization"):
            assert r.group(6) != "-", f"{r.group(4)} matched no onnxruntime node"
    assert sum(r.group(5) in ("FusedMatMul", "LayerNormalization") for r in rows) >= 8
    claimed = ",".join(r.group(6) for r in rows)
    assert "MatmulTransposeFusion" in claimed  # Q.K^T, named for the fusions that made it
    rest = re.search(r"onnxruntime nodes with no kiln layer: [\d.]+ ms, largest (.*)", proc.stdout)
    assert rest is None or "MatMul" not in rest.group(1)


def test_bad_input_is_one_line_and_exit_1(tmp_path):
    """A missing model, a file that is no ONNX model and a missing kiln binary each end with one
    line naming the problem, not a traceback."""
    script = os.path.join(REPO, "bench", "layer_compare.py")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x0a\xff\xff\xff")
    good = os.path.join(MODELS, "resnet_mini", "model.onnx")
    cases = [([str(tmp_path / "missing.onnx"), "--kiln", KILN], "no such file"),
             ([str(junk), "--kiln", KILN], "not an ONNX model"),
             ([good, "--kiln", str(tmp_path / "no-kiln")], "kiln binary not found")]
    for argv, words in cases:
        proc = subprocess.run([sys.executable, script] + argv, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 1, (argv, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
