"""Sequences and optionals through `kiln run` (folders of .npy, `none`), from .onnx and through a
plan, checked against onnxruntime; bad input gets a one-line error."""

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from tools_helpers import kiln

F = TensorProto.FLOAT


def seq_info(name, elem=F):
    return helper.make_tensor_sequence_value_info(name, elem, None)


def save(tmp_path, nodes, inputs, outputs, name="m.onnx"):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def seq_dir(path, arrays):
    os.mkdir(path)
    for i, a in enumerate(arrays):
        np.save(os.path.join(path, f"{i}.npy"), a)
    return str(path)


def run(model, out_dir, *inputs, check=True):
    args = ["run", model, "--output-dir", out_dir]
    for name, path in inputs:
        args += ["--input", f"{name}={path}"]
    return kiln(*args, check=check)


def read_out(out_dir, name):
    with open(os.path.join(out_dir, "outputs.json")) as f:
        entry = json.load(f)[name]
    if entry is None:
        return None
    path = os.path.join(out_dir, entry)
    if os.path.isdir(path):
        n = len([f for f in os.listdir(path) if f.endswith(".npy")])
        return [np.load(os.path.join(path, f"{i}.npy")) for i in range(n)]
    return np.load(path)


def edit_model(tmp_path):
    """A sequence in; Insert at a position, Erase the first, split x and concat everything."""
    nodes = [helper.make_node("SequenceInsert", ["s", "x", "pos"], ["s1"]),
             helper.make_node("SequenceErase", ["s1"], ["s2"]),
             helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=1),
             helper.make_node("ConcatFromSequence", ["parts"], ["joined"], axis=1),
             helper.make_node("SequenceLength", ["s2"], ["n"]),
             helper.make_node("SequenceAt", ["s2", "pos"], ["at"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["stacked"], axis=0, new_axis=1)]
    ins = [seq_info("s"), helper.make_tensor_value_info("x", F, [2, 3]),
           helper.make_tensor_value_info("pos", TensorProto.INT64, [])]
    outs = [seq_info("s2"), helper.make_tensor_value_info("joined", F, None),
            helper.make_tensor_value_info("n", TensorProto.INT64, None),
            helper.make_tensor_value_info("at", F, None),
            helper.make_tensor_value_info("stacked", F, None)]
    return save(tmp_path, nodes, ins, outs)


def test_sequence_ops_match_onnxruntime_from_onnx_and_plan(tmp_path):
    import onnxruntime as ort
    model = edit_model(tmp_path)
    rs = np.random.RandomState(0)
    s = [rs.randn(2, 3).astype(np.float32) for _ in range(3)]
    x = rs.randn(2, 3).astype(np.float32)
    pos = np.array(1, np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "pos.npy", pos)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"s": s, "x": x, "pos": pos})))
    feeds = [("s", seq_dir(tmp_path / "s", s)), ("x", tmp_path / "x.npy"),
             ("pos", tmp_path / "pos.npy")]
    plan = str(tmp_path / "m.plan")
    kiln("build", model, "-o", plan, "--shapes", "s:1,192,100000")
    for i, m in enumerate([model, plan]):
        out = str(tmp_path / f"out{i}")
        run(m, out, *feeds)
        got = read_out(out, "s2")
        assert len(got) == len(ref["s2"]) == 3
        for a, b in zip(got, ref["s2"]):
            np.testing.assert_array_equal(a, b)
        for name in ("joined", "n", "at", "stacked"):
            np.testing.assert_array_equal(read_out(out, name), ref[name])


def test_optional_none_and_present(tmp_path):
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F, [2])))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("Identity", ["o"], ["o2"])]
    outs = [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
            helper.make_value_info("o2", helper.make_optional_type_proto(
                helper.make_tensor_type_proto(F, [2])))]
    model = save(tmp_path, nodes, [opt], outs)
    run(model, str(tmp_path / "a"), ("o", "none"))
    assert read_out(str(tmp_path / "a"), "has") == np.array(False)
    assert read_out(str(tmp_path / "a"), "o2") is None
    x = np.array([1.5, -2.0], np.float32)
    np.save(tmp_path / "x.npy", x)
    run(model, str(tmp_path / "b"), ("o", tmp_path / "x.npy"))
    assert read_out(str(tmp_path / "b"), "has") == np.array(True)
    np.testing.assert_array_equal(read_out(str(tmp_path / "b"), "o2"), x)


def one_line_error(proc, *words):
    assert proc.returncode not in (0,) and proc.returncode < 128, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_position_out_of_range_is_an_error(tmp_path):
    model = edit_model(tmp_path)
    s = [np.zeros((2, 3), np.float32)] * 2
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    np.save(tmp_path / "pos.npy", np.array(7, np.int64))
    proc = run(model, str(tmp_path / "o"), ("s", seq_dir(tmp_path / "s", s)),
               ("x", tmp_path / "x.npy"), ("pos", tmp_path / "pos.npy"), check=False)
    one_line_error(proc, "position 7 is out of range")


def test_mismatched_dtypes_are_errors(tmp_path):
    nodes = [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    model = save(tmp_path, nodes, [seq_info("s")], [helper.make_tensor_value_info("y", F, None)])
    mixed = seq_dir(tmp_path / "mixed", [np.zeros(2, np.float32), np.zeros(2, np.int64)])
    one_line_error(run(model, str(tmp_path / "o"), ("s", mixed), check=False), "one dtype")
    shapes = seq_dir(tmp_path / "shapes", [np.zeros((2, 2), np.float32), np.zeros(2, np.float32)])
    one_line_error(run(model, str(tmp_path / "o"), ("s", shapes), check=False), "element 1")
    empty = seq_dir(tmp_path / "empty", [])
    one_line_error(run(model, str(tmp_path / "o"), ("s", empty), check=False), "empty sequence")
    nodes = [helper.make_node("SequenceInsert", ["s", "t"], ["y"])]
    model = save(tmp_path, nodes, [seq_info("s"), helper.make_tensor_value_info(
        "t", TensorProto.INT64, [2])], [seq_info("y")], name="ins.onnx")
    np.save(tmp_path / "t.npy", np.zeros(2, np.int64))
    proc = run(model, str(tmp_path / "o"), ("s", seq_dir(tmp_path / "f", [np.zeros(2, np.float32)])),
               ("t", tmp_path / "t.npy"), check=False)
    one_line_error(proc, "int64", "float32")


def test_python_lists_and_none(tmp_path):
    import kiln as pk
    model = edit_model(tmp_path)
    rs = np.random.RandomState(1)
    s = [rs.randn(2, 3).astype(np.float32) for _ in range(2)]
    x = rs.randn(2, 3).astype(np.float32)
    out = pk.run(model, {"s": s, "x": x, "pos": np.array(0, np.int64)})
    assert isinstance(out["s2"], list) and len(out["s2"]) == 2
    np.testing.assert_array_equal(out["s2"][0], x)
    np.testing.assert_array_equal(out["s2"][1], s[0])  # x inserted first, the last erased
    np.testing.assert_array_equal(out["stacked"], np.stack([x, s[0]]))
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F, [2])))
    path = save(tmp_path, [helper.make_node("OptionalHasElement", ["o"], ["has"]),
                           helper.make_node("Identity", ["o"], ["o2"])], [opt],
                [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                 helper.make_value_info("o2", helper.make_optional_type_proto(
                     helper.make_tensor_type_proto(F, [2])))], name="opt.onnx")
    out = pk.run(path, {"o": None})
    assert not out["has"] and out["o2"] is None
