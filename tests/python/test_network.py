"""kiln.Network: typed helpers and generic layers against numpy references, and invalid calls
refused with KilnError by the call that is wrong."""

import numpy as np
import pytest

import kiln


def _run(net, feeds):
    return kiln.run(net, feeds)


def _err(excinfo, status, *words):
    e = excinfo.value
    assert e.status_name == status, e
    for w in words:
        assert w in e.message, e.message


def _conv_ref(x, w, b, pad):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,mc->nmhw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out + b[None, :, None, None]


def test_conv_activation_pool(rng):
    x = rng.randn(2, 3, 8, 8).astype(np.float32)
    w = rng.randn(4, 3, 3, 3).astype(np.float32)
    b = rng.randn(4).astype(np.float32)
    net = kiln.Network()
    t = net.add_input("x", np.float32, (2, 3, 8, 8))
    t = net.add_convolution(t, w, b, pads=(1, 1, 1, 1), name="conv")
    assert t.shape == (2, 4, 8, 8) and t.dtype == np.float32
    t = net.add_activation(t, kiln.Activation.LEAKY_RELU, alpha=0.1)
    t = net.add_pooling(t, "average", kernel=(2, 2))
    assert t.shape == (2, 4, 4, 4)
    net.mark_output(t, name="y")
    ref = _conv_ref(x, w, b, 1)
    ref = np.where(ref > 0, ref, 0.1 * ref).reshape(2, 4, 4, 2, 4, 2).mean(axis=(3, 5))
    np.testing.assert_allclose(_run(net, {"x": x})["y"], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kind, alpha, beta, ref",
    [
        ("relu", 0, 0, lambda x: np.maximum(x, 0)),
        ("sigmoid", 0, 0, lambda x: 1 / (1 + np.exp(-x))),
        ("tanh", 0, 0, np.tanh),
        ("clip", -0.5, 0.5, lambda x: np.clip(x, -0.5, 0.5)),
        ("elu", 1.0, 0, lambda x: np.where(x > 0, x, np.exp(x) - 1)),
        ("swish", 0, 0, lambda x: x / (1 + np.exp(-x))),
        ("hard_swish", 0, 0, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    ],
)
def test_activations(kind, alpha, beta, ref, rng):
    x = rng.randn(3, 7).astype(np.float32) * 3
    net = kiln.Network()
    t = net.add_input("x", np.float32, x.shape)
    net.mark_output(net.add_activation(t, kind, alpha=alpha, beta=beta), name="y")
    np.testing.assert_allclose(_run(net, {"x": x})["y"], ref(x.astype(np.float64)), atol=2e-6,
                               rtol=1e-5)


def test_matmul_gemm_elementwise_softmax(rng):
    a = rng.randn(2, 5).astype(np.float32)
    w = rng.randn(3, 5).astype(np.float32)
    c = rng.randn(3).astype(np.float32)
    m = rng.randn(5, 4).astype(np.float32)
    net = kiln.Network()
    ta = net.add_input("a", np.float32, (2, 5))
    g = net.add_matmul(ta, w, c, trans_b=True)
    mm = net.add_matmul(ta, m)
    assert g.shape == (2, 3) and mm.shape == (2, 4)
    s = net.add_softmax(g, axis=1)
    d = net.add_elementwise(mm, net.add_constant(np.float32(2)), "div")
    net.mark_output(s, name="s")
    net.mark_output(d, name="d")
    out = _run(net, {"a": a})
    logits = a.astype(np.float64) @ w.T + c
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["s"], e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(out["d"], (a @ m) / 2, rtol=1e-5, atol=1e-6)


def test_reshape_transpose_concat_and_generic_layers(rng):
    x = rng.randn(2, 3, 4).astype(np.float32)
    net = kiln.Network()
    t = net.add_input("x", np.float32, (2, 3, 4))
    r = net.add_reshape(t, (6, 4))
    tr = net.add_transpose(t, (2, 0, 1))
    cat = net.add_concat([r, net.add_layer("Neg", [r])], axis=0)
    red = net.add_layer("ReduceSum", [t, net.add_constant(np.array([1], np.int64))],
                        {"keepdims": 0})
    top = net.add_layer("TopK", [r, net.add_constant(np.array([2], np.int64))], {"axis": 1},
                        num_outputs=2)
    assert cat.shape == (12, 4) and tr.shape == (4, 2, 3) and red.shape == (2, 4)
    for name, tt in [("tr", tr), ("cat", cat), ("red", red), ("vals", top[0]), ("idx", top[1])]:
        net.mark_output(tt, name=name)
    out = _run(net, {"x": x})
    np.testing.assert_array_equal(out["tr"], x.transpose(2, 0, 1))
    np.testing.assert_array_equal(out["cat"], np.concatenate([x.reshape(6, 4), -x.reshape(6, 4)]))
    np.testing.assert_allclose(out["red"], x.sum(axis=1), rtol=1e-6)
    order = np.argsort(-x.reshape(6, 4), axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(out["idx"], order)
    np.testing.assert_array_equal(out["vals"], np.take_along_axis(x.reshape(6, 4), order, 1))


def test_normalization(rng):
    x = rng.randn(2, 3, 4, 4).astype(np.float32)
    scale, bias = rng.rand(3).astype(np.float32) + 0.5, rng.randn(3).astype(np.float32)
    mean, var = rng.randn(3).astype(np.float32), rng.rand(3).astype(np.float32) + 0.1
    ln_s, ln_b = rng.rand(4).astype(np.float32), rng.randn(4).astype(np.float32)
    net = kiln.Network()
    t = net.add_input("x", np.float32, x.shape)
    net.mark_output(net.add_normalization(t, scale, bias, mean, var, epsilon=1e-3), name="bn")
    net.mark_output(net.add_normalization(t, ln_s, ln_b, epsilon=1e-5), name="ln")
    out = _run(net, {"x": x})
    sh = (1, 3, 1, 1)
    bn = (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-3) * scale.reshape(sh)
    np.testing.assert_allclose(out["bn"], bn + bias.reshape(sh), rtol=1e-4, atol=1e-5)
    mu, sd = x.mean(-1, keepdims=True), np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out["ln"], (x - mu) / sd * ln_s + ln_b, rtol=1e-4, atol=1e-5)


def test_dynamic_input_with_a_shared_symbol(rng):
    net = kiln.Network()
    a = net.add_input("a", np.float32, ("n", 3))
    b = net.add_input("b", np.float32, ("n", 3))
    net.mark_output(net.add_elementwise(a, b, kiln.ElementWise.MAX), name="y")
    plan = net.build(shapes={"a": ((1, 3), (2, 3), (4, 3)), "b": ((1, 3), (2, 3), (4, 3))})
    engine = kiln.Engine(plan)
    assert engine.inputs[0].shape == ("n", 3) and engine.outputs[0].shape == ("n", 3)
    av, bv = rng.randn(4, 3).astype(np.float32), rng.randn(4, 3).astype(np.float32)
    np.testing.assert_array_equal(engine.context().run({"a": av, "b": bv})["y"],
                                  np.maximum(av, bv))


def test_tensor_names_and_layer_count():
    net = kiln.Network(opset=13)
    x = net.add_input("x", np.float32, (2,))
    y = net.add_activation(x, "relu", name="act")
    y.name = "renamed"
    assert y.name == "renamed" and x.name == "x"
    net.mark_output(y)
    assert net.num_layers == 1
    assert kiln.Engine(net.build()).outputs[0].name == "renamed"


# ---- invalid calls -------------------------------------------------------------------------


@pytest.fixture
def net():
    n = kiln.Network()
    n.x = n.add_input("x", np.float32, (1, 3, 8, 8))
    n.i = n.add_input("i", np.int64, (1, 3, 8, 8))
    return n


def test_unknown_op(net):
    with pytest.raises(kiln.KilnError) as ei:
        net.add_layer("Frobnicate", [net.x])
    _err(ei, "UNSUPPORTED", "'Frobnicate' is not a built-in op")


def test_wrong_input_count(net):
    with pytest.raises(kiln.KilnError) as ei:
        net.add_layer("Relu", [net.x, net.x], name="r")
    _err(ei, "MODEL", "layer 'r'", "2 inputs", "takes 1")


def test_rank_mismatch(net):
    w = net.add_constant(np.ones((4, 3, 3), np.float32))
    with pytest.raises(kiln.KilnError) as ei:
        net.add_convolution(net.x, w, name="conv")
    _err(ei, "SHAPE", "layer 'conv'", "rank")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_reshape(net.x, (5, 5))
    _err(ei, "SHAPE", "192 elements", "5x5")


def test_dtype_mismatch(net):
    with pytest.raises(kiln.KilnError) as ei:
        net.add_elementwise(net.x, net.i, "add", name="mixed")
    _err(ei, "DTYPE", "layer 'mixed'", "int64", "float32")


def test_dangling_and_foreign_tensor_ids(net):
    with pytest.raises(kiln.KilnError) as ei:
        net.add_layer("Relu", [999])
    _err(ei, "INVALID_ARGUMENT", "tensor 999 does not exist")
    with pytest.raises(kiln.KilnError) as ei:
        net.mark_output(-5)
    _err(ei, "INVALID_ARGUMENT", "tensor -5 does not exist")
    other = kiln.Network()
    with pytest.raises(kiln.KilnError) as ei:
        other.add_activation(net.x, "relu")
    _err(ei, "INVALID_ARGUMENT", "another network")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_activation("x", "relu")
    _err(ei, "INVALID_ARGUMENT", "not a kiln.Tensor")


def test_building_with_no_outputs(net):
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(net)
    _err(ei, "MODEL", "no outputs")


def test_other_refusals(net):
    with pytest.raises(kiln.KilnError) as ei:
        net.add_input("x", np.float32, (1,))
    _err(ei, "INVALID_ARGUMENT", "'x'")
    net.add_activation(net.x, "relu", name="dup")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_activation(net.x, "relu", name="dup")
    _err(ei, "INVALID_ARGUMENT", "'dup' already exists")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_activation(net.x, "sparkle")
    _err(ei, "INVALID_ARGUMENT", "'sparkle'")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_plugin("NoSuchPlugin", [net.x])
    _err(ei, "PLUGIN", "NoSuchPlugin")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_input("c", np.complex64, (1,))
    _err(ei, "DTYPE", "complex64")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_layer("Relu", [net.x], {"bad": {"a": 1}})
    _err(ei, "INVALID_ARGUMENT", "attribute 'bad'")
    with pytest.raises(kiln.KilnError) as ei:
        net.add_convolution(net.x, np.ones((2, 3, 1, 1), np.float32), strides=(1,))
    _err(ei, "INVALID_ARGUMENT", "strides needs 2 values")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.Network(opset=3)
    _err(ei, "INVALID_ARGUMENT", "opset 3")
    y = net.add_activation(net.x, "relu")
    net.mark_output(y, name="y")
    with pytest.raises(kiln.KilnError) as ei:
        net.mark_output(y)
    _err(ei, "INVALID_ARGUMENT", "already an output")


def test_a_refused_call_leaves_the_network_usable(net):
    before = net.num_layers
    for bad in (lambda: net.add_layer("Relu", [net.x, net.x]),
                lambda: net.add_elementwise(net.x, net.i, "add"),
                lambda: net.add_layer("Nope", [net.x])):
        with pytest.raises(kiln.KilnError):
            bad()
    assert net.num_layers == before
    net.mark_output(net.add_activation(net.x, "relu"), name="y")
    net.mark_output(net.add_layer("Identity", [net.i]), name="j")
    x = np.linspace(-1, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)
    out = kiln.run(net, {"x": x, "i": np.zeros((1, 3, 8, 8), np.int64)})
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))
