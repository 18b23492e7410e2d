"""Control flow: If, Loop and Scan models written with onnx's helpers, run by kiln from .onnx
and through a plan, against onnxruntime.

- If: the branch is chosen by a scalar input; the branches read enclosing-scope values and
  make outputs of different shapes (so the result's shape is known only at run time).
- Loop: a counted loop with a loop-carried state, a scan output, and a nested If in its body
  that reads a value two scopes up.
- Scan: a running sum over the sequence axis with a carried state, reversed and non-zero
  axes.
- Scan-8 (opset 8): a leading batch axis, per-entry sequence_lens, a reversed scan input.
- An If on a constant condition is folded at build: its branch inlined, the other dropped.
"""

import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def kiln(*args):
    proc = subprocess.run([KILN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return proc


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return m


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def if_model():
    """y = cond ? x * 2 (shape of x) : concat(x, w) along axis 0 (one row more)."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "w")
    two = numpy_helper.from_array(np.array(2, np.float32), "two")
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [vi("t", F, None)], [two])
    else_g = helper.make_graph([helper.make_node("Concat", ["x", "w"], ["e"], axis=0)], "else",
                               [], [vi("e", F, None)])
    nodes = [helper.make_node("Relu", ["x0"], ["x"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return model(nodes, [vi("x0", F, [3, 4]), vi("c", B, [])], [vi("y", F, None)], [w])


def loop_model():
    """A counted loop: state s += x * i each trip (s carried), scan output s at each trip, and in
    the body an If (on i being even) that reads x from two scopes up."""
    inner_then = helper.make_graph([helper.make_node("Neg", ["x"], ["nt"])], "ithen", [],
                                   [vi("nt", F, None)])
    inner_else = helper.make_graph([helper.make_node("Identity", ["x"], ["ne"])], "ielse", [],
                                   [vi("ne", F, None)])
    two = numpy_helper.from_array(np.array(2, np.int64), "two_i")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero_i")
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mod", ["i", "two_i"], ["r"]),
         helper.make_node("Equal", ["r", "zero_i"], ["even"]),
         helper.make_node("If", ["even"], ["sx"], then_branch=inner_then, else_branch=inner_else),
         helper.make_node("Mul", ["sx", "fi"], ["d"]),
         helper.make_node("Add", ["s_in", "d"], ["s_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("s_in", F, [2, 3])],
        [vi("cond_out", B, []), vi("s_out", F, [2, 3]), vi("scan", F, [2, 3])], [two, zero])
    nodes = [helper.make_node("Loop", ["M", "", "s0"], ["s_final", "trace"], body=body)]
    return model(nodes, [vi("M", I64, []), vi("s0", F, [2, 3]), vi("x", F, [2, 3])],
                 [vi("s_final", F, [2, 3]), vi("trace", F, None)])


def while_model():
    """A loop ended by its condition: doubles v until its sum passes a limit."""
    limit = numpy_helper.from_array(np.array(100, np.float32), "limit")
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "v_in"], ["v_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, None)],
        [vi("cond_out", B, []), vi("v_out", F, None)], [limit])
    nodes = [helper.make_node("Loop", ["", "c", "v0"], ["v"], body=body)]
    return model(nodes, [vi("c", B, []), vi("v0", F, [4])], [vi("v", F, [4])])


def scan_model():
    """Running sums: forward over axis 1 of x (state carried), and a reversed scan output
    stacked along axis 1, plus an enclosing-scope bias."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "xt"], ["acc_out"]),
         helper.make_node("Add", ["acc_out", "bias"], ["yt"])],
        "body", [vi("acc_in", F, [2]), vi("xt", F, [2])],
        [vi("acc_out", F, [2]), vi("yt", F, [2])])
    nodes = [helper.make_node("Scan", ["acc0", "x"], ["acc", "y"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_output_axes=[1],
                              scan_output_directions=[1])]
    return model(nodes, [vi("acc0", F, [2]), vi("x", F, [2, 5]), vi("bias", F, [2])],
                 [vi("acc", F, [2]), vi("y", F, [2, 5])])


def scan8_model(with_lens):
    """Scan-8 over x [batch 3, sequence 4, 2]: a running sum carried per batch entry (acc0 [3, 2])
    and the sums as a scan output; the second scan input is read reversed. With sequence_lens,
    each entry stops at its own length (a scan output's later steps are 0)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "xt"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "rt"], ["yt"])],
        "body", [vi("acc_in", F, [2]), vi("xt", F, [2]), vi("rt", F, [2])],
        [vi("acc_out", F, [2]), vi("yt", F, [2])])
    lens = "lens" if with_lens else ""
    nodes = [helper.make_node("Scan", [lens, "acc0", "x", "r"], ["acc", "y"], body=body,
                              num_scan_inputs=2, directions=[0, 1])]
    inputs = [vi("acc0", F, [3, 2]), vi("x", F, [3, 4, 2]), vi("r", F, [3, 4, 2])]
    if with_lens:
        inputs.insert(0, vi("lens", I64, [3]))
    return model(nodes, inputs, [vi("acc", F, [3, 2]), vi("y", F, [3, 4, 2])], opset=8)


def run_kiln(tmp_path, m, feeds, form, shapes=None):
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    target = path
    if form == "plan":
        target = tmp_path / "model.plan"
        extra = ["--shapes", shapes] if shapes else []
        kiln("build", path, "-o", target, "--quiet", *extra)
    args = []
    for name, arr in feeds.items():
        np.save(tmp_path / f"{name}.npy", arr)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    out = tmp_path / "out"
    kiln("run", target, *args, "--output-dir", out)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, want in zip(names, sess.run(None, feeds)):
        got = np.load(out / f"{name}.npy")
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


FORMS = ["onnx", "plan"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("cond", [True, False])
def test_if_branch_by_scalar_input(tmp_path, form, cond):
    x = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    run_kiln(tmp_path, if_model(), {"x0": x, "c": np.array(cond)}, form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("trips", [0, 1, 5])
def test_counted_loop_with_state_and_scan_output(tmp_path, form, trips):
    rng = np.random.RandomState(1)
    feeds = {"M": np.array(trips, np.int64), "s0": rng.randn(2, 3).astype(np.float32),
             "x": rng.randn(2, 3).astype(np.float32)}
    if trips == 0:  # onnxruntime's empty scan output has the body's declared shape
        m = loop_model()
        path = tmp_path / "m.onnx"
        onnx.save(m, path)
        got = ort.InferenceSession(str(path)).run(None, feeds)[1]
        assert got.shape == (0, 2, 3)
    run_kiln(tmp_path, loop_model(), feeds, form)


@pytest.mark.parametrize("form", FORMS)
def test_loop_ended_by_condition(tmp_path, form):
    feeds = {"c": np.array(True), "v0": np.array([1, 2, 0.5, 0.25], np.float32)}
    run_kiln(tmp_path, while_model(), feeds, form)


@pytest.mark.parametrize("form", FORMS)
def test_scan_axes_and_directions(tmp_path, form):
    rng = np.random.RandomState(2)
    feeds = {"acc0": rng.randn(2).astype(np.float32), "x": rng.randn(2, 5).astype(np.float32),
             "bias": rng.randn(2).astype(np.float32)}
    run_kiln(tmp_path, scan_model(), feeds, form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("with_lens", [False, True])
def test_scan8_batch_and_sequence_lens(tmp_path, form, with_lens):
    rng = np.random.RandomState(5)
    feeds = {"acc0": rng.randn(3, 2).astype(np.float32), "x": rng.randn(3, 4, 2).astype(np.float32),
             "r": rng.randn(3, 4, 2).astype(np.float32)}
    if with_lens:
        feeds = {"lens": np.array([4, 2, 1], np.int64), **feeds}
    run_kiln(tmp_path, scan8_model(with_lens), feeds, form)


def constant_if_model(cond):
    """An If on a constant condition, its branch reading x from the enclosing scope."""
    c = numpy_helper.from_array(np.array(cond), "c")
    one = numpy_helper.from_array(np.array(1, np.float32), "one")
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"])], "then", [],
                               [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                               [vi("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], [c, one])


@pytest.mark.parametrize("cond", [True, False])
def test_constant_if_is_inlined_at_build(tmp_path, cond):
    x = np.random.RandomState(3).randn(2, 3).astype(np.float32)
    run_kiln(tmp_path, constant_if_model(cond), {"x": x}, "plan")
    out = kiln("inspect", tmp_path / "model.plan").stdout.decode()
    assert ":If" not in out and "branch" not in out, out
    assert ("cpu:Add" in out) == cond and ("cpu:Sub" in out) == (not cond), out


def test_inspect_shows_bodies_indented(tmp_path):
    onnx.save(loop_model(), tmp_path / "loop.onnx")
    out = kiln("inspect", tmp_path / "loop.onnx").stdout.decode().splitlines()
    loop = next(i for i, line in enumerate(out) if "cpu:Loop" in line)
    assert out[loop + 1].strip().startswith("body: 8 nodes")
    inner = next(i for i, line in enumerate(out) if line.strip().startswith("then_branch"))
    indent = lambda s: len(s) - len(s.lstrip())
    assert indent(out[inner]) > indent(out[loop + 1]) > indent(out[loop])
