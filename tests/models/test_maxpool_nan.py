"""NaN through kiln's float MaxPool, GlobalMaxPool and MaxRoiPool, as PyTorch's max_pool2d and
numpy's max treat it: an output is NaN when any input tap of its window is NaN (pads are -inf,
never NaN), and the Indices output names the window's first NaN. One-node models run through
`kiln run` against numpy's max over sliding_window_view windows of the -inf padded input, for the
shapes of ResNet-50's stem pool, YOLO's SPPF and the pools between, with NaN at plane corners,
edges and random pixels, positive and negative; MaxRoiPool against a reference of its bins."""

import json

import numpy as np
import onnx
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper

from kiln_cli import kiln

CASES = [
    ("stem 3x3 s2 p1", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     [1, 64, 112, 112]),
    ("SPPF 5x5 s1 p2", dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]), [1, 128, 20, 20]),
    ("2x2 s2", dict(kernel_shape=[2, 2], strides=[2, 2]), [1, 64, 56, 56]),
    ("3x3 s2 odd sizes", dict(kernel_shape=[3, 3], strides=[2, 2]), [2, 3, 17, 37]),
    ("3x3 s2 ceil", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), [1, 3, 16, 17]),
    ("3x3 s1 p1 large plane", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [1, 4, 66, 66]),
    ("5x5 s1 p2 large plane", dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]), [1, 3, 70, 70]),
    ("same 3x3 small plane", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [1, 5, 7, 9]),
    ("same 7x7 small plane", dict(kernel_shape=[7, 7], pads=[3, 3, 3, 3]), [1, 3, 12, 5]),
    ("4x4 s4", dict(kernel_shape=[4, 4], strides=[4, 4]), [1, 3, 16, 18]),
    ("3x2 s(1,2) p(0,1,2,0)", dict(kernel_shape=[3, 2], strides=[1, 2], pads=[0, 1, 2, 0]),
     [1, 3, 7, 9]),
    ("dilated 3x3 d2 s2 p2", dict(kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 2],
                                  pads=[2, 2, 2, 2]), [1, 3, 15, 17]),
    ("1-D k3 s2 p1", dict(kernel_shape=[3], strides=[2], pads=[1, 1]), [2, 3, 19]),
    ("3-D 2x2x2", dict(kernel_shape=[2, 2, 2]), [1, 2, 5, 6, 7]),
]


def with_nans(shape, seed):
    """Values in [-50, 50) with +inf in a few pixels and NaN (either sign) in the first and last
    pixel of channel 0, the other corners and edge middles of channel 1, and about every third
    plane's random pixel; the remaining planes hold none."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-50, 50, shape).astype(np.float32)
    planes = x.reshape(-1, *shape[2:])
    flat = planes.reshape(len(planes), -1)
    flat[rng.integers(0, len(planes), 3), rng.integers(0, flat.shape[1], 3)] = np.inf
    neg_nan = -np.float32(np.nan)
    flat[0, 0], flat[0, -1] = np.nan, neg_nan
    if len(planes) > 1:
        for idx in np.ndindex(*(2 for _ in shape[2:])):
            corner = tuple(i * (n - 1) for i, n in zip(idx, shape[2:]))
            planes[1][corner] = np.nan
            edge = tuple(n // 2 if j == 0 else c for j, (c, n) in enumerate(zip(corner, shape[2:])))
            planes[1][edge] = neg_nan
    for p in range(2, len(planes), 3):
        flat[p, rng.integers(0, flat.shape[1])] = np.nan if p % 2 else neg_nan
    return x


def reference(x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=0):
    """numpy's max (and argmax: its first NaN, else its first maximum) over each window of x
    padded with -inf; the argmax as an index into x flattened, as ONNX's Indices."""
    nsp = x.ndim - 2
    k = np.array(kernel_shape)
    s = np.array(strides or [1] * nsp)
    d = np.array(dilations or [1] * nsp)
    p = np.array(pads or [0] * 2 * nsp)
    span = (k - 1) * d + 1
    size = np.array(x.shape[2:]) + p[:nsp] + p[nsp:] - span
    out = (-(-size // s) if ceil_mode else size // s) + 1
    if ceil_mode:  # the last window starts inside the input or its begin padding
        out -= ((out - 1) * s >= np.array(x.shape[2:]) + p[:nsp]).astype(int)
    extra = np.maximum((out - 1) * s + span - (np.array(x.shape[2:]) + p[:nsp] + p[nsp:]), 0)
    width = [(0, 0), (0, 0)] + [(int(b), int(e + ex))
                                for b, e, ex in zip(p[:nsp], p[nsp:], extra)]
    xp = np.pad(x, width, constant_values=-np.inf)
    pos = np.pad(np.arange(x.size).reshape(x.shape), width, constant_values=-1)
    axes = tuple(range(2, 2 + nsp))
    pick = (slice(None),) * 2 + tuple(slice(0, o * st, st) for o, st in zip(out, s))
    tap = (Ellipsis,) + tuple(slice(None, None, dd) for dd in d)
    win = sliding_window_view(xp, tuple(span), axis=axes)[pick][tap]
    wpos = sliding_window_view(pos, tuple(span), axis=axes)[pick][tap]
    win = win.reshape(*win.shape[:2 + nsp], -1)
    wpos = wpos.reshape(*wpos.shape[:2 + nsp], -1)
    arg = np.argmax(win, axis=-1)
    return win.max(axis=-1), np.take_along_axis(wpos, arg[..., None], axis=-1)[..., 0]


def run_model(tmp_path, nodes, x, outputs):
    g = helper.make_graph(
        nodes, "pool",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.save(tmp_path / "x.npy", x)
    kiln("run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
         str(tmp_path / "o"))
    index = json.loads((tmp_path / "o" / "outputs.json").read_text())
    return [np.load(tmp_path / "o" / index[o]) for o in outputs]


def assert_same(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} differ, first at "
                           f"{np.argwhere(bad)[0]}: got {got[bad][0]}, want {want[bad][0]}")


@pytest.mark.parametrize("name,attrs,shape", CASES, ids=[c[0] for c in CASES])
def test_maxpool_propagates_nan(name, attrs, shape, tmp_path):
    x = with_nans(shape, 11)
    want, _ = reference(x, **attrs)
    assert np.isnan(want).any() and not np.isnan(want).all()
    (got,) = run_model(tmp_path, [helper.make_node("MaxPool", ["x"], ["y"], **attrs)], x, ["y"])
    assert_same(got, want, name)


INDEXED = [c for c in CASES if c[0].startswith(("stem", "dilated", "1-D", "3x2"))]


@pytest.mark.parametrize("name,attrs,shape", INDEXED, ids=[c[0] for c in INDEXED])
def test_maxpool_indices_name_the_first_nan(name, attrs, shape, tmp_path):
    x = with_nans(shape, 12)
    x[np.isinf(x)] = 0  # argmax over -inf padding would name a pad
    want, want_idx = reference(x, **attrs)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    got, idx = run_model(tmp_path, [node], x, ["y", "i"])
    assert_same(got, want, name)
    assert_same(idx, want_idx, name + " indices")


def test_sppf_chain(tmp_path):
    """YOLO's SPPF: three 5x5 pools in a row, NaN spreading further with each."""
    x = with_nans([1, 128, 20, 20], 13)
    attrs = dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    nodes = [helper.make_node("MaxPool", ["x"], ["p1"], **attrs),
             helper.make_node("MaxPool", ["p1"], ["p2"], **attrs),
             helper.make_node("MaxPool", ["p2"], ["y"], **attrs)]
    (got,) = run_model(tmp_path, nodes, x, ["y"])
    want = x
    for _ in range(3):
        want, _ = reference(want, **attrs)
    assert_same(got, want, "SPPF")


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_maxpool_other_float_types(dtype, tmp_path):
    x = with_nans([1, 8, 23, 30], 14).astype(dtype)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    want, _ = reference(x, **attrs)
    (got,) = run_model(tmp_path, [helper.make_node("MaxPool", ["x"], ["y"], **attrs)], x, ["y"])
    assert got.dtype == dtype
    assert_same(got, want, str(dtype))


@pytest.mark.parametrize("shape", [[1, 8, 7, 7], [2, 3, 16, 16], [1, 4, 1, 1]])
def test_global_maxpool_propagates_nan(shape, tmp_path):
    x = with_nans(shape, 15)
    want = x.max(axis=(2, 3), keepdims=True)
    (got,) = run_model(tmp_path, [helper.make_node("GlobalMaxPool", ["x"], ["y"])], x, ["y"])
    assert_same(got, want, "GlobalMaxPool")


def roi_reference(x, rois, pooled, scale):
    """MaxRoiPool as onnx's operator page and Caffe's ROIPooling define it: each roi's corners
    scaled and rounded, its box (at least 1 x 1) cut into pooled bins of floor / ceil bounds
    clamped to the input; an empty bin is 0, any other the max of its window (NaN if it holds
    one). Corners here are whole after scaling, so rounding has no ties."""
    ph, pw = pooled
    out = np.zeros((len(rois), x.shape[1], ph, pw), x.dtype)
    for r, (b, x1, y1, x2, y2) in enumerate(rois):
        xs, ys, xe, ye = (int(round(v * scale)) for v in (x1, y1, x2, y2))
        bh, bw = max(ye - ys + 1, 1) / ph, max(xe - xs + 1, 1) / pw
        for i in range(ph):
            h0 = min(max(int(np.floor(i * bh)) + ys, 0), x.shape[2])
            h1 = min(max(int(np.ceil((i + 1) * bh)) + ys, 0), x.shape[2])
            for j in range(pw):
                w0 = min(max(int(np.floor(j * bw)) + xs, 0), x.shape[3])
                w1 = min(max(int(np.ceil((j + 1) * bw)) + xs, 0), x.shape[3])
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def roi_model(rois, pooled, scale):
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=list(pooled),
                            spatial_scale=scale)
    return node, helper.make_tensor("rois", TensorProto.FLOAT, rois.shape, rois.ravel())


ROIS = np.array([[0, 0, 0, 31, 23], [1, 4, 2, 20, 18], [0, 10, 12, 10, 12], [1, -6, -4, 8, 6],
                 [0, 24, 16, 40, 30], [1, 2, 20, 29, 21]], np.float32)


@pytest.mark.parametrize("pooled,scale", [((3, 3), 1.0), ((2, 5), 0.5), ((7, 7), 1.0)])
def test_max_roi_pool_propagates_nan(pooled, scale, tmp_path):
    """The reference is first checked against onnxruntime on data without NaN (whose MaxRoiPool
    drops NaN as its MaxPool does), then kiln against the reference with NaN in the planes."""
    import onnxruntime

    rois = ROIS.copy()
    rois[:, 1:] *= 2 if scale == 0.5 else 1
    node, init = roi_model(rois, pooled, scale)
    g = helper.make_graph([node], "roi", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 6, 24, 32])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [init])
    path = tmp_path / "roi.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    clean = np.random.default_rng(16).uniform(-50, 50, [2, 6, 24, 32]).astype(np.float32)
    sess = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": clean})[0],
                                  roi_reference(clean, rois, pooled, scale))
    x = with_nans([2, 6, 24, 32], 17)
    want = roi_reference(x, rois, pooled, scale)
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.save(tmp_path / "x.npy", x)
    kiln("run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
         str(tmp_path / "o"))
    assert_same(np.load(tmp_path / "o" / "y.npy"), want, f"MaxRoiPool {pooled}")
