#!/usr/bin/env python3
"""Plugins on the CUDA backend, on a GPU machine, against the same plugins on the CPU.

- Swish (examples/swish/swish.onnx: Conv then the plugin, dynamic N, H, W) and ReluSigmoidMul
  (Conv then the plugin) built with --backend cuda: the plugin layer must be placed on cuda,
  and every sample input must match the CPU build (rtol 1e-4, atol 1e-5) from .onnx (kiln run)
  and through a plan loaded by the Python API, run four times in one context (warm-up,
  stream-graph recording, replays: both plugins declare their enqueue graph-safe) and with
  KILN_CUDA_GRAPHS=0.
- float16: a model whose plugin inputs and outputs are float16 (x and bias) runs on CUDA
  against the CPU plugin, within 1e-2 of the output's largest magnitude.
- Python (--torch, needs torch with CUDA): ctx.run with torch CUDA tensors as inputs (bound as
  device memory), outputs="torch" and outputs bound to the caller's tensors, against numpy
  runs; a Python plugin declaring backends=("cuda",) gets kiln.DeviceArray views and computes
  with torch on the context's stream.

$KILN_LIBRARY / $KILN_BACKEND_PATH as for diff_backends.py; --plugins is the CUDA build's
plugins folder. Prints one line per check and exits non-zero on any failure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
RTOL, ATOL = 1e-4, 1e-5
failures = []
BACKEND = "cuda"  # --backend: another one only to try the script without a GPU


def report(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}".rstrip(), flush=True)
    if not ok:
        failures.append(name)


def kiln_cli(binary, *args, env=None):
    p = subprocess.run([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300, env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise RuntimeError(f"kiln {' '.join(args)}: {p.stderr.decode().strip()}")
    return p.stdout.decode()


def close(got, want, rtol=RTOL, atol=ATOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return False, f"shape {got.shape} != {want.shape}"
    err = np.abs(got - want) / (atol + rtol * np.abs(want))
    return bool(err.max(initial=0) <= 1), f"worst {err.max(initial=0):.3f} of the tolerance"


def relu_sigmoid_mul_model(path, dtype=TensorProto.FLOAT):
    """Conv(3->8) then ReluSigmoidMul (float32), or the plugin alone on float16 x."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    rng = np.random.RandomState(1)
    if dtype == TensorProto.FLOAT:
        w = numpy_helper.from_array(rng.randn(8, 3, 3, 3).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                 helper.make_node("ReluSigmoidMul", ["c"], ["y"], domain="custom",
                                  name="rsm")]
        inits = [w]
        out = helper.make_tensor_value_info("y", dtype, ["N", 8, "H", "W"])
    else:
        nodes = [helper.make_node("ReluSigmoidMul", ["x"], ["y"], domain="custom",
                                  name="rsm")]
        inits = []
        out = helper.make_tensor_value_info("y", dtype, ["N", 3, "H", "W"])
    g = helper.make_graph(nodes, "rsm", [helper.make_tensor_value_info(
        "x", dtype, ["N", 3, "H", "W"])], [out], inits)
    onnx.save(helper.make_model(g, opset_imports=opsets), path)
    return path


def swish_fp16_model(path):
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    bias = numpy_helper.from_array(np.linspace(-1, 1, 3).astype(np.float16), "bias")
    node = helper.make_node("Plugin", ["x", "bias"], ["y"], domain="custom", name="swish",
                            info='{"bias_axis":1}')
    node.attribute.append(helper.make_attribute("name", "Swish"))
    g = helper.make_graph([node], "swish16",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16,
                                                         ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16,
                                                         ["N", 3, "H", "W"])], [bias])
    onnx.save(helper.make_model(g, opset_imports=opsets), path)
    return path


SHAPES = "x:1x3x1x1,2x3x16x24,4x3x32x32"


def samples(dtype=np.float32):
    rng = np.random.RandomState(0)
    return [(rng.randn(*s) * 3).astype(dtype)
            for s in [(1, 3, 8, 8), (2, 3, 16, 24), (3, 3, 5, 7), (1, 3, 1, 1), (4, 3, 32, 17)]]


def placed(binary, plan, lib):
    info = json.loads(kiln_cli(binary, "inspect", plan, "--json", "--plugins", lib))
    return {layer["name"]: layer["backend"] for layer in info["layers"]}


def check_model(k, binary, name, model, lib, plugin_layer, xs, tol, tmp):
    """CPU build vs CUDA build: .onnx through kiln run, the plan through the Python API."""
    cpu = k.Engine(k.build(model, shapes={"x": tuple(tuple(int(d) for d in s.split("x"))
                                                     for s in SHAPES[2:].split(","))},
                           plugins=[lib]))
    plan_path = os.path.join(tmp, f"{name}.plan")
    kiln_cli(binary, "build", model, "-o", plan_path, "--backend", BACKEND, "--plugins", lib,
             "--shapes", SHAPES)
    where = placed(binary, plan_path, lib)
    report(f"{name}: plugin layer on cuda", where.get(plugin_layer) == BACKEND, str(where))
    wants = [cpu.run({"x": x})["y"] for x in xs]
    # .onnx through kiln run --backend cuda
    for i, (x, want) in enumerate(zip(xs, wants)):
        xp, out = os.path.join(tmp, "x.npy"), os.path.join(tmp, f"o_{name}_{i}")
        np.save(xp, x)
        kiln_cli(binary, "run", model, "--backend", BACKEND, "--plugins", lib, "--shapes",
                 SHAPES, "--input", f"x={xp}", "--output-dir", out)
        ok, detail = close(np.load(os.path.join(out, "y.npy")), want, *tol)
        report(f"{name}: .onnx on cuda, input {x.shape}", ok, detail)
    # the plan, one context, four runs per shape (graphs recorded and replayed)
    with open(plan_path, "rb") as f:
        eng = k.Engine(f.read())
    ctx = eng.context()
    for x, want in zip(xs, wants):
        runs = [ctx.run({"x": x})["y"] for _ in range(4)]
        ok, detail = close(runs[0], want, *tol)
        same = all(np.array_equal(r, runs[0]) for r in runs[1:])
        report(f"{name}: plan on cuda x4 runs, input {x.shape}", ok and same,
               detail + ("" if same else "; runs differ"))
    return plan_path, wants


def check_torch(k, plan_path, xs, wants, tol):
    import torch

    with open(plan_path, "rb") as f:
        eng = k.Engine(f.read())
    ctx = eng.context()
    for x, want in zip(xs, wants):
        xt = torch.from_numpy(x).cuda()
        got = ctx.run({"x": xt}, outputs="torch")["y"]
        ok1 = isinstance(got, torch.Tensor) and got.is_cuda
        ok, detail = close(got.cpu().numpy(), want, *tol)
        report(f"torch in, torch out {tuple(x.shape)}", ok and ok1, detail)
        mine = torch.empty(tuple(want.shape), dtype=got.dtype, device="cuda")
        res = ctx.run({"x": xt}, outputs={"y": mine})["y"]
        ok, detail = close(mine.cpu().numpy(), want, *tol)
        report(f"outputs bound to the caller's tensor {tuple(x.shape)}", ok and res is mine,
               detail)
        ok, detail = close(ctx.run({"x": x})["y"], want, *tol)
        report(f"numpy again after device bindings {tuple(x.shape)}", ok, detail)


def check_python_plugin(k):
    import torch

    class TorchScale(k.Plugin):
        name = "TorchScale"
        backends = ("cuda", "cpu")
        seen = []

        def output_shapes(self, input_shapes):
            return [input_shapes[0]]

        def compute(self, inputs, outputs):
            type(self).seen.append(type(inputs[0]).__name__)
            if isinstance(inputs[0], k.DeviceArray):
                with torch.cuda.stream(torch.cuda.ExternalStream(inputs[0].stream)):
                    x = torch.as_tensor(inputs[0], device="cuda")
                    y = torch.as_tensor(outputs[0], device="cuda")
                    torch.mul(x, 2.5, out=y)
            else:
                outputs[0][...] = inputs[0] * np.float32(2.5)

    k.register_plugin(TorchScale)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("TorchScale", ["a"], ["b"], name="scale"),
             helper.make_node("Sigmoid", ["b"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "py", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [64, 1000])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 1000])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.RandomState(3).randn(64, 1000).astype(np.float32)
    want = 1 / (1 + np.exp(-np.maximum(x, 0) * np.float32(2.5)))
    eng = k.Engine(k.build(model, backends=[BACKEND]))
    ok, detail = close(eng.run({"x": x})["y"], want, 1e-5, 1e-6)
    on_gpu = TorchScale.seen and all(s == "DeviceArray" for s in TorchScale.seen)
    report("Python plugin on cuda gets DeviceArray, torch computes", ok and bool(on_gpu),
           f"{detail}; compute saw {sorted(set(TorchScale.seen))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build-cuda", "bin", "kiln"))
    ap.add_argument("--plugins", default=os.path.join(REPO, "build-cuda", "plugins"))
    ap.add_argument("--torch", action="store_true", help="also the torch/Python checks")
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args()
    global BACKEND
    BACKEND = args.backend
    import kiln as k

    swish = os.path.join(args.plugins, "libswish.so")
    rsm = os.path.join(args.plugins, "librelu_sigmoid_mul.so")
    with tempfile.TemporaryDirectory() as tmp:
        xs = [np.load(os.path.join(REPO, "examples", "swish", "data", f"input_{i}.npy"))
              for i in range(5)]
        model = os.path.join(REPO, "examples", "swish", "swish.onnx")
        plan, wants = check_model(k, args.kiln, "swish", model, swish, "/swish/Plugin", xs,
                                  (RTOL, ATOL), tmp)
        check_model(k, args.kiln, "relu_sigmoid_mul",
                    relu_sigmoid_mul_model(os.path.join(tmp, "rsm.onnx")), rsm, "rsm",
                    samples(), (RTOL, ATOL), tmp)
        for name, path, lib, layer in [
                ("swish fp16", swish_fp16_model(os.path.join(tmp, "s16.onnx")), swish, "swish"),
                ("relu_sigmoid_mul fp16",
                 relu_sigmoid_mul_model(os.path.join(tmp, "r16.onnx"), TensorProto.FLOAT16),
                 rsm, "rsm")]:
            xs16 = samples(np.float16)
            scale = max(float(np.abs(x.astype(np.float32)).max()) for x in xs16) + 1
            check_model(k, args.kiln, name.replace(" ", "_"), path, lib, layer, xs16,
                        (0.0, 1e-2 * scale), tmp)
        os.environ["KILN_CUDA_GRAPHS"] = "0"
        r = subprocess.run([sys.executable, "-c", (
            "import sys, numpy as np; sys.path.insert(0, %r); import kiln as k;"
            "e = k.Engine(open(%r, 'rb').read()); c = e.context();"
            "x = np.load(%r); print(float(np.abs(c.run({'x': x})['y'] - np.load(%r)).max()))")
            % (os.path.join(REPO, "python"), plan,
               os.path.join(REPO, "examples", "swish", "data", "input_1.npy"),
               os.path.join(REPO, "examples", "swish", "data", "output_1.npy"))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
            env=dict(os.environ, KILN_PLUGIN_PATH=swish))
        del os.environ["KILN_CUDA_GRAPHS"]
        diff = float(r.stdout.decode().strip() or "inf")
        report("swish plan with KILN_CUDA_GRAPHS=0 against PyTorch's output", diff <= 1e-4,
               f"max abs diff {diff:.2e} {r.stderr.decode().strip()[-200:]}")
        if args.torch:
            check_torch(k, plan, xs, wants, (RTOL, ATOL))
            check_python_plugin(k)
    print(f"{len(failures)} failures" if failures else "all plugin checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
