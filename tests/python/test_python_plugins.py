"""Python plugins end to end: registration, build and run from ONNX (op_type mapping and
custom Plugin nodes), networks built by code, plans round-tripped with the plugin re-registered,
fields of every type, and errors inside plugin code reported as KilnError, never a crash."""

import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from pykiln_helpers import make_model
from onnx import TensorProto, helper

import kiln


class PyScale(kiln.Plugin):
    """y = x * scale + shift"""

    name = "PyScale"
    version = "1"
    namespace = ""
    fields = {"scale": kiln.field(kiln.FLOAT32, required=True), "shift": kiln.FLOAT32}
    calls = 0

    def output_shapes(self, input_shapes):
        return [input_shapes[0]]

    def compute(self, inputs, outputs):
        type(self).calls += 1
        x, y = inputs[0], outputs[0]
        assert not x.flags.writeable and y.flags.writeable
        y[...] = x * np.float32(self.fields["scale"]) + np.float32(self.fields.get("shift", 0.0))


class PySplitSign(kiln.Plugin):
    """Two outputs of different dtypes: |x| (float32) and sign(x) (int64); returns arrays."""

    name = "PySplitSign"
    dtypes = (np.float32, np.int64)

    def num_outputs(self):
        return 2

    def output_dtypes(self, in_dtypes):
        return [in_dtypes[0], np.int64]

    def output_shapes(self, input_shapes):
        return [input_shapes[0], input_shapes[0]]

    def compute(self, inputs, outputs):
        x = inputs[0]
        return [np.abs(x), np.sign(x).astype(np.int64)]


class PyRowSum(kiln.Plugin):
    """Sums the last axis: the output shape depends on the input's dims."""

    name = "PyRowSum"
    namespace = "custom"

    def output_shapes(self, input_shapes):
        return [input_shapes[0][:-1]]

    def compute(self, inputs, outputs):
        np.sum(inputs[0], axis=-1, out=outputs[0])


class PyFieldEcho(kiln.Plugin):
    """Copies x; records the fields of every instance created (to check serialization)."""

    name = "PyFieldEcho"
    fields = {
        "i": kiln.INT64,
        "f": kiln.FLOAT32,
        "s": kiln.STRING,
        "ii": kiln.INT64S,
        "ff": kiln.FLOAT32S,
        "b": kiln.BYTES,
    }
    seen = []

    def __init__(self, fields):
        super().__init__(fields)
        type(self).seen.append(dict(self.fields))

    def output_shapes(self, input_shapes):
        return input_shapes[:1]

    def compute(self, inputs, outputs):
        outputs[0][...] = inputs[0]


class PyBroken(kiln.Plugin):
    """Fails where its field 'where' says."""

    name = "PyBroken"
    fields = {"where": kiln.field(kiln.STRING, default="compute")}

    def __init__(self, fields):
        super().__init__(fields)
        if self.fields["where"] == "create":
            raise ValueError("refusing to be created")

    def num_outputs(self):
        if self.fields["where"] == "num_outputs":
            return 0
        return 1

    def output_shapes(self, input_shapes):
        if self.fields["where"] == "shapes":
            raise KeyError("no shape for you")
        if self.fields["where"] == "bad_shapes":
            return [(2, -3)]
        if self.fields["where"] == "two_shapes":
            return [input_shapes[0], input_shapes[0]]
        return [input_shapes[0]]

    def compute(self, inputs, outputs):
        if self.fields["where"] == "compute":
            return 1 / 0
        if self.fields["where"] == "wrong_return":
            return [np.zeros((1,), np.float32)]
        outputs[0][...] = inputs[0]


class PyCudaOnly(PyScale):
    """PyScale declaring the CUDA backend alone (its compute would get kiln.DeviceArray)."""

    name = "PyCudaOnly"
    backends = ("cuda",)


for cls in (PyScale, PySplitSign, PyRowSum, PyFieldEcho, PyBroken, PyCudaOnly):
    kiln.default_registry().add(cls)


def _x(shape=(2, 3), seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def _plugin_model(op_type, attrs, domain="", shape=(2, 3), n_out=1, out_types=None):
    opsets = [("", 17)] + ([(domain, 1)] if domain else [])
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, ["x"], outs, name="p", domain=domain)
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    out_types = out_types or [TensorProto.FLOAT] * n_out
    return make_model(
        [node],
        [("x", TensorProto.FLOAT, list(shape))],
        [(o, t, None) for o, t in zip(outs, out_types)],
        opsets=opsets,
    )


def test_registered_in_the_default_registry():
    ids = kiln.default_registry().plugins()
    assert ("PyScale", "1", "") in ids and ("PyRowSum", "1", "custom") in ids
    with pytest.raises(kiln.KilnError) as ei:
        kiln.register_plugin(PyScale)  # the same identity twice
    assert "already registered" in ei.value.message


def test_onnx_op_type_mapping():
    x = _x()
    model = _plugin_model("PyScale", {"scale": 2.0, "shift": 1.0})
    y = kiln.run(model, {"x": x})["y0"]
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))


def test_onnx_custom_domain_and_int_for_float_field():
    x = _x()
    model = _plugin_model("PyScale", {"scale": 3}, domain="custom")
    np.testing.assert_array_equal(kiln.run(model, {"x": x})["y0"], x * np.float32(3))


def test_onnx_generic_plugin_node():
    x = _x((4, 5))
    model = _plugin_model(
        "Plugin", {"name": "PyRowSum", "plugin_namespace": "custom"}, domain="custom", shape=(4, 5)
    )
    y = kiln.run(model, {"x": x})["y0"]
    assert y.shape == (4,)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-6)


def test_two_outputs_with_their_own_dtypes():
    x = _x((3, 3))
    model = _plugin_model(
        "PySplitSign", {}, shape=(3, 3), n_out=2, out_types=[TensorProto.FLOAT, TensorProto.INT64]
    )
    out = kiln.run(model, {"x": x})
    np.testing.assert_array_equal(out["y0"], np.abs(x))
    assert out["y1"].dtype == np.int64
    np.testing.assert_array_equal(out["y1"], np.sign(x).astype(np.int64))


def test_dynamic_shapes_with_a_plugin():
    net = kiln.Network()
    x = net.add_input("x", np.float32, ("batch", 6))
    net.mark_output(net.add_plugin(PyRowSum, [x]), name="y")
    plan = kiln.build(net, shapes={"x": ((1, 6), (4, 6), (16, 6))})
    engine = kiln.Engine(plan)
    assert engine.outputs[0].shape == ("batch",)
    ctx = engine.context()
    for n in (1, 7, 16):
        xv = _x((n, 6), n)
        np.testing.assert_allclose(ctx.run({"x": xv})["y"], xv.sum(axis=1), rtol=1e-6)


def test_network_plugin_layer_by_name_and_class():
    net = kiln.Network()
    x = net.add_input("x", np.float32, (2, 3))
    a = net.add_plugin("PyScale", [x], fields={"scale": 2})  # int converted: declared float
    b = net.add_plugin(PyScale, [a], fields={"scale": 0.5, "shift": -1.0})
    assert b.shape == (2, 3) and b.dtype == np.float32
    net.mark_output(b, name="y")
    xv = _x()
    y = kiln.run(net, {"x": xv})["y"]
    np.testing.assert_array_equal(y, (xv * np.float32(2)) * np.float32(0.5) - np.float32(1))


def test_plan_round_trip_needs_the_plugin_registered(tmp_path):
    reg = kiln.Registry()
    reg.register(PyScale)
    path = tmp_path / "scale.plan"
    path.write_bytes(kiln.build(_plugin_model("PyScale", {"scale": 4.0}), plugins=reg))
    del reg
    gc.collect()
    with pytest.raises(kiln.KilnError) as ei:
        kiln.Engine(path, plugins=kiln.Registry())
    assert ei.value.status_name == "PLUGIN"
    assert "PyScale" in ei.value.message and "not registered" in ei.value.message
    again = kiln.Registry()
    again.register(PyScale)  # what importing the defining module does
    x = _x()
    y = kiln.Engine(path, plugins=again).context().run({"x": x})["y0"]
    np.testing.assert_array_equal(y, x * np.float32(4))


def test_every_field_type_survives_the_plan():
    PyFieldEcho.seen.clear()
    fields = {"i": -7, "f": 0.25, "s": "héllo", "ii": [1, -2, 3], "ff": [0.5, -1.5], "b": b"a\0b"}
    net = kiln.Network()
    x = net.add_input("x", np.float32, (2,))
    net.mark_output(net.add_plugin("PyFieldEcho", [x], fields=fields), name="y")
    plan = kiln.build(net)
    PyFieldEcho.seen.clear()
    engine = kiln.Engine(plan)
    assert PyFieldEcho.seen, "loading the plan creates the plugin from its stored fields"
    assert PyFieldEcho.seen[0] == fields
    np.testing.assert_array_equal(engine.context().run({"x": [1.0, 2.0]})["y"], [1.0, 2.0])


def test_prefer_plugins_replaces_a_builtin_op():
    class Relu(kiln.Plugin):
        name = "Relu"
        ran = 0

        def output_shapes(self, input_shapes):
            return [input_shapes[0]]

        def compute(self, inputs, outputs):
            type(self).ran += 1
            np.maximum(inputs[0], 0, out=outputs[0])

    reg = kiln.Registry()
    reg.register(Relu)
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")],
        [("x", TensorProto.FLOAT, [4])],
        [("y", TensorProto.FLOAT, [4])],
    )
    x = np.array([-1, 2, -3, 4], np.float32)
    builtin = kiln.build(model, plugins=reg)
    assert kiln.plan_layers(builtin)[0][1] == "Relu" and kiln.plan_layers(builtin)[0][2] == ""
    plan = kiln.build(model, plugins=reg, prefer_plugins=["Relu"])
    assert kiln.plan_layers(plan)[0][2] == "kiln.plugin"
    y = kiln.Engine(plan, plugins=reg).context().run({"x": x})["y"]
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert Relu.ran == 1


def test_contexts_get_clones_and_instances_are_released():
    before = kiln.plugin.live_instances()
    engine = kiln.Engine(kiln.build(_plugin_model("PyScale", {"scale": 2.0})))
    contexts = [engine.context() for _ in range(3)]
    assert kiln.plugin.live_instances() == before + 4
    results = []

    def work(ctx, seed):
        x = _x(seed=seed)
        results.append(np.array_equal(ctx.run({"x": x})["y0"], x * np.float32(2)))

    threads = [threading.Thread(target=work, args=(c, i)) for i, c in enumerate(contexts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 3
    del contexts, engine, threads
    gc.collect()
    assert kiln.plugin.live_instances() == before


@pytest.mark.parametrize(
    "where, words",
    [
        ("compute", ["compute", "ZeroDivisionError"]),
        ("wrong_return", ["compute", "shape (1,)"]),
    ],
)
def test_errors_at_run_time_become_kiln_errors(where, words):
    engine = kiln.Engine(kiln.build(_plugin_model("PyBroken", {"where": where})))
    ctx = engine.context()
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"x": _x()})
    assert ei.value.status_name == "PLUGIN"
    for w in words:
        assert w in ei.value.message, ei.value.message
    assert "PyBroken" in ei.value.message
    with pytest.raises(kiln.KilnError):  # and again: the context survives
        ctx.run({"x": _x()})


@pytest.mark.parametrize(
    "where, words",
    [
        ("create", ["refusing to be created"]),
        ("num_outputs", ["PyBroken", "-1 outputs"]),
        ("shapes", ["output_shapes", "KeyError", "no shape for you"]),
        ("bad_shapes", ["output_shapes", "negative"]),
        ("two_shapes", ["output_shapes", "2 shapes for 1 outputs"]),
    ],
)
def test_errors_at_build_time_become_kiln_errors(where, words):
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(_plugin_model("PyBroken", {"where": where}))
    for w in words:
        assert w in ei.value.message, ei.value.message


def test_field_errors():
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(_plugin_model("PyScale", {"shift": 1.0}))
    assert "needs field 'scale'" in ei.value.message
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(_plugin_model("PyScale", {"scale": "big"}))
    assert "scale" in ei.value.message
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(_plugin_model("PyScale", {"scale": 1.0, "sacle": 2.0}))
    assert "no field 'sacle'" in ei.value.message
    net = kiln.Network()
    x = net.add_input("x", np.float32, (2,))
    with pytest.raises(kiln.KilnError) as ei:
        net.add_plugin("PyScale", [x], fields={"shift": 1.0})
    assert "needs field 'scale'" in ei.value.message
    with pytest.raises(kiln.KilnError) as ei:
        net.add_plugin("PyScale", [x], fields={"scale": "x"})
    assert "scale" in ei.value.message
    # the network is unharmed by refused calls
    net.mark_output(net.add_plugin("PyScale", [x], fields={"scale": 1.0}), name="y")
    np.testing.assert_array_equal(kiln.run(net, {"x": [1.0, -1.0]})["y"], [1.0, -1.0])


def test_bad_plugin_classes():
    class NoName(kiln.Plugin):
        pass

    class BadField(kiln.Plugin):
        name = "BadField"
        fields = {"a": 99}

    with pytest.raises(kiln.KilnError) as ei:
        kiln.Registry().register(NoName)
    assert "no name" in ei.value.message
    with pytest.raises(kiln.KilnError) as ei:
        kiln.Registry().register(BadField)
    assert "field 'a'" in ei.value.message
    with pytest.raises(kiln.KilnError):
        kiln.Registry().register(int)


def test_unsupported_dtype_is_refused_by_format_negotiation():
    model = make_model(
        [helper.make_node("PyScale", ["x"], ["y"], name="p", scale=1.0)],
        [("x", TensorProto.INT32, [3])],
        [("y", TensorProto.INT32, [3])],
    )
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(model)
    assert "refused input 0" in ei.value.message and "int32" in ei.value.message


def test_library_plugins_load_through_the_registry(tmp_path):
    with pytest.raises(kiln.KilnError) as ei:
        kiln.Registry().load_library(tmp_path / "nope.so")
    assert ei.value.status_name == "NOT_FOUND" and "nope.so" in ei.value.message
    bogus = tmp_path / "bogus.so"
    bogus.write_bytes(b"not a library")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.load_plugin_library(bogus)
    assert "bogus.so" in ei.value.message


def _plugin_dir():
    d = os.path.join(os.path.dirname(os.path.dirname(kiln.LIBRARY_PATH)), "plugins")
    if not os.path.exists(os.path.join(d, "libswish.so")):
        pytest.skip(f"{d}/libswish.so is not built")
    return d


def _python(code, *args, **env):
    """Runs code in a fresh interpreter (argv[1:] = args) with kiln importable."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.path.dirname(os.path.dirname(kiln.__file__))
    full.setdefault("KILN_LIBRARY", kiln.LIBRARY_PATH)
    return subprocess.run([sys.executable, "-c", code, *args], env=full, capture_output=True,
                          text=True, timeout=120)


def test_default_registry_loads_kiln_plugin_path():
    d = _plugin_dir()
    r = _python("import kiln; print(sorted(n for n, _, _ in kiln.default_registry().plugins()))",
                KILN_PLUGIN_PATH=d)
    assert r.returncode == 0, r.stderr
    assert "'Swish'" in r.stdout
    r = _python("import kiln\ntry:\n    kiln.default_registry()\nexcept kiln.KilnError as e:\n"
                "    print('refused:', e.message)", KILN_PLUGIN_PATH="/no/such/dir.so")
    assert r.returncode == 0, r.stderr
    assert "refused: KILN_PLUGIN_PATH" in r.stdout and "/no/such/dir.so" in r.stdout


def test_library_and_python_plugins_in_one_model():
    d = _plugin_dir()
    reg = kiln.Registry()
    reg.add([os.path.join(d, "libswish.so"), PyScale])
    net = kiln.Network(registry=reg)
    x = net.add_input("x", np.float32, (2, 4))
    bias = net.add_constant(np.zeros((4,), np.float32))
    s = net.add_plugin("Swish", [x, bias])
    net.mark_output(net.add_plugin(PyScale, [s], fields={"scale": 2.0}), name="y")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(net, plugins=kiln.Registry())
    assert "registry it was created with" in ei.value.message
    xv = _x((2, 4))
    y = kiln.Engine(kiln.build(net), plugins=reg).context().run({"x": xv})["y"]
    np.testing.assert_allclose(y, 2 * xv / (1 + np.exp(-xv)), rtol=1e-5, atol=1e-6)


def test_plan_with_a_python_plugin_across_processes(tmp_path):
    (tmp_path / "myplugins.py").write_text(
        "import numpy as np, kiln\n"
        "class Cube(kiln.Plugin):\n"
        "    name = 'Cube'\n"
        "    fields = {'k': kiln.FLOAT32}\n"
        "    def output_shapes(self, s):\n"
        "        return [s[0]]\n"
        "    def compute(self, ins, outs):\n"
        "        outs[0][...] = np.float32(self.fields['k']) * ins[0] ** 3\n"
        "kiln.register_plugin(Cube)\n"
    )
    plan = tmp_path / "cube.plan"
    build = (
        "import sys, numpy as np, kiln\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import myplugins\n"
        "net = kiln.Network()\n"
        "x = net.add_input('x', np.float32, (3,))\n"
        "net.mark_output(net.add_plugin('Cube', [x], fields={'k': 0.5}), name='y')\n"
        f"open({str(plan)!r}, 'wb').write(kiln.build(net))\n"
    )
    load = (
        "import sys, numpy as np, kiln\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "if sys.argv[1] == 'import': import myplugins\n"
        "try:\n"
        f"    y = kiln.run({str(plan)!r}, {{'x': np.array([1, 2, -3], np.float32)}})['y']\n"
        "    print('y =', y.tolist())\n"
        "except kiln.KilnError as e:\n"
        "    print('error:', e.message)\n"
    )
    r = _python(build)
    assert r.returncode == 0, r.stderr
    r = _python(load, "no-import")
    assert r.returncode == 0, r.stderr
    assert "error:" in r.stdout and "'Cube'" in r.stdout and "not registered" in r.stdout
    r = _python(load, "import")
    assert r.returncode == 0, r.stderr
    assert "y = [0.5, 4.0, -13.5]" in r.stdout



def test_cuda_only_python_plugin_is_refused_on_the_cpu():
    """backends=("cuda",) reaches kiln as ABI v2's supports_backend: a CPU build refuses the
    node with its name and the plugin's, where a plugin with the default backends runs."""
    model = _plugin_model("PyCudaOnly", {"scale": 2.0})
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(model)
    msg = ei.value.message
    assert "node 'p': plugin 'PyCudaOnly' does not run on the cpu" in msg, msg


def test_device_array_interface():
    """What a Python plugin gets on the CUDA backend: the CUDA array interface (v3) of kiln's
    device buffer and stream (never flagged read-only: torch refuses such arrays)."""
    a = kiln.DeviceArray(0x7F0000001000, (2, 3), np.float16, 0x55, writable=False)
    cai = a.__cuda_array_interface__
    assert cai == {"shape": (2, 3), "typestr": "<f2", "data": (0x7F0000001000, False),
                   "strides": None, "version": 3, "stream": 0x55}
    assert a.nbytes == 12 and a.size == 6 and not a.writable
    assert "stream" not in kiln.DeviceArray(16, (4,), np.float32, 0, True).__cuda_array_interface__


class _FakeDeviceArray:
    """A strided device array as a producer would describe it (no memory behind it)."""

    __cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "data": (4096, False),
                                "strides": (4, 8), "version": 3}


def test_device_inputs_are_checked_before_binding():
    """A device array kiln would have to copy (strided, or of another dtype) is refused with
    the input's name; outputs binds numpy or CUDA arrays, nothing else."""
    engine = kiln.Engine(kiln.build(_plugin_model("PyScale", {"scale": 1.0})))
    ctx = engine.context()
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"x": _FakeDeviceArray()})
    assert "input 'x'" in ei.value.message and "C-contiguous" in ei.value.message
    contiguous = type("C", (), {"__cuda_array_interface__": {
        "shape": (2, 3), "typestr": "<f2", "data": (4096, False), "strides": None,
        "version": 3}})()
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"x": contiguous})
    assert "input 'x' is float32" in ei.value.message and "float16" in ei.value.message
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"x": _x()}, outputs={"y0": [[0.0] * 3] * 2})
    assert "binds numpy arrays or CUDA arrays, not list" in ei.value.message
    np.testing.assert_array_equal(ctx.run({"x": _x()})["y0"], _x())


def test_a_library_that_refuses_to_register_fails_every_time():
    """A library whose entry refuses fails with its reason on each load, not OK the second time
    (the registry forgets it)."""
    plugins = os.environ.get("KILN_PLUGINS") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build",
        "plugins")
    lib_path = os.path.join(plugins, "test", "librefusing.so")
    reg = kiln.Registry()
    for _ in range(2):
        with pytest.raises(kiln.KilnError) as ei:
            reg.load_library(lib_path)
        assert ei.value.status_name == "PLUGIN", ei.value.message
        assert "failed to register" in ei.value.message
        assert "needs a device this machine lacks" in ei.value.message
