"""Benchmark: the ReluSigmoidMul plugin against the same computation as three ONNX ops.

Builds two models with onnx.helper on input x of shape 1x64x112x112 (by default):
  plugin:  y = ReluSigmoidMul(x)                  (one fused plugin kernel)
  ops:     y = Mul(Relu(x), Sigmoid(x))           (built-in ops; kiln's element-wise fusion
                                                   pass may merge them into one kernel)
runs both with `kiln bench --json`, reports how many layers each plan has after optimization
(so it is visible whether the builder fused the three ops), and writes a results table into
docs/plugins.md between the bench markers.

    python3 bench/plugin_fused.py --kiln build/bin/kiln --plugins build/plugins

With --backend cuda (a CUDA build's kiln and plugins) every model runs on the GPU: the plugin's
CUDA kernel, kiln's fused kernel and the three one-op models; the table then also gives the
GPU time of the compute layers (`kiln bench --profile`, copies of the host input and output
left out) and goes between the bench:plugin_fused_cuda markers.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- bench:plugin_fused:begin -->"
END = "<!-- bench:plugin_fused:end -->"
BEGIN_GPU = "<!-- bench:plugin_fused_cuda:begin -->"
END_GPU = "<!-- bench:plugin_fused_cuda:end -->"
SINGLES = ("relu", "sigmoid", "mul")


def make_models(folder, shape):
    vi = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    plugin = helper.make_graph(
        [helper.make_node("ReluSigmoidMul", ["x"], ["y"], domain="custom", name="fused")],
        "plugin", [vi("x")], [vi("y")])
    ops = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
         helper.make_node("Mul", ["r", "s"], ["y"], name="mul")],
        "ops", [vi("x")], [vi("y")])
    singles = [helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [vi("x")],
                                 [vi("y")]),
               helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "sigmoid",
                                 [vi("x")], [vi("y")]),
               helper.make_graph([helper.make_node("Mul", ["x", "z"], ["y"])], "mul",
                                 [vi("x"), vi("z")], [vi("y")])]
    paths = {}
    for graph in singles:
        paths[graph.name] = os.path.join(folder, f"{graph.name}.onnx")
        onnx.save(helper.make_model(graph, opset_imports=opsets), paths[graph.name])
    for name, graph in (("plugin", plugin), ("ops", ops)):
        paths[name] = os.path.join(folder, f"{name}.onnx")
        onnx.save(helper.make_model(graph, opset_imports=opsets), paths[name])
    return paths


def kiln(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"kiln {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def layers(binary, model, lib, backend):
    text = kiln(binary, "inspect", model, "--plugins", lib, *backend)
    m = re.search(r"layers \((\d+) after optimization\)", text)
    kinds = re.findall(r"^\s+\d+\s+\S+\s+(.+?)\s+->", text, re.M)
    return (int(m.group(1)) if m else -1), kinds


def compute_ms(binary, model, lib, backend, iterations, warmup):
    """Median ms of the layers that are not copies between host and device."""
    res = json.loads(kiln(binary, "bench", model, "--plugins", lib, *backend, "--profile",
                          "--json", "--iterations", str(iterations), "--warmup", str(warmup)))
    return sum(layer["median_ms"] for layer in res["layers"]
               if "Memcpy" not in layer["op"])


def check_same(binary, paths, lib, shape, folder, backend):
    x = (np.random.RandomState(0).randn(*shape) * 4).astype(np.float32)
    np.save(os.path.join(folder, "x.npy"), x)
    outs = {}
    for name in ("plugin", "ops"):
        model = paths[name]
        out = os.path.join(folder, f"out_{name}")
        kiln(binary, "run", model, "--input", f"x={folder}/x.npy", "--output-dir", out,
             "--plugins", lib, *backend)
        outs[name] = np.load(os.path.join(out, "y.npy"))
    return float(np.abs(outs["plugin"] - outs["ops"]).max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "bin", "kiln"))
    ap.add_argument("--plugins", default=os.path.join(REPO, "build", "plugins"))
    ap.add_argument("--shape", default="1x64x112x112")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--doc", default=os.path.join(REPO, "docs", "plugins.md"))
    ap.add_argument("--no-doc", action="store_true", help="print only")
    ap.add_argument("--backend", default="cpu", help="cpu, or cuda for the GPU")
    args = ap.parse_args()
    gpu = args.backend != "cpu"
    backend = ["--backend", args.backend]
    begin, end = (BEGIN, END) if not gpu else (BEGIN_GPU, END_GPU)
    if gpu:
        args.threads = "1"
    shape = tuple(int(d) for d in args.shape.split("x"))
    lib = os.path.join(args.plugins, "librelu_sigmoid_mul.so")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_models(tmp, shape)
        diff = check_same(args.kiln, paths, lib, shape, tmp, backend)
        plans = {name: layers(args.kiln, paths[name], lib, backend) for name in ("plugin", "ops")}
        gpu_ms = {}
        for threads in args.threads.split(","):
            lat = {}
            for name, model in paths.items():
                res = json.loads(kiln(args.kiln, "bench", model, "--plugins", lib, "--threads",
                                      threads, "--iterations", str(args.iterations),
                                      "--warmup", str(args.warmup), "--json", *backend))
                lat[name] = res["latency_ms"]
                if gpu:
                    gpu_ms[name] = compute_ms(args.kiln, model, lib, backend, args.iterations,
                                              args.warmup)
            if gpu:
                gpu_ms["separate"] = sum(gpu_ms[m] for m in SINGLES)
            rows.append(("plugin", int(threads), lat["plugin"]))
            rows.append(("ops", int(threads), lat["ops"]))
            rows.append(("separate", int(threads), {k: sum(lat[m][k] for m in SINGLES)
                                                    for k in ("median", "min", "p90")}))
    n = int(np.prod(shape))
    where = (f"{platform.machine()}, {os.cpu_count()} cores" if not gpu else
             f"--backend {args.backend}, host input and output (copies included in the "
             "latency columns; the compute column is the GPU layers alone, by --profile)")
    table = [f"Input {args.shape} float32 ({n * 4 / 1e6:.1f} MB in, the same out); "
             f"{args.iterations} timed runs after {args.warmup} warm-up; "
             f"{where}; `kiln bench --json`.",
             "",
             "| model | layers after optimization | threads | median ms | min ms | p90 ms "
             "| GB/s (median) |" + (" compute ms | compute GB/s |" if gpu else ""),
             "|---|---|---|---|---|---|---|" + ("---|---|" if gpu else "")]
    for name, threads, lat in rows:
        if name == "separate":
            count, kinds = 3, ["sum of three one-op models"]
            desc = "Relu, Sigmoid, Mul run unfused"
        else:
            count, kinds = plans[name]
            desc = "ReluSigmoidMul plugin" if name == "plugin" else "Relu, Sigmoid, Mul"
        gbs = 2 * n * 4 / (lat["median"] / 1e3) / 1e9
        row = (f"| {desc} | {count} ({', '.join(kinds)}) | {threads} | "
               f"{lat['median']:.3f} | {lat['min']:.3f} | {lat['p90']:.3f} | {gbs:.1f} |")
        if gpu:
            ms = gpu_ms[name]
            row += f" {ms:.4f} | {2 * n * 4 / (ms / 1e3) / 1e9:.0f} |"
        table.append(row)
    table += ["", f"Largest difference between the plugin's and the three-op model's outputs: "
              f"{diff:.2e}. The unfused rows add the latencies of three models of one op each "
              "(Relu, Sigmoid, Mul of two inputs); each of those also copies its output out, so "
              "the sum carries two more output copies than a real unfused plan would. GB/s counts "
              "one read and one write of the tensor."]
    text = "\n".join(table)
    print(text)
    if args.no_doc:
        return
    with open(args.doc) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        raise SystemExit(f"{args.doc} has no {begin} ... {end} markers")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(args.doc, "w") as f:
        f.write(f"{head}{begin}\n{text}\n{end}{tail}")
    print(f"updated {args.doc}")


if __name__ == "__main__":
    main()
