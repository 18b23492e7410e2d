#!/usr/bin/env python3
"""kiln's CUDA backend against PyTorch on the same GPU, in one process, alternating.

For each model and batch size: the PyTorch module (torchvision's ResNet-50, MobileNetV2,
EfficientNet-B0 with seeded random weights; a BERT-base encoder, 12 layers, d 768, 12 heads,
sequence 128, written here as transformers' BertModel computes it: exported with its attention
as MatMul/Softmax/MatMul, run in PyTorch through scaled_dot_product_attention, its fastest form) is exported to ONNX, built with `kiln build --backend cuda,cpu`
(one plan per model, its batch range the profile) and loaded through libkiln's C API (ctypes),
input and output bound to torch's CUDA tensors (BERT's int64 ids too: the embedding Gather
reads them on the GPU, and the output is written into torch's tensor on the device). Every timed round runs each configuration once, in turn, so clocks and
caches drift alike for all of them:

  kiln           kiln_context_execute (enqueue + synchronize), stream graphs on (the default)
  torch-eager    module(x), then torch.cuda.synchronize()
  torch-graph    a torch.cuda.CUDAGraph of module(x) replayed, then synchronize
  kiln NAME=VALUE  the same model built with that environment variable set (--variant, e.g.
                 KILN_CUDA_NHWC=1), in its own context, side by side with the default plan;
                 only for switches read at build (a switch read when a plan runs, such as
                 KILN_CUDA_CONV_GRAPH, applies to both plans: set it for a run of its own)
  torch-compile-MODE  torch.compile(mode=MODE) (with --compile MODES: reduce-overhead,
                 max-autotune; each takes a minute or more)
  torch-*-cl     the same in channels_last (CNNs with --precision fp16)

Each iteration is timed on the host clock around the synchronous call; the table gives the
median and p90 in milliseconds. With --precision fp32 (the default) precision is float32
everywhere and strict for both: TF32 is turned off in PyTorch (cudnn.allow_tf32 and
matmul.allow_tf32 False), as kiln's fp32 is strict. With --precision fp16 PyTorch runs
model.half() on a float16 input, and kiln the same float32 ONNX file built with
`--precision fp16` (its graph input and output stay float32: the casts at the edges are part
of kiln's time). kiln's output is checked against PyTorch's (max |diff| / max |ref|) before
timing.

Writes a JSON report (--json-out) and prints a markdown table last.
"""

import argparse
import copy
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

KILN_MEMORY_HOST, KILN_MEMORY_DEVICE = 0, 2


class Kiln:
    """The few libkiln calls the benchmark needs."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L, P = self.lib, ctypes.c_void_p
        L.kiln_last_error.restype = ctypes.c_char_p
        L.kiln_engine_load_file.argtypes = [ctypes.c_char_p, P, ctypes.POINTER(P)]
        L.kiln_engine_destroy.argtypes = [P]
        L.kiln_context_create.argtypes = [P, ctypes.POINTER(P)]
        L.kiln_context_destroy.argtypes = [P]
        L.kiln_context_set_input_shape.argtypes = [P, ctypes.c_char_p, ctypes.c_int,
                                                   ctypes.POINTER(ctypes.c_int64)]
        L.kiln_context_set_input_memory.argtypes = [P, ctypes.c_char_p, P, ctypes.c_size_t,
                                                    ctypes.c_int]
        L.kiln_context_set_output_memory.argtypes = [P, ctypes.c_char_p, P, ctypes.c_size_t,
                                                     ctypes.c_int]
        L.kiln_context_execute.argtypes = [P]

    def check(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.kiln_last_error().decode())

    def load(self, plan):
        e = ctypes.c_void_p()
        self.check(self.lib.kiln_engine_load_file(plan.encode(), None, ctypes.byref(e)))
        return e

    def context(self, engine):
        c = ctypes.c_void_p()
        self.check(self.lib.kiln_context_create(engine, ctypes.byref(c)))
        return c

    def bind(self, ctx, name, t, output=False):
        if not output:
            dims = (ctypes.c_int64 * t.dim())(*t.shape)
            self.check(self.lib.kiln_context_set_input_shape(ctx, name.encode(), t.dim(), dims))
        mem = KILN_MEMORY_DEVICE if t.is_cuda else KILN_MEMORY_HOST
        fn = self.lib.kiln_context_set_output_memory if output else \
            self.lib.kiln_context_set_input_memory
        self.check(fn(ctx, name.encode(), ctypes.c_void_p(t.data_ptr()),
                      t.numel() * t.element_size(), mem))


class BertLayer(torch.nn.Module):
    """One post-LayerNorm BERT encoder layer (as transformers' BertLayer, dropout off)."""

    def __init__(self, d=768, heads=12, ff=3072):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.out, self.ln1 = torch.nn.Linear(d, d), torch.nn.LayerNorm(d, eps=1e-12)
        self.ff1, self.ff2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-12)
        self.sdpa = False  # torch's own runs use scaled_dot_product_attention (its best)

    def forward(self, x):
        b, s, d = x.shape

        def heads(t):
            return t.view(b, s, self.heads, self.dh).permute(0, 2, 1, 3)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        if self.sdpa:
            ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        else:  # the eager form exporters write: MatMul, scale, Softmax, MatMul
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh), dim=-1)
            ctx = p @ v
        x = self.ln1(x + self.out(ctx.permute(0, 2, 1, 3).reshape(b, s, d)))
        return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))


class BertEncoder(torch.nn.Module):
    """A BERT-base encoder: token, position and segment-0 embeddings, LayerNorm, 12 layers."""

    def __init__(self, vocab=30522, d=768, layers=12, max_pos=512):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(max_pos, d)
        self.seg = torch.nn.Parameter(torch.randn(d) * 0.02)
        self.ln = torch.nn.LayerNorm(d, eps=1e-12)
        self.layers = torch.nn.ModuleList(BertLayer(d) for _ in range(layers))
        self.register_buffer("pos_ids", torch.arange(max_pos), persistent=False)

    def use_sdpa(self, on):
        for layer in self.layers:
            layer.sdpa = on
        return self

    def forward(self, ids):
        x = self.ln(self.tok(ids) + self.pos(self.pos_ids[: ids.shape[1]]) + self.seg)
        for layer in self.layers:
            x = layer(x)
        return x


def make_model(name):
    torch.manual_seed(0)
    if name == "bert":
        return BertEncoder().eval()
    import torchvision

    ctor = {"resnet50": torchvision.models.resnet50,
            "mobilenetv2": torchvision.models.mobilenet_v2,
            "efficientnet_b0": torchvision.models.efficientnet_b0}[name]
    return ctor(weights=None).eval()


def example(name, batch, device):
    if name == "bert":
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(0, 30522, (batch, 128), generator=g, dtype=torch.int64)
        return ids
    g = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 3, 224, 224, generator=g).to(device)


def export(model, name, batches, path):
    x = example(name, min(batches), "cpu")
    kw = dict(input_names=["x"], output_names=["y"], opset_version=17,
              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(model, (x,), path, **kw)


def build_plan(kiln_cli, onnx_path, name, batches, plan, precision, env=None):
    lo, hi = min(batches), max(batches)
    tail = "128" if name == "bert" else "3x224x224"
    spec = f"x:{lo}x{tail},{hi}x{tail},{hi}x{tail}"
    t0 = time.perf_counter()
    p = subprocess.run([kiln_cli, "build", onnx_path, "-o", plan, "--backend", "cuda,cpu",
                        "--shapes", spec, "--precision", precision, "--quiet"],
                       stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600, env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise RuntimeError("kiln build: " + p.stderr.decode().strip())
    return time.perf_counter() - t0


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def summary(ms):
    s = sorted(ms)
    return {"median": statistics.median(s), "p90": s[min(len(s) - 1, int(0.9 * len(s)))],
            "n": len(s)}


def eager_and_graph(configs, suffix, model, x, label):
    """configs["torch-eager" + suffix] and, when capture works, ["torch-graph" + suffix]."""

    def eager():
        with torch.no_grad():
            model(x)
        torch.cuda.synchronize()

    configs["torch-eager" + suffix] = eager
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph), torch.no_grad():
            model(x)
    except RuntimeError as e:  # a module that copies from the host while it runs
        print(f"{label}: no torch CUDA graph: {str(e)[:160]}", flush=True)
        return

    def replay():
        graph.replay()
        torch.cuda.synchronize()

    configs["torch-graph" + suffix] = replay


def plan_load_ms(K, plan, times=5):
    """Milliseconds to load the plan (kiln_engine_load_file) and to create a first context on it:
    the first load in the process (libkiln_cuda.so opened, the device's libraries initialized;
    torch has already made the CUDA context) and the median of the next `times`."""
    def one():
        t0 = time.perf_counter()
        e = K.load(plan)
        t1 = time.perf_counter()
        c = K.context(e)
        t2 = time.perf_counter()
        K.lib.kiln_context_destroy(c)
        K.lib.kiln_engine_destroy(e)
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3
    first = one()
    rest = [one() for _ in range(times)]
    return {"first_load": first[0], "first_context": first[1],
            "load_median": statistics.median(r[0] for r in rest),
            "context_median": statistics.median(r[1] for r in rest),
            "plan_mb": os.path.getsize(plan) / 1e6}


def bench_one(K, engine, model, name, batch, args, variants=()):
    dev = "cuda"
    x_host = example(name, batch, "cpu")
    x_dev = x_host.to(dev)
    half = args.precision == "fp16"
    x_torch = x_dev.half() if half and name != "bert" else x_dev
    with torch.no_grad():
        ref = model(x_torch).float()
    out = torch.empty_like(ref)
    ctx = K.context(engine)
    extra = []  # (label, context, output) of each variant plan
    try:
        K.bind(ctx, "x", x_dev)
        K.bind(ctx, "y", out, output=True)
        run_kiln = lambda: K.check(K.lib.kiln_context_execute(ctx))  # noqa: E731
        run_kiln()
        torch.cuda.synchronize()
        err = float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))

        configs = {"kiln": run_kiln}
        variant_err = {}
        for label, veng in variants:
            vctx, vout = K.context(veng), torch.empty_like(ref)
            extra.append((label, vctx, vout))
            K.bind(vctx, "x", x_dev)
            K.bind(vctx, "y", vout, output=True)
            configs[label] = (lambda c: lambda: K.check(K.lib.kiln_context_execute(c)))(vctx)
            configs[label]()
            torch.cuda.synchronize()
            variant_err[label] = float((vout - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        label = f"{name} batch {batch}"
        eager_and_graph(configs, "", model, x_torch, label)
        cl_model = None
        if half and name != "bert":
            cl_model = copy.deepcopy(model).to(memory_format=torch.channels_last)
            x_cl = x_torch.contiguous(memory_format=torch.channels_last)
            eager_and_graph(configs, "-cl", cl_model, x_cl, label + " channels_last")
        compile_s = {}
        for mode in args.compile.split(",") if args.compile else []:
            cmodel, cx = (cl_model, x_cl) if cl_model is not None else (model, x_torch)
            torch._dynamo.reset()
            compiled = torch.compile(copy.deepcopy(cmodel), mode=mode)
            t0 = time.perf_counter()
            with torch.no_grad():
                for _ in range(3):
                    compiled(cx)
            torch.cuda.synchronize()
            compile_s[mode] = time.perf_counter() - t0

            def comp(compiled=compiled, cx=cx):
                with torch.no_grad():
                    compiled(cx)
                torch.cuda.synchronize()

            configs[f"torch-compile-{mode}"] = comp
        for fn in configs.values():
            for _ in range(args.warmup):
                fn()
        times = {k: [] for k in configs}
        for _ in range(args.iterations):
            for k, fn in configs.items():
                times[k].append(timed(fn))
        torch.cuda.synchronize()
        # The last kiln run replayed its stream graphs: its output must still be right.
        err_replay = float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        row = {"model": name, "batch": batch, "precision": args.precision,
               "kiln_vs_torch_max_rel_err": err,
               "after_replays_max_rel_err": err_replay, "torch_compile_s": compile_s,
               "variant_max_rel_err": variant_err}
        row.update({k: summary(v) for k, v in times.items()})
        return row
    finally:
        K.lib.kiln_context_destroy(ctx)
        for _, vctx, _ in extra:
            K.lib.kiln_context_destroy(vctx)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True, help="the kiln CLI")
    ap.add_argument("--libkiln", required=True, help="libkiln.so")
    ap.add_argument("--models", default="resnet50,mobilenetv2,efficientnet_b0,bert")
    ap.add_argument("--batches", default="1,64", help="CNN batch sizes")
    ap.add_argument("--bert-batches", default="1,32")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--compile", nargs="?", const="reduce-overhead", metavar="MODES",
                    help="also torch.compile in these modes, comma-separated (default "
                    "reduce-overhead; e.g. reduce-overhead,max-autotune), of the channels_last "
                    "module for CNNs in fp16; each compile takes a minute or more")
    ap.add_argument("--precision", choices=["fp32", "fp16"], default="fp32")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=VALUE",
                    help="also time a kiln plan built with this environment variable set (e.g. "
                    "KILN_CUDA_NHWC=1), as the configuration 'kiln NAME=VALUE' (repeatable). "
                    "The variable is set for `kiln build` alone: switches the CUDA module reads "
                    "when a plan runs (KILN_CUDA_CONV_GRAPH, KILN_CUDA_GRAPHS, KILN_CUDA_CONV1X1) "
                    "apply to every plan of the process, so measure them in a run of their own")
    ap.add_argument("--json-out")
    ap.add_argument("--work", help="folder for the exports and plans (default: a new temporary "
                    "one); an export already there is reused")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    K = Kiln(args.libkiln)
    rows = []
    work = args.work or tempfile.mkdtemp(prefix="bench-gpu-")
    os.makedirs(work, exist_ok=True)
    for name in args.models.split(","):
        batches = [int(b) for b in (args.bert_batches if name == "bert" else args.batches)
                   .split(",")]
        try:
            model = make_model(name)
            onnx_path = os.path.join(work, f"{name}.onnx")
            if not os.path.exists(onnx_path):
                export(model, name, batches, onnx_path)
            plan = os.path.join(work, f"{name}.plan")
            build_s = build_plan(args.kiln, onnx_path, name, batches, plan, args.precision)
            variants = []
            for i, v in enumerate(args.variant):
                key, _, value = v.partition("=")
                vplan = os.path.join(work, f"{name}.{i}.plan")
                build_plan(args.kiln, onnx_path, name, batches, vplan, args.precision,
                           {key: value})
                variants.append((f"kiln {v}", K.load(vplan)))
            if name == "bert":
                model.use_sdpa(True)  # exported in the eager form; timed in torch's best
            model = model.cuda()
            if args.precision == "fp16":
                model = model.half()
            load_ms = plan_load_ms(K, plan)
            engine = K.load(plan)
        except Exception as e:  # one model's failure must not hide the others' rows
            print(f"{name}: {type(e).__name__}: {e}", flush=True)
            rows.append({"model": name, "error": str(e)})
            continue
        for b in batches:
            try:
                row = bench_one(K, engine, model, name, b, args, variants)
                row["kiln_build_s"] = build_s
                row["plan_load_ms"] = load_ms
            except Exception as e:
                row = {"model": name, "batch": b, "error": f"{type(e).__name__}: {e}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
        K.lib.kiln_engine_destroy(engine)
        for _, veng in variants:
            K.lib.kiln_engine_destroy(veng)
        del model
        torch.cuda.empty_cache()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    cols = ["kiln"] + [f"kiln {v}" for v in args.variant] + ["torch-eager", "torch-graph"]
    if args.precision == "fp16":
        cols += ["torch-eager-cl", "torch-graph-cl"]
    cols += [f"torch-compile-{m}" for m in args.compile.split(",")] if args.compile else []
    print("\n| model | batch | " + " | ".join(f"{c} median / p90 ms" for c in cols) +
          " | best torch / kiln | kiln err (first, last run) |")
    print("| --- | ---: |" + " ---: |" * len(cols) + " ---: | ---: |")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r.get('batch', '')} | error: {r['error'][:120]} |")
            continue
        cells = [f"{r[c]['median']:.3f} / {r[c]['p90']:.3f}" if c in r else "n/a" for c in cols]
        best = min(r[c]["median"] for c in cols if c.startswith("torch") and c in r)
        print(f"| {r['model']} | {r['batch']} | " + " | ".join(cells) +
              f" | {best / r['kiln']['median']:.2f}x | {r['kiln_vs_torch_max_rel_err']:.1e}, "
              f"{r['after_replays_max_rel_err']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
