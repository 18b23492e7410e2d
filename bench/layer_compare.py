#!/usr/bin/env python3
"""kiln's per-layer profile beside onnxruntime's on the same model, to find where kiln trails.

    python3 bench/layer_compare.py MODEL.onnx [--threads 1] [--batch 1] [--rounds 3] [--top 30]

Both engines run the model --rounds times, alternating (the machine may be shared); each layer's
figure is the minimum over rounds of its median time in a round. kiln's layers come from
`kiln bench --profile --json`, onnxruntime's from its profiler (enable_profiling, the
*_kernel_time events). A kiln layer is matched to the onnxruntime nodes that hold any of the
ONNX nodes it stands for (onnxruntime renames fused nodes, e.g. conv_3 becomes conv_3_nchwc, and
runs an activation it fuses differently as a node of its own), so a row compares the same work.
A conv or product row also gives its geometry from onnx's shape inference at the run's input
shapes (e.g. `3x3 s2 128->128 56x56->28x28`, `196x1024 @ 1024x256`), where the shapes are known.

The whole model's figure is timed apart, in the same rounds, with neither profiler on (plain
`kiln bench --json`, and bench.py's onnxruntime turn: a session without enable_profiling, made,
timed and released, so its idle workers do not spin through kiln's turns): onnxruntime's profiler
costs it microseconds a node, enough to turn a tie into a lead for kiln, so the whole-model ratio
to quote is that one; the times under the profilers are printed beside it.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import batched_model, default_kiln, make_inputs, ort_turn  # noqa: E402


def kiln_round(kiln, plan, files, threads, iterations, profile=True):
    cmd = [kiln, "bench", plan, "--threads", str(threads), "--warmup", "5", "--iterations",
           str(iterations), "--json"] + (["--profile"] if profile else [])
    for name, path in files.items():
        cmd += ["--input", f"{name}={path}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rep = json.loads(out)
    return rep["latency_ms"]["median"], rep.get("layers", [])


def ort_round(model_path, feeds, threads, iterations, work):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "ort")
    # the graph onnxruntime runs, for the outputs of its fused nodes (ort_owner)
    so.optimized_model_filepath = os.path.join(work, "ort_optimized.onnx")
    so.log_severity_level = 3  # not the warning that the saved graph is for this machine only
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    for _ in range(5 + iterations):
        sess.run(None, feeds)
    events = json.load(open(sess.end_profiling()))
    per_node = collections.defaultdict(list)
    runs = []
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_node[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1000.0)
        elif e.get("cat") == "Session" and e["name"] == "model_run":
            runs.append(e["dur"] / 1000.0)
    # The first 5 runs are warm-up; every node runs once per run.
    nodes = {k: float(np.median(v[5:] or v)) for k, v in per_node.items()}
    return float(np.median(runs[5:] or runs)), nodes


def ort_outputs(work):
    """{node name: its output tensors} in the graph onnxruntime ran (saved by ort_round), or {}
    where it could not be saved or read."""
    try:
        graph = onnx.load(os.path.join(work, "ort_optimized.onnx"), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - the names are a help, not a requirement
        return {}
    return {n.name: list(n.output) for n in graph.node}


def _dims(shapes, name):
    return shapes.get(name) or []


def describe_node(node, shapes):
    """A short geometry of a Conv, ConvTranspose, Gemm or MatMul node from the inferred shapes,
    e.g. '3x3 s2 128->128 56x56->28x28' or '196x1024 @ 1024x256', or '' where the shapes are
    not known."""
    if node.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul") or len(node.input) < 2:
        return ""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    x, y = _dims(shapes, node.input[0]), _dims(shapes, node.output[0])
    if node.op_type in ("Conv", "ConvTranspose"):
        w = _dims(shapes, node.input[1])
        if len(x) < 3 or len(y) < 3 or len(w) < 3:
            return ""
        kern = "x".join(str(d) for d in w[2:])
        strides = attrs.get("strides") or []
        text = kern + (f" s{strides[0]}" if strides and max(strides) > 1 else "")
        group = attrs.get("group", 1)
        text += f" {x[1]}->{y[1]}" + (f" g{group}" if group > 1 else "")
        return text + " " + "x".join(map(str, x[2:])) + "->" + "x".join(map(str, y[2:]))
    if node.op_type in ("Gemm", "MatMul"):
        w = _dims(shapes, node.input[1])
        if len(x) < 2 or len(w) < 2:
            return ""
        a = x if not attrs.get("transA") else x[::-1]
        b = w if not attrs.get("transB") else w[::-1]
        lead = "x".join(map(str, a[:-2])) + " " if len(a) > 2 else ""
        return f"{lead}{a[-2]}x{a[-1]} @ {b[-2]}x{b[-1]}"
    return ""


def node_geometry(model_path, arrays):
    """{ONNX node name: describe_node} for the model at the inputs' shapes (onnx's shape
    inference with the graph inputs set to them), {} where inference fails."""
    try:
        model = onnx.load(model_path)
        for vi in model.graph.input:
            if vi.name in arrays:
                dims = vi.type.tensor_type.shape.dim
                for d, n in zip(dims, arrays[vi.name].shape):
                    d.Clear()
                    d.dim_value = int(n)
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - the geometry is a help, not a requirement
        return {}
    g = inferred.graph
    shapes = {t.name: list(t.dims) for t in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    out = {}
    for n in g.node:
        text = describe_node(n, shapes)
        if text:
            out[n.name] = text
    return out


def ort_owner(ort_name, onnx_names, producers, outputs=None):
    """The ONNX node an onnxruntime node name stands for, or None: the name itself, or with
    onnxruntime's suffix (_nchwc, _token_N) taken off, either an ONNX node's name or (the NCHWc
    convs, named for the tensor they write, e.g. /stem/stem.2/Relu_output_0_nchwc) the name of
    a tensor, whose producing node is meant; failing that (fused nodes named for their kind,
    e.g. SkipLayerNormalization_token_12), the producer of the last of the node's outputs in
    onnxruntime's graph (`outputs`) that the model has."""
    for name in (ort_name, ort_name.split("/")[0]):
        base = re.sub(r"(_nchwc|_token_\d+)$", "", name)
        for cand in (name, base):
            if cand in onnx_names:
                return cand
            if cand in producers:
                return producers[cand]
    for out in reversed((outputs or {}).get(ort_name, [])):
        out = re.sub(r"_nchwc$", "", out)
        if out in producers:
            return producers[out]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--kiln", default=default_kiln())
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1,
                    help="images a run (default 1): above 1, both engines run a copy of the "
                    "model with a batch dim (bench.py's --batch)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        # a bench model's name (bench.py's --models) stands for its export under bench/models
        named = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models",
                             args.model + ".onnx")
        if not os.path.isfile(named):
            sys.exit(f"layer_compare: {args.model}: no such file (nor bench/models/{args.model}"
                     ".onnx; `python3 bench/bench.py --models NAME` exports the bench models)")
        args.model = named
    if not os.path.isfile(args.kiln):
        sys.exit(f"layer_compare: kiln binary not found at {args.kiln} (build it, or pass --kiln)")
    try:
        graph = onnx.load(args.model, load_external_data=False).graph
    except Exception as e:  # a truncated or foreign file
        sys.exit(f"layer_compare: {args.model}: not an ONNX model ({type(e).__name__})")
    onnx_names = {n.name for n in graph.node}
    with tempfile.TemporaryDirectory() as work:
        model = batched_model(args.model, args.batch, work) if args.batch > 1 else args.model
        arrays, files, specs = make_inputs(model, work, batch=args.batch)
        plan = os.path.join(work, "model.plan")
        cmd = [args.kiln, "build", model, "-o", plan]
        for s in specs:
            cmd += ["--shapes", s]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"layer_compare: kiln build {args.model}: {p.stderr.strip()}")
        geometry = node_geometry(model, arrays)
        k_layers, o_nodes, k_tot, o_tot, o_outputs = {}, {}, [], [], {}
        k_plain, o_plain = [], []
        for _ in range(args.rounds):
            k_plain.append(kiln_round(args.kiln, plan, files, args.threads, args.iterations,
                                      profile=False)[0])
            # bench.py's turn: a session made, timed and released, so its idle workers do not
            # spin through kiln's turns; no profiler, which costs onnxruntime microseconds a node
            o_plain.append(ort_turn(model, args.threads, arrays, 5, args.iterations)["median"])
            total, layers = kiln_round(args.kiln, plan, files, args.threads, args.iterations)
            k_tot.append(total)
            for layer in layers:
                prev = k_layers.get(layer["name"])
                if prev is None or layer["median_ms"] < prev["median_ms"]:
                    k_layers[layer["name"]] = layer
            total, nodes = ort_round(model, arrays, args.threads, args.iterations, work)
            o_outputs = o_outputs or ort_outputs(work)
            o_tot.append(total)
            for k, v in nodes.items():
                o_nodes[k] = min(v, o_nodes.get(k, v))
    # kiln lists the node a fused layer is named for, not always the activation nodes it took
    # in (Clip, Sigmoid + Mul): an ONNX node that no kiln layer names counts for the layer that
    # holds its first computed input, so onnxruntime's Clip or QuickGelu lands beside it.
    holder = {o: layer["name"] for layer in k_layers.values()
              for o in layer.get("onnx_nodes") or [layer["name"]]}
    made_by = {out: n for n in graph.node for out in n.output}
    consts = {t.name for t in graph.initializer}

    def holding_layer(name, depth=0):
        if name in holder or depth > 8:
            return holder.get(name)
        node = next((n for n in graph.node if n.name == name), None)
        ins = [i for i in (node.input if node else []) if i and i not in consts and i in made_by]
        return holding_layer(made_by[ins[0]].name, depth + 1) if ins else None

    producers = {out: n.name for n in graph.node for out in n.output}
    owner = {}
    for name in o_nodes:
        o = ort_owner(name, onnx_names, producers, o_outputs)
        layer = holding_layer(o) if o is not None else None
        if layer is not None:
            owner.setdefault(layer, []).append(name)
    rows, claimed = [], set()
    for layer in k_layers.values():
        mine = owner.get(layer["name"], [])
        claimed.update(mine)
        ort_ms = sum(o_nodes[n] for n in mine) if mine else float("nan")
        shape = next((geometry[n] for n in layer.get("onnx_nodes") or [layer["name"]]
                      if n in geometry), "")
        rows.append((layer["median_ms"], ort_ms, layer["name"], layer["op"],
                     layer.get("kernel", "") + (f", {shape}" if shape else ""), ",".join(mine)))
    k_sum = sum(r[0] for r in rows)
    o_sum = sum(o_nodes.values())
    print(f"{args.model}, batch {args.batch}, {args.threads} thread(s), "
          f"min over {args.rounds} rounds")
    k_best, o_best = min(k_plain), min(o_plain)
    print(f"whole model median, no profilers: kiln {k_best:.3f} ms, onnxruntime {o_best:.3f} ms "
          f"(ORT / kiln {o_best / k_best:.2f}); under the profilers: kiln {min(k_tot):.3f} ms, "
          f"onnxruntime {min(o_tot):.3f} ms; layer sums: kiln {k_sum:.3f} ms, onnxruntime "
          f"{o_sum:.3f} ms")
    print(f"{'kiln ms':>8} {'ORT ms':>8} {'gap ms':>8}  layer (op, kernel, geometry) <- "
          "onnxruntime nodes")
    rows.sort(key=lambda r: -(r[0] - (0 if np.isnan(r[1]) else r[1])))
    for k_ms, o_ms, name, op, kernel, mine in rows[: args.top]:
        gap = k_ms - (0 if np.isnan(o_ms) else o_ms)
        print(f"{k_ms:8.4f} {o_ms:8.4f} {gap:8.4f}  {name} ({op}, {kernel}) <- {mine or '-'}")
    rest = sorted((v, k) for k, v in o_nodes.items() if k not in claimed)
    if rest:
        print(f"onnxruntime nodes with no kiln layer: {sum(v for v, _ in rest):.3f} ms, largest "
              + ", ".join(f"{k} {v:.3f}" for v, k in rest[::-1][:5]))


if __name__ == "__main__":
    main()
