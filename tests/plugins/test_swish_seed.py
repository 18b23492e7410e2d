"""The first seed document's exact Swish export runs with the example Swish plugin.

The seed exports `custom::Plugin` with name_s="Swish" and info_s='{"size": 555, "shape": [6, 7,
8], "module": "abcdefg"}' (a free description naming no key Swish uses), after a 3x3 conv whose
weight is the identity on channels, with a bias parameter of 3.15 and dynamic batch/H/W
(examples/swish/export_seed.py is that module). examples/swish/seed/ holds that module's
export by torch 2.11 with PyTorch's outputs at three shapes; the same graph is also written
here with onnx's helpers, with onnxruntime running it with the plugin spelled in standard ops
as a second reference. kiln must accept
the unknown keys with one warning line, run from .onnx and through a plan at several shapes, and
still refuse a bias_axis it cannot use.
"""

import json
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
PLUGINS = os.environ.get("KILN_PLUGINS") or os.path.join(REPO, "build", "plugins")
SWISH_LIB = os.path.join(PLUGINS, "libswish.so")
SEED_INFO = json.dumps({"size": 555, "shape": [6, 7, 8], "module": "abcdefg"})
SHAPES = [(1, 3, 8, 8), (2, 3, 13, 21), (4, 3, 5, 7)]
TORCH_EXPORT = os.path.join(REPO, "examples", "swish", "seed")


def conv_weight():
    w = np.zeros((3, 3, 3, 3), np.float32)
    for c in range(3):
        w[c, c] = np.eye(3, dtype=np.float32)
    return w


def seed_model(info=SEED_INFO, plugin=True):
    dims = ["batch", 3, "height", "width"]
    inits = [numpy_helper.from_array(conv_weight(), "conv.weight"),
             numpy_helper.from_array(np.full(3, 3.15, np.float32), "bias")]
    nodes = [helper.make_node("Conv", ["image", "conv.weight"], ["/conv/Conv_output_0"],
                              name="/conv/Conv", dilations=[1, 1], group=1,
                              kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])]
    if plugin:
        # Attributes by hand: the node's own `name` keyword would shadow the attribute `name`.
        node = helper.make_node("Plugin", ["/conv/Conv_output_0", "bias"], ["output"],
                                name="/Plugin", domain="custom")
        node.attribute.extend([helper.make_attribute("info", info),
                               helper.make_attribute("name", "Swish")])
        nodes.append(node)
    else:  # the same computation in standard ops, for onnxruntime
        inits.append(numpy_helper.from_array(np.array([1, 3, 1, 1], np.int64), "bshape"))
        nodes += [helper.make_node("Sigmoid", ["/conv/Conv_output_0"], ["s"]),
                  helper.make_node("Mul", ["/conv/Conv_output_0", "s"], ["m"]),
                  helper.make_node("Reshape", ["bias", "bshape"], ["b4"]),
                  helper.make_node("Add", ["m", "b4"], ["output"])]
    graph = helper.make_graph(nodes, "main_graph",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
                              inits)
    opsets = [helper.make_opsetid("", 11)] + ([helper.make_opsetid("custom", 1)] if plugin else [])
    return helper.make_model(graph, opset_imports=opsets, producer_name="pytorch")


def kiln(*args, check=True):
    env = dict(os.environ)
    env.pop("KILN_PLUGIN_PATH", None)
    r = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=300)
    if check:
        assert r.returncode == 0, f"kiln {args} failed: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    d = tmp_path_factory.mktemp("seed")
    onnx.save(seed_model(), d / "swish_seed.onnx")
    ref = ort.InferenceSession(seed_model(plugin=False).SerializeToString(),
                               providers=["CPUExecutionProvider"])
    rng = np.random.RandomState(7)
    cases = []
    for i, shape in enumerate(SHAPES):
        x = (rng.randn(*shape) * 2).astype(np.float32)
        np.save(d / f"x{i}.npy", x)
        cases.append((d / f"x{i}.npy", ref.run(None, {"image": x})[0]))
    return d, cases


def test_reference_is_the_seed_formula(seed):
    _, cases = seed
    x = np.load(cases[0][0])
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = pad[:, :, :-2, :-2] + pad[:, :, 1:-1, 1:-1] + pad[:, :, 2:, 2:]
    np.testing.assert_allclose(cases[0][1], conv / (1 + np.exp(-conv)) + 3.15, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("form", ["onnx", "plan"])
def test_seed_export_runs_and_matches(seed, tmp_path, form):
    d, cases = seed
    target = d / "swish_seed.onnx"
    if form == "plan":
        target = tmp_path / "seed.plan"
        r = kiln("build", d / "swish_seed.onnx", "-o", target, "--plugins", SWISH_LIB,
                 "--shapes", "image:1x3x4x4,2x3x16x16,4x3x32x32")
        warnings = [ln for ln in r.stderr.splitlines() if "ignoring keys" in ln]
        assert len(warnings) == 1, r.stderr
        assert "size,shape,module" in warnings[0]
    for i, (x, want) in enumerate(cases):
        out = tmp_path / f"out{i}"
        kiln("run", target, "--plugins", SWISH_LIB, "--input", f"image={x}", "--output-dir", out)
        got = np.load(out / "output.npy")
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_bad_bias_axis_is_still_refused(tmp_path):
    info = json.dumps({"size": 555, "bias_axis": 7.5})
    onnx.save(seed_model(info), tmp_path / "m.onnx")
    r = kiln("build", tmp_path / "m.onnx", "-o", tmp_path / "p", "--plugins", SWISH_LIB,
             "--shapes", "image:1x3x4x4", check=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert "bias_axis" in lines[0] and "Swish" in lines[0]


def test_malformed_info_is_refused(tmp_path):
    onnx.save(seed_model('{"size": [1, 2'), tmp_path / "m.onnx")
    r = kiln("build", tmp_path / "m.onnx", "-o", tmp_path / "p", "--plugins", SWISH_LIB,
             "--shapes", "image:1x3x4x4", check=False)
    assert r.returncode != 0 and "not valid JSON" in r.stderr, r.stderr


@pytest.mark.parametrize("form", ["onnx", "plan"])
def test_the_pytorch_export_matches_pytorch(tmp_path, form):
    model = os.path.join(TORCH_EXPORT, "swish_seed.onnx")
    node = [n for n in onnx.load(model).graph.node if n.op_type == "Plugin"][0]
    attrs = {a.name: helper.get_attribute_value(a).decode() for a in node.attribute}
    assert node.domain == "custom" and attrs == {"name": "Swish", "info": SEED_INFO}
    target = model
    if form == "plan":
        target = tmp_path / "seed.plan"
        kiln("build", model, "-o", target, "--plugins", SWISH_LIB,
             "--shapes", "image:1x3x4x4,2x3x16x16,4x3x32x32")
    for i in range(len(SHAPES)):
        x = os.path.join(TORCH_EXPORT, "data", f"input_{i}.npy")
        assert np.load(x).shape == SHAPES[i]
        out = tmp_path / f"out{i}"
        kiln("run", target, "--plugins", SWISH_LIB, "--input", f"image={x}", "--output-dir", out)
        want = np.load(os.path.join(TORCH_EXPORT, "data", f"output_{i}.npy"))
        np.testing.assert_allclose(np.load(out / "output.npy"), want, rtol=1e-5, atol=1e-5)
