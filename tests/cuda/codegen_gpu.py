#!/usr/bin/env python3
"""kiln.FusedElementwise as generated kernels on CUDA, against onnxruntime.

Each model below is a chain of element-wise ops that kiln fuses into one kiln.FusedElementwise
layer; `kiln build --backend cuda` generates that layer's kernel (NVRTC) and stores it in the
plan. For float32, float16 and bfloat16 plans this checks that:

- `kiln inspect` shows the layer with a generated kernel (and without one when the plan is
  built with KILN_CUDA_CODEGEN=0);
- the plan's outputs match onnxruntime (CPU, float32) at shapes that take each path of the
  kernel: every input at the output's shape with an element count divisible by eight (eight
  elements per thread), counts of 12 and odd ones (one per thread), a per-channel input (broadcast
  offsets, once per eight elements where the innermost dim allows) and a one-element graph input read as a single value, in both flat paths; float32 within 1e-5 of the output's magnitude, float16 1e-2,
  bfloat16 8e-2;
- a plan with generated code and one without give the same float32 results (within 1e-6: the
  same float operations, differently scheduled);
- a model typed float16 throughout fuses its element-wise chain into one generated layer too;
- loading and running a plan with generated code never loads the compiler: after a process
  loads such a plan through kiln's Python API and runs it, libnvrtc is not in its memory map
  (/proc/self/maps).

Needs a GPU. Exits non-zero on any failure.
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
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOL = {"fp32": 1e-5, "fp16": 1e-2, "bf16": 8e-2}


def model_silu_bias(path):
    """y = x * sigmoid(x) * 0.5 + b[c] + z  (x, z: N x C x H x W; b: 1 x C x 1 x 1)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "H", "W"])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 8, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, "H", "W"])
    b = helper.make_tensor("b", TensorProto.FLOAT, [1, 8, 1, 1],
                           np.linspace(-1, 1, 8).astype(np.float32))
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Add", ["hb", "z"], ["y"])]
    g = helper.make_graph(nodes, "silu_bias", [x, z], [y], [b, half])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return ["--shapes", "x:1x8x3x3,2x8x9x7,4x8x16x16", "--shapes",
            "z:1x8x3x3,2x8x9x7,4x8x16x16"]


def model_gelu_tanh(path):
    """y = tanh(x) * hardswish(x) - abs(x) / 3  (one input, every shape flat)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "D"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "D"])
    three = helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])
    nodes = [helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("HardSwish", ["x"], ["hs"]),
             helper.make_node("Mul", ["t", "hs"], ["p"]),
             helper.make_node("Abs", ["x"], ["a"]),
             helper.make_node("Div", ["a", "three"], ["q"]),
             helper.make_node("Sub", ["p", "q"], ["y"])]
    g = helper.make_graph(nodes, "gelu_tanh", [x], [y], [three])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return ["--shapes", "x:1x1,3x5,64x4096"]


def model_scale(path):
    """y = relu(x * s) + x with s a one-element graph input (read as a single value)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "D"])
    sc = helper.make_tensor_value_info("s", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "D"])
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    g = helper.make_graph(nodes, "scale", [x, sc], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return ["--shapes", "x:1x1,3x7,8x1024"]


MODELS = {"silu_bias": (model_silu_bias, [{"x": (2, 8, 16, 16), "z": (2, 8, 16, 16)},
                                          {"x": (1, 8, 3, 5), "z": (1, 8, 3, 5)},
                                          {"x": (4, 8, 16, 16), "z": (4, 8, 16, 16)}]),
          "gelu_tanh": (model_gelu_tanh, [{"x": (64, 4096)}, {"x": (3, 4)}, {"x": (3, 5)},
                                          {"x": (1, 1)}]),
          "scale": (model_scale, [{"x": (8, 1024), "s": (1,)}, {"x": (3, 7), "s": (1,)}])}


def kiln_cmd(kiln, *args, env=None):
    p = subprocess.run([kiln, *args], capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stdout, p.stderr


def fused_layers(kiln, plan):
    rc, out, err = kiln_cmd(kiln, "inspect", plan, "--json")
    if rc != 0:
        raise RuntimeError(f"inspect: {err.strip()}")
    info = json.loads(out)
    return [layer for layer in info.get("layers", []) if layer.get("op") == "FusedElementwise"]


def run_plan(kiln, plan, feeds, tmp, env=None):
    os.makedirs(tmp, exist_ok=True)
    args = ["run", plan, "--output-dir", os.path.join(tmp, "out")]
    for name, arr in feeds.items():
        f = os.path.join(tmp, f"{name}.npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    rc, _, err = kiln_cmd(kiln, *args, env=env)
    if rc != 0:
        raise RuntimeError(f"run: {err.strip()}")
    with open(os.path.join(tmp, "out", "outputs.json")) as f:
        index = json.load(f)
    return {k: np.load(os.path.join(tmp, "out", v)) for k, v in index.items()}, err


LOAD_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import kiln
ctx = kiln.Engine(sys.argv[1]).context()
out = ctx.run({"x": np.ones((2, 8, 4, 4), np.float32), "z": np.ones((2, 8, 4, 4), np.float32)})
assert out["y"].shape == (2, 8, 4, 4)
with open("/proc/self/maps") as f:
    print("nvrtc" if "libnvrtc" in f.read() else "clean")
"""


def no_compiler_at_load(plan):
    p = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, plan, os.path.join(REPO, "python")],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return f"loading the plan in Python failed: {p.stderr.strip()[-300:]}"
    if p.stdout.strip() != "clean":
        return "loading a plan with generated code mapped libnvrtc"
    return ""


def half_model_fuses(kiln, tmp):
    """A model typed float16 end to end (as a model exported in 16 bits): its Relu, Sigmoid and
    Mul fuse into one generated layer on CUDA, and the result matches numpy's float32 over the
    float16 input within float16's rounding. Returns failures."""
    path, plan = os.path.join(tmp, "half.onnx"), os.path.join(tmp, "half.plan")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 8, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 8, 16, 16])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["r", "s"], ["y"])]
    g = helper.make_graph(nodes, "half", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    rc, _, err = kiln_cmd(kiln, "build", path, "-o", plan, "--backend", "cuda", "--quiet")
    if rc != 0:
        return [f"float16 model: build: {err.strip()}"]
    rc, out, err = kiln_cmd(kiln, "inspect", plan, "--json")
    ops = [layer.get("op") for layer in json.loads(out).get("layers", [])]
    fails = []
    if ops.count("FusedElementwise") != 1 or "Relu" in ops or "Mul" in ops:
        fails.append(f"float16 model: not fused into one layer: {ops}")
    elif not all("generated" in json.dumps(x) for x in fused_layers(kiln, plan)):
        fails.append("float16 model: the fused layer has no generated kernel")
    xv = np.random.default_rng(1).standard_normal((4, 8, 16, 16)).astype(np.float16) * 3
    got, _ = run_plan(kiln, plan, {"x": xv}, os.path.join(tmp, "rh"))
    xf = xv.astype(np.float32)
    want = np.maximum(xf, 0) / (1 + np.exp(-xf))
    rel = float(np.max(np.abs(got["y"].astype(np.float32) - want))) / float(np.max(np.abs(want)))
    print(f"codegen float16 model fused into {ops.count('FusedElementwise')} layer(s), "
          f"max rel diff {rel:.2e}", flush=True)
    if got["y"].dtype != np.float16 or rel > 1e-3:
        fails.append(f"float16 model: {got['y'].dtype}, max rel diff {rel:.2e}")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build-cuda/bin/kiln"))
    a = ap.parse_args()
    failures, checks = [], 0
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (make, cases) in MODELS.items():
            path = os.path.join(tmp, f"{name}.onnx")
            shapes = make(path)
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            plans = {}
            for precision in ("fp32", "fp16", "bf16"):
                plan = os.path.join(tmp, f"{name}_{precision}.plan")
                extra = [] if precision == "fp32" else ["--precision", precision]
                rc, _, err = kiln_cmd(a.kiln, "build", path, "-o", plan, "--backend", "cuda",
                                      "--quiet", *shapes, *extra)
                if rc != 0:
                    failures.append(f"{name} {precision}: build: {err.strip()}")
                    continue
                layers = fused_layers(a.kiln, plan)
                checks += 1
                if not layers or not all("generated" in json.dumps(x) for x in layers):
                    failures.append(f"{name} {precision}: no generated kernel in {layers}")
                plans[precision] = plan
            env = dict(os.environ, KILN_CUDA_CODEGEN="0")
            interp = os.path.join(tmp, f"{name}_interp.plan")
            rc, _, err = kiln_cmd(a.kiln, "build", path, "-o", interp, "--backend", "cuda",
                                  "--quiet", *shapes, env=env)
            checks += 1
            if rc != 0 or any("generated" in json.dumps(x) for x in fused_layers(a.kiln, interp)):
                failures.append(f"{name}: KILN_CUDA_CODEGEN=0 still generated code ({err.strip()})")
            for case in cases:
                feeds = {k: rng.standard_normal(s).astype(np.float32) * 3 for k, s in case.items()}
                want = sess.run(None, feeds)[0]
                scale = max(float(np.max(np.abs(want))), 1e-30)
                for precision, plan in plans.items():
                    got, err = run_plan(a.kiln, plan, feeds, os.path.join(tmp, "r"))
                    rel = float(np.max(np.abs(got["y"].astype(np.float64) - want))) / scale
                    checks += 1
                    ok = got["y"].shape == want.shape and rel <= TOL[precision]
                    print(f"codegen {name:10s} {precision} {str(case[next(iter(case))]):18s} "
                          f"max rel diff {rel:.2e} {'ok' if ok else 'FAILED'}", flush=True)
                    if not ok:
                        failures.append(f"{name} {precision} {case}: {rel:.2e}")
                got_i, _ = run_plan(a.kiln, interp, feeds, os.path.join(tmp, "r"))
                if "fp32" in plans:
                    got_g, _ = run_plan(a.kiln, plans["fp32"], feeds, os.path.join(tmp, "r"))
                    rel = float(np.max(np.abs(got_g["y"] - got_i["y"]))) / scale
                    checks += 1
                    if rel > 1e-6:
                        failures.append(f"{name} {case}: generated vs interpreter {rel:.2e}")
            if name == "silu_bias" and "fp16" in plans:
                checks += 1
                why = no_compiler_at_load(plans["fp16"])
                print(f"codegen load without NVRTC: {why or 'ok'}", flush=True)
                if why:
                    failures.append(why)
        checks += 1
        failures += half_model_fuses(a.kiln, tmp)
    for f in failures:
        print("FAILED", f)
    print(f"codegen: {checks - len(failures)}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
