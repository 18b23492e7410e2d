#!/usr/bin/env python3
"""The CUDA backend's convolutions with the epilogue in cuDNN's graph API (conv_graph.c) against
onnxruntime.

Each case is one Conv (1x1, or 3x3 at stride 1 or 2) in float16 or bfloat16 (so stored NHWC),
with or without bias, then an activation the legacy fused call refuses (SiLU as Sigmoid * x,
Sigmoid, ReLU6 as Clip, Tanh) or one cuDNN's pointwise nodes lack (HardSwish: the epilogue
kernel), optionally after a residual Add of a second input: the forms the fusion pass folds
into the convolution's epilogue, EfficientNet-B0's expansion and head convs among them.

Each case runs twice, in separate processes: with KILN_CUDA_CONV_GRAPH=1 and with =0 (cuDNN's
convolution, then the epilogue kernel). The backend's verbose log says, once a context and
convolution, whether cuDNN fused the epilogue: in the first run every 1x1 case with SiLU or
Sigmoid and no residual must say so (the EfficientNet-B0 form this exists for), no case of the
other run may; where cuDNN makes no plan the unfused path must give the same answer. The
reference is onnxruntime (CPU, float32) on the same model with weights and inputs rounded to the
16-bit type; the tolerance is 1e-2 (float16) or 8e-2 (bfloat16) of the output's largest
magnitude. Needs a GPU; exits non-zero on any mismatch.
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

# (batch, in channels, height, width, out channels, window, stride, bias, activation, residual)
CASES = [
    (2, 16, 56, 56, 96, 1, 1, True, "silu", False),  # EfficientNet-B0's expansion
    (1, 320, 7, 7, 1280, 1, 1, True, "silu", False),  # its head
    (3, 40, 14, 14, 240, 1, 1, True, "sigmoid", False),
    (2, 24, 9, 11, 144, 1, 1, True, "relu6", False),
    (1, 32, 12, 12, 64, 1, 1, False, "silu", False),
    (2, 48, 11, 11, 48, 1, 1, True, "tanh", True),
    (1, 64, 13, 17, 64, 1, 1, True, "silu", True),
    (2, 32, 15, 15, 32, 3, 1, True, "silu", False),
    (1, 16, 30, 30, 32, 3, 2, True, "relu6", False),
    (1, 40, 14, 14, 80, 1, 1, True, "hardswish", False),  # no pointwise node: epilogue kernel
    (1, 12, 10, 10, 20, 1, 1, True, "silu", False),  # channels not multiples of 8
]
# What the H200 (cuDNN 9.14) fused: 1x1 and 3x3 convs with bias (or none) and SiLU or Sigmoid.
# It made no plan for ReLU6 (a RELU_FWD with an upper clip); the graphs with a residual add
# failed on a descriptor list too short (since lengthened, not yet rerun). Cases without a plan
# run unfused, and must still match.
MUST_FUSE = ("silu", "sigmoid")


def activation(name, src, dst):
    if name == "silu":
        return [helper.make_node("Sigmoid", [src], [dst + "_s"]),
                helper.make_node("Mul", [src, dst + "_s"], [dst])]
    if name == "relu6":
        return [helper.make_node("Clip", [src, "lo", "hi"], [dst])]
    op = {"sigmoid": "Sigmoid", "tanh": "Tanh", "hardswish": "HardSwish"}[name]
    return [helper.make_node(op, [src], [dst])]


def model_of(case, precision, rng):
    n, c, h, w, k, win, stride, bias, act, residual = case
    pad = win // 2
    oh, ow = (h + 2 * pad - win) // stride + 1, (w + 2 * pad - win) // stride + 1

    def const(name, shape, scale):
        return numpy_helper.from_array(
            rounded(rng.standard_normal(shape).astype(np.float32) * scale, precision), name)

    inits = [const("w", [k, c, win, win], 1.0 / np.sqrt(c * win * win)),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(const("b", [k], 0.3))
        conv_in.append("b")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    nodes = [helper.make_node("Conv", conv_in, ["a"], kernel_shape=[win, win],
                              strides=[stride, stride], pads=[pad] * 4)]
    src = "a"
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [n, k, oh, ow]))
        nodes.append(helper.make_node("Add", ["a", "r"], ["ar"]))
        src = "ar"
    nodes += activation(act, src, "y")
    g = helper.make_graph(nodes, "conv", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, k, oh, ow])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m, (n, k, oh, ow)


def check(case, precision, rng, log):
    model, out_shape = model_of(case, precision, rng)
    n, c, h, w = case[:4]
    feeds = {"x": rounded(rng.standard_normal((n, c, h, w)).astype(np.float32), precision)}
    if case[9]:
        feeds["r"] = rounded(rng.standard_normal(out_shape).astype(np.float32), precision)
    ref = ort_reference(model, feeds)
    plan = kiln.build(model.SerializeToString(), backends=["cuda", "cpu"], precision=precision)
    del log[:]
    y = kiln.Engine(plan).context().run(feeds)["y"].astype(np.float64)
    fused = any("fused by cuDNN's graph API" in m for m in log)
    return mismatch(y, ref, precision), fused


def worker(precisions, label, graph_on):
    log = []
    kiln.set_logger(lambda level, msg: log.append(msg), kiln.LogLevel.VERBOSE)
    rng = np.random.default_rng(5)
    failed = 0
    for precision in precisions:
        for case in CASES:
            n, c, h, w, k, win, _, _, act, _ = case
            must = (graph_on and win == 1 and act in MUST_FUSE and not case[9] and c % 8 == 0
                    and k % 8 == 0)
            try:
                why, fused = check(case, precision, rng, log)
                if why is None and must and not fused:
                    why = "the epilogue was not fused by cuDNN's graph API"
                if why is None and fused and not graph_on:
                    why = "fused with KILN_CUDA_CONV_GRAPH=0"
            except Exception as e:  # a build or run error is a failure of this case
                why, fused = f"{type(e).__name__}: {e}", False
            name = "{}x{}x{}x{} -> {} {}x{} s{} bias={} {} residual={}".format(
                n, c, h, w, k, win, win, case[6], case[7], act, case[9])
            print(f"{'ok  ' if why is None else 'FAIL'} [{label}] {name} {precision}"
                  f"{' (graph)' if fused else ''}{'' if why is None else ': ' + why}", flush=True)
            failed += why is not None
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", nargs="+", default=["fp16", "bf16"])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        on = os.environ.get("KILN_CUDA_CONV_GRAPH") == "1"
        return 1 if worker(args.precision, args.worker, on) else 0
    failed = run_workers(__file__, "KILN_CUDA_CONV_GRAPH", ("1", "0"), args.precision)
    total = 2 * len(CASES) * len(args.precision)
    print(f"conv_graph_gpu: {'all ' + str(total) + ' cases match' if not failed else 'FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
