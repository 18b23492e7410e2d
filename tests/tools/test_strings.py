"""String tensors through `kiln run` (.npy with numpy's '<U' dtype in and out, TensorProto
files), through a plan and through the Python bindings, checked against onnxruntime; bad input
gets a one-line error."""

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tools_helpers import kiln, run_ort

S, I64 = TensorProto.STRING, TensorProto.INT64
X = np.array(["monday", "Tuesday night", "émile MONDAY", "中文 字", "www.kiln.com", "b"])
K = np.array([3, 1, 4, 1, 5, 9], np.int64)
SUFFIX = np.array(["-x"])


def string_model(path):
    """Every string op kiln has, on one string input, a one-element one and an int64 one
    (onnxruntime's StringNormalizer needs a locale the machine has: C.UTF-8)."""
    words = helper.make_tensor("words", S, [2], [b"b", "émile MONDAY".encode()])
    nodes = [
        helper.make_node("StringNormalizer", ["x"], ["norm"], case_change_action="UPPER",
                         stopwords=["monday"], locale="C.UTF-8"),
        helper.make_node("StringNormalizer", ["x"], ["low"], case_change_action="LOWER",
                         is_case_sensitive=1, stopwords=["b"], locale="C.UTF-8"),
        helper.make_node("StringConcat", ["x", "suffix"], ["cat"]),
        helper.make_node("StringSplit", ["x"], ["sub", "count"]),
        helper.make_node("StringSplit", ["cat"], ["sub2", "count2"], delimiter="-", maxsplit=1),
        helper.make_node("RegexFullMatch", ["x"], ["is_url"], pattern=r"www\.[\w.-]+\.com"),
        helper.make_node("RegexFullMatch", ["x"], ["two_words"], pattern=r"\S+\s\S+"),
        helper.make_node("Equal", ["x", "suffix"], ["eq"]),
        helper.make_node("Constant", [], ["w"], value=words),
        helper.make_node("LabelEncoder", ["x"], ["ids"], domain="ai.onnx.ml",
                         keys_strings=["b", "monday"], values_int64s=[7, 8], default_int64=-5),
        helper.make_node("LabelEncoder", ["k"], ["names"], domain="ai.onnx.ml",
                         keys_int64s=[1, 4, 9], values_strings=["one", "four", "nine"],
                         default_string="?"),
        helper.make_node("Cast", ["k"], ["ks"], to=S),
        helper.make_node("Cast", ["ks"], ["kf"], to=TensorProto.FLOAT),
        helper.make_node("StringConcat", ["x", "x"], ["twice"]),
        helper.make_node("Identity", ["twice"], ["twice_id"]),
    ]
    nodes.insert(0, nodes.pop(8))  # the Constant first
    nodes.append(helper.make_node("StringConcat", ["w", "w"], ["ww"]))
    ins = [helper.make_tensor_value_info("x", S, [6]),
           helper.make_tensor_value_info("suffix", S, [1]),
           helper.make_tensor_value_info("k", I64, [6])]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in [
        ("norm", S), ("low", S), ("cat", S), ("sub", S), ("count", I64), ("sub2", S),
        ("count2", I64), ("is_url", TensorProto.BOOL), ("two_words", TensorProto.BOOL),
        ("eq", TensorProto.BOOL), ("ids", I64), ("names", S), ("ks", S),
        ("kf", TensorProto.FLOAT), ("twice_id", S), ("ww", S)]]
    graph = helper.make_graph(nodes, "strings", ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20),
                                                    helper.make_opsetid("ai.onnx.ml", 4)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


def feeds():
    return {"x": X, "suffix": SUFFIX, "k": K}


def read_out(out_dir, name):
    with open(os.path.join(out_dir, "outputs.json")) as f:
        return np.load(os.path.join(out_dir, json.load(f)[name]), allow_pickle=False)


def same(got, want):
    assert got.shape == want.shape, (got, want)
    if want.dtype == object or want.dtype.kind in "US":
        assert got.dtype.kind == "U", got.dtype
        assert [str(v) for v in got.flat] == [str(v) for v in want.flat], (got, want)
    else:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_string_ops_match_onnxruntime_cli_and_plan(tmp_path):
    model = string_model(str(tmp_path / "m.onnx"))
    ref = run_ort(model, feeds())
    assert [str(v) for v in ref["norm"]] == ["TUESDAY NIGHT", "ÉMILE MONDAY", "中文 字",
                                           "WWW.KILN.COM", "B"]
    for name, value in feeds().items():
        np.save(tmp_path / f"{name}.npy", value)
    args = []
    for name in feeds():
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    plan = str(tmp_path / "m.plan")
    kiln("build", model, "-o", plan, "--shapes", "x:1,400,100000", "--shapes",
         "suffix:1,100,10000")
    for i, m in enumerate([model, plan]):
        out = str(tmp_path / f"out{i}")
        kiln("run", m, "--output-dir", out, *args)
        for name, want in ref.items():
            same(read_out(out, name), want)


def test_tensor_proto_inputs(tmp_path):
    """String TensorProto files (string_data) as inputs, as the ONNX test sets give them."""
    model = string_model(str(tmp_path / "m.onnx"))
    ref = run_ort(model, feeds())
    args = []
    for name, value in feeds().items():
        t = onnx.numpy_helper.from_array(value, name)
        with open(tmp_path / f"{name}.pb", "wb") as f:
            f.write(t.SerializeToString())
        args += ["--input", f"{name}={tmp_path / (name + '.pb')}"]
    out = str(tmp_path / "out")
    kiln("run", model, "--output-dir", out, *args)
    for name in ("cat", "sub", "ids", "names"):
        same(read_out(out, name), ref[name])


def test_python_str_arrays(tmp_path):
    import kiln as pk
    model = string_model(str(tmp_path / "m.onnx"))
    ref = run_ort(model, feeds())
    got = pk.run(model, feeds())
    for name, want in ref.items():
        same(got[name], want)
    # bytes and object arrays are strings too; a sequence may hold strings
    got = pk.run(model, {"x": np.array([s.encode() for s in X]), "suffix": SUFFIX.astype(object),
                         "k": K})
    same(got["cat"], ref["cat"])
    seq = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
         helper.make_node("SequenceAt", ["s", "i"], ["y"])], "seq",
        [helper.make_tensor_value_info("a", S, [2]), helper.make_tensor_value_info("b", S, [1]),
         helper.make_tensor_value_info("i", I64, [])],
        [helper.make_tensor_sequence_value_info("s", S, None),
         helper.make_tensor_value_info("y", S, None)])
    path = str(tmp_path / "seq.onnx")
    onnx.save(helper.make_model(seq, opset_imports=[helper.make_opsetid("", 18)]), path)
    out = pk.run(path, {"a": np.array(["p", "q"]), "b": np.array(["r"]),
                        "i": np.array(1, np.int64)})
    same(out["y"], np.array(["r"]))
    assert [list(map(str, a)) for a in out["s"]] == [["p", "q"], ["r"]]


def one_line_error(proc, *words):
    assert proc.returncode != 0 and proc.returncode < 128, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def single(tmp_path, node, ins, outs, name="e.onnx", opset=20):
    graph = helper.make_graph([node], "g", ins, outs)
    path = str(tmp_path / name)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                      helper.make_opsetid("ai.onnx.ml", 4)]), path)
    return path


@pytest.mark.parametrize("pattern,says", [(r"a+?", "lazy"), (r"(?i)abc", "(?...)"),
                                          (r"\p{L}", "\\p"), (r"[\W]", "negated class"),
                                          (r"(ab", "not closed"),
                                          (r"(a{1000}){1000}", "100000"), (r"a{1001}", "1000")])
def test_unsupported_patterns_fail_at_build(tmp_path, pattern, says):
    path = single(tmp_path, helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern),
                  [helper.make_tensor_value_info("x", S, [2])],
                  [helper.make_tensor_value_info("y", TensorProto.BOOL, None)])
    proc = kiln("build", path, "-o", str(tmp_path / "p.plan"), "--shapes", "x:1,200,1000",
                check=False)
    one_line_error(proc, says)


def test_bad_input_is_one_line_error(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.array(["a", "bc"]))
    locale = single(tmp_path, helper.make_node("StringNormalizer", ["x"], ["y"], locale="tr_TR"),
                    [helper.make_tensor_value_info("x", S, [2])],
                    [helper.make_tensor_value_info("y", S, None)], "loc.onnx", 10)
    one_line_error(kiln("run", locale, "--input", f"x={x}", "--output-dir", str(tmp_path / "o"),
                        check=False), "locale 'tr_TR'")
    shape = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", S, [2])], [helper.make_tensor_value_info("y", I64, None)])
    path = str(tmp_path / "r.onnx")
    onnx.save(helper.make_model(shape, opset_imports=[helper.make_opsetid("", 18)]), path)
    one_line_error(kiln("run", path, "--input", f"x={x}", "--output-dir", str(tmp_path / "o"),
                        check=False), "Shape", "string tensor")
    # a data-movement op given strings and numbers as its data
    concat = helper.make_graph(
        [helper.make_node("Concat", ["x", "n"], ["y"], axis=0)], "g",
        [helper.make_tensor_value_info("x", S, [2])], [helper.make_tensor_value_info("y", S, None)],
        [helper.make_tensor("n", I64, [1], [5])])
    path = str(tmp_path / "mix.onnx")
    onnx.save(helper.make_model(concat, opset_imports=[helper.make_opsetid("", 18)]), path)
    one_line_error(kiln("run", path, "--input", f"x={x}", "--output-dir", str(tmp_path / "o"),
                        check=False), "Concat", "int64", "strings")
    # a numeric .npy for a string input, and a truncated '<U' file
    concat = single(tmp_path, helper.make_node("StringConcat", ["x", "x"], ["y"]),
                    [helper.make_tensor_value_info("x", S, [2])],
                    [helper.make_tensor_value_info("y", S, None)], "c.onnx")
    f = tmp_path / "f.npy"
    np.save(f, np.zeros(2, np.float32))
    one_line_error(kiln("run", concat, "--input", f"x={f}", "--output-dir", str(tmp_path / "o"),
                        check=False), "float32")
    raw = x.read_bytes()
    cut = tmp_path / "cut.npy"
    cut.write_bytes(raw[:-3])
    one_line_error(kiln("run", concat, "--input", f"x={cut}", "--output-dir", str(tmp_path / "o"),
                        check=False), ".npy")
    # a string TensorProto whose string_data count does not match its dims
    t = onnx.numpy_helper.from_array(np.array(["a", "b"]), "x")
    t.dims[0] = 3
    pb = tmp_path / "x.pb"
    pb.write_bytes(t.SerializeToString())
    one_line_error(kiln("run", concat, "--input", f"x={pb}", "--output-dir", str(tmp_path / "o"),
                        check=False), "holds 2 strings")


TEXTS = np.array(["abc@def.com", "x@y.org", "555-1234", "a中c", "abc", "cd", "ababc", "foo bar",
                  "]-^a", "color", "colour", "", " lead", "tab\there", "Ünï"])


@pytest.mark.parametrize("pattern", [r"[a-z]+@[a-z]+\.(com|org)", r"\d{3}-\d{4}", r".*中.*",
                                     r"a.c", r"(?:ab)+c", r"[^\s]+", r"\bfoo\b.*", r"[\]\-^a]+",
                                     r"colou?r", r"\w+", r"\s?\S+", r"[[:alpha:]]+", r".{3}",
                                     r"ab|cd", r"\W*\w+\t\w+", r"[[:punct:]]+",
                                     r"[[:alpha:][:digit:]@.]+"])
def test_regex_subset_matches_onnxruntime(tmp_path, pattern):
    import kiln as pk
    path = single(tmp_path, helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern),
                  [helper.make_tensor_value_info("x", S, [len(TEXTS)])],
                  [helper.make_tensor_value_info("y", TensorProto.BOOL, None)])
    want = run_ort(path, {"x": TEXTS})["y"]
    np.testing.assert_array_equal(pk.run(path, {"x": TEXTS})["y"], want)


def one_node(node, ins, outs, opset=20):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s)
                                            for n, t, s in ins],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("ai.onnx.ml", 4)])
    model.ir_version = 9
    return model.SerializeToString()


EDGES = [
    (helper.make_node("StringSplit", ["x"], ["a", "b"], maxsplit=1),
     np.array(["a b c  ", "  x  y ", " ", ""]), [(S, None), (I64, None)], 20),
    (helper.make_node("StringSplit", ["x"], ["a", "b"], delimiter="ab", maxsplit=1),
     np.array(["xabyabz", "ab", "", "abab"]), [(S, None), (I64, None)], 20),
    (helper.make_node("StringNormalizer", ["x"], ["y"], stopwords=["a"], locale="C.UTF-8"),
     np.array([["a", "a"]]), [(S, None)], 10),
    (helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER",
                      locale="C.UTF-8"), np.array(["straße", "ǆ", "ﬁ", "ı", "ÿ"]), [(S, None)], 10),
    (helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER",
                      stopwords=["σ"], locale="C.UTF-8"), np.array(["İ", "Σ", "ǅ", "ÀÉ"]),
     [(S, None)], 10),
    (helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a", "b"],
                      values_strings=["A", "B"]), np.array([["a", "c"], ["b", ""]]), [(S, None)],
     20),
    (helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a"],
                      values_floats=[0.5]), np.array(["a", "z"]), [(TensorProto.FLOAT, None)], 20),
]


@pytest.mark.parametrize("case", range(len(EDGES)))
def test_edge_cases_match_onnxruntime(case):
    import kiln as pk
    import onnxruntime as ort
    node, x, outs, opset = EDGES[case]
    model = one_node(node, [("x", S, list(x.shape))], [(o, t) for o, (t, _) in
                                                        zip(node.output, outs)], opset)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})
    got = pk.run(model, {"x": x})
    for name, w in zip(node.output, want):
        same(got[name], w)


def test_label_encoder_numeric_keys_match_onnxruntime():
    import kiln as pk
    import onnxruntime as ort
    big = 2**53 + 1
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_int64s=[big, 3], values_strings=["big", "three"],
                            default_string="-")
    model = one_node(node, [("x", I64, [3])], [("y", S)])
    x = np.array([big, big - 1, 3], np.int64)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    same(pk.run(model, {"x": x})["y"], want[0])
    assert [str(v) for v in want[0]] == ["big", "-", "three"]


def moves_model():
    """The data-movement ops on strings, from graph inputs and from a string initializer."""
    inits = [helper.make_tensor("shape", I64, [2], [3, 2]),
             helper.make_tensor("idx", I64, [2], [1, 0]),
             helper.make_tensor("st", I64, [1], [1]), helper.make_tensor("en", I64, [1], [3]),
             helper.make_tensor("ax", I64, [1], [1]), helper.make_tensor("cond", TensorProto.BOOL,
                                                                         [3], [1, 0, 1]),
             helper.make_tensor("rep", I64, [2], [2, 1]), helper.make_tensor("sp", I64, [2], [1, 1]),
             helper.make_tensor("words", S, [2, 2], [b"w", b"x", "\u4e2d".encode(), b""])]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             helper.make_node("Concat", ["x", "y"], ["c"], axis=0),
             helper.make_node("Slice", ["x", "st", "en", "ax"], ["s"]),
             helper.make_node("Where", ["cond", "x", "y"], ["w"]),
             helper.make_node("Tile", ["y", "rep"], ["ti"]),
             helper.make_node("Split", ["x", "sp"], ["s0", "s1"], axis=0),
             helper.make_node("Flatten", ["x"], ["f"], axis=0),
             helper.make_node("Unsqueeze", ["y", "ax"], ["u"]),
             helper.make_node("Transpose", ["words"], ["wt"], perm=[1, 0]),
             helper.make_node("Concat", ["wt", "x"], ["wc"], axis=1)]
    outs = ["r", "t", "g", "c", "s", "w", "ti", "s0", "s1", "f", "u", "wt", "wc"]
    graph = helper.make_graph(nodes, "moves", [helper.make_tensor_value_info("x", S, [2, 3]),
                                               helper.make_tensor_value_info("y", S, [1, 3])],
                              [helper.make_tensor_value_info(o, S, None) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_data_movement_on_strings_matches_onnxruntime(tmp_path):
    import kiln as pk
    path = str(tmp_path / "moves.onnx")
    onnx.save(moves_model(), path)
    x = np.array([["a", "bb", "ccc"], ["d", "", "中f"]])
    y = np.array([["p", "q", "r"]])
    ref = run_ort(path, {"x": x, "y": y})
    got = pk.run(path, {"x": x, "y": y})
    for name, want in ref.items():
        same(got[name], want)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    plan = str(tmp_path / "moves.plan")
    kiln("build", path, "-o", plan, "--shapes", "x:1,400,10000", "--shapes", "y:1,400,10000")
    out = str(tmp_path / "out")
    kiln("run", plan, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
         "--output-dir", out)
    for name, want in ref.items():
        same(read_out(out, name), want)
