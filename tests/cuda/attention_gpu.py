#!/usr/bin/env python3
"""The fused attention kernel of the CUDA backend against a float64 reference.

Each case is a model in the form exporters write attention (Transpose, MatMul, Mul by the
scale, Add of an additive mask, Softmax, MatMul, Transpose; see kn_pass_fuse_attention),
built for CUDA in float16 and bfloat16, where the pass turns it into one kiln.Attention node
(checked in the plan's layers). The shapes cover what the kernel tiles by: query rows not a
multiple of 16, keys not a multiple of the 64-key tile (and fewer than one tile), head sizes
16 to 128, batch and heads small enough that the launcher shrinks its CTAs, and masks of every
kind: none, one padding row shared by the queries ([B, 1, 1, Sk]), a per-query causal mask
([B, 1, Sq, Sk]) and a row masked everywhere, which must give NaN (as onnxruntime does).

The reference is float64 softmax(Q K^T * scale + mask) V of the same (rounded) inputs; the
tolerance is 1e-2 of the output's largest magnitude. Needs a GPU; exits non-zero on any
mismatch or error.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import kiln  # noqa: E402

BACKENDS = ["cuda", "cpu"]

# (batch, heads, query rows, keys, head size, mask kind)
CASES = [
    (2, 3, 128, 128, 64, "padding"),
    (1, 12, 128, 128, 64, "padding"),
    (1, 2, 5, 7, 64, "none"),
    (2, 2, 100, 200, 32, "causal"),
    (1, 1, 70, 130, 128, "none"),
    (1, 4, 33, 65, 80, "padding"),
    (3, 2, 16, 16, 16, "causal"),
    (2, 2, 40, 300, 96, "padding"),
    (1, 2, 24, 24, 48, "masked_row"),
]


def model_of(b, h, sq, sk, d, mask):
    f = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("q", f, [b, sq, h, d]),
        helper.make_tensor_value_info("k", f, [b, sk, h, d]),
        helper.make_tensor_value_info("v", f, [b, sk, h, d]),
    ]
    nodes = [
        helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v"], ["vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
    ]
    scores = "ss"
    if mask != "none":
        shape = [b, 1, 1, sk] if mask == "padding" else [b, 1, sq, sk]
        inputs.append(helper.make_tensor_value_info("mask", f, shape))
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        scores = "sm"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vt"], ["o"]),
        helper.make_node("Transpose", ["o"], ["y"], perm=[0, 2, 1, 3]),
    ]
    scale = helper.make_tensor("scale", f, [], [1.0 / np.sqrt(d)])
    g = helper.make_graph(nodes, "attention", inputs,
                          [helper.make_tensor_value_info("y", f, [b, sq, h, d])], [scale])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def mask_of(rng, b, sq, sk, kind):
    if kind == "padding":
        m = np.zeros((b, 1, 1, sk), np.float32)
        for i in range(b):
            m[i, 0, 0, sk - 1 - i * (sk // 4):] = -10000.0  # batch i pads its last keys
        return m
    m = np.zeros((b, 1, sq, sk), np.float32)
    if kind == "causal":
        m[:, 0] = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, 0.0)
    else:  # masked_row
        m[:, 0, 3, :] = -np.inf
        m[:, 0, :, : sk // 3] = -10000.0
    return m


def reference(q, k, v, mask, d):
    q, k, v = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    if mask is not None:
        s = s + mask.astype(np.float64)
    with np.errstate(invalid="ignore"):
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p = p / p.sum(axis=-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3)


def rounded(x, precision):
    if precision == "fp16":
        return x.astype(np.float16).astype(np.float32)
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def check(case, precision, rng):
    b, h, sq, sk, d, kind = case
    model = model_of(b, h, sq, sk, d, kind)
    plan = kiln.build(model.SerializeToString(), backends=BACKENDS, precision=precision)
    ops = [op for _, op, _ in kiln.plan_layers(plan)]
    if "Attention" not in ops:
        return f"no fused attention in the plan (layers: {sorted(set(o for o in ops if o))})"
    feeds = {n: rounded(rng.standard_normal((b, s, h, d)).astype(np.float32) * 2.0, precision)
             for n, s in (("q", sq), ("k", sk), ("v", sk))}
    mask = None
    if kind != "none":
        mask = mask_of(rng, b, sq, sk, kind)
        feeds["mask"] = mask
    y = kiln.Engine(plan).context().run(feeds)["y"].astype(np.float64)
    ref = reference(feeds["q"], feeds["k"], feeds["v"], mask, d)
    nan_ref = np.isnan(ref)
    if not np.array_equal(np.isnan(y), nan_ref):
        return f"NaN in {np.isnan(y).sum()} places, reference in {nan_ref.sum()}"
    scale = np.abs(ref[~nan_ref]).max()
    err = np.abs(y - ref)[~nan_ref].max() / scale
    if err > 1e-2:
        return f"error {err:.2e} of the largest output (tolerance 1e-2)"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", nargs="+", default=["fp16", "bf16"])
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    failed = 0
    for precision in args.precision:
        for case in CASES:
            try:
                why = check(case, precision, rng)
            except Exception as e:  # a build or run error is a failure of this case
                why = f"{type(e).__name__}: {e}"
            label = "x".join(str(c) for c in case[:5]) + f" {case[5]} {precision}"
            print(f"{'ok  ' if why is None else 'FAIL'} {label}{'' if why is None else ': ' + why}")
            failed += why is not None
    total = len(CASES) * len(args.precision)
    print(f"attention_gpu: {total - failed}/{total} cases match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
