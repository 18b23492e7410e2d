"""kiln.edit (Python) does what kiln edit does, on the same models."""

import numpy as np
import onnx
import pytest

from tools_helpers import check_full, kiln, run_ort, swish_model

kedit = pytest.importorskip("kiln.edit")  # PYTHONPATH=python and KILN_LIBRARY set by make


def test_python_edit_equals_cli(tmp_path):
    src = swish_model(str(tmp_path / "m.onnx"))
    cli_out, py_out = str(tmp_path / "cli.onnx"), str(tmp_path / "py.onnx")
    kiln("edit", src, "-o", cli_out, "--replace-pattern", "swish", "--with-plugin", "Swish",
         "--remove", "ident", "--fold-constants", "--cleanup")
    m = kedit.Model(src)
    assert m.replace_pattern("swish", "Swish") == 1
    m.remove("ident").fold_constants().cleanup().save(py_out)
    check_full(py_out)
    a, b = onnx.load(cli_out).graph, onnx.load(py_out).graph
    assert [n.op_type for n in a.node] == [n.op_type for n in b.node]
    assert m.nodes() == [(n.name, n.op_type) for n in b.node]


def test_python_extract_insert_set_shape(tmp_path):
    src = swish_model(str(tmp_path / "m.onnx"))
    out = str(tmp_path / "k.onnx")
    m = kedit.Model(src)
    m.extract(["mm"], ["y1"]).insert_after("y1", "LeakyRelu", alpha=0.5).rename("mm", "z")
    m.set_shape("z", ["batch", 8]).save(out)
    check_full(out)
    g = onnx.load(out).graph
    assert g.input[0].name == "z" and g.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    x = np.random.RandomState(0).randn(3, 8).astype(np.float32)
    y = run_ort(out, {"z": x})["y1"]
    sw = x / (1 + np.exp(-x)) + onnx.numpy_helper.to_array(
        [t for t in onnx.load(src).graph.initializer if t.name == "b"][0])
    want = sw * 6.0
    np.testing.assert_allclose(y, np.where(want > 0, want, 0.5 * want), rtol=1e-5, atol=1e-5)


def test_python_failed_edit_leaves_model_unchanged(tmp_path):
    m = kedit.Model(swish_model(str(tmp_path / "m.onnx")))
    before = m.nodes()
    with pytest.raises(Exception, match="no node named"):
        m.remove("missing")
    with pytest.raises(Exception, match="graph input 'x'"):
        m.extract(["sg"], ["y"])
    assert m.nodes() == before
