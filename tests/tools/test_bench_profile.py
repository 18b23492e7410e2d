"""kiln bench --profile: per-layer times of the optimized plan, mapped back to ONNX nodes."""

import json
import os
import subprocess

import onnx

from tools_helpers import KILN, MODELS, REPO, kiln


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
    # each layer's output shape: the stem conv's (stride 2) in the table, and after the slowest
    rows = r.stdout.split("(execution order):")[1].splitlines()
    assert rows[1].split()[:2] == ["#", "ms"] and "output" in rows[1]
    assert rows[2].split()[5].startswith("1x") and rows[2].split()[5].endswith("x32x32")
    slowest = r.stdout.split("slowest layers:")[1].splitlines()[1]
    assert slowest.split(" -> ")[-1].strip().startswith("1x")


def test_profile_output_shapes_follow_the_run_shape():
    """Each layer's output shape in --json is the shape at the run's input shape: the same plan
    at two input sizes gives the stem 32x32 then 48x40, the classifier 1x10 then 2x10."""
    model = os.path.join(MODELS, "resnet_mini", "model.onnx")
    seen = []
    for shape in ("1x3x64x64", "2x3x96x80"):
        out = json.loads(kiln("bench", model, "--shapes", f"input:{shape}", "--iterations", "2",
                              "--warmup", "0", "--profile", "--json").stdout)
        layers = out["layers"]
        assert all(isinstance(l["output_shape"], list) for l in layers)
        seen.append((layers[0]["output_shape"], layers[-1]["output_shape"]))
    assert seen == [([1, 8, 32, 32], [1, 10]), ([2, 8, 48, 40], [2, 10])]


def bench_json(*args, env=None):
    proc = subprocess.run([KILN, "bench", *args, "--json"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_device_time_on_a_device_plan_only():
    """A plan on a device backend reports each run's device time by the backend's events
    (testdev's events complete when its worker thread reaches them); a host plan has none."""
    model = os.path.join(MODELS, "resnet_mini", "model.onnx")
    testdev = os.environ.get("KILN_BACKEND_PATH") or os.path.join(REPO, "build", "tests", "lib")
    env = dict(os.environ, KILN_BACKEND_PATH=testdev)
    out = bench_json(model, "--shapes", "input:1x3x32x32", "--iterations", "6", "--warmup", "1",
                     "--backend", "testdev,cpu", env=env)
    dev, host = out["device_ms"], out["latency_ms"]
    assert set(dev) == set(host)
    assert 0 < dev["min"] <= dev["median"] <= dev["p90"] <= dev["max"]
    # the device work is part of what the host waits for in each run
    assert dev["min"] <= host["max"]
    out = bench_json(model, "--shapes", "input:1x3x32x32", "--iterations", "3", "--warmup", "0")
    assert "device_ms" not in out
