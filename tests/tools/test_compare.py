"""kiln compare against Polygraphy: the same two output sets give the same statistics (within
float rounding) and the same verdict; model sides run on shared seeded inputs."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper
import pytest

from tools_helpers import MODELS, PLUGINS, kiln, swish_model

STATS = ["max_abs", "mean_abs", "median_abs", "max_rel", "mean_rel", "median_rel"]
POLY = {"max_abs": "max_absdiff", "mean_abs": "mean_absdiff", "median_abs": "median_absdiff",
        "max_rel": "max_reldiff", "mean_rel": "mean_reldiff", "median_rel": "median_reldiff"}


def save_outputs(folder, arrays):
    """A folder as kiln run writes it: one .npy per output and outputs.json naming them."""
    os.makedirs(folder, exist_ok=True)
    files = {}
    for i, (name, a) in enumerate(arrays.items()):
        files[name] = f"out{i}.npy"
        np.save(os.path.join(folder, files[name]), a)
    with open(os.path.join(folder, "outputs.json"), "w") as f:
        json.dump(files, f)
    return f"outputs:{folder}"


def polygraphy_compare(ref, target, stat, atol, rtol):
    """Polygraphy's comparison of target against ref (ref is its second runner, the one whose
    values divide the relative error)."""
    from polygraphy.comparator import Comparator, IterationResult, RunResults, SimpleCompareFunc
    from polygraphy.logger import G_LOGGER
    G_LOGGER.module_severity = G_LOGGER.CRITICAL
    results = RunResults()
    results.append(("target", [IterationResult(target, runner_name="target")]))
    results.append(("ref", [IterationResult(ref, runner_name="ref")]))
    acc = Comparator.compare_accuracy(
        results, compare_func=SimpleCompareFunc(check_error_stat=stat, atol=atol, rtol=rtol))
    return dict(acc[0].items())[("target", "ref")][0]


def output_sets():
    rs = np.random.RandomState(7)
    ref = {"logits": rs.randn(4, 50).astype(np.float32),
           "boxes": rs.rand(2, 8, 4).astype(np.float32) * 100,
           "scores": rs.randn(3, 7).astype(np.float64)}
    ref["logits"][0, :5] = 0.0  # zero reference values: Polygraphy's epsilon path
    target = {k: (v + rs.randn(*v.shape) * s).astype(v.dtype)
              for (k, v), s in zip(ref.items(), [1e-4, 1e-2, 1e-6])}
    target["boxes"][1, 3, 2] += 5.0  # one large error
    return ref, target


@pytest.mark.parametrize("stat,atol,rtol", [("elemwise", 1e-3, 1e-3), ("max", 1e-2, 1e-2),
                                            ("mean", 1e-3, 1e-5), ("median", 1e-5, 1e-5),
                                            ("elemwise", 10.0, 0.0)])
def test_statistics_equal_polygraphy(tmp_path, stat, atol, rtol):
    ref, target = output_sets()
    r = kiln("compare", save_outputs(str(tmp_path / "ref"), ref),
             save_outputs(str(tmp_path / "target"), target), "--json",
             "--check-error-stat", stat, "--atol", atol, "--rtol", rtol, check=False)
    assert r.returncode in (0, 1), r.stderr
    got = json.loads(r.stdout)
    verdicts = []
    for name in ref:
        want = polygraphy_compare({name: ref[name]}, {name: target[name]}, stat, atol, rtol)[name]
        ours = got["outputs"][name]
        for k in STATS:
            np.testing.assert_allclose(ours[k], getattr(want, POLY[k]), rtol=1e-5, atol=0,
                                       err_msg=f"{name} {k}")
        assert ours["pass"] == bool(want), name
        verdicts.append(bool(want))
    assert got["pass"] == all(verdicts)
    assert r.returncode == (0 if all(verdicts) else 1)


def test_worst_element_and_special_values(tmp_path):
    ref = {"y": np.array([[1.0, 2.0], [3.0, np.inf]], np.float32)}
    target = {"y": np.array([[1.0, 2.5], [np.nan, np.inf]], np.float32)}
    r = kiln("compare", save_outputs(str(tmp_path / "a"), ref),
             save_outputs(str(tmp_path / "b"), target), "--json", check=False)
    y = json.loads(r.stdout)["outputs"]["y"]
    assert r.returncode == 1 and not y["pass"]
    assert y["nan_target"] == 1 and y["inf_ref"] == 1 and y["inf_target"] == 1
    assert y["worst_index"] == 2  # the first NaN error
    finite = {"y": ref["y"][:1]}, {"y": target["y"][:1]}
    r = kiln("compare", save_outputs(str(tmp_path / "c"), finite[0]),
             save_outputs(str(tmp_path / "d"), finite[1]), "--json", check=False)
    y = json.loads(r.stdout)["outputs"]["y"]
    assert y["worst_index"] == 1 and y["worst_ref"] == 2.0 and y["worst_target"] == 2.5


def test_models_share_seeded_inputs_and_report(tmp_path):
    """A model against its plugin-edited self: same seeded inputs on both sides, a PASS, and an
    SVG per output; a different seed gives different inputs but still a PASS."""
    src = swish_model(str(tmp_path / "m.onnx"))
    edited = str(tmp_path / "k.onnx")
    kiln("edit", src, "-o", edited, "--replace-pattern", "swish", "--with-plugin", "Swish")
    lib = os.path.join(PLUGINS, "libswish.so")
    report = tmp_path / "report"
    r = kiln("compare", src, edited, "--plugins", lib, "--json", "--report", report,
             "--seed", "3", "--atol", "1e-4", "--rtol", "1e-4")
    out = json.loads(r.stdout)
    assert out["pass"] and out["outputs"]["y"]["count"] == 32
    svg = (report / "y.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") == 40
    # Against ORT on the same seeded data the statistics are those of a real difference.
    r2 = kiln("compare", src, src, "--json", "--seed", "3")
    assert json.loads(r2.stdout)["outputs"]["y"]["max_abs"] == 0.0


def test_plan_against_saved_outputs_of_a_real_model(tmp_path):
    name = "mobilenetv2_mini"
    case = os.path.join(MODELS, name, "case1_2x3x64x64")
    ref_dir = str(tmp_path / "ref")
    import onnxruntime as ort
    x = np.load(os.path.join(case, "input.npy"))
    sess = ort.InferenceSession(os.path.join(MODELS, name, "model.onnx"))
    save_outputs(ref_dir, dict(zip([o.name for o in sess.get_outputs()],
                                   sess.run(None, {"input": x}))))
    plan = str(tmp_path / "m.plan")
    kiln("build", os.path.join(MODELS, name, "model.onnx"), "-o", plan, "--shapes",
         "input:2x3x64x64")
    r = kiln("compare", f"outputs:{ref_dir}", plan, "--input", f"input={case}/input.npy",
             "--atol", "1e-3", "--rtol", "1e-3")
    assert "PASS" in r.stdout
    # A tolerance of zero fails: real float differences exist between the two.
    r = kiln("compare", f"outputs:{ref_dir}", plan, "--input", f"input={case}/input.npy",
             "--atol", "0", "--rtol", "0", check=False)
    assert r.returncode == 1 and "FAIL" in r.stdout


def test_target_precision_fp16_finds_the_planted_overflow(tmp_path):
    """--target-precision builds the target side in fp16 (kiln build --precision): the CPU
    lowers element-wise layers, so a product beyond 65504 overflows and compare fails (exit 1),
    while with the layer kept in fp32 through --layer-precision both sides agree."""
    c = [helper.make_tensor(n, TensorProto.FLOAT, [1], [v]) for n, v in
         (("k1", 300.0), ("k2", 300.0))]
    nodes = [helper.make_node("Mul", ["x", "k1"], ["a"], name="mul1"),
             helper.make_node("Transpose", ["a"], ["at"], name="t1", perm=[1, 0]),
             helper.make_node("Mul", ["at", "k2"], ["y"], name="mul2")]
    g = helper.make_graph(nodes, "o", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], c)
    model = str(tmp_path / "o.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    np.save(tmp_path / "x.npy", np.array([[0.1, -0.5], [1.0, 2.0]], np.float32))
    base = ["compare", model, model, "--input", f"x={tmp_path}/x.npy", "--rtol", "1e-2",
            "--atol", "1e-2", "--json"]
    r = kiln(*base, "--target-precision", "fp16", check=False)
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["pass"] is False
    r = kiln(*base, "--target-precision", "fp16", "--layer-precision", "mul2=fp32", check=False)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("args,needle", [
    (["outputs:/nonexistent", "outputs:/nonexistent"], "outputs.json"),
    (["--rtol", "abc"], "--rtol"),
    (["--ref-precision", "fp8"], "expected fp32, tf32, fp16 or bf16"),
    (["--target-backend", "nosuch"], "unknown backend 'nosuch'"),
    (["--check-error-stat", "p99"], "elemwise"),
])
def test_bad_compare_exits_2(tmp_path, args, needle):
    src = swish_model(str(tmp_path / "m.onnx"))
    full = args if args[0].startswith("outputs:") else [src, src, *args]
    r = kiln("compare", *full, check=False)
    assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_npz_sides_equal_folder_sides(tmp_path):
    """An .npz archive (numpy.savez, zip64 members included) is a side like outputs:DIR."""
    ref, target = output_sets()
    np.savez(tmp_path / "ref.npz", **ref)
    np.savez(tmp_path / "target.npz", **target)
    args = ["--json", "--atol", "1e-3", "--rtol", "1e-3"]
    a = kiln("compare", save_outputs(str(tmp_path / "r"), ref),
             save_outputs(str(tmp_path / "t"), target), *args, check=False)
    b = kiln("compare", str(tmp_path / "ref.npz"), f"outputs:{tmp_path}/target.npz", *args,
             check=False)
    assert a.returncode == b.returncode == 1
    assert json.loads(a.stdout) == json.loads(b.stdout)
    np.savez_compressed(tmp_path / "z.npz", **ref)
    bad = kiln("compare", str(tmp_path / "z.npz"), str(tmp_path / "ref.npz"), check=False)
    assert bad.returncode == 2 and "savez_compressed" in bad.stderr
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    bad = kiln("compare", str(tmp_path / "junk.npz"), str(tmp_path / "ref.npz"), check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
