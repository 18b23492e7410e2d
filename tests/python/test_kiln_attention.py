"""kiln.Attention, the op the attention fusion pass makes on a GPU (src/passes/fuse_attention.c),
run on the host from a model that carries it: softmax(q k^T * scale + mask) v over heads with
q, k, v in [batch, seq, heads, head size] and the output in the same layout, against numpy;
and its shape checks refuse bad inputs in one line; its packed form (one [batch, seq, 3 heads
head size] input, attribute heads) the same way."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from pykiln_helpers import make_model

import kiln

F = TensorProto.FLOAT


def reference(q, k, v, mask, scale):
    qh, kh, vh = (np.transpose(t, (0, 2, 1, 3)).astype(np.float64) for t in (q, k, v))
    s = qh @ np.transpose(kh, (0, 1, 3, 2)) * scale
    if mask is not None:
        s = s + mask
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.transpose(p @ vh, (0, 2, 1, 3)).astype(np.float32)


def model(q_shape, k_shape, v_shape, mask_shape, scale):
    ins = ["q", "k", "v"] + (["mask"] if mask_shape else [])
    node = helper.make_node("Attention", ins, ["y"], domain="kiln", scale=scale)
    inputs = [("q", F, q_shape), ("k", F, k_shape), ("v", F, v_shape)]
    if mask_shape:
        inputs.append(("mask", F, mask_shape))
    y_shape = list(q_shape[:3]) + [v_shape[3]]
    return make_model([node], inputs, [("y", F, y_shape)], opsets=(("", 17), ("kiln", 1)))


@pytest.mark.parametrize("mask_shape", [None, (2, 1, 1, 7), (2, 3, 5, 7), (5, 7)],
                         ids=["none", "keys", "full", "rows"])
def test_attention_matches_numpy(mask_shape):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 5, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, 7, 3, 8)).astype(np.float32)
    v = rng.standard_normal((2, 7, 3, 6)).astype(np.float32)
    feeds = {"q": q, "k": k, "v": v}
    mask = None
    if mask_shape:
        mask = np.where(rng.random(mask_shape) < 0.3, -1e4, 0.0).astype(np.float32)
        feeds["mask"] = mask
    plan = kiln.build(model(q.shape, k.shape, v.shape, mask_shape, 0.35))
    got = kiln.run(plan, feeds)["y"]
    np.testing.assert_allclose(got, reference(q, k, v, mask, 0.35), rtol=1e-5, atol=1e-5)


def test_attention_fully_masked_row_is_nan():
    """A query row whose every key is masked with -inf gives NaN, as the unfused Softmax and
    MatMul do (and numpy, onnxruntime and the CUDA kernel); the other rows are unaffected."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in [(1, 4, 2, 8), (1, 6, 2, 8),
                                                                      (1, 6, 2, 8)])
    mask = np.zeros((1, 2, 4, 6), np.float32)
    mask[0, 1, 2, :] = -np.inf
    plan = kiln.build(model(q.shape, k.shape, v.shape, mask.shape, 0.5))
    got = kiln.run(plan, {"q": q, "k": k, "v": v, "mask": mask})["y"]
    with np.errstate(invalid="ignore"):
        want = reference(q, k, v, mask, 0.5)
    assert np.isnan(got[0, 2, 1]).all() and np.isnan(want[0, 2, 1]).all()
    ok = ~np.isnan(want)
    assert not np.isnan(got[ok]).any()
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k_shape,mask_shape,message", [
    ((2, 7, 3, 4), None, "disagree"),
    ((2, 7, 3, 8), (2, 3, 5, 6), "does not broadcast"),
])
def test_attention_refuses_bad_shapes(k_shape, mask_shape, message):
    with pytest.raises(kiln.KilnError, match=message):
        kiln.build(model((2, 5, 3, 8), k_shape, (2, 7, 3, 6), mask_shape, 1.0))


def packed_model(b, s, heads, d, mask_shape, scale):
    """kiln.Attention in its packed form: one [B, S, 3 H D] input holding q | k | v a row."""
    ins = ["qkv", "", ""] + (["mask"] if mask_shape else [])
    node = helper.make_node("Attention", ins, ["y"], domain="kiln", scale=scale, heads=heads)
    inputs = [("qkv", F, (b, s, 3 * heads * d))]
    if mask_shape:
        inputs.append(("mask", F, mask_shape))
    return make_model([node], inputs, [("y", F, (b, s, heads, d))],
                      opsets=(("", 17), ("kiln", 1)))


@pytest.mark.parametrize("mask_shape", [None, (2, 1, 1, 5)], ids=["none", "keys"])
def test_packed_attention_matches_numpy(mask_shape):
    """The packed form (the fusion pass's merged Q/K/V product) reads q, k and v from the thirds
    of each row."""
    rng = np.random.default_rng(4)
    b, s, heads, d = 2, 5, 3, 8
    qkv = rng.standard_normal((b, s, 3 * heads * d)).astype(np.float32)
    q, k, v = (qkv[:, :, i * heads * d:(i + 1) * heads * d].reshape(b, s, heads, d)
               for i in range(3))
    feeds, mask = {"qkv": qkv}, None
    if mask_shape:
        mask = np.where(rng.random(mask_shape) < 0.3, -1e4, 0.0).astype(np.float32)
        feeds["mask"] = mask
    got = kiln.run(kiln.build(packed_model(b, s, heads, d, mask_shape, 0.4)), feeds)["y"]
    np.testing.assert_allclose(got, reference(q, k, v, mask, 0.4), rtol=1e-5, atol=1e-5)


def test_packed_attention_refuses_a_row_not_of_three_heads():
    node = helper.make_node("Attention", ["qkv", "", ""], ["y"], domain="kiln", heads=3)
    m = make_model([node], [("qkv", F, (2, 5, 70))], [("y", F, None)],  # 70: not 3 x 3 x D
                   opsets=(("", 17), ("kiln", 1)))
    with pytest.raises(kiln.KilnError, match="3 x heads x head size"):
        kiln.build(m)
