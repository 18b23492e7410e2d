#!/usr/bin/env python3
"""Writes tests/models/bert_attention: a 2-layer BERT-style encoder in the form PyTorch's
exporter gives transformers' BERT (eager attention), built with onnx.helper so it needs no
PyTorch: a word-embedding Gather of run-time ids plus positions, LayerNorm, then per layer
Q/K/V MatMul + bias, Reshape to [B, S, H, D], Transpose (0,2,1,3) for Q and V and (0,2,3,1)
for K, MatMul, Mul by 1/sqrt(D), Add of a padding mask (ids == 0 -> -10000, [B, 1, 1, S]),
Softmax, MatMul, Transpose back, Reshape, output projection + bias + residual, LayerNorm,
erf-GELU feed-forward + residual, LayerNorm. It is the pattern kiln.Attention fuses on a GPU
in fp16 and bf16 plans (passes.h, kn_pass_fuse_attention); elsewhere it runs unfused. Head
size 16 (the tensor-core kernel's multiple) and odd sequence lengths in the cases (key
padding).

Reference outputs come from onnxruntime (CPU, float32); the script adds or replaces the
model's entry in manifest.json.
"""

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "bert_attention"
VOCAB, D_MODEL, HEADS, FF, LAYERS, MAX_POS = 50, 64, 4, 128, 2, 64
HEAD = D_MODEL // HEADS


def build(rng):
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(name, *shape, scale=0.2):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def layer_norm(x, p):
        g = const(p + ".g", (1 + 0.1 * rng.standard_normal(D_MODEL)).astype(np.float32))
        b = const(p + ".b", (0.1 * rng.standard_normal(D_MODEL)).astype(np.float32))
        return node("LayerNormalization", [x, g, b], p + "/ln", axis=-1, epsilon=1e-12)

    def linear(x, p, n_in, n_out):
        w = weight(p + ".w", n_in, n_out)
        b = weight(p + ".b", n_out, scale=0.1)
        y = node("MatMul", [x, w], p + "/mm")
        return node("Add", [b, y], p + "/add")

    # embeddings: word(ids) + position[:S]
    emb = node("Gather", [weight("emb", VOCAB, D_MODEL, scale=1.0), "ids"], "emb/gather")
    shape = node("Shape", ["ids"], "emb/shape")
    seq = node("Slice", [shape, const("c1", np.array([1], np.int64)),
                         const("c2", np.array([2], np.int64))], "emb/seq")
    pos = node("Slice", [weight("pos", MAX_POS, D_MODEL, scale=1.0),
                         const("c0", np.array([0], np.int64)), seq], "emb/pos")
    x = layer_norm(node("Add", [emb, pos], "emb/add"), "emb")
    # padding mask [B, 1, 1, S]: 0 where ids != 0, -10000 where ids == 0
    pad = node("Cast", [node("Equal", ["ids", const("zero", np.array(0, np.int64))], "m/eq")],
               "m/cast", to=TensorProto.FLOAT)
    mask = node("Unsqueeze", [node("Mul", [pad, const("neg", np.array(-10000.0, np.float32))],
                                   "m/mul"), const("ax12", np.array([1, 2], np.int64))],
                "m/mask")
    split = const("split_shape", np.array([0, 0, HEADS, HEAD], np.int64))
    merge = const("merge_shape", np.array([0, 0, D_MODEL], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(HEAD), np.float32))
    for i in range(LAYERS):
        p = f"l{i}"
        q = node("Reshape", [linear(x, p + "/q", D_MODEL, D_MODEL), split], p + "/q4")
        k = node("Reshape", [linear(x, p + "/k", D_MODEL, D_MODEL), split], p + "/k4")
        v = node("Reshape", [linear(x, p + "/v", D_MODEL, D_MODEL), split], p + "/v4")
        qt = node("Transpose", [q], p + "/qt", perm=[0, 2, 1, 3])
        kt = node("Transpose", [k], p + "/kt", perm=[0, 2, 3, 1])
        vt = node("Transpose", [v], p + "/vt", perm=[0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [qt, kt], p + "/qk"), scale], p + "/scaled")
        prob = node("Softmax", [node("Add", [s, mask], p + "/masked")], p + "/softmax", axis=-1)
        ctx = node("Transpose", [node("MatMul", [prob, vt], p + "/pv")], p + "/ctx",
                   perm=[0, 2, 1, 3])
        attn = linear(node("Reshape", [ctx, merge], p + "/merge"), p + "/o", D_MODEL, D_MODEL)
        x = layer_norm(node("Add", [attn, x], p + "/res1"), p + "/ln1")
        h = linear(x, p + "/ff1", D_MODEL, FF)
        erf = node("Erf", [node("Div", [h, const(p + "/sqrt2", np.array(np.sqrt(2.0),
                                                                   np.float32))], p + "/div")],
                   p + "/erf")
        gelu = node("Mul", [node("Mul", [h, node("Add", [erf, const(p + "/one", np.array(
            1.0, np.float32))], p + "/erf1")], p + "/gmul"), const(p + "/half", np.array(
                0.5, np.float32))], p + "/gelu")
        x = layer_norm(node("Add", [linear(gelu, p + "/ff2", FF, D_MODEL), x], p + "/res2"),
                       p + "/ln2")
    nodes.append(helper.make_node("Identity", [x], ["hidden"], name="out"))
    graph = helper.make_graph(
        nodes, NAME,
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT,
                                       ["batch", "seq", D_MODEL])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, sum(int(np.prod(t.dims)) for t in inits if t.data_type == TensorProto.FLOAT)


def main():
    rng = np.random.default_rng(7)
    model, params = build(rng)
    folder = os.path.join(HERE, NAME)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    cases = []
    for n, (b, s) in enumerate([(2, 12), (1, 21)]):
        ids = rng.integers(1, VOCAB, (b, s)).astype(np.int64)
        ids[-1, -3:] = 0  # padding at the tail of the last sequence: the mask matters
        case = f"case{n}_{b}x{s}"
        os.makedirs(os.path.join(folder, case), exist_ok=True)
        np.save(os.path.join(folder, case, "ids.npy"), ids)
        (out,) = sess.run(["hidden"], {"ids": ids})
        np.save(os.path.join(folder, case, "hidden.npy"), out)
        cases.append({"name": case, "inputs": {"ids": f"{NAME}/{case}/ids.npy"},
                      "outputs": {"hidden": f"{NAME}/{case}/hidden.npy"}})
    manifest_path = os.path.join(HERE, "manifest.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    entry = {"name": NAME, "model": f"{NAME}/model.onnx", "opset": 17, "parameters": params,
             "dynamic": True, "shapes": ["ids:1x4,2x16,4x32"], "rtol": 0.001, "atol": 0.001,
             "cuda_ops": ["Attention"], "cases": cases}
    manifest["models"] = [m for m in manifest["models"] if m["name"] != NAME] + [entry]
    tmp = manifest_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    os.replace(tmp, manifest_path)


if __name__ == "__main__":
    main()
