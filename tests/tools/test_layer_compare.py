"""bench/layer_compare.py: kiln's per-layer profile beside onnxruntime's, matched node for node."""

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


def test_every_conv_layer_has_its_onnxruntime_nodes():
    model = os.path.join(MODELS, "resnet_mini", "model.onnx")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "bench", "layer_compare.py"), model,
                           "--kiln", KILN, "--rounds", "1", "--iterations", "3", "--top", "200"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [re.match(r"\s*([\d.]+)\s+(\S+)\s+([-\d.]+)\s+(\S+) \((\w+), .*\) <- (.*)$", line)
            for line in proc.stdout.splitlines()]
    rows = [r for r in rows if r]
    convs = [r for r in rows if r.group(5) == "FusedConv"]
    assert len(convs) >= 10
    for r in convs:
        assert r.group(6) != "-", f"{r.group(4)} matched no onnxruntime node"
        assert r.group(2) != "nan"
    # what onnxruntime ran outside kiln's layers is its layout reorders and reshapes
    rest = re.search(r"onnxruntime nodes with no kiln layer: [\d.]+ ms, largest (.*)", proc.stdout)
    if rest:
        assert "Conv" not in rest.group(1) and "_nchwc" not in rest.group(1)
