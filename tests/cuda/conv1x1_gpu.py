#!/usr/bin/env python3
"""The CUDA backend's own 1x1 convolution (kernels_conv1x1.cu) against onnxruntime.

Each case is one 1x1 Conv with bias in float16 or bfloat16 (so stored NHWC), then an activation
(SiLU as Sigmoid * x, ReLU6 as Clip, HardSwish, ReLU or none) and optionally a residual Add of a
second input, before or after the activation as MobileNetV2, EfficientNet-B0 and ResNet use
them: the forms the fusion pass folds into the convolution's epilogue. Shapes cover pixel counts
that fill the kernel's 128-row tiles and ones that do not, channel counts that are and are not
multiples of its 32-wide k steps, narrow and wide outputs (both tile widths), and channels that
are not multiples of 8 (the kernel declines them: cuDNN runs those).

Each case runs twice, in separate processes: with the default (cuDNN's convolution, fused with
bias, residual and ReLU where it takes them, else followed by the epilogue kernel) and with
KILN_CUDA_CONV1X1=1 (the own kernel for every 1x1 convolution it takes, the epilogue in its
store). The reference is onnxruntime (CPU, float32) on the same model with
weights and inputs rounded to the 16-bit type; the tolerance is 1e-2 (float16) or 8e-2
(bfloat16) of the output's largest magnitude. Needs a GPU; exits non-zero on any mismatch.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import kiln  # noqa: E402
# this folder: the script's own
from cnn_kernels_gpu import mismatch, ort_reference, rounded, run_workers  # noqa: E402

# (batch, in channels, height, width, out channels, activation, residual: None, "pre" (added
# before the activation) or "post" (after it, as MobileNetV2's projection + skip))
CASES = [
    (1, 16, 112, 112, 96, "silu", None),
    (2, 96, 29, 31, 24, "none", "pre"),
    (1, 320, 7, 7, 1280, "silu", None),
    (3, 40, 14, 14, 240, "hardswish", None),
    (64, 24, 8, 8, 144, "relu6", None),
    (1, 1152, 7, 7, 192, "none", "pre"),
    (1, 8, 5, 5, 8, "relu", None),
    (2, 72, 9, 9, 40, "relu6", "pre"),
    (1, 64, 13, 17, 64, "relu", "pre"),
    (2, 48, 11, 11, 48, "silu", "post"),
    (1, 12, 10, 10, 20, "silu", None),  # channels not multiples of 8: cuDNN's
]


def activation(name, src, dst):
    if name == "silu":
        return [helper.make_node("Sigmoid", [src], [dst + "_s"]),
                helper.make_node("Mul", [src, dst + "_s"], [dst])]
    if name == "relu6":
        return [helper.make_node("Clip", [src, "lo", "hi"], [dst])]
    if name == "hardswish":
        return [helper.make_node("HardSwish", [src], [dst])]
    if name == "relu":
        return [helper.make_node("Relu", [src], [dst])]
    return [helper.make_node("Identity", [src], [dst])]


def model_of(case, precision, rng):
    n, c, h, w, k, act, residual = case

    def const(name, shape, scale):
        return numpy_helper.from_array(
            rounded(rng.standard_normal(shape).astype(np.float32) * scale, precision), name)

    inits = [const("w", [k, c, 1, 1], 1.0 / np.sqrt(c)), const("b", [k], 0.3),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["a"])]
    if residual is not None:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [n, k, h, w]))
    if residual == "pre":
        nodes.append(helper.make_node("Add", ["a", "r"], ["ar"]))
        nodes += activation(act, "ar", "y")
    elif residual == "post":
        nodes += activation(act, "a", "e")
        nodes.append(helper.make_node("Add", ["e", "r"], ["y"]))
    else:
        nodes += activation(act, "a", "y")
    g = helper.make_graph(nodes, "conv1x1", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, k, h, w])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def check(case, precision, rng):
    model = model_of(case, precision, rng)
    n, c, h, w, k, _, residual = case
    feeds = {"x": rounded(rng.standard_normal((n, c, h, w)).astype(np.float32), precision)}
    if residual is not None:
        feeds["r"] = rounded(rng.standard_normal((n, k, h, w)).astype(np.float32), precision)
    ref = ort_reference(model, feeds)
    plan = kiln.build(model.SerializeToString(), backends=["cuda", "cpu"], precision=precision)
    y = kiln.Engine(plan).context().run(feeds)["y"].astype(np.float64)
    return mismatch(y, ref, precision)


def worker(precisions, label):
    rng = np.random.default_rng(5)
    failed = 0
    for precision in precisions:
        for case in CASES:
            try:
                why = check(case, precision, rng)
            except Exception as e:  # a build or run error is a failure of this case
                why = f"{type(e).__name__}: {e}"
            name = "{}x{}x{}x{} -> {} {} residual={} {}".format(*case, precision)
            print(f"{'ok  ' if why is None else 'FAIL'} [{label}] {name}"
                  f"{'' if why is None else ': ' + why}", flush=True)
            failed += why is not None
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", nargs="+", default=["fp16", "bf16"])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return 1 if worker(args.precision, args.worker) else 0
    failed = run_workers(__file__, "KILN_CUDA_CONV1X1", (None, "1"), args.precision)
    total = 2 * len(CASES) * len(args.precision)
    print(f"conv1x1_gpu: {'all ' + str(total) + ' cases match' if not failed else 'FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
