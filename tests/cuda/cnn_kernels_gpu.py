#!/usr/bin/env python3
"""The CUDA backend's kernels of mobile CNNs against onnxruntime: depthwise convolution, global
pooling and the squeeze-and-excitation block.

Each case is a small network conv 1x1 -> depthwise conv (groups = channels) -> conv 1x1, with
the depthwise layer's bias, an activation after it (ReLU6 as Clip, SiLU as Sigmoid * x, or
none), optionally a squeeze-and-excitation block on it (global average or max pool, 1x1 conv,
ReLU, 1x1 conv, Sigmoid, channel Mul) and optionally a residual Add: the forms MobileNetV2 and
EfficientNet-B0 use. A 64x64 map at batch 1 makes the NHWC global pool split its pixels over
several blocks. Built for
CUDA in float16 and bfloat16, where the 1x1 convs around it make the layout pass store the
depthwise layer NHWC (the vector NHWC kernel, channels filling 16-byte vectors) or keep it
NCHW (channels that do not; with KILN_CUDA_NHWC_DEPTHWISE=0 set, every case), which --kiln
checks in the plan. Shapes cover 3x3 and 5x5 windows, strides 1 and 2, odd map sizes, channel
counts below, at and above the kernel's 32-vector slice, and batches 1 and 3 (the launcher's
one- and four-outputs-a-thread forms).

Cases with an expansion activation put one on the first 1x1 conv (the residual then adds x):
the builder moves a clamp (ReLU6), with that conv's bias, into the depthwise layer's loads
(kiln.FusedDepthwiseConv, passes/fuse_depthwise_input.c) and leaves SiLU, HardSigmoid and
Sigmoid in the expansion conv's epilogue, which --kiln checks in the plan. HardSigmoid and
Sigmoid are not zero at zero, so a kernel that activated the padding would fail.

The reference is onnxruntime (CPU, float32) on the same model with its weights and input
rounded to the 16-bit type; the tolerance is 1e-2 (float16) or 8e-2 (bfloat16) of the
output's largest magnitude. Needs a GPU; exits non-zero on any mismatch or error.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import kiln  # noqa: E402

BACKENDS = ["cuda", "cpu"]

# (batch, channels, height, width, window, stride, activation, residual, squeeze pool,
#  expansion activation)
CASES = [
    (3, 96, 29, 31, 3, 1, "relu6", True, None, None),
    (1, 96, 29, 31, 3, 2, "relu6", False, None, None),
    (1, 1152, 7, 7, 5, 1, "silu", False, "avg", None),
    (3, 264, 15, 13, 5, 2, "silu", False, "avg", None),
    (2, 40, 28, 28, 5, 1, "none", True, "max", None),
    (1, 8, 9, 11, 3, 1, "silu", False, None, None),
    (2, 12, 10, 10, 3, 2, "relu6", False, "avg", None),  # 12 channels: not 16-byte vectors, NCHW
    (64, 32, 16, 16, 3, 1, "relu6", True, None, None),
    (1, 96, 64, 64, 3, 1, "silu", False, "avg", None),  # split global pool
    (1, 40, 70, 66, 5, 1, "silu", True, "max", None),
    (3, 96, 29, 31, 3, 1, "relu6", True, None, "silu"),
    (1, 96, 29, 31, 3, 2, "none", False, None, "hardsigmoid"),
    (2, 12, 10, 10, 5, 2, "silu", False, None, "sigmoid"),  # NCHW
    (64, 32, 16, 16, 3, 1, "relu6", False, None, "relu6"),
    (1, 1152, 7, 7, 5, 1, "silu", False, "avg", "silu"),
    (1, 40, 9, 9, 7, 1, "none", False, None, "hardsigmoid"),  # 7x7: cuDNN after the prologue
]

EXPANSION = {"relu6": "Clip", "hardsigmoid": "HardSigmoid", "sigmoid": "Sigmoid"}


def rounded(x, precision):
    if precision == "fp16":
        return x.astype(np.float16).astype(np.float32)
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def model_of(case, precision, rng):
    n, c, h, w, k, s, act, residual, squeeze, expansion = case
    pad = k // 2
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    residual = residual and s == 1

    def const(name, shape, scale):
        return numpy_helper.from_array(
            rounded(rng.standard_normal(shape).astype(np.float32) * scale, precision), name)

    inits = [const("w1", [c, c, 1, 1], 1.0 / np.sqrt(c)), const("b1", [c], 0.1),
             const("wd", [c, 1, k, k], 1.0 / k), const("bd", [c], 0.1),
             const("w2", [c, c, 1, 1], 1.0 / np.sqrt(c)), const("b2", [c], 0.1),
             const("ws1", [max(c // 4, 1), c, 1, 1], 1.0 / np.sqrt(c)),
             const("bs1", [max(c // 4, 1)], 0.1),
             const("ws2", [c, max(c // 4, 1), 1, 1], 1.0 / np.sqrt(max(c // 4, 1))),
             const("bs2", [c], 0.1),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a0" if expansion else "a"])]
    if expansion == "silu":
        nodes += [helper.make_node("Sigmoid", ["a0"], ["as"]),
                  helper.make_node("Mul", ["a0", "as"], ["a"])]
    elif expansion:
        extra = ["lo", "hi"] if expansion == "relu6" else []
        nodes.append(helper.make_node(EXPANSION[expansion], ["a0", *extra], ["a"]))
    nodes.append(helper.make_node("Conv", ["a", "wd", "bd"], ["d"], name="dw", group=c,
                                  kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4))
    last = "d"
    if act == "relu6":
        nodes.append(helper.make_node("Clip", ["d", "lo", "hi"], ["e"]))
        last = "e"
    elif act == "silu":
        nodes += [helper.make_node("Sigmoid", ["d"], ["sg"]),
                  helper.make_node("Mul", ["d", "sg"], ["e"])]
        last = "e"
    if squeeze:
        pool = "GlobalAveragePool" if squeeze == "avg" else "GlobalMaxPool"
        nodes += [helper.make_node(pool, [last], ["sq"]),
                  helper.make_node("Conv", ["sq", "ws1", "bs1"], ["s1"]),
                  helper.make_node("Relu", ["s1"], ["s2"]),
                  helper.make_node("Conv", ["s2", "ws2", "bs2"], ["s3"]),
                  helper.make_node("Sigmoid", ["s3"], ["s4"]),
                  helper.make_node("Mul", [last, "s4"], ["se"])]
        last = "se"
    if residual:
        nodes.append(helper.make_node("Add", [last, "x" if expansion else "a"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("Conv", [last, "w2", "b2"], ["y"]))
    g = helper.make_graph(nodes, "depthwise",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, oh, ow])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def depthwise_layer(kiln_cli, plan):
    """The depthwise layer of the plan as kiln inspect --json shows it ({} if absent)."""
    with tempfile.NamedTemporaryFile(suffix=".plan") as f:
        f.write(plan)
        f.flush()
        out = subprocess.run([kiln_cli, "inspect", f.name, "--json"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    layers = json.loads(out)["layers"]
    dw = [layer for layer in layers if layer.get("name") == "dw"]
    return dw[0] if dw else {}


def check(case, precision, rng, kiln_cli, expect_nhwc):
    model = model_of(case, precision, rng)
    x = rounded(rng.standard_normal(case[:4]).astype(np.float32), precision)
    ref = ort_reference(model, {"x": x})
    plan = kiln.build(model.SerializeToString(), backends=BACKENDS, precision=precision)
    if kiln_cli:
        # the vector NHWC kernel takes channels filling 16-byte vectors (and 3x3, 5x5 windows)
        want = expect_nhwc and case[1] % 8 == 0 and case[4] in (3, 5)
        layer = depthwise_layer(kiln_cli, plan)
        if bool(layer.get("nhwc", {}).get("inputs", 0) & 1) != want:
            return f"depthwise layer {'not ' if want else ''}stored NHWC"
        # only a clamp (ReLU6) moves into the loads; SiLU and the others stay in the
        # expansion conv's epilogue (fused by cuDNN's graph API where it can)
        moved = layer.get("op") == "FusedDepthwiseConv"
        if moved != (case[9] == "relu6"):
            return f"depthwise layer is {layer.get('op')} with a {case[9]} expansion"
    y = kiln.Engine(plan).context().run({"x": x})["y"].astype(np.float64)
    return mismatch(y, ref, precision)


def ort_reference(model, feeds):
    """onnxruntime's (CPU, float32) first output of model for feeds, in float64."""
    so = ort.SessionOptions()
    so.log_severity_level = 3  # the unused Clip bounds of the other activations
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0].astype(np.float64)


def run_workers(script, var, values, precisions):
    """Run script's --worker in a process of its own once for each value of environment
    variable var (None: unset), as a case runner with a setting read once a process needs;
    returns how many of those runs failed."""
    failed = 0
    for value in values:
        label = "default" if value is None else f"{var}={value}"
        env = dict(os.environ)
        env.pop(var, None)
        if value is not None:
            env[var] = value
        rc = subprocess.run([sys.executable, os.path.abspath(script), "--worker", label,
                             "--precision", *precisions], env=env, timeout=900).returncode
        failed += rc != 0
    return failed


def mismatch(y, ref, precision):
    """Why y (kiln) does not match ref (onnxruntime, float64), or None: shape, non-finite
    values, or an error above 1e-2 (float16) / 8e-2 (bfloat16) of the largest output."""
    if y.shape != ref.shape:
        return f"shape {list(y.shape)} against {list(ref.shape)}"
    if not np.all(np.isfinite(y)):
        return f"{int(np.sum(~np.isfinite(y)))} non-finite outputs"
    err = np.abs(y - ref).max() / np.abs(ref).max()
    tol = 1e-2 if precision == "fp16" else 8e-2
    if err > tol:
        return f"error {err:.2e} of the largest output (tolerance {tol:g})"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", nargs="+", default=["fp16", "bf16"])
    ap.add_argument("--kiln", help="the kiln CLI: also check which layout the plan stores")
    args = ap.parse_args()
    expect_nhwc = os.environ.get("KILN_CUDA_NHWC_DEPTHWISE", "1") != "0"
    rng = np.random.default_rng(11)
    failed = 0
    for precision in args.precision:
        for case in CASES:
            try:
                why = check(case, precision, rng, args.kiln, expect_nhwc)
            except Exception as e:  # a build or run error is a failure of this case
                why = f"{type(e).__name__}: {e}"
            label = "x".join(str(v) for v in case[:4]) + " k{} s{} {} res={} se={} ex={} {}".format(
                *case[4:], precision)
            print(f"{'ok  ' if why is None else 'FAIL'} {label}{'' if why is None else ': ' + why}")
            failed += why is not None
    total = len(CASES) * len(args.precision)
    print(f"cnn_kernels_gpu: {total - failed}/{total} cases match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
