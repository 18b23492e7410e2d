"""kiln bench --profile: per-layer times of the optimized plan, mapped back to ONNX nodes."""

import json
import os

import onnx

from tools_helpers import MODELS, kiln


def test_profile_layers_cover_the_onnx_graph():
    model = os.path.join(MODELS, "resnet_mini", "model.onnx")
    r = kiln("bench", model, "--shapes", "input:1x3x32x32", "--iterations", "5", "--warmup", "1",
             "--profile", "--json")
    out = json.loads(r.stdout)
    layers = out["layers"]
    onnx_nodes = [n.name for n in onnx.load(model).graph.node]
    assert 0 < len(layers) < len(onnx_nodes)  # fusion kept: fewer layers than ONNX nodes
    covered = [n for l in layers for n in l["onnx_nodes"]]
    assert len(covered) == len(set(covered))  # each ONNX node in at most one layer
    assert set(covered) <= set(onnx_nodes)
    stem = layers[0]
    assert stem["op"] == "FusedConv" and stem["kernel"]  # Conv + BatchNormalization + Relu
    assert [n.split("/")[-1] for n in stem["onnx_nodes"]] == ["Conv", "BatchNormalization", "Relu"]
    assert abs(sum(l["share"] for l in layers) - 1.0) < 1e-3
    assert all(l["median_ms"] >= 0 for l in layers) and out["latency_ms"]["median"] > 0


def test_profile_text_lists_slowest():
    model = os.path.join(MODELS, "mobilenetv2_mini", "model.onnx")
    r = kiln("bench", model, "--shapes", "input:1x3x64x64", "--iterations", "3", "--warmup", "0",
             "--profile")
    assert "per-layer median ms" in r.stdout and "slowest layers:" in r.stdout
