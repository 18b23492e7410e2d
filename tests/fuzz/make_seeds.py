#!/usr/bin/env python3
"""Collect fuzz seeds into OUT/<target>/: small ONNX node-test models and their .pb tensors,
the repo's test models, plans built from both with the kiln CLI, and .npy files of every dtype
kiln reads. Deterministic: the same inputs give the same corpus.

usage: make_seeds.py --kiln build/bin/kiln --out build-fuzz/corpus [--max-node-models 300]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def put(out, target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def node_tests():
    import onnx

    base = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    for t in sorted(os.listdir(base)):
        model = os.path.join(base, t, "model.onnx")
        if os.path.isfile(model):
            yield t, model, os.path.join(base, t, "test_data_set_0")


def build_plan(kiln, model, shapes, tmp):
    plan = os.path.join(tmp, "seed.plan")
    cmd = [kiln, "build", model, "-o", plan, "--threads", "1", "--quiet"]
    for s in shapes:
        cmd += ["--shapes", s]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    if r.returncode != 0:
        return None
    with open(plan, "rb") as f:
        return f.read()


def npy_seeds(out):
    import numpy as np
    import io

    for dt in ["<f4", "<f8", "<f2", "|u1", "|i1", "<u2", "<i2", "<i4", "<i8", "<u4", "<u8", "|b1"]:
        for shape in [(), (0,), (3,), (2, 3), (1, 2, 1, 2)]:
            buf = io.BytesIO()
            np.save(buf, (np.arange(int(np.prod(shape))) % 3).astype(dt).reshape(shape))
            put(out, "npy", buf.getvalue())


STRING_CASES = ("test_string_concat_broadcasting", "test_string_split_maxsplit",
                "test_strnormalizer_export_monday_insensintive_upper_twodim",
                "test_regex_full_match_email_domain", "test_ai_onnx_ml_label_encoder_tensor_mapping",
                "test_equal_string_broadcast")


def string_seeds(kiln, out, tmp):
    """String tensors: node-test models and their string_data inputs, a plan holding a string
    constant, and numpy unicode and bytes arrays."""
    import io

    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    for t, model, data_dir in node_tests():
        if t not in STRING_CASES:
            continue
        with open(model, "rb") as f:
            put(out, "onnx", f.read())
        for pb in sorted(os.listdir(data_dir)):
            with open(os.path.join(data_dir, pb), "rb") as f:
                put(out, "tensor_proto", f.read())
    const = helper.make_tensor("c", TensorProto.STRING, [2], [b"ab", "\u4e2d".encode()])
    graph = helper.make_graph([helper.make_node("StringConcat", ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, None)], [const])
    model = os.path.join(tmp, "strings.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), model)
    with open(model, "rb") as f:
        put(out, "onnx", f.read())
    plan = build_plan(kiln, model, ["x:1,200,4000"], tmp)
    if plan is not None:
        put(out, "plan", plan)
    for arr in [np.array(["a", "", "\u00e9\u4e2d"]), np.array([[b"ab", b"\xff"]]), np.array("x")]:
        buf = io.BytesIO()
        np.save(buf, arr)
        put(out, "npy", buf.getvalue())


# Node tests of sequences, optionals, control flow that carries them, and Scan (both forms):
# always seeds, whatever the sampling above picks, so the fuzzers start from blocks the
# container ops open and from bodies the runtime executes.
CONTAINER_TESTS = re.compile(r"^test_(sequence_|optional_|split_to_sequence|concat_from_sequence|"
                             r"loop1[36]_seq|if_seq|if_opt|identity_sequence|identity_opt|scan)")


def container_seeds(out, kiln, tmp):
    """The node tests above and the sequence/optional and Scan-8 models of tests/models, as .onnx
    and as plans (their sequence and optional inputs need no --shapes)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
    import onnx
    import test_control_flow as tc
    import test_sequences as ts
    models = [model for t, model, _ in node_tests() if CONTAINER_TESTS.match(t)]
    for i, m in enumerate([ts.edit_model(), ts.split_model(), ts.loop_model(),
                           ts.optional_model(), ts.optional_sequence_model(),
                           tc.scan8_model(False), tc.scan8_model(True)]):
        path = os.path.join(tmp, f"sequences_{i}.onnx")
        onnx.save(m, path)
        models.append(path)
    for model in models:
        with open(model, "rb") as f:
            put(out, "onnx", f.read())
        plan = build_plan(kiln, model, [], tmp)
        if plan is not None:
            put(out, "plan", plan)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-node-models", type=int, default=300)
    ap.add_argument("--max-bytes", type=int, default=4096)
    a = ap.parse_args()
    tmp = os.path.join(a.out, ".tmp")
    os.makedirs(tmp, exist_ok=True)

    small = [n for n in node_tests() if os.path.getsize(n[1]) <= a.max_bytes]
    step = max(1, len(small) / max(1, a.max_node_models))
    for t, model, data_dir in [small[int(i * step)] for i in range(min(len(small), a.max_node_models))]:
        with open(model, "rb") as f:
            put(a.out, "onnx", f.read())
        if os.path.isdir(data_dir):
            for pb in sorted(os.listdir(data_dir))[:2]:
                with open(os.path.join(data_dir, pb), "rb") as f:
                    data = f.read()
                if len(data) <= a.max_bytes:
                    put(a.out, "tensor_proto", data)
        plan = build_plan(a.kiln, model, [], tmp)
        if plan is not None and len(plan) <= 16 * a.max_bytes:
            put(a.out, "plan", plan)

    with open(os.path.join(ROOT, "tests", "models", "manifest.json")) as f:
        manifest = json.load(f)
    for m in manifest["models"]:
        model = os.path.join(ROOT, "tests", "models", m["model"])
        with open(model, "rb") as f:
            data = f.read()
        if len(data) <= 128 * 1024:
            put(a.out, "onnx", data)
        shapes = [s.split(",")[0] if "," in s else s for s in m.get("shapes", [])]
        plan = build_plan(a.kiln, model, shapes, tmp)
        if plan is not None:
            put(a.out, "plan", plan)
        for case in m.get("cases", [])[:1]:
            for rel in list(case["inputs"].values()) + list(case["outputs"].values()):
                with open(os.path.join(ROOT, "tests", "models", rel), "rb") as f:
                    data = f.read()
                if len(data) <= 64 * 1024:
                    put(a.out, "npy", data)
    container_seeds(a.out, a.kiln, tmp)
    npy_seeds(a.out)
    string_seeds(a.kiln, a.out, tmp)
    shutil.rmtree(tmp)
    for target in ["onnx", "plan", "npy", "tensor_proto"]:
        d = os.path.join(a.out, target)
        n = len(os.listdir(d)) if os.path.isdir(d) else 0
        print(f"{target}: {n} seeds", file=sys.stderr)


if __name__ == "__main__":
    main()
