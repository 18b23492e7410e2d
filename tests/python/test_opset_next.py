"""Opsets 25 to 28 (onnx 1.20 to 1.23) and the Attention errata of onnx 1.23, against onnxruntime
(which implements them) or numpy: each model is built here with onnx.helper, stamped with the
opset that brought the op or its new form, run by kiln and by the reference on the same random
inputs. onnx 1.19's own node tests still encode Attention's earlier reading; the cases that
changed are listed in tests/conformance/expected_failures.txt."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln

F, F16, I8, I32, I64, U8, B = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT8,
                               TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                               TensorProto.BOOL)


def model(nodes, inputs, outputs, opset):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 11
    return m.SerializeToString()


def run_both(onnx_bytes, feeds):
    got = kiln.run(kiln.build(onnx_bytes), feeds)
    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return got, dict(zip(names, sess.run(None, feeds)))


def assert_same(onnx_bytes, feeds, rtol=1e-5, atol=1e-6):
    got, ref = run_both(onnx_bytes, feeds)
    assert set(got) == set(ref)
    for name in ref:
        assert got[name].dtype == ref[name].dtype and got[name].shape == ref[name].shape, name
        np.testing.assert_allclose(got[name], ref[name], rtol=rtol, atol=atol, err_msg=name)


def attention(q, k, v, extra_inputs=(), n_out=1, opset=23, **attrs):
    ins = [("Q", F, q.shape), ("K", F, k.shape), ("V", F, v.shape)]
    ins += [(n, t, a.shape) for n, t, a in extra_inputs]
    names = ["Q", "K", "V", "mask", "past_key", "past_value"]
    present = {n for n, _, _ in extra_inputs}
    node_in = [n if i < 3 or n in present else "" for i, n in enumerate(names)]
    while node_in[-1] == "":
        node_in.pop()
    outs = ["Y", "present_key", "present_value", "qk"][:n_out]
    if n_out == 4:
        outs[1] = outs[2] = ""
    node = helper.make_node("Attention", node_in, outs, **attrs)
    out_info = [(o, F, None) for o in outs if o]
    feeds = {"Q": q, "K": k, "V": v}
    feeds.update({n: a for n, _, a in extra_inputs})
    return model([node], ins, out_info, opset), feeds


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_grouped_query_attention_repeats_kv_heads():
    """Query head h reads kv head h // (q_heads / kv_heads), as PyTorch and onnxruntime do."""
    rng = np.random.default_rng(0)
    q, k, v = rand(rng, 2, 6, 5, 8), rand(rng, 2, 2, 7, 8), rand(rng, 2, 2, 7, 4)
    assert_same(*attention(q, k, v))
    # and against numpy, so the grouping is not only two engines agreeing
    got = kiln.run(kiln.build(attention(q, k, v)[0]), {"Q": q, "K": k, "V": v})["Y"]
    kr, vr = np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1)
    s = q @ kr.transpose(0, 1, 3, 2) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ vr, rtol=1e-5, atol=1e-6)


def test_causal_attention_after_a_past_is_bottom_right():
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 1, 4, 3, 8), rand(rng, 1, 2, 3, 8), rand(rng, 1, 2, 3, 8)
    past = [("past_key", F, rand(rng, 1, 2, 5, 8)), ("past_value", F, rand(rng, 1, 2, 5, 8))]
    assert_same(*attention(q, k, v, past, n_out=3, is_causal=1))


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_softcap_before_the_mask_and_qk_output_modes(mode):
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 2, 3, 4, 8), rand(rng, 2, 3, 6, 8), rand(rng, 2, 3, 6, 8)
    mask = [("mask", F, np.where(rng.random((4, 6)) < 0.3, -np.inf, rng.random((4, 6)))
             .astype(np.float32))]
    assert_same(*attention(q, k, v, mask, n_out=4, softcap=2.0, qk_matmul_output_mode=mode))


def test_fully_masked_rows_are_zero():
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 1, 2, 3, 8), rand(rng, 1, 2, 4, 8), rand(rng, 1, 2, 4, 8)
    keep = np.ones((3, 4), dtype=bool)
    keep[1] = False
    onnx_bytes, feeds = attention(q, k, v, [("mask", B, keep)], n_out=4,
                                  qk_matmul_output_mode=3)
    got = kiln.run(kiln.build(onnx_bytes), feeds)
    assert np.all(got["Y"][:, :, 1] == 0) and np.all(got["qk"][:, :, 1] == 0)
    assert np.all(np.isfinite(got["Y"]))
    assert_same(onnx_bytes, feeds)


@pytest.mark.parametrize("left,right,causal", [(2, 0, 0), (2, 1, 0), (1, -1, 1), (-1, 2, 0)])
def test_sliding_window_opset25(left, right, causal):
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, 2, 2, 5, 8), rand(rng, 2, 2, 3, 8), rand(rng, 2, 2, 3, 8)
    past = [("past_key", F, rand(rng, 2, 2, 4, 8)), ("past_value", F, rand(rng, 2, 2, 4, 8))]
    # no mask input between V and the past: attention() leaves its slot empty
    assert_same(*attention(q, k, v, past, n_out=1, opset=25, left_window_size=left,
                           right_window_size=right, is_causal=causal))


def test_window_attribute_out_of_range_is_one_line():
    rng = np.random.default_rng(5)
    q = rand(rng, 1, 1, 2, 4)
    onnx_bytes, _ = attention(q, q, q, opset=25, left_window_size=-2)
    with pytest.raises(kiln.KilnError, match="left_window_size"):
        kiln.build(onnx_bytes)


@pytest.mark.parametrize("dtype,t", [(np.float32, F), (np.int32, I32), (np.int64, I64)])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod_opset26(dtype, t, exclusive, reverse):
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 4, (3, 5)).astype(dtype)
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive,
                            reverse=reverse)
    onnx_bytes = model([node], [("x", t, x.shape), ("axis", I64, [])], [("y", t, None)], 26)
    for axis in (0, 1, -1):
        assert_same(onnx_bytes, {"x": x, "axis": np.array(axis, dtype=np.int64)})


@pytest.mark.parametrize("src,dst,to", [(np.float32, np.int32, I32), (np.int8, np.uint8, U8),
                                        (np.float16, np.int16, TensorProto.INT16),
                                        (np.uint8, np.int8, I8)])
def test_bitcast_opset26(src, dst, to):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 3)) * 100).astype(src)
    node = helper.make_node("BitCast", ["x"], ["y"], to=to)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(src))
    got = kiln.run(kiln.build(model([node], [("x", t, x.shape)], [("y", to, None)], 26)),
                   {"x": x})["y"]
    np.testing.assert_array_equal(got, x.view(dst))


def test_bitcast_of_another_width_is_refused():
    node = helper.make_node("BitCast", ["x"], ["y"], to=I64)
    with pytest.raises(kiln.KilnError, match="widths differ"):
        kiln.build(model([node], [("x", F, [2])], [("y", I64, None)], 26))


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swiglu_opset28(alpha):
    rng = np.random.default_rng(8)
    a, b = rand(rng, 3, 16), rand(rng, 3, 16)
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=alpha)
    got = kiln.run(kiln.build(model([node], [("a", F, a.shape), ("b", F, b.shape)],
                                    [("y", F, None)], 28)), {"a": a, "b": b})["y"]
    want = a / (1 + np.exp(-alpha * a.astype(np.float64))) * b
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"])
    with pytest.raises(kiln.KilnError, match="same shape"):
        kiln.build(model([node], [("a", F, [3, 16]), ("b", F, [1, 16])], [("y", F, None)], 28))


def test_mod_floor_remainder_of_floats_opset28():
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 3.0, np.inf, 1.0, -1.0, 4.0, np.nan],
                 dtype=np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 0.0, 2.0, np.inf, np.inf, 2.0, 1.0],
                 dtype=np.float32)
    node = helper.make_node("Mod", ["a", "b"], ["y"], fmod=0)
    onnx_bytes = model([node], [("a", F, [12]), ("b", F, [12])], [("y", F, None)], 28)
    got, ref = run_both(onnx_bytes, {"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], ref["y"])
    np.testing.assert_array_equal(np.signbit(got["y"]), np.signbit(ref["y"]))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype,t", [(np.int8, I8), (np.int32, I32)])
def test_bitshift_signed_opset28(direction, dtype, t):
    bits = 8 * np.dtype(dtype).itemsize
    x = np.array([-100, -1, 1, 77, -128, 100, -5, 5], dtype=dtype)
    s = np.array([1, 3, 0, 2, 1, bits, -1, bits + 3], dtype=dtype)
    node = helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)
    onnx_bytes = model([node], [("x", t, [8]), ("s", t, [8])], [("y", t, None)], 28)
    got = kiln.run(kiln.build(onnx_bytes), {"x": x, "s": s})["y"]
    ok = (s >= 0) & (s < bits)
    sh = np.where(ok, s, 0).astype(np.int64)
    x64 = x.astype(np.int64)
    if direction == "LEFT":
        want = np.where(ok, (x64 << sh), 0).astype(dtype)
    else:
        want = np.where(ok, x64 >> sh, np.where(x64 < 0, -1, 0)).astype(dtype)
    np.testing.assert_array_equal(got, want)


def test_spacetodepth_crd_opset28():
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    for mode in ("CRD", "DCR"):
        node = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode=mode)
        assert_same(model([node], [("x", F, x.shape)], [("y", F, None)], 28), {"x": x})


def test_range_float16_opset27():
    node = helper.make_node("Range", ["s", "l", "d"], ["y"])
    onnx_bytes = model([node], [("s", F16, []), ("l", F16, []), ("d", F16, [])],
                       [("y", F16, None)], 27)
    feeds = {"s": np.array(1000, np.float16), "l": np.array(1100, np.float16),
             "d": np.array(0.5, np.float16)}
    assert_same(onnx_bytes, feeds, rtol=0, atol=0)


def test_reduce_max_over_an_empty_set_and_lpnorm_of_zeros():
    node = helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=1)
    got = kiln.run(kiln.build(model([node], [("x", B, [0, 4]), ("axes", I64, [1])],
                                    [("y", B, None)], 18)),
                   {"x": np.zeros((0, 4), bool), "axes": np.array([0], np.int64)})["y"]
    np.testing.assert_array_equal(got, np.zeros((1, 4), bool))
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=0, p=2)
    x = np.array([[3.0, 0.0], [4.0, 0.0]], np.float32)
    got = kiln.run(kiln.build(model([node], [("x", F, x.shape)], [("y", F, None)], 22)),
                   {"x": x})["y"]
    np.testing.assert_allclose(got, [[0.6, 0.0], [0.8, 0.0]], rtol=1e-6)


def test_opset_29_is_refused_in_one_line():
    node = helper.make_node("Relu", ["x"], ["y"])
    with pytest.raises(kiln.KilnError, match="opset 29.*1 to 28"):
        kiln.build(model([node], [("x", F, [2])], [("y", F, None)], 29))


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("bias,past,act", [(False, False, "none"), (True, True, "silu"),
                                           (True, False, "swish"), (False, True, "none")])
def test_causal_conv_with_state_opset27(k, bias, past, act):
    rng = np.random.default_rng(9)
    b, c, length = 2, 3, 5
    feeds = {"x": rand(rng, b, c, length), "w": rand(rng, c, 1, k)}
    ins = [("x", F, [b, c, length]), ("w", F, [c, 1, k])]
    names = ["x", "w", "", ""]
    if bias:
        feeds["bias"], names[2] = rand(rng, c), "bias"
        ins.append(("bias", F, [c]))
    if past:
        feeds["past"], names[3] = rand(rng, b, c, k - 1), "past"
        ins.append(("past", F, [b, c, k - 1]))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], activation=act)
    assert_same(model([node], ins, [("y", F, None), ("state", F, None)], 27), feeds)


def test_causal_conv_with_state_bad_weight_is_one_line():
    node = helper.make_node("CausalConvWithState", ["x", "w"], ["y"])
    with pytest.raises(kiln.KilnError, match="weight"):
        kiln.build(model([node], [("x", F, [1, 3, 5]), ("w", F, [2, 1, 3])], [("y", F, None)], 27))


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("hq,hkv,per_key_decay,past", [(2, 2, False, False), (4, 2, True, True),
                                                        (3, 1, False, True)])
def test_linear_attention_opset27(rule, hq, hkv, per_key_decay, past):
    rng = np.random.default_rng(10)
    b, t, dk, dv = 2, 4, 4, 3
    key = rand(rng, b, t, hkv, dk)
    key /= np.linalg.norm(key, axis=-1, keepdims=True)  # as the delta rules expect
    feeds = {"q": rand(rng, b, t, hq * dk), "k": key.reshape(b, t, hkv * dk),
             "v": rand(rng, b, t, hkv * dv)}
    ins = [("q", F, [b, t, hq * dk]), ("k", F, [b, t, hkv * dk]), ("v", F, [b, t, hkv * dv])]
    names = ["q", "k", "v", "", "", ""]
    if past:
        feeds["past"], names[3] = rand(rng, b, hkv, dk, dv), "past"
        ins.append(("past", F, [b, hkv, dk, dv]))
    if rule in ("gated", "gated_delta"):
        width = hkv * dk if per_key_decay else hkv
        feeds["g"], names[4] = -rng.random((b, t, width)).astype(np.float32), "g"
        ins.append(("g", F, [b, t, width]))
    if rule in ("delta", "gated_delta"):
        width = hkv if hq != 3 else 1
        feeds["beta"], names[5] = rng.random((b, t, width)).astype(np.float32), "beta"
        ins.append(("beta", F, [b, t, width]))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], q_num_heads=hq,
                            kv_num_heads=hkv, update_rule=rule)
    assert_same(model([node], ins, [("y", F, None), ("state", F, None)], 27), feeds, rtol=1e-4,
                atol=1e-5)


def test_linear_attention_without_its_decay_is_one_line():
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y"], q_num_heads=1,
                            kv_num_heads=1)  # gated_delta by default: needs decay and beta
    ins = [(n, F, [1, 2, 4]) for n in ("q", "k", "v")]
    with pytest.raises(kiln.KilnError, match="decay"):
        kiln.build(model([node], ins, [("y", F, None)], 27))


def test_two_bit_types_opset25():
    """uint2/int2: one byte an element in kiln, four a byte in ONNX data; through Cast,
    DequantizeLinear and QuantizeLinear, from numpy's ml_dtypes arrays."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([-2, -1, 0, 1, 1, -2, 0], dtype=ml_dtypes.int2)
    node = helper.make_node("Cast", ["x"], ["y"], to=F)
    got = kiln.run(kiln.build(model([node], [("x", 26, [7])], [("y", F, None)], 25)),
                   {"x": x})["y"]
    np.testing.assert_array_equal(got, [-2, -1, 0, 1, 1, -2, 0])
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    # a uint2 zero point of 1, packed as ONNX stores it (onnx 1.19's helper has no 2-bit types)
    zp = TensorProto(name="z", data_type=25, raw_data=bytes([0b01]))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 25, [5]),
                                        helper.make_tensor_value_info("s", F, [])],
                          [helper.make_tensor_value_info("y", F, None)], [zp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    m.ir_version = 11
    u = np.array([0, 1, 2, 3, 3], dtype=ml_dtypes.uint2)
    got = kiln.run(kiln.build(m.SerializeToString()), {"x": u, "s": np.float32(0.5)})["y"]
    np.testing.assert_allclose(got, (np.array([0, 1, 2, 3, 3]) - 1) * 0.5)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    zi = TensorProto(name="z", data_type=26, raw_data=bytes([0]))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [6]),
                                        helper.make_tensor_value_info("s", F, [])],
                          [helper.make_tensor_value_info("y", 26, None)], [zi])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    m.ir_version = 11
    xs = np.array([-9.0, -2.0, -0.4, 0.6, 1.0, 7.0], np.float32)
    got = kiln.run(kiln.build(m.SerializeToString()), {"x": xs, "s": np.float32(1.0)})["y"]
    assert got.dtype == ml_dtypes.int2  # saturated to [-2, 1]
    np.testing.assert_array_equal(got.astype(np.int8), [-2, -2, 0, 1, 1, 1])


@pytest.mark.parametrize("length", [None, 8, 9])
def test_dft_inverse_of_a_onesided_spectrum_is_numpy_irfft(length):
    """DFT with inverse=1 and onesided=1 (IRFFT): m bins of a Hermitian spectrum make
    dft_length (default 2 (m - 1)) real values."""
    rng = np.random.default_rng(11)
    spec = rand(rng, 2, 5, 3, 2)
    ins = [("x", F, spec.shape), ("axis", I64, [])]
    names, feeds = ["x", "", "axis"], {"x": spec, "axis": np.array(1, np.int64)}
    if length is not None:
        names[1] = "n"
        ins.append(("n", I64, []))
        feeds["n"] = np.array(length, np.int64)
    node = helper.make_node("DFT", names, ["y"], inverse=1, onesided=1)
    got = kiln.run(kiln.build(model([node], ins, [("y", F, None)], 20)), feeds)["y"]
    want = np.fft.irfft(spec[..., 0] + 1j * spec[..., 1], n=length, axis=1)
    assert got.shape == want.shape + (1,)
    np.testing.assert_allclose(got[..., 0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,ins,attrs", [
    ("CausalConvWithState", [("x", [1, 3, 5]), ("w", [3, 1, 4])], {}),
    ("LinearAttention", [("q", [1, 2, 4]), ("k", [1, 2, 4]), ("v", [1, 2, 4])],
     {"q_num_heads": 1, "kv_num_heads": 1, "update_rule": "linear"}),
])
def test_output_0_left_out_is_one_line(op, ins, attrs):
    """Output 0 unnamed while the state output is used: refused, not written through."""
    node = helper.make_node(op, [n for n, _ in ins], ["", "state"], **attrs)
    with pytest.raises(kiln.KilnError, match="output 0 is required"):
        kiln.build(model([node], [(n, F, s) for n, s in ins], [("state", F, None)], 27))
