"""kiln debug reduce and kiln debug precision: a planted failure is found and isolated, and
the answers are checked with onnx's checker and onnxruntime."""

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tools_helpers import KILN, kiln
from test_compare_layers import planted_fp16_model

CHECK = """
import sys, onnx, onnxruntime as ort
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
sys.exit(1 if any(n.name == "bad" for n in m.graph.node) else 0)
"""


def branchy_model(path):
    """Nine nodes on two outputs; the node named 'bad' is the one made to fail."""
    rs = np.random.RandomState(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Sigmoid", ["b"], ["c"], name="sig"),
             helper.make_node("Mul", ["b", "c"], ["d"], name="bad"),
             helper.make_node("Tanh", ["d"], ["e"], name="tanh"),
             helper.make_node("Add", ["e", "a"], ["f"], name="add"),
             helper.make_node("Exp", ["a"], ["g"], name="exp"),
             helper.make_node("Softmax", ["f"], ["y"], name="softmax"),
             helper.make_node("Neg", ["g"], ["z"], name="neg")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 8])],
                          [helper.make_tensor_value_info("y", 1, [2, 8]),
                           helper.make_tensor_value_info("z", 1, [2, 8])],
                          [numpy_helper.from_array(rs.randn(8, 8).astype(np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    return path


def test_reduce_isolates_the_failing_node(tmp_path):
    model = branchy_model(str(tmp_path / "m.onnx"))
    check = tmp_path / "check.py"
    check.write_text(CHECK)
    out = str(tmp_path / "min.onnx")
    kiln("debug", "reduce", model, "-o", out, "--check", f"{sys.executable} {check} {{}}")
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    assert len(m.graph.node) <= 3 and "bad" in [n.name for n in m.graph.node]
    assert subprocess.run([sys.executable, str(check), out]).returncode == 1
    # The reduced model computes what the original computes on that tensor.
    import onnxruntime as ort
    feeds = {i.name: np.random.RandomState(1).rand(2, 8).astype(np.float32)
             for i in m.graph.input}
    got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert got[0].shape == (2, 8)


def test_reduce_refuses_a_model_that_passes(tmp_path):
    model = branchy_model(str(tmp_path / "m.onnx"))
    out = tmp_path / "min.onnx"
    r = kiln("debug", "reduce", model, "-o", out, "--fails-compare", "--atol", "1e-3",
             check=False)
    assert r.returncode == 2 and "does not fail" in r.stderr and not out.exists()
    r = kiln("debug", "reduce", model, "-o", out, check=False)
    assert r.returncode == 2 and "--check" in r.stderr


def fp16_everywhere_but(model, keep_nodes, path):
    """Every float tensor written by a node not in keep_nodes rounded to fp16 and back: the
    onnxruntime side of the precision check."""
    m = onnx.load(model)
    out_nodes = []
    for n in m.graph.node:
        out_nodes.append(n)
        if n.name in keep_nodes:
            continue
        for i, o in enumerate(list(n.output)):
            n.output[i] = o + "_f32"
            out_nodes.append(helper.make_node("Cast", [o + "_f32"], [o + "_f16"], to=10))
            out_nodes.append(helper.make_node("Cast", [o + "_f16"], [o], to=1))
    del m.graph.node[:]
    m.graph.node.extend(out_nodes)
    onnx.save(m, path)
    return path


def test_precision_keeps_only_the_overflowing_layer(tmp_path):
    model = planted_fp16_model(str(tmp_path / "p.onnx"))
    x = np.random.RandomState(2).rand(4, 16).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    lst = tmp_path / "keep.txt"
    r = kiln("debug", "precision", model, "--precision", "fp16", "--emulate", "-o", lst,
             "--input", f"x={tmp_path}/x.npy", "--rtol", "1e-2", "--atol", "1e-2")
    assert "FAILS" in r.stdout
    assert lst.read_text() == "mm_big=fp32\n"
    # onnxruntime, rounding every tensor but mm_big's to fp16: within tolerance; with
    # mm_big rounded too: not.
    import onnxruntime as ort
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for keep, ok in [({"mm_big"}, True), (set(), False)]:
        path = fp16_everywhere_but(model, keep, str(tmp_path / "h.onnx"))
        got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None,
                                                                                {"x": x})[0]
        assert np.allclose(got, want, rtol=1e-2, atol=1e-2) == ok
    # bf16 keeps fp32's range: nothing has to stay.
    r = kiln("debug", "precision", model, "--precision", "bf16", "--emulate", "-o", lst,
             "--input", f"x={tmp_path}/x.npy", "--rtol", "5e-2", "--atol", "5e-2")
    assert lst.read_text() == ""


CHECK_PRECISION = """
import sys, numpy as np, onnxruntime as ort
sys.path.insert(0, {here!r})
from test_debug import fp16_everywhere_but
keep = {{line.split("=")[0] for line in open(sys.argv[1]) if line.strip()}}
model, x = {model!r}, np.load({x!r})
want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {{"x": x}})[0]
path = fp16_everywhere_but(model, keep, {tmp!r})
got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {{"x": x}})[0]
sys.exit(0 if np.allclose(got, want, rtol=1e-2, atol=1e-2) else 1)
"""


def test_precision_with_an_external_check(tmp_path):
    """--check hands each candidate list to a command: here onnxruntime at fp16 storage."""
    model = planted_fp16_model(str(tmp_path / "p.onnx"))
    np.save(tmp_path / "x.npy", np.random.RandomState(2).rand(4, 16).astype(np.float32))
    script = tmp_path / "check.py"
    script.write_text(CHECK_PRECISION.format(here=os.path.dirname(os.path.abspath(__file__)),
                                             model=model, x=str(tmp_path / "x.npy"),
                                             tmp=str(tmp_path / "c.onnx")))
    lst = tmp_path / "keep.txt"
    kiln("debug", "precision", model, "--precision", "fp16", "-o", lst, "--check",
         f"{sys.executable} {script} {{}}")
    assert lst.read_text() == "mm_big=fp32\n"
    # Judged by real fp16 builds, nothing has to stay: the CPU keeps MatMul in float32 (it
    # lowers element-wise and data-movement layers only), so no layer overflows.
    r = kiln("debug", "precision", model, "--precision", "fp16", "-o", lst,
             "--input", f"x={tmp_path}/x.npy", "--rtol", "1e-2", "--atol", "1e-2")
    assert "within tolerance" in r.stdout and lst.read_text() == ""
    r = kiln("debug", "precision", model, "--precision", "fp16", "-o", lst, "--emulate",
             "--check", "true {}", check=False)
    assert r.returncode != 0 and "not both" in r.stderr
