"""Sequences and optionals: models written with onnx's helpers, run by `kiln run` from .onnx and
through a plan, against onnxruntime. A sequence graph input or output is a folder of 0.npy,
1.npy, ... (one file per element); an empty optional input is the word `none`, an empty
optional output is null in outputs.json.

- A sequence input of tensors of different shapes: inserted into, erased from, read at a
  negative position, counted, and concatenated (new axis and along an axis).
- SplitToSequence of a tensor input (equal parts and given lengths), a sequence output.
- A Loop that appends to a sequence each trip (a sequence carried through a body).
- An optional input that may be empty, tested with OptionalHasElement and read through If.
- Plans are built without --shapes: a sequence or optional input's size is set by the value
  given at run time, which no user can state as a profile in advance.
- The Python API: lists in and out for sequences, None for an empty optional.
- Bad input: a position out of range, elements of different dtypes, a tensor given where a
  sequence is needed: each a one-line error and a non-zero exit.
"""

import json
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


def kiln(*args, ok=True):
    proc = subprocess.run([KILN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=120)
    if ok:
        assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return proc


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "sequences", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def seq_vi(name, dtype, shape=None):
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(dtype, shape)))


def opt_vi(name, dtype, shape=None):
    return helper.make_value_info(
        name, helper.make_optional_type_proto(helper.make_tensor_type_proto(dtype, shape)))


def const_i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def edit_model():
    """seq (rows of 3 columns, any row count) -> insert x at 1, erase the last, read at -1,
    count, concatenate along axis 0; and x, x stacked on a new axis."""
    nodes = [
        helper.make_node("SequenceInsert", ["seq", "x", "one"], ["s1"]),
        helper.make_node("SequenceErase", ["s1"], ["s2"]),
        helper.make_node("SequenceAt", ["s2", "minus_one"], ["last"]),
        helper.make_node("SequenceLength", ["s2"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["cat"], axis=0),
        helper.make_node("SequenceConstruct", ["x", "x"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["stacked"], axis=0, new_axis=1),
        helper.make_node("Identity", ["s2"], ["edited"]),
    ]
    return model(nodes, [seq_vi("seq", F, ["r", 3]), vi("x", F, [2, 3])],
                 [vi("last", F, None), vi("n", I64, []), vi("cat", F, None),
                  vi("stacked", F, [2, 2, 3]), seq_vi("edited", F)],
                 [const_i64("one", 1), const_i64("minus_one", -1)])


def split_model():
    """x (4 x 6) split along axis 1 into equal parts of 2, and along axis 0 by lengths [1, 3]
    without keeping the axis of the length-1 parts (keepdims applies only without split)."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "two"], ["parts"], axis=1),
        helper.make_node("SplitToSequence", ["x", "lens"], ["rows"], axis=0),
        helper.make_node("SplitToSequence", ["x"], ["cols"], axis=1, keepdims=0),
        helper.make_node("SequenceLength", ["cols"], ["ncols"]),
    ]
    return model(nodes, [vi("x", F, [4, 6])],
                 [seq_vi("parts", F), seq_vi("rows", F), seq_vi("cols", F), vi("ncols", I64, [])],
                 [const_i64("two", 2), const_i64("lens", [1, 3])])


def loop_model():
    """A counted loop that appends x * i to a sequence each trip (the sequence is carried)."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("SequenceInsert", ["s_in", "xi"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [vi("i", I64, []), vi("c_in", B, []), seq_vi("s_in", F)],
        [vi("c_out", B, []), seq_vi("s_out", F)])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    return model(nodes, [vi("M", I64, []), vi("x", F, [2])], [seq_vi("s", F), vi("n", I64, [])])


def loop_appends_twice_model():
    """Each trip appends x * i twice and records the length of the sequence it was given, read
    after the first append (so that append must leave its input intact), as a scan output."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("SequenceInsert", ["s_in", "xi"], ["s_mid"]),
         helper.make_node("SequenceLength", ["s_in"], ["old_len"]),
         helper.make_node("SequenceInsert", ["s_mid", "xi"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [vi("i", I64, []), vi("c_in", B, []), seq_vi("s_in", F)],
        [vi("c_out", B, []), seq_vi("s_out", F), vi("old_len", I64, [])])
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s", "lens"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0)]
    return model(nodes, [vi("M", I64, []), vi("x", F, [2])],
                 [seq_vi("s", F), vi("lens", I64, None), vi("cat", F, None)])


def optional_model():
    """has = the optional holds a tensor; y = its element + 1 if so, else zeros(2)."""
    one = numpy_helper.from_array(np.array(1, np.float32), "onef")
    zeros = numpy_helper.from_array(np.zeros(2, np.float32), "zeros")
    then_g = helper.make_graph(
        [helper.make_node("OptionalGetElement", ["o"], ["e"]),
         helper.make_node("Add", ["e", "onef"], ["t"])], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Identity", ["zeros"], ["z"])], "else", [],
                               [vi("z", F, None)])
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("If", ["has"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Optional", ["y"], ["oy"])]
    return model(nodes, [opt_vi("o", F, [2])],
                 [vi("has", B, []), vi("y", F, None), opt_vi("oy", F)], [one, zeros], opset=18)


def optional_sequence_model():
    """o: an optional sequence; has = it holds one, n = its length if so, else -1."""
    o = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))))
    then_g = helper.make_graph(
        [helper.make_node("OptionalGetElement", ["o"], ["s"]),
         helper.make_node("SequenceLength", ["s"], ["l"])], "then", [], [vi("l", I64, [])])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["z"], value=const_i64("minus", -1))], "else", [],
        [vi("z", I64, [])])
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("If", ["has"], ["n"], then_branch=then_g, else_branch=else_g)]
    return model(nodes, [o], [vi("has", B, []), vi("n", I64, [])], opset=18)


def write_input(tmp_path, name, value):
    """A tensor as NAME.npy, a list as a folder of NAME/0.npy..., None as `none`."""
    if value is None:
        return "none"
    if isinstance(value, list):
        folder = tmp_path / name
        folder.mkdir()
        for i, t in enumerate(value):
            np.save(folder / f"{i}.npy", t)
        return folder
    np.save(tmp_path / f"{name}.npy", value)
    return tmp_path / f"{name}.npy"


def read_output(out, entry):
    if entry is None:
        return None
    path = out / entry
    if path.is_dir():
        return [np.load(path / f"{i}.npy") for i in range(len(list(path.glob("*.npy"))))]
    return np.load(path)


def assert_same(name, got, want):
    if want is None:
        assert got is None, name
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (name, got)
        for g, w in zip(got, want):
            assert_same(name, g, w)
    else:
        want = np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def save_target(tmp_path, m, form):
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    if form == "onnx":
        return path
    plan = tmp_path / "model.plan"
    kiln("build", path, "-o", plan, "--quiet")
    return plan


def run_kiln(tmp_path, m, feeds, form):
    target = save_target(tmp_path, m, form)
    args = []
    for name, value in feeds.items():
        args += ["--input", f"{name}={write_input(tmp_path, name, value)}"]
    out = tmp_path / "out"
    kiln("run", target, *args, "--output-dir", out)
    entries = json.loads((out / "outputs.json").read_text())
    sess = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, want in zip(names, sess.run(None, feeds)):
        assert_same(name, read_output(out, entries[name]), want)


FORMS = ["onnx", "plan"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("rows", [[1, 4, 2], [3]])
def test_sequence_edits_and_concat(tmp_path, form, rows):
    rng = np.random.RandomState(0)
    seq = [rng.randn(r, 3).astype(np.float32) for r in rows]
    run_kiln(tmp_path, edit_model(), {"seq": seq, "x": rng.randn(2, 3).astype(np.float32)}, form)


@pytest.mark.parametrize("form", FORMS)
def test_split_to_sequence(tmp_path, form):
    x = np.random.RandomState(1).randn(4, 6).astype(np.float32)
    run_kiln(tmp_path, split_model(), {"x": x}, form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("trips", [0, 3])
def test_loop_carries_a_sequence(tmp_path, form, trips):
    feeds = {"M": np.array(trips, np.int64), "x": np.array([1.5, -2], np.float32)}
    run_kiln(tmp_path, loop_model(), feeds, form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("trips", [1, 100])
def test_loop_grows_a_sequence_many_trips(tmp_path, form, trips):
    """Appends inside a loop grow the carried sequence in place (docs/sequences.md, Cost): the
    result is the same as onnxruntime's, and a value read after an append is untouched."""
    feeds = {"M": np.array(trips, np.int64), "x": np.array([0.5, -1], np.float32)}
    run_kiln(tmp_path, loop_appends_twice_model(), feeds, form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("empty", [False, True])
def test_optional_input(tmp_path, form, empty):
    o = None if empty else np.array([3, 4], np.float32)
    run_kiln(tmp_path, optional_model(), {"o": o}, form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("empty", [False, True])
def test_optional_sequence_input(tmp_path, form, empty):
    """An optional sequence is a folder (or `none`): the folder's sequence is its element."""
    o = None if empty else [np.zeros(2, np.float32), np.ones(3, np.float32)]
    run_kiln(tmp_path, optional_sequence_model(), {"o": o}, form)


def refused(tmp_path, m, feeds, needle, form="onnx"):
    target = save_target(tmp_path, m, form)
    args = []
    for name, value in feeds.items():
        args += ["--input", f"{name}={write_input(tmp_path, name, value)}"]
    proc = kiln("run", target, *args, "--output-dir", tmp_path / "out", ok=False)
    err = proc.stderr.decode("utf-8", "replace").strip()
    assert proc.returncode not in (0, -6, -11), err  # an error exit, not a crash
    assert len(err.splitlines()) == 1 and needle in err, err


def test_position_out_of_range_is_refused(tmp_path):
    m = model([helper.make_node("SequenceAt", ["seq", "pos"], ["y"])],
              [seq_vi("seq", F), vi("pos", I64, [])], [vi("y", F, None)])
    seq = [np.zeros(2, np.float32), np.ones(2, np.float32)]
    refused(tmp_path, m, {"seq": seq, "pos": np.array(2, np.int64)}, "range")


def test_mixed_element_dtypes_are_refused(tmp_path):
    m = model([helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
              [seq_vi("seq", F)], [vi("y", F, None)])
    seq = [np.zeros(2, np.float32), np.ones(2, np.int64)]
    refused(tmp_path, m, {"seq": seq}, "dtype")


def test_tensor_where_sequence_is_needed_is_refused(tmp_path):
    m = model([helper.make_node("SequenceLength", ["seq"], ["n"])],
              [seq_vi("seq", F)], [vi("n", I64, [])])
    refused(tmp_path, m, {"seq": np.zeros(2, np.float32)}, "seq")


@pytest.mark.parametrize("form", FORMS)
def test_sequence_and_optional_kinds_are_not_mixed(tmp_path, form):
    """An empty optional (`none`) for a sequence input, a folder's sequence for an optional
    tensor, and a tensor for an optional sequence are each refused in one line (a plan keeps
    the kind each input declares)."""
    m = model([helper.make_node("SequenceLength", ["seq"], ["n"])],
              [seq_vi("seq", F)], [vi("n", I64, [])])
    cases = [(m, {"seq": None}, "'seq' is a sequence"),
             (optional_model(), {"o": [np.zeros(2, np.float32)]}, "'o' is an optional tensor"),
             (optional_sequence_model(), {"o": np.zeros(2, np.float32)},
              "'o' is an optional sequence")]
    for i, (bad, feeds, needle) in enumerate(cases):
        sub = tmp_path / str(i)
        sub.mkdir()
        refused(sub, bad, feeds, needle, form)


def kiln_python():
    import sys
    sys.path.insert(0, os.path.join(REPO, "python"))
    os.environ.setdefault("KILN_LIBRARY", os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(KILN))), "lib", "libkiln.so"))
    import kiln as k
    return k


@pytest.mark.parametrize("form", FORMS)
def test_python_lists_and_none(tmp_path, form):
    """The Python API takes a sequence as a list and an empty optional as None, and returns
    them so; the same models and oracle as above."""
    k = kiln_python()
    rng = np.random.RandomState(4)
    cases = [(edit_model(), {"seq": [rng.randn(r, 3).astype(np.float32) for r in (2, 1, 3)],
                             "x": rng.randn(2, 3).astype(np.float32)}),
             (split_model(), {"x": rng.randn(4, 6).astype(np.float32)}),
             (loop_model(), {"M": np.array(2, np.int64), "x": np.array([1, 2], np.float32)}),
             (optional_model(), {"o": None}),
             (optional_model(), {"o": np.array([5, 6], np.float32)})]
    for i, (m, feeds) in enumerate(cases):
        path = tmp_path / f"m{i}.onnx"
        onnx.save(m, path)
        target = str(path) if form == "onnx" else k.build(str(path))
        got = k.run(target, feeds)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        for name, want in zip(names, sess.run(None, feeds)):
            assert_same(name, got[name], want)
    path = tmp_path / "optseq.onnx"
    onnx.save(optional_sequence_model(), path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    target = str(path) if form == "onnx" else k.build(str(path))
    for o in (None, [np.zeros(2, np.float32)] * 3):
        got = k.run(target, {"o": o})
        for name, want in zip(["has", "n"], sess.run(None, {"o": o})):
            assert_same(name, got[name], want)
    with pytest.raises(k.KilnError, match="'seq' is a sequence"):
        k.run(str(tmp_path / "m0.onnx"), {"seq": np.zeros((1, 3), np.float32),
                                          "x": np.zeros((2, 3), np.float32)})
    with pytest.raises(k.KilnError, match="one dtype"):
        k.run(str(tmp_path / "m0.onnx"), {"seq": [np.zeros((1, 3), np.float32),
                                                   np.zeros((1, 3), np.int64)],
                                          "x": np.zeros((2, 3), np.float32)})
