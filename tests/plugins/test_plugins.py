"""End-to-end tests of kiln plugins through the CLI.

The kiln binary comes from $KILN (default build/bin/kiln) and the plugin libraries from
$KILN_PLUGINS (default build/plugins, with the deliberately broken one in its test/ folder).
The Swish model and its PyTorch references are checked in (examples/swish), so no torch here.
"""

import glob
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
PLUGINS = os.environ.get("KILN_PLUGINS") or os.path.join(REPO, "build", "plugins")
SWISH_LIB = os.path.join(PLUGINS, "libswish.so")
RSM_LIB = os.path.join(PLUGINS, "librelu_sigmoid_mul.so")
BROKEN_LIB = os.path.join(PLUGINS, "test", "libbroken.so")
EXAMPLE = os.path.join(REPO, "examples", "swish")
SWISH_MODEL = os.path.join(EXAMPLE, "swish.onnx")
SAMPLES = sorted(glob.glob(os.path.join(EXAMPLE, "data", "input_*.npy")))

pytestmark = pytest.mark.skipif(
    not (os.path.exists(KILN) and os.path.exists(SWISH_LIB)),
    reason="build kiln and the plugins first (KILN / KILN_PLUGINS)")

CUBE_SRC = r"""
#include "kiln/kiln_plugin.h"
#include <stdlib.h>

typedef struct cube { const kiln_host_api *host; } cube;

static int32_t cube_outputs(void *self) { (void)self; return 1; }
static int32_t cube_shapes(void *self, int32_t n_in, const kiln_shape_expr *in, int32_t n_out,
                           kiln_shape_expr *out, kiln_expr_builder *b) {
    (void)b;
    if (n_in != 1 || n_out != 1) {
        ((cube *)self)->host->set_error("Cube takes one input");
        return -1;
    }
    out[0] = in[0];
    return 0;
}
static void cube_range(void *arg, int64_t begin, int64_t end) {
    float **io = arg;
    for (int64_t i = begin; i < end; i++)
        io[1][i] = io[0][i] * io[0][i] * io[0][i];
}
static int32_t cube_enqueue(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                            const void *const *inputs, int32_t n_out,
                            const kiln_tensor_desc *out_desc, void *const *outputs,
                            void *workspace, const kiln_stream *stream) {
    (void)n_in, (void)n_out, (void)out_desc, (void)workspace;
    int64_t n = 1;
    for (int d = 0; d < in_desc[0].rank; d++)
        n *= in_desc[0].dims[d];
    float *io[2] = {(float *)inputs[0], (float *)outputs[0]};
    ((cube *)self)->host->parallel_for(stream, n, 4096, cube_range, io);
    return 0;
}
static void *cube_clone(void *self) {
    cube *c = malloc(sizeof *c);
    if (c) *c = *(cube *)self;
    return c;
}
static void cube_destroy(void *self) { free(self); }
static const kiln_plugin_ops cube_ops = {
    .struct_size = sizeof(kiln_plugin_ops), .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = cube_outputs, .output_shapes = cube_shapes, .enqueue = cube_enqueue,
    .clone = cube_clone, .destroy = cube_destroy,
};
static int32_t cube_create(const kiln_plugin_creator *cr, const kiln_field_list *f,
                           kiln_plugin_instance *out) {
    (void)f;
    cube *c = malloc(sizeof *c);
    if (c == NULL) return -1;
    c->host = cr->user;
    out->ops = &cube_ops;
    out->self = c;
    return 0;
}
KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *host, kiln_registry *r) {
    kiln_plugin_creator c = {
        .struct_size = sizeof c, .abi_version = KILN_PLUGIN_ABI_VERSION, .name = "Cube",
        .version = "1", .plugin_namespace = "", .create = cube_create, .user = (void *)host,
    };
    return host->register_creator(r, &c);
}
"""


def kiln(*args, env=None, check=True):
    full_env = dict(os.environ)
    full_env.pop("KILN_PLUGIN_PATH", None)
    full_env.update(env or {})
    r = subprocess.run([KILN, *args], capture_output=True, text=True, env=full_env, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def reference(sample):
    return np.load(sample.replace("input_", "output_"))


def run_swish(model, sample, out_dir, *extra, env=None):
    kiln("run", model, "--input", f"x={sample}", "--output-dir", str(out_dir), *extra, env=env)
    return np.load(os.path.join(out_dir, "y.npy"))


def assert_close(got, want, tol=1e-5):
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def one_line_error(r):
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_samples_cover_several_shapes():
    shapes = {np.load(s).shape for s in SAMPLES}
    assert len(SAMPLES) >= 4 and len(shapes) == len(SAMPLES)


@pytest.mark.parametrize("index", range(5))
def test_swish_with_plugins_flag(tmp_path, index):
    sample = SAMPLES[index]
    got = run_swish(SWISH_MODEL, sample, tmp_path, "--plugins", SWISH_LIB)
    assert_close(got, reference(sample))


@pytest.mark.parametrize("form", ["file", "folder"])
def test_swish_through_plugin_path(tmp_path, form):
    path = SWISH_LIB if form == "file" else PLUGINS
    for i, sample in enumerate(SAMPLES[:3]):
        got = run_swish(SWISH_MODEL, sample, tmp_path / str(i), env={"KILN_PLUGIN_PATH": path})
        assert_close(got, reference(sample))


def test_swish_plan_round_trip(tmp_path):
    plan = str(tmp_path / "swish.plan")
    kiln("build", SWISH_MODEL, "-o", plan, "--shapes", "x:1x3x1x1,2x3x16x24,4x3x32x32",
         "--plugins", SWISH_LIB)
    for i, sample in enumerate(SAMPLES):
        got = run_swish(plan, sample, tmp_path / str(i), "--plugins", SWISH_LIB)
        assert_close(got, reference(sample))


def test_missing_plugin_names_it_and_how_to_load(tmp_path):
    r = kiln("run", SWISH_MODEL, "--input", f"x={SAMPLES[0]}", "--output-dir", str(tmp_path),
             check=False)
    line = one_line_error(r)
    assert "Swish" in line and "--plugins" in line and "KILN_PLUGIN_PATH" in line


def test_plan_without_plugin_names_plugin_and_layer(tmp_path):
    plan = str(tmp_path / "swish.plan")
    kiln("build", SWISH_MODEL, "-o", plan, "--shapes", "x:1x3x8x8", "--plugins", SWISH_LIB)
    r = kiln("run", plan, "--input", f"x={SAMPLES[0]}", "--output-dir", str(tmp_path),
             check=False)
    line = one_line_error(r)
    assert "Swish" in line and "/swish/Plugin" in line and "--plugins" in line


def swish_node_model(path, **attrs):
    node = helper.make_node("Swish", ["x", "bias"], ["y"], domain="custom", name="sw")
    for k, v in attrs.items():
        node.attribute.append(helper.make_attribute(k, v))
    bias = numpy_helper.from_array(np.linspace(-1, 1, 4).astype(np.float32), "bias")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3, 3])], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("custom", 1)])
    onnx.save(model, path)
    return path


def test_op_type_binding_with_version_and_namespace(tmp_path):
    model = swish_node_model(str(tmp_path / "m.onnx"), plugin_version="1", plugin_namespace="",
                             info='{"bias_axis": 1}')
    x = np.random.RandomState(3).randn(2, 4, 3, 3).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    got = run_swish(model, str(tmp_path / "x.npy"), tmp_path / "out", "--plugins", SWISH_LIB)
    want = x / (1 + np.exp(-x)) + np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4, 1, 1)
    assert_close(got, want)


@pytest.mark.parametrize("attrs", [{"plugin_version": "2"}, {"plugin_namespace": "other"}])
def test_identity_mismatch_lists_registered(tmp_path, attrs):
    model = swish_node_model(str(tmp_path / "m.onnx"), **attrs)
    r = kiln("build", model, "-o", str(tmp_path / "p"), "--plugins", SWISH_LIB, check=False)
    line = one_line_error(r)
    assert "Swish" in line and "registered only as" in line
    assert "version '1' namespace ''" in line


def test_bad_info_field_is_refused(tmp_path):
    model = swish_node_model(str(tmp_path / "m.onnx"), info='{"bias_axis": "one"}')
    r = kiln("build", model, "-o", str(tmp_path / "p"), "--plugins", SWISH_LIB, check=False)
    line = one_line_error(r)
    assert "Swish" in line and "bias_axis" in line


def test_out_of_tree_plugin(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "cube.c"
    src.write_text(CUBE_SRC)
    lib = str(tmp_path / "libcube.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-fvisibility=hidden",
                    "-I", os.path.join(REPO, "include"), "-o", lib, str(src)], check=True)
    node = helper.make_node("Cube", ["x"], ["y"], name="cube0")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])])
    model = str(tmp_path / "cube.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    plan = str(tmp_path / "cube.plan")
    kiln("build", model, "-o", plan, "--shapes", "x:1x5,3x5,64x5", "--plugins", lib)
    x = np.random.RandomState(5).randn(7, 5).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for target in (model, plan):
        out = tmp_path / ("out_" + os.path.basename(target))
        kiln("run", target, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out),
             "--plugins", lib)
        np.testing.assert_allclose(np.load(out / "y.npy"), x ** 3, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_relu_sigmoid_mul_matches_numpy(tmp_path, dtype):
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    node = helper.make_node("ReluSigmoidMul", ["x"], ["y"], domain="custom", name="rsm")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", onnx_type, ["N", 16, "H", "W"])],
        [helper.make_tensor_value_info("y", onnx_type, ["N", 16, "H", "W"])])
    model = str(tmp_path / "rsm.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("custom", 1)]), model)
    rng = np.random.RandomState(7)
    for i, shape in enumerate([(1, 16, 5, 5), (2, 16, 33, 47), (1, 16, 1, 1)]):
        x = (rng.randn(*shape) * 6).astype(dtype)
        np.save(tmp_path / f"x{i}.npy", x)
        got = run_swish(model, str(tmp_path / f"x{i}.npy"), tmp_path / f"o{i}", "--plugins",
                        RSM_LIB)
        xf = x.astype(np.float64)
        want = np.maximum(xf, 0) / (1 + np.exp(-xf))
        assert got.dtype == dtype
        if dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:  # within one rounding to half
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("lib", [SWISH_LIB, RSM_LIB])
def test_plugin_check_passes(lib):
    r = kiln("plugin-check", lib, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and r.stdout.count("PASS") >= 8


def test_plugin_check_catches_the_broken_plugin():
    r = kiln("plugin-check", BROKEN_LIB, check=False)
    assert r.returncode == 1, r.stdout
    failed = {ln.split()[1] + " " + ln.split()[2] for ln in r.stdout.splitlines()
              if ln.startswith("FAIL")}
    assert {"output shapes", "enqueue float32", "clones on", "bad fields"} <= failed, r.stdout
    assert "rank 9" in r.stdout and "not finite" in r.stdout and "accepted" in r.stdout


def test_plugin_check_unknown_name():
    r = kiln("plugin-check", SWISH_LIB, "--plugin", "Nope", check=False)
    line = one_line_error(r)
    assert "Nope" in line and "Swish" in line


def test_prefer_plugin_replaces_builtin_op(tmp_path):
    """--prefer-plugin Relu sends Relu nodes to a plugin named Relu; without it the built-in
    op runs."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "relu_cube.c"
    src.write_text(CUBE_SRC.replace('.name = "Cube"', '.name = "Relu"'))
    lib = str(tmp_path / "librelucube.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-fvisibility=hidden",
                    "-I", os.path.join(REPO, "include"), "-o", lib, str(src)], check=True)
    node = helper.make_node("Relu", ["x"], ["y"], name="relu0")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])])
    model = str(tmp_path / "relu.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    x = np.random.RandomState(6).randn(4, 5).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    builtin, plugin = tmp_path / "builtin", tmp_path / "plugin"
    kiln("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(builtin),
         "--plugins", lib)
    np.testing.assert_array_equal(np.load(builtin / "y.npy"), np.maximum(x, 0))
    kiln("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(plugin),
         "--plugins", lib, "--prefer-plugin", "Relu")
    np.testing.assert_allclose(np.load(plugin / "y.npy"), x ** 3, rtol=1e-6)
    inspect = kiln("inspect", model, "--plugins", lib, "--prefer-plugin", "Relu").stdout
    assert "plugin:Relu" in inspect and "Relu (version 1" in inspect
