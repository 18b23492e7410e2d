"""kiln compare --layers against onnxruntime: the target keeps its fused plan, every layer
output it still has is compared with the reference tensor of that name, and a planted error
is named at the layer that holds it."""

import json
import os
import xml.etree.ElementTree as ET

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tools_helpers import MODELS, kiln

MODEL = os.path.join(MODELS, "mobilenetv2_mini", "model.onnx")


def ort_all_tensors(path, feeds):
    """Every node output of the model, by onnxruntime (the unfused fp32 reference)."""
    import onnxruntime as ort
    m = onnx.load(path)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def layers_json(*args):
    proc = kiln("compare", *args, "--layers", "--json", check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout), proc.returncode


def plan_layers(model, *args):
    proc = kiln("bench", model, *args, "--profile", "--json", "--iterations", "1", "--warmup", "0")
    return [layer["name"] for layer in json.loads(proc.stdout)["layers"]]


def test_layers_match_onnxruntime_and_keep_the_fusion(tmp_path):
    x = np.random.RandomState(3).rand(1, 3, 64, 64).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ref = ort_all_tensors(MODEL, {"input": x})
    np.savez(tmp_path / "ref.npz", **ref)
    out, rc = layers_json(str(tmp_path / "ref.npz"), MODEL, "--input", f"input={tmp_path}/x.npy",
                          "--rtol", "1e-3", "--atol", "1e-3")
    # The target is the plan as built: the same layers, in the same order, as without --layers.
    assert [layer["name"] for layer in out["layers"]] == plan_layers(MODEL, "--shapes",
                                                                     "input:1x3x64x64")
    onnx_nodes = {n.name for n in onnx.load(MODEL).graph.node}
    fused = [layer for layer in out["layers"] if len(layer["onnx_nodes"]) > 1]
    assert len(fused) >= 10 and len(out["layers"]) < len(onnx_nodes)
    for layer in out["layers"]:
        assert set(layer["onnx_nodes"]) <= onnx_nodes
        assert layer["pass"], layer
        assert layer["max_abs"] < 1e-3
    assert out["first_failing_layer"] is None and out["pass"] and rc == 0
    # kiln's own unfused reference agrees with onnxruntime's layer by layer.
    own, _ = layers_json(MODEL, MODEL, "--input", f"input={tmp_path}/x.npy", "--rtol", "1e-3",
                         "--atol", "1e-3")
    assert [layer["name"] for layer in own["layers"]] == [layer["name"] for layer in out["layers"]]
    for a, b in zip(own["layers"], out["layers"]):
        assert abs(a["max_abs"] - b["max_abs"]) < 1e-4


def test_planted_weight_error_is_named_at_its_layer(tmp_path):
    m = onnx.load(MODEL)
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    victim = convs[len(convs) // 2]
    inits = {i.name: i for i in m.graph.initializer}
    w = numpy_helper.to_array(inits[victim.input[1]]).copy()
    w.flat[0] += 0.5
    inits[victim.input[1]].CopyFrom(numpy_helper.from_array(w, victim.input[1]))
    bad = str(tmp_path / "bad.onnx")
    onnx.save(m, bad)
    x = np.random.RandomState(4).rand(1, 3, 64, 64).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out, _ = layers_json(MODEL, bad, "--input", f"input={tmp_path}/x.npy", "--rtol", "1e-3",
                         "--atol", "1e-3", "--report", str(tmp_path / "rep"))
    first = next(layer for layer in out["layers"] if layer["name"] == out["first_failing_layer"])
    assert victim.name in first["onnx_nodes"]
    index = out["layers"].index(first)
    assert all(layer["pass"] for layer in out["layers"][:index])
    # The error kiln reports for that layer is the error onnxruntime sees on its tensor.
    ref = ort_all_tensors(MODEL, {"input": x})
    tgt = ort_all_tensors(bad, {"input": x})
    name = first["outputs"][0]
    want = float(np.max(np.abs(tgt[name] - ref[name])))
    assert abs(first["max_abs"] - want) <= 1e-3 * want + 1e-4
    svg = ET.parse(tmp_path / "rep" / "layers.svg").getroot()
    rects = [e for e in svg.iter() if e.tag.endswith("rect")]
    assert len(rects) == len(out["layers"])
    assert sum(r.get("fill") == "#c83c3c" for r in rects) == sum(
        not layer["pass"] for layer in out["layers"])


def planted_fp16_model(path):
    """x -> MatMul+Relu -> MatMul whose result (~1e5) overflows fp16 -> *1e-5 -> Tanh -> MatMul."""
    rs = np.random.RandomState(1)
    inits = [numpy_helper.from_array(rs.rand(16, 16).astype(np.float32), "W1"),
             numpy_helper.from_array((3e3 * (0.5 + rs.rand(16, 16))).astype(np.float32), "W2"),
             numpy_helper.from_array(rs.randn(16, 8).astype(np.float32), "W3"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "s")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "W2"], ["big"], name="mm_big"),
             helper.make_node("Mul", ["big", "s"], ["small"], name="scale"),
             helper.make_node("Tanh", ["small"], ["t"], name="tanh"),
             helper.make_node("MatMul", ["t", "W3"], ["y"], name="mm3")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [4, 16])],
                          [helper.make_tensor_value_info("y", 1, [4, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def test_planted_fp16_overflow_is_the_first_failing_layer(tmp_path):
    model = planted_fp16_model(str(tmp_path / "p.onnx"))
    # fp16 storage after every layer: each layer output goes through Cast(fp16) and back.
    casts = []
    for t in ["r1", "big", "t"]:
        casts += ["--insert-after", t, "--op", "Cast", "--attr", "to=10",
                  "--insert-after", t, "--op", "Cast", "--attr", "to=1"]
    half = str(tmp_path / "half.onnx")
    kiln("edit", model, "-o", half, *casts)
    out, rc = layers_json(model, half, "--rtol", "1e-2", "--atol", "1e-2")
    first = next(layer for layer in out["layers"] if layer["name"] == out["first_failing_layer"])
    assert first["outputs"] == ["big"] and first["max_abs"] is None  # inf
    assert rc == 1 and not out["pass"]


def test_layers_needs_a_target_that_runs(tmp_path):
    np.savez(tmp_path / "a.npz", y=np.zeros(3, np.float32))
    proc = kiln("compare", MODEL, f"outputs:{tmp_path}/a.npz", "--layers", check=False)
    assert proc.returncode == 2 and "--layers" in proc.stderr
