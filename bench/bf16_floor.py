#!/usr/bin/env python3
"""How close bf16 can come to float32 on each model of tests/models: the bf16 floor.

Every Conv, ConvTranspose, Gemm and MatMul gets its first two inputs (the activation and the
weights) rounded to bfloat16 through a Cast pair; everything else, storage and accumulation
included, stays float32, and onnxruntime runs the result with its graph optimizations off. That
is the least rounding a product on bf16 tensor cores (or AMX) can do, so no bf16 plan can be
expected to beat the error printed here: max |y - ref| / max |ref| per output, ref being the
manifest's float32 reference. kiln's bf16 plans add their own roundings (the GPU stores
activations in bf16) and keep some layers in float32 (the CPU's depthwise convs).

Models whose opset is below 13 (Cast has no bfloat16 there) are reported and skipped.

    python3 bench/bf16_floor.py [--models a,b] [--json-out FILE]
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models")
PRODUCTS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def rounded_products(model):
    """The model with each product's first two inputs rounded to bf16 (Cast there and back)."""
    nodes = []
    for i, n in enumerate(model.graph.node):
        if n.op_type in PRODUCTS:
            for j, x in enumerate(list(n.input)[:2]):
                if not x:
                    continue
                mid, out = f"bf16_floor_{i}_{j}", f"bf16_floor_{i}_{j}_f32"
                nodes.append(helper.make_node("Cast", [x], [mid], to=TensorProto.BFLOAT16))
                nodes.append(helper.make_node("Cast", [mid], [out], to=TensorProto.FLOAT))
                n.input[j] = out
        nodes.append(n)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def opset(model):
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", help="comma-separated names (default: all of the manifest)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    manifest = json.load(open(os.path.join(ROOT, "manifest.json")))
    wanted = set(args.models.split(",")) if args.models else None
    unknown = sorted((wanted or set()) - {e["name"] for e in manifest["models"]})
    if unknown:
        print(f"bf16_floor.py: no model named {', '.join(unknown)} in tests/models/manifest.json",
              file=sys.stderr)
        return 2
    rows, worst = [], 0.0
    for entry in manifest["models"]:
        if wanted is not None and entry["name"] not in wanted:
            continue
        model = onnx.load(os.path.join(ROOT, entry["model"]))
        if opset(model) < 13:
            print(f"{entry['name']}: opset {opset(model)} has no bfloat16 Cast; skipped")
            continue
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(rounded_products(model).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        for case in entry["cases"]:
            feeds = {k: np.load(os.path.join(ROOT, v)) for k, v in case["inputs"].items()}
            got = dict(zip(names, sess.run(None, feeds)))
            for out, ref_path in case["outputs"].items():
                ref = np.load(os.path.join(ROOT, ref_path))
                if ref.dtype.kind != "f" or ref.size == 0:
                    continue
                scale = float(np.abs(ref).max()) or 1.0
                err = float(np.abs(got[out].astype(np.float64) - ref).max()) / scale
                worst = max(worst, err)
                rows.append({"model": entry["name"], "case": case["name"], "output": out,
                             "floor": err})
                print(f"{entry['name']:26s} {case['name']:24s} {out:16s} {err:.3g}")
    print(f"worst bf16 floor: {worst:.3g} of the output's largest magnitude")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "worst": worst}, f, indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
