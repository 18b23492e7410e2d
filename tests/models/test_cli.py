"""The CLI's contract: what build, run, bench and inspect print and write on success.

The kiln binary is $KILN, or build/bin/kiln under the repository root.
"""

import json
import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")

with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = {m["name"]: m for m in json.load(_f)["models"]}


def kiln(*args, check=True):
    if not os.access(KILN, os.X_OK):
        pytest.fail(f"kiln binary not found at {KILN} (set KILN)")
    proc = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    if check:
        assert proc.returncode == 0, f"kiln {args[0]} failed: {proc.stderr.strip()}"
    return proc


def model_args(name, case=0):
    m = MANIFEST[name]
    shapes = [a for s in m["shapes"] for a in ("--shapes", s)]
    inputs = [a for k, v in m["cases"][case]["inputs"].items()
              for a in ("--input", f"{k}={os.path.join(HERE, v)}")]
    return os.path.join(HERE, m["model"]), shapes, inputs


def outputs(out_dir):
    with open(os.path.join(out_dir, "outputs.json")) as f:
        index = json.load(f)
    return {name: np.load(os.path.join(out_dir, file)) for name, file in index.items()}


def test_build_quiet_prints_nothing(tmp_path):
    model, shapes, _ = model_args("resnet_mini")
    proc = kiln("build", model, "-o", tmp_path / "m.plan", "--quiet", *shapes)
    assert proc.stdout == "" and proc.stderr == ""
    assert (tmp_path / "m.plan").stat().st_size > 0
    assert sorted(os.listdir(tmp_path)) == ["m.plan"], "temporary files left behind"


def test_build_replaces_existing_plan(tmp_path):
    plan = tmp_path / "m.plan"
    plan.write_bytes(b"old contents")
    model, shapes, _ = model_args("vgg_mini")
    kiln("build", model, "-o", plan, "--quiet", *shapes)
    assert plan.read_bytes() != b"old contents"
    kiln("inspect", plan)


def odd_names_model(path):
    """Outputs whose names are not file-safe."""
    nodes = [helper.make_node("Relu", ["in:0"], ["out/relu:0"]),
             helper.make_node("Neg", ["in:0"], ["../neg output"])]
    graph = helper.make_graph(
        nodes, "odd", [helper.make_tensor_value_info("in:0", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("out/relu:0", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("../neg output", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path.write_bytes(model.SerializeToString())


def test_run_writes_file_safe_names(tmp_path):
    odd_names_model(tmp_path / "odd.onnx")
    x = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    out.mkdir()
    kiln("run", tmp_path / "odd.onnx", "--input", f"in:0={tmp_path / 'x.npy'}",
         "--output-dir", out)
    with open(out / "outputs.json") as f:
        index = json.load(f)
    assert set(index) == {"out/relu:0", "../neg output"}
    for file in index.values():
        assert "/" not in file and file not in (".", "..") and file.endswith(".npy")
        assert (out / file).is_file()
    assert len(set(index.values())) == 2
    got = outputs(out)
    np.testing.assert_array_equal(got["out/relu:0"], np.maximum(x, 0))
    np.testing.assert_array_equal(got["../neg output"], -x)
    assert sorted(os.listdir(out)) == sorted(list(index.values()) + ["outputs.json"])


def test_tensor_proto_input_matches_npy(tmp_path):
    model, shapes, _ = model_args("squeezenet_mini")
    x = np.load(os.path.join(HERE, MANIFEST["squeezenet_mini"]["cases"][0]["inputs"]["input"]))
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(x, "input").SerializeToString())
    np.save(tmp_path / "x.npy", x)
    results = []
    for ext in ("npy", "pb"):
        out = tmp_path / ext
        out.mkdir()
        kiln("run", model, *shapes, "--input", f"input={tmp_path / ('x.' + ext)}",
             "--output-dir", out)
        results.append(outputs(out)["logits"])
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("name", ["resnet_mini", "transformer_encoder", "lstm_bidir"])
def test_threads_and_repeats_agree(tmp_path, name):
    """The same plan at 1 and 2 threads, and run twice, gives the same answer; repeated runs at
    one thread count are bit-identical."""
    model, shapes, inputs = model_args(name, case=-1)
    plan = tmp_path / "m.plan"
    kiln("build", model, "-o", plan, "--quiet", *shapes)
    runs = []
    for i, threads in enumerate((1, 1, 2)):
        out = tmp_path / f"out{i}"
        out.mkdir()
        kiln("run", plan, *inputs, "--threads", threads, "--output-dir", out)
        runs.append(outputs(out))
    for key in runs[0]:
        np.testing.assert_array_equal(runs[0][key], runs[1][key])
        np.testing.assert_allclose(runs[2][key], runs[0][key], rtol=1e-5, atol=1e-5)


def test_bench_json(tmp_path):
    model, shapes, inputs = model_args("mobilenetv2_mini")
    proc = kiln("bench", model, *shapes, *inputs, "--warmup", 1, "--iterations", 5, "--json")
    report = json.loads(proc.stdout)
    lat = report["latency_ms"]
    for key in ("min", "median", "mean", "p90", "p95", "p99", "max"):
        assert isinstance(lat[key], (int, float)) and lat[key] > 0, key
    assert lat["min"] <= lat["median"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    assert report["throughput_per_s"] > 0


def test_bench_without_inputs(tmp_path):
    """Without --input, bench makes its own data at the profile's opt shapes."""
    model, shapes, _ = model_args("gru_bidir")
    report = json.loads(kiln("bench", model, *shapes, "--iterations", 2, "--json").stdout)
    assert report["latency_ms"]["median"] > 0


def test_inspect_json_and_dot(tmp_path):
    model, shapes, _ = model_args("inception_mini")
    plan = tmp_path / "m.plan"
    kiln("build", model, "-o", plan, "--quiet", *shapes)
    for target in (model, plan):
        dot = tmp_path / "g.dot"
        proc = kiln("inspect", target, "--json", "--dot", dot)
        info = json.loads(proc.stdout)
        assert isinstance(info, dict) and info
        text = json.dumps(info)
        assert "input" in text and "logits" in text
        assert dot.read_text().lstrip().startswith("digraph")
        # each layer names its tensors: the first reads the graph input, the last writes the
        # output, each writes tensors of its own, and each reads one written before it (by the
        # graph's input or an earlier layer; the rest are weights)
        layers = info["layers"]
        assert "input" in layers[0]["inputs"] and layers[-1]["outputs"] == ["logits"]
        written = {"input"}
        for layer in layers:
            assert any(i in written for i in layer["inputs"]), layer
            assert layer["outputs"] and not written & set(layer["outputs"]), layer
            written.update(layer["outputs"])


def plan_and_two_dirs(tmp_path, name):
    """The bundled model `name` built to a plan, with two empty output folders."""
    model, shapes, inputs = model_args(name)
    plan = tmp_path / "m.plan"
    kiln("build", model, "-o", plan, "--quiet", *shapes)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return model, shapes, inputs, plan, a, b


def test_run_model_and_plan_agree(tmp_path):
    """Building in memory and loading a saved plan run the same program."""
    model, shapes, inputs, plan, a, b = plan_and_two_dirs(tmp_path, "densenet_mini")
    kiln("run", model, *shapes, *inputs, "--output-dir", a)
    kiln("run", plan, *inputs, "--output-dir", b)
    np.testing.assert_array_equal(outputs(a)["logits"], outputs(b)["logits"])


def test_build_options_on_a_plan_warn(tmp_path):
    """A plan was built already: build-only options given with one are named in one warning line
    (and the run goes on, the same as without them); options for the run itself warn of
    nothing."""
    model, shapes, inputs, plan, a, b = plan_and_two_dirs(tmp_path, "resnet_mini")
    proc = kiln("run", plan, *inputs, "--output-dir", a, "--threads", "2")
    assert "warning" not in proc.stderr
    proc = kiln("run", plan, *inputs, "--output-dir", b, "--precision", "fp16", "--tactics",
                "timed", "--timing-cache", tmp_path / "c.txt")
    warnings = [ln for ln in proc.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1, proc.stderr
    assert str(plan) in warnings[0] and "--precision, --tactics and --timing-cache" in warnings[0]
    assert not (tmp_path / "c.txt").exists()
    np.testing.assert_array_equal(outputs(a)["logits"], outputs(b)["logits"])
    proc = kiln("bench", plan, "--iterations", "2", "--layer-precision", "*=fp32")
    assert "--layer-precision ignored" in proc.stderr
