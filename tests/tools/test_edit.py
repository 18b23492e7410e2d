"""kiln edit against onnx-graphsurgeon doing the same job on the same models; every model kiln
writes must pass onnx.checker's full check and give the same outputs in onnxruntime."""

import os

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from tools_helpers import MODELS, PLUGINS, check_full, kiln, run_ort, swish_model


def gs_extract(src, dst, inputs, outputs):
    model = onnx.shape_inference.infer_shapes(onnx.load(src))
    graph = gs.import_onnx(model)
    tensors = graph.tensors()
    graph.inputs = [tensors[n] for n in inputs]
    graph.outputs = [tensors[n] for n in outputs]
    graph.cleanup()
    onnx.save(gs.export_onnx(graph), dst)


@pytest.mark.parametrize("cut", [(["mm"], ["y1"]), (["y0"], ["y"]), (["x"], ["sw", "y2"])])
def test_extract_matches_graphsurgeon(tmp_path, cut):
    src = swish_model(str(tmp_path / "m.onnx"))
    ours, theirs = str(tmp_path / "k.onnx"), str(tmp_path / "g.onnx")
    kiln("edit", src, "-o", ours, "--extract-inputs", ",".join(cut[0]),
         "--extract-outputs", ",".join(cut[1]))
    gs_extract(src, theirs, *cut)
    check_full(ours)
    k, g = onnx.load(ours).graph, onnx.load(theirs).graph
    assert [i.name for i in k.input] == [i.name for i in g.input]
    assert [o.name for o in k.output] == [o.name for o in g.output]
    assert len(k.node) == len(g.node)
    feeds = {i.name: np.random.RandomState(5).randn(4, 8).astype(np.float32) for i in k.input}
    want, got = run_ort(theirs, feeds), run_ort(ours, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_extract_of_a_real_model_matches_graphsurgeon(tmp_path):
    src = os.path.join(MODELS, "resnet_mini", "model.onnx")
    fixed = str(tmp_path / "fixed.onnx")
    kiln("edit", src, "-o", fixed, "--set-shape", "input:2x3x32x32")
    model = onnx.shape_inference.infer_shapes(onnx.load(fixed))
    # Block outputs (the Relu after each residual Add) cut the graph cleanly.
    made_by = {o: n.op_type for n in model.graph.node for o in n.output}
    relus = [n.output[0] for n in model.graph.node
             if n.op_type == "Relu" and made_by.get(n.input[0]) == "Add"]
    cut = ([relus[0]], [relus[-1]])
    ours, theirs = str(tmp_path / "k.onnx"), str(tmp_path / "g.onnx")
    kiln("edit", fixed, "-o", ours, "--extract-inputs", cut[0][0], "--extract-outputs", cut[1][0])
    gs_extract(fixed, theirs, *cut)
    check_full(ours)
    assert len(onnx.load(ours).graph.node) == len(onnx.load(theirs).graph.node) > 3
    shape = [d.dim_value for d in onnx.load(ours).graph.input[0].type.tensor_type.shape.dim]
    feeds = {cut[0][0]: np.random.RandomState(2).randn(*shape).astype(np.float32)}
    np.testing.assert_allclose(run_ort(ours, feeds)[cut[1][0]], run_ort(theirs, feeds)[cut[1][0]],
                               rtol=1e-5, atol=1e-5)


def test_fold_and_cleanup_no_more_nodes_than_graphsurgeon(tmp_path):
    # The transformer's shape subgraphs (Shape -> Gather -> Concat -> Reshape) fold once the
    # input shape is fixed.
    src = os.path.join(MODELS, "transformer_encoder", "model.onnx")
    fixed = str(tmp_path / "fixed.onnx")
    kiln("edit", src, "-o", fixed, "--set-shape", "ids:2x12")
    ours, theirs = str(tmp_path / "k.onnx"), str(tmp_path / "g.onnx")
    kiln("edit", fixed, "-o", ours, "--fold-constants", "--cleanup")
    graph = gs.import_onnx(onnx.load(fixed))
    graph.fold_constants().cleanup()
    onnx.save(gs.export_onnx(graph), theirs)
    check_full(ours)
    n_orig = len(onnx.load(fixed).graph.node)
    n_ours, n_theirs = len(onnx.load(ours).graph.node), len(onnx.load(theirs).graph.node)
    assert n_ours <= n_theirs < n_orig
    ids = np.load(os.path.join(MODELS, "transformer_encoder", "case0_2x12", "ids.npy"))
    want, got = run_ort(fixed, {"ids": ids}), run_ort(ours, {"ids": ids})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_fold_small_model_matches_graphsurgeon(tmp_path):
    src = swish_model(str(tmp_path / "m.onnx"))
    ours, theirs = str(tmp_path / "k.onnx"), str(tmp_path / "g.onnx")
    kiln("edit", src, "-o", ours, "--fold-constants", "--cleanup")
    graph = gs.import_onnx(onnx.load(src))
    graph.fold_constants().cleanup()
    onnx.save(gs.export_onnx(graph), theirs)
    check_full(ours)
    ops = [n.op_type for n in onnx.load(ours).graph.node]
    assert "Exp" not in ops and ops.count("Mul") == 2  # c1*c2 folded, the dead Exp gone
    assert len(ops) <= len(onnx.load(theirs).graph.node)
    x = np.random.RandomState(1).randn(4, 8).astype(np.float32)
    np.testing.assert_allclose(run_ort(ours, {"x": x})["y"], run_ort(src, {"x": x})["y"],
                               rtol=1e-6, atol=1e-6)


def test_remove_insert_rename_match_graphsurgeon(tmp_path):
    src = swish_model(str(tmp_path / "m.onnx"))
    ours, theirs = str(tmp_path / "k.onnx"), str(tmp_path / "g.onnx")
    kiln("edit", src, "-o", ours, "--remove", "ident", "--insert-after", "y1", "--op", "LeakyRelu",
         "--attr", "alpha=0.25", "--rename", "relu=final_relu", "--toposort")
    graph = gs.import_onnx(onnx.load(src))
    nodes = {n.name: n for n in graph.nodes}
    ident = nodes["ident"]
    nodes["relu"].inputs[0] = ident.inputs[0]
    ident.outputs.clear()
    y1 = graph.tensors()["y1"]
    leaky_out = gs.Variable("y1_leaky", dtype=np.float32)
    graph.nodes.append(gs.Node("LeakyRelu", attrs={"alpha": 0.25}, inputs=[y1],
                               outputs=[leaky_out]))
    nodes["relu"].inputs[0] = leaky_out
    graph.cleanup().toposort()
    onnx.save(gs.export_onnx(graph), theirs)
    check_full(ours)
    k = onnx.load(ours).graph
    assert "ident" not in [n.name for n in k.node] and "final_relu" in [n.name for n in k.node]
    x = np.random.RandomState(4).randn(4, 8).astype(np.float32)
    np.testing.assert_allclose(run_ort(ours, {"x": x})["y"], run_ort(theirs, {"x": x})["y"],
                               rtol=1e-6, atol=1e-6)


def test_swish_pattern_to_plugin_runs_and_matches(tmp_path):
    """The seed's edit: x*sigmoid(x)+b as three nodes becomes the Swish plugin."""
    src = swish_model(str(tmp_path / "m.onnx"))
    ours = str(tmp_path / "k.onnx")
    r = kiln("edit", src, "-o", ours, "--replace-pattern", "swish", "--with-plugin", "Swish")
    assert "replaced 1 swish pattern" in r.stderr
    check_full(ours)
    ops = [n.op_type for n in onnx.load(ours).graph.node]
    assert ops.count("Swish") == 1 and "Sigmoid" not in ops and "Add" not in ops
    x = np.random.RandomState(1).randn(4, 8).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kiln("run", ours, "--plugins", os.path.join(PLUGINS, "libswish.so"), "--input",
         f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), run_ort(src, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def test_gelu_and_relu_sigmoid_mul_patterns(tmp_path):
    from onnx import TensorProto, helper, numpy_helper
    c = lambda n, v: numpy_helper.from_array(np.array(v, np.float32), n)
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]), helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("Sigmoid", ["g"], ["s"]), helper.make_node("Mul", ["r", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
                              [c("sqrt2", 2 ** 0.5), c("one", 1.0), c("half", 0.5)])
    src = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    ours = str(tmp_path / "k.onnx")
    kiln("edit", src, "-o", ours, "--replace-pattern", "gelu", "--with-plugin", "MyGelu",
         "--replace-pattern", "relu-sigmoid-mul", "--with-plugin", "ReluSigmoidMul:1:")
    check_full(ours)
    k = onnx.load(ours).graph
    assert [n.op_type for n in k.node] == ["MyGelu", "ReluSigmoidMul"]
    assert k.node[1].input[0] == k.node[0].output[0] == "g"


@pytest.mark.parametrize("args,needle", [
    (["--remove", "nope"], "no node named 'nope'"),
    (["--extract-inputs", "mm"], "go together"),
    (["--extract-inputs", "mm", "--extract-outputs", "zz"], "'zz'"),
    (["--extract-inputs", "sg", "--extract-outputs", "y"], "graph input 'x'"),
    (["--replace-pattern", "nonsense", "--with-plugin", "P"], "unknown pattern"),
    (["--opset", "12"], "plain"),
    (["--bogus"], "unknown option"),
])
def test_bad_edits_fail_with_one_line(tmp_path, args, needle):
    src = swish_model(str(tmp_path / "m.onnx"))
    out = tmp_path / "k.onnx"
    r = kiln("edit", src, "-o", out, *args, check=False)
    assert r.returncode == 1 and needle in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not out.exists()


def test_opset_plain_conversion(tmp_path):
    src = swish_model(str(tmp_path / "m.onnx"))
    ours = str(tmp_path / "k.onnx")
    kiln("edit", src, "-o", ours, "--opset", "18")
    check_full(ours)
    assert [o.version for o in onnx.load(ours).opset_import if o.domain == ""] == [18]


def test_external_data_above_threshold(tmp_path):
    src = swish_model(str(tmp_path / "m.onnx"), cols=64)
    ours = str(tmp_path / "k.onnx")
    kiln("edit", src, "-o", ours, "--external-data-threshold", "1024")
    assert os.path.getsize(tmp_path / "k.onnx.data") >= 64 * 64 * 4
    check_full(ours)
    m = onnx.load(ours, load_external_data=False)
    ext = {t.name for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert ext == {"W"}
    x = np.random.RandomState(1).randn(4, 64).astype(np.float32)
    np.testing.assert_allclose(run_ort(ours, {"x": x})["y"], run_ort(src, {"x": x})["y"],
                               rtol=1e-6, atol=1e-6)
