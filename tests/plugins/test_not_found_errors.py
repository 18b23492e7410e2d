"""The three ways a node can fail to find what runs it each get their own one-line message:

- an op of ONNX's domain that no backend implements (and no plugin provides): names the node,
  the op, the built-in ops and plugins close to its name, and how to load a plugin library;
- a custom-domain op with no plugin of that name registered: names the node, op and domain,
  how many plugins are registered and which come close, and how to load a library;
- a plugin found under another version or namespace: names what was asked for and what is
  registered, and how to load the right library or take any version.
"""

import os
import subprocess

import onnx
import pytest
from onnx import TensorProto, helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
PLUGINS = os.environ.get("KILN_PLUGINS") or os.path.join(REPO, "build", "plugins")
SWISH_LIB = os.path.join(PLUGINS, "libswish.so")
RSM_LIB = os.path.join(PLUGINS, "librelu_sigmoid_mul.so")
HOW_TO_LOAD = "--plugins LIB.so, KILN_PLUGIN_PATH or kiln_registry_load_library()"


def model(path, op, domain="", **attrs):
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain)
    for k, v in attrs.items():
        node.attribute.append(helper.make_attribute(k, v))
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def build_error(path, *libs):
    args = [KILN, "build", str(path), "-o", str(path) + ".plan"]
    for lib in libs:
        args += ["--plugins", lib]
    env = dict(os.environ)
    env.pop("KILN_PLUGIN_PATH", None)
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    return lines[0]


def test_onnx_op_no_backend_has(tmp_path):
    line = build_error(model(tmp_path / "m.onnx", "Reluu"), SWISH_LIB)
    assert "node 'the_node'" in line and "op 'Reluu'" in line
    assert "is not an ONNX op that kiln's backends implement" in line
    assert "close built-in ops: 'Relu'" in line
    assert HOW_TO_LOAD in line


def test_onnx_op_close_to_a_registered_plugin(tmp_path):
    line = build_error(model(tmp_path / "m.onnx", "swish"), SWISH_LIB)
    assert "close registered plugins: 'Swish'" in line


def test_custom_op_without_plugin(tmp_path):
    line = build_error(model(tmp_path / "m.onnx", "Swish", domain="custom"))
    assert "node 'the_node'" in line and "custom op 'Swish' (domain 'custom')" in line
    assert "needs a plugin named 'Swish'" in line and "no plugins are registered" in line
    assert HOW_TO_LOAD in line


def test_custom_op_with_a_near_plugin_registered(tmp_path):
    line = build_error(model(tmp_path / "m.onnx", "Swishh", domain="custom"), SWISH_LIB, RSM_LIB)
    assert "2 plugins registered; close: 'Swish'" in line and HOW_TO_LOAD in line


def test_generic_plugin_node_names_the_plugin(tmp_path):
    line = build_error(model(tmp_path / "m.onnx", "Plugin", domain="custom", name="Frobnicator"),
                       SWISH_LIB)
    assert "needs a plugin named 'Frobnicator'" in line and "1 plugin registered, none close" in line


@pytest.mark.parametrize("attrs,asked", [({"plugin_version": "2"}, "version '2'"),
                                         ({"plugin_namespace": "acme"}, "namespace 'acme'")])
def test_plugin_with_wrong_identity(tmp_path, attrs, asked):
    line = build_error(model(tmp_path / "m.onnx", "Swish", domain="custom", **attrs), SWISH_LIB)
    assert "node 'the_node' asks for plugin 'Swish'" in line and asked in line
    assert "registered only as: version '1' namespace ''" in line
    assert HOW_TO_LOAD in line and "plugin_version/plugin_namespace" in line


def test_the_three_messages_differ(tmp_path):
    lines = [build_error(model(tmp_path / "a.onnx", "Swish2"), SWISH_LIB),
             build_error(model(tmp_path / "b.onnx", "Swish2", domain="custom"), SWISH_LIB),
             build_error(model(tmp_path / "c.onnx", "Swish", domain="custom", plugin_version="2"),
                         SWISH_LIB)]
    heads = [ln.split(": node 'the_node'")[1][:40] for ln in lines]
    assert len(set(heads)) == 3, lines
