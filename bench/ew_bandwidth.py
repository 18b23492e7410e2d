#!/usr/bin/env python3
"""Bandwidth of kiln's generated element-wise kernel against the device's own copy, on one GPU.

A model computing Mul(Relu(x), Sigmoid(x)) (kiln fuses it into one kiln.FusedElementwise, whose
CUDA kernel is generated at build) runs on device-bound torch tensors, so an execute is the
execute's device time (kiln_context_device_time: the backend's events around what the
execute queued, the input's copy into the plan's memory included) and the fused layer's own
time (profiling on: events around that layer) are both reported. The anchor is a device-to-device copy of the
same tensor (torch's copy_ between two CUDA tensors, timed by CUDA events), which reads and
writes the same bytes. Both are medians over --iterations runs, alternating, after --warmup;
GB/s counts one read and one write of the tensor. The ratio layer / copy is the figure that
matters (issue: at least 80 %).

    python3 bench/ew_bandwidth.py --kiln build-cuda/bin/kiln \
        --libkiln build-cuda/lib/libkiln.so --shapes 8x64x112x112,32x64x112x112
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

DTYPES = {"fp32": (TensorProto.FLOAT, torch.float32), "fp16": (TensorProto.FLOAT16, torch.float16),
          "bf16": (TensorProto.BFLOAT16, torch.bfloat16)}
KILN_MEMORY_DEVICE = 2


def make_model(path, shape, dtype):
    et = DTYPES[dtype][0]
    x = helper.make_tensor_value_info("x", et, list(shape))
    y = helper.make_tensor_value_info("y", et, list(shape))
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["r", "s"], ["y"])]
    g = helper.make_graph(nodes, "relu_sigmoid_mul", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


class Kiln:
    def __init__(self, path):
        L, P = ctypes.CDLL(path), ctypes.c_void_p
        self.lib = L
        L.kiln_last_error.restype = ctypes.c_char_p
        L.kiln_engine_load_file.argtypes = [ctypes.c_char_p, P, ctypes.POINTER(P)]
        L.kiln_context_create.argtypes = [P, ctypes.POINTER(P)]
        L.kiln_context_set_input_memory.argtypes = [P, ctypes.c_char_p, P, ctypes.c_size_t,
                                                    ctypes.c_int]
        L.kiln_context_set_output_memory.argtypes = L.kiln_context_set_input_memory.argtypes
        L.kiln_context_execute.argtypes = [P]
        L.kiln_context_device_time.argtypes = [P, ctypes.POINTER(ctypes.c_double)]
        L.kiln_context_destroy.argtypes = [P]
        L.kiln_engine_destroy.argtypes = [P]
        L.kiln_context_set_profiling.argtypes = [P, ctypes.c_int]
        L.kiln_context_layer_time.argtypes = [P, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
        L.kiln_engine_num_layers.argtypes = [P]
        L.kiln_engine_layer_info.argtypes = [P, ctypes.c_int, ctypes.c_void_p]

    def check(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.kiln_last_error().decode())


class LayerInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("op_type", ctypes.c_char_p),
                ("domain", ctypes.c_char_p), ("kernel", ctypes.c_char_p),
                ("n_inputs", ctypes.c_int), ("n_outputs", ctypes.c_int),
                ("inputs", ctypes.c_char_p * 16), ("outputs", ctypes.c_char_p * 16)]


def fused_layer_ms(K, e, x, y, nbytes, args):
    """The element-wise layer's own time (its backend's events around it, profiling on), the
    median over the runs, and its description (op type, kernel)."""
    ctx = ctypes.c_void_p()
    K.check(K.lib.kiln_context_create(e, ctypes.byref(ctx)))
    K.check(K.lib.kiln_context_set_input_memory(ctx, b"x", x.data_ptr(), nbytes,
                                                KILN_MEMORY_DEVICE))
    K.check(K.lib.kiln_context_set_output_memory(ctx, b"y", y.data_ptr(), nbytes,
                                                 KILN_MEMORY_DEVICE))
    K.check(K.lib.kiln_context_set_profiling(ctx, 1))
    n = K.lib.kiln_engine_num_layers(e)
    infos = []
    for i in range(n):
        info = LayerInfo()
        K.check(K.lib.kiln_engine_layer_info(e, i, ctypes.byref(info)))
        infos.append(info)
    pick = next((i for i, f in enumerate(infos) if f.op_type.decode() not in
                 ("MemcpyToDevice", "MemcpyToHost", "Identity")), 0)
    times, ms = [], ctypes.c_double()
    for i in range(args.warmup + args.iterations):
        K.check(K.lib.kiln_context_execute(ctx))
        K.check(K.lib.kiln_context_layer_time(ctx, pick, ctypes.byref(ms)))
        if i >= args.warmup:
            times.append(ms.value)
    K.lib.kiln_context_destroy(ctx)
    desc = " + ".join(f"{f.op_type.decode()}" for f in infos)
    return f"{desc} (timed: {infos[pick].kernel.decode()})", statistics.median(times)


def copy_ms(src, dst):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    dst.copy_(src)
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--libkiln", required=True)
    ap.add_argument("--shapes", default="8x64x112x112,32x64x112x112")
    ap.add_argument("--dtypes", default="fp32,fp16")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    K = Kiln(args.libkiln)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dt in args.dtypes.split(","):
            for spec in args.shapes.split(","):
                shape = tuple(int(d) for d in spec.split("x"))
                onnx_path, plan = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "m.plan")
                make_model(onnx_path, shape, dt)
                p = subprocess.run([args.kiln, "build", onnx_path, "-o", plan, "--backend",
                                    "cuda", "--quiet"], capture_output=True, text=True)
                if p.returncode != 0:
                    raise SystemExit("kiln build: " + p.stderr.strip())
                tdt = DTYPES[dt][1]
                x = torch.randn(shape, device="cuda").to(tdt)
                y, c = torch.empty_like(x), torch.empty_like(x)
                e, ctx = ctypes.c_void_p(), ctypes.c_void_p()
                K.check(K.lib.kiln_engine_load_file(plan.encode(), None, ctypes.byref(e)))
                K.check(K.lib.kiln_context_create(e, ctypes.byref(ctx)))
                nbytes = x.numel() * x.element_size()
                K.check(K.lib.kiln_context_set_input_memory(ctx, b"x", x.data_ptr(), nbytes,
                                                            KILN_MEMORY_DEVICE))
                K.check(K.lib.kiln_context_set_output_memory(ctx, b"y", y.data_ptr(), nbytes,
                                                             KILN_MEMORY_DEVICE))
                ref = torch.relu(x.float()) * torch.sigmoid(x.float())
                K.check(K.lib.kiln_context_execute(ctx))
                err = float((y.float() - ref).abs().max() / ref.abs().max())
                kt, ct = [], []
                ms = ctypes.c_double()
                for i in range(args.warmup + args.iterations):
                    K.check(K.lib.kiln_context_execute(ctx))
                    K.check(K.lib.kiln_context_device_time(ctx, ctypes.byref(ms)))
                    cm = copy_ms(x, c)
                    if i >= args.warmup:
                        kt.append(ms.value)
                        ct.append(cm)
                K.lib.kiln_context_destroy(ctx)
                layer, layer_ms = fused_layer_ms(K, e, x, y, nbytes, args)
                K.lib.kiln_engine_destroy(e)
                k_ms, c_ms = statistics.median(kt), statistics.median(ct)
                gbs = lambda t: 2 * nbytes / (t / 1e3) / 1e9  # noqa: E731
                rows.append((dt, spec, nbytes / 1e6, k_ms, gbs(k_ms), layer, layer_ms,
                             gbs(layer_ms), c_ms, gbs(c_ms), c_ms / layer_ms, err))
                print(rows[-1], flush=True)
    print(f"\n{torch.cuda.get_device_name()}; medians of {args.iterations} alternating runs\n")
    print("| dtype | shape | MB each way | execute ms (device) | execute GB/s | layer | layer ms "
          "| layer GB/s | copy ms | copy GB/s | layer / copy | max rel err |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dt, spec, mb, k_ms, kg, layer, l_ms, lg, c_ms, cg, r, err in rows:
        print(f"| {dt} | {spec} | {mb:.1f} | {k_ms:.4f} | {kg:.0f} | {layer} | {l_ms:.4f} | "
              f"{lg:.0f} | {c_ms:.4f} | {cg:.0f} | {r:.0%} | {err:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
