"""Valid-looking graphs whose operators get impossible attributes or operands.

Each model is small and well-formed as a protobuf, but one node breaks its operator's rules
(a zero stride, an axis out of range, a perm that is not a permutation, indices out of range, a
kernel larger than its padded input, ...). kiln must reject each one cleanly, at build time when
the problem is visible from shapes and constants, else at run time: non-zero exit, one line on
stderr, no crash or sanitizer report, nothing written into --output-dir.

The kiln binary is $KILN, or build/bin/kiln under the repository root.
"""

import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
CRASH_MARKS = ("Sanitizer", "runtime error:", "core dumped", "Segmentation fault", "Aborted",
               "Assertion")

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def c(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, output_type=F, inits=(), opset=13):
    """inputs: [(name, dtype, shape)]; the graph output is the last node's first output."""
    out = nodes[-1].output[0]
    graph = helper.make_graph(
        nodes, "bad", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(out, output_type, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


X4 = [("x", F, [1, 2, 5, 5])]
X2 = [("x", F, [3, 4])]
W = c("w", np.ones((4, 2, 3, 3), np.float32))

CASES = {
    "conv_zero_stride": model(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[0, 1])], X4, inits=[W]),
    "conv_zero_dilation": model(
        [helper.make_node("Conv", ["x", "w"], ["y"], dilations=[1, 0])], X4, inits=[W]),
    "conv_negative_pad": model(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[-9, 0, 0, 0])], X4, inits=[W]),
    "conv_group_not_dividing": model(
        [helper.make_node("Conv", ["x", "w3"], ["y"], group=3)], X4,
        inits=[c("w3", np.ones((3, 1, 3, 3), np.float32))]),
    "conv_channel_mismatch": model(
        [helper.make_node("Conv", ["x", "w5"], ["y"])], X4,
        inits=[c("w5", np.ones((4, 5, 3, 3), np.float32))]),
    "conv_kernel_larger_than_input": model(
        [helper.make_node("Conv", ["x", "wbig"], ["y"])], X4,
        inits=[c("wbig", np.ones((1, 2, 7, 7), np.float32))]),
    "conv_kernel_shape_disagrees": model(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 2])], X4, inits=[W]),
    "conv_bias_wrong_length": model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"])], X4,
        inits=[W, c("b", np.ones(7, np.float32))]),
    "conv_rank_2_input": model(
        [helper.make_node("Conv", ["x", "w"], ["y"])], X2, inits=[W]),
    "convtranspose_output_padding_too_big": model(
        [helper.make_node("ConvTranspose", ["x", "wt"], ["y"], strides=[2, 2],
                          output_padding=[3, 3])], X4,
        inits=[c("wt", np.ones((2, 2, 3, 3), np.float32))]),
    "maxpool_kernel_too_big": model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[9, 9])], X4),
    "maxpool_zero_kernel": model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[0, 2])], X4),
    "avgpool_zero_stride": model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[0, 0])],
        X4),
    "transpose_perm_repeats": model(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0])], X2),
    "transpose_perm_out_of_range": model(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 5])], X2),
    "transpose_perm_too_short": model(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1])], X2),
    "concat_axis_out_of_range": model(
        [helper.make_node("Concat", ["x", "x"], ["y"], axis=7)], X2),
    "concat_shape_mismatch": model(
        [helper.make_node("Concat", ["x", "z"], ["y"], axis=0)], X2 + [("z", F, [3, 5])]),
    "concat_dtype_mismatch": model(
        [helper.make_node("Concat", ["x", "z"], ["y"], axis=0)], X2 + [("z", I64, [3, 4])]),
    "softmax_axis_out_of_range": model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=-5)], X2),
    "reduce_axes_out_of_range": model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"])], X2,
        inits=[c("axes", np.array([4], np.int64))]),
    "reshape_two_minus_ones": model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], X2,
        inits=[c("s", np.array([-1, -1], np.int64))]),
    "reshape_wrong_count": model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], X2,
        inits=[c("s", np.array([5, 5], np.int64))]),
    "reshape_negative_dim": model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], X2,
        inits=[c("s", np.array([-3, -4], np.int64))]),
    "reshape_overflowing_dims": model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], X2,
        inits=[c("s", np.array([1 << 62, 1 << 62, 0], np.int64))]),
    "split_sizes_do_not_sum": model(
        [helper.make_node("Split", ["x", "sp"], ["y", "y2"], axis=1)], X2,
        inits=[c("sp", np.array([1, 5], np.int64))]),
    "split_negative_size": model(
        [helper.make_node("Split", ["x", "sp"], ["y", "y2"], axis=1)], X2,
        inits=[c("sp", np.array([-2, 6], np.int64))]),
    "slice_zero_step": model(
        [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], X2,
        inits=[c("st", np.array([0], np.int64)), c("en", np.array([2], np.int64)),
               c("ax", np.array([0], np.int64)), c("sp", np.array([0], np.int64))]),
    "slice_axis_out_of_range": model(
        [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])], X2,
        inits=[c("st", np.array([0], np.int64)), c("en", np.array([2], np.int64)),
               c("ax", np.array([3], np.int64))]),
    "slice_repeated_axis": model(
        [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])], X2,
        inits=[c("st", np.array([0, 0], np.int64)), c("en", np.array([2, 2], np.int64)),
               c("ax", np.array([0, 0], np.int64))]),
    "gather_axis_out_of_range": model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=2)], X2,
        inits=[c("i", np.array([0], np.int64))]),
    "gather_constant_index_out_of_range": model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], X2,
        inits=[c("i", np.array([0, 3], np.int64))]),
    "gatherelements_rank_mismatch": model(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)], X2,
        inits=[c("i", np.zeros((3,), np.int64))]),
    "matmul_inner_mismatch": model(
        [helper.make_node("MatMul", ["x", "m"], ["y"])], X2,
        inits=[c("m", np.ones((5, 2), np.float32))]),
    "gemm_trans_mismatch": model(
        [helper.make_node("Gemm", ["x", "m"], ["y"], transB=1)], X2,
        inits=[c("m", np.ones((4, 2), np.float32))]),
    "add_not_broadcastable": model(
        [helper.make_node("Add", ["x", "z"], ["y"])], X2, inits=[c("z", np.ones((2, 4), np.float32))]),
    "add_dtype_mismatch": model(
        [helper.make_node("Add", ["x", "z"], ["y"])], X2, inits=[c("z", np.ones((3, 4), np.int64))]),
    "expand_incompatible": model(
        [helper.make_node("Expand", ["x", "s"], ["y"])], X2,
        inits=[c("s", np.array([2, 4], np.int64))]),
    "tile_negative_repeat": model(
        [helper.make_node("Tile", ["x", "r"], ["y"])], X2,
        inits=[c("r", np.array([2, -1], np.int64))]),
    "tile_wrong_length": model(
        [helper.make_node("Tile", ["x", "r"], ["y"])], X2,
        inits=[c("r", np.array([2], np.int64))]),
    "constantofshape_negative": model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"])], [], inits=[
            c("s", np.array([2, -3], np.int64))]),
    "pad_negative_beyond_size": model(
        [helper.make_node("Pad", ["x", "p"], ["y"])], X2,
        inits=[c("p", np.array([0, -5, 0, 0], np.int64))]),
    "pad_wrong_length": model(
        [helper.make_node("Pad", ["x", "p"], ["y"])], X2,
        inits=[c("p", np.array([1, 1, 1], np.int64))]),
    "topk_k_too_big": model(
        [helper.make_node("TopK", ["x", "k"], ["y", "yi"], axis=1)], X2,
        inits=[c("k", np.array([9], np.int64))]),
    "topk_negative_k": model(
        [helper.make_node("TopK", ["x", "k"], ["y", "yi"], axis=1)], X2,
        inits=[c("k", np.array([-1], np.int64))]),
    "onehot_negative_depth": model(
        [helper.make_node("OneHot", ["i", "d", "v"], ["y"])], [("i", I64, [3])],
        inits=[c("d", np.array([-4], np.int64)), c("v", np.array([0, 1], np.float32))]),
    "range_zero_delta": model(
        [helper.make_node("Range", ["a", "b", "d"], ["y"])], [], inits=[
            c("a", np.array(0, np.float32)), c("b", np.array(10, np.float32)),
            c("d", np.array(0, np.float32))]),
    "range_huge": model(
        [helper.make_node("Range", ["a", "b", "d"], ["y"])], [], output_type=I64, inits=[
            c("a", np.array(0, np.int64)), c("b", np.array(1 << 62, np.int64)),
            c("d", np.array(1, np.int64))]),
    "resize_negative_scale": model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")], X4,
        inits=[c("sc", np.array([1, 1, -2, 2], np.float32))]),
    "resize_scales_wrong_length": model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")], X4,
        inits=[c("sc", np.array([2, 2], np.float32))]),
    "resize_unknown_mode": model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="bicubic-ish")], X4,
        inits=[c("sc", np.array([1, 1, 2, 2], np.float32))]),
    "einsum_bad_equation": model(
        [helper.make_node("Einsum", ["x", "x"], ["y"], equation="ij,jk->iq")], X2, opset=13),
    "batchnorm_wrong_channels": model(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], X4,
        inits=[c(n, np.ones(7, np.float32)) for n in "sbmv"]),
    "layernorm_axis_out_of_range": model(
        [helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=3)], X2,
        inits=[c("s", np.ones(4, np.float32))], opset=17),
    "cast_to_undefined": model(
        [helper.make_node("Cast", ["x"], ["y"], to=0)], X2),
    "cast_to_unknown_type": model(
        [helper.make_node("Cast", ["x"], ["y"], to=99)], X2),
    "depthtospace_not_divisible": model(
        [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=3)], X4),
    "unsqueeze_axis_out_of_range": model(
        [helper.make_node("Unsqueeze", ["x", "a"], ["y"])], X2,
        inits=[c("a", np.array([5], np.int64))]),
    "squeeze_non_one_dim": model(
        [helper.make_node("Squeeze", ["x", "a"], ["y"])], X2,
        inits=[c("a", np.array([0], np.int64))]),
    "flatten_axis_out_of_range": model(
        [helper.make_node("Flatten", ["x"], ["y"], axis=3)], X2),
    "where_not_broadcastable": model(
        [helper.make_node("Where", ["cnd", "x", "z"], ["y"])], X2,
        inits=[c("cnd", np.ones((2,), bool)), c("z", np.ones((3, 4), np.float32))]),
    "lstm_hidden_size_mismatch": model(
        [helper.make_node("LSTM", ["xs", "lw", "lr"], ["y"], hidden_size=3)],
        [("xs", F, [2, 1, 4])],
        inits=[c("lw", np.ones((1, 12, 4), np.float32)), c("lr", np.ones((1, 16, 4), np.float32))]),
}

# Problems that only the data shows: the graph builds, the run must fail cleanly.
RUNTIME_CASES = {
    "gather_index_out_of_range": (
        model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
              X2 + [("i", I64, [2])]),
        {"x": np.ones((3, 4), np.float32), "i": np.array([0, 7], np.int64)}),
    "gather_index_far_negative": (
        model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
              X2 + [("i", I64, [1])]),
        {"x": np.ones((3, 4), np.float32), "i": np.array([-99], np.int64)}),
    "gatherelements_index_out_of_range": (
        model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
              X2 + [("i", I64, [3, 4])]),
        {"x": np.ones((3, 4), np.float32), "i": np.full((3, 4), 4, np.int64)}),
    "scatterelements_index_out_of_range": (
        model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)],
              X2 + [("i", I64, [1, 4]), ("u", F, [1, 4])]),
        {"x": np.ones((3, 4), np.float32), "i": np.full((1, 4), 3, np.int64),
         "u": np.ones((1, 4), np.float32)}),
    "reshape_runtime_shape_mismatch": (
        model([helper.make_node("Reshape", ["x", "s"], ["y"])], X2 + [("s", I64, [2])]),
        {"x": np.ones((3, 4), np.float32), "s": np.array([5, 5], np.int64)}),
    "expand_runtime_huge": (
        model([helper.make_node("Expand", ["x", "s"], ["y"])], X2 + [("s", I64, [3])]),
        {"x": np.ones((3, 4), np.float32), "s": np.array([1 << 40, 3, 4], np.int64)}),
    "constantofshape_runtime_huge": (
        model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [("s", I64, [2])]),
        {"s": np.array([1 << 40, 1 << 40], np.int64)}),
    "range_runtime_huge": (
        model([helper.make_node("Range", ["a", "b", "d"], ["y"])],
              [("a", I64, []), ("b", I64, []), ("d", I64, [])], output_type=I64),
        {"a": np.array(0, np.int64), "b": np.array(1 << 60, np.int64),
         "d": np.array(1, np.int64)}),
    "range_runtime_zero_delta": (
        model([helper.make_node("Range", ["a", "b", "d"], ["y"])],
              [("a", I64, []), ("b", I64, []), ("d", I64, [])], output_type=I64),
        {"a": np.array(0, np.int64), "b": np.array(5, np.int64), "d": np.array(0, np.int64)}),
    "tile_runtime_huge": (
        model([helper.make_node("Tile", ["x", "r"], ["y"])], X2 + [("r", I64, [2])]),
        {"x": np.ones((3, 4), np.float32), "r": np.array([1 << 40, 1 << 30], np.int64)}),
    "onehot_runtime_huge_depth": (
        model([helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
              [("i", I64, [3]), ("d", I64, [1]), ("v", F, [2])]),
        {"i": np.array([0, 1, 2], np.int64), "d": np.array([1 << 50], np.int64),
         "v": np.array([0, 1], np.float32)}),
    "slice_runtime_zero_step": (
        model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
              X2 + [("st", I64, [1]), ("en", I64, [1]), ("ax", I64, [1]), ("sp", I64, [1])]),
        {"x": np.ones((3, 4), np.float32), "st": np.array([0], np.int64),
         "en": np.array([2], np.int64), "ax": np.array([0], np.int64),
         "sp": np.array([0], np.int64)}),
    "topk_runtime_k_too_big": (
        model([helper.make_node("TopK", ["x", "k"], ["y", "yi"], axis=1)],
              X2 + [("k", I64, [1])]),
        {"x": np.ones((3, 4), np.float32), "k": np.array([99], np.int64)}),
}


def kiln(*args):
    if not os.access(KILN, os.X_OK):
        pytest.fail(f"kiln binary not found at {KILN} (set KILN)")
    proc = subprocess.run([KILN, *map(str, args)], capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=120)
    return proc.returncode, proc.stderr.decode("utf-8", "replace")


def assert_clean_failure(rc, err):
    assert 0 <= rc < 128, f"crashed: exit {rc}; stderr: {err[-2000:]}"
    for mark in CRASH_MARKS:
        assert mark not in err, f"{mark!r} on stderr: {err[-2000:]}"
    assert rc != 0, "expected a failure, got exit 0"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"expected one line on stderr, got {lines!r}"


def write_inputs(tmp_path, model_proto, feeds=None):
    args = []
    if feeds is None:
        feeds = {}
        for vi in model_proto.graph.input:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            dtype = np.float32 if vi.type.tensor_type.elem_type == F else np.int64
            feeds[vi.name] = np.ones(shape, dtype)
    for name, arr in feeds.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    return args


# Known gaps, each a spec rule kiln does not check yet.
KNOWN_GAPS = {}


@pytest.mark.parametrize("kind", [
    pytest.param(k, marks=pytest.mark.xfail(reason=KNOWN_GAPS[k])) if k in KNOWN_GAPS else k
    for k in sorted(CASES)])
def test_invalid_node(tmp_path, kind):
    path = tmp_path / "m.onnx"
    path.write_bytes(CASES[kind].SerializeToString())
    rc, err = kiln("build", path, "-o", tmp_path / "m.plan", "--quiet")
    assert_clean_failure(rc, err)
    assert not (tmp_path / "m.plan").exists()
    out = tmp_path / "out"
    out.mkdir()
    rc, err = kiln("run", path, *write_inputs(tmp_path, CASES[kind]), "--output-dir", out)
    assert_clean_failure(rc, err)
    assert os.listdir(out) == []


@pytest.mark.parametrize("kind", sorted(RUNTIME_CASES))
def test_invalid_data(tmp_path, kind):
    proto, feeds = RUNTIME_CASES[kind]
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    out = tmp_path / "out"
    out.mkdir()
    rc, err = kiln("run", path, *write_inputs(tmp_path, proto, feeds), "--output-dir", out)
    assert_clean_failure(rc, err)
    assert os.listdir(out) == []
