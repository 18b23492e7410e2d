"""Real models against PyTorch: every case in manifest.json is run through `kiln run` straight
from the .onnx file and through a plan saved by `kiln build`, and each output must match
PyTorch's within the manifest's tolerances (rtol 1e-3, atol 1e-3; integer outputs exactly).

The kiln binary is $KILN, or build/bin/kiln under the repository root.
"""

import json
import os
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
TIMEOUT = 300

with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = json.load(_f)["models"]

CASES = [(m, c) for m in MANIFEST for c in m["cases"]]
CASE_IDS = [f"{m['name']}-{c['name']}" for m, c in CASES]


def shape_args(model):
    args = []
    for spec in model["shapes"]:
        args += ["--shapes", spec]
    return args


def kiln(*args):
    if not os.access(KILN, os.X_OK):
        pytest.fail(f"kiln binary not found at {KILN} (set KILN)")
    proc = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def check_outputs(model, case, out_dir):
    with open(os.path.join(out_dir, "outputs.json")) as f:
        index = json.load(f)
    for name, ref_file in case["outputs"].items():
        assert name in index, f"output {name!r} missing from outputs.json ({sorted(index)})"
        got = np.load(os.path.join(out_dir, index[name]))
        ref = np.load(os.path.join(HERE, ref_file))
        assert got.shape == ref.shape, f"{name}: shape {got.shape} != {ref.shape}"
        if ref.dtype.kind in "biu":
            assert got.dtype.kind in "biu", f"{name}: dtype {got.dtype}, expected {ref.dtype}"
            mismatch = int(np.count_nonzero(got != ref))
            assert mismatch == 0, f"{name}: {mismatch} of {ref.size} integer values differ"
        else:
            assert got.dtype == ref.dtype, f"{name}: dtype {got.dtype} != {ref.dtype}"
            err = np.abs(got.astype(np.float64) - ref)
            ok = np.allclose(got, ref, rtol=model["rtol"], atol=model["atol"])
            assert ok, (f"{name}: max abs err {err.max():.3g}, "
                        f"{int((err > model['atol'] + model['rtol'] * np.abs(ref)).sum())} "
                        f"of {ref.size} values outside tolerance")


def run_case(model_path, model, case, out_dir, extra=()):
    args = ["run", model_path, *extra]
    for name, file in case["inputs"].items():
        args += ["--input", f"{name}={os.path.join(HERE, file)}"]
    args += ["--output-dir", str(out_dir)]
    rc, _, err = kiln(*args)
    assert rc == 0, f"kiln run failed ({rc}): {err.strip()}"
    check_outputs(model, case, out_dir)


@pytest.fixture(scope="session")
def plans(tmp_path_factory):
    """Plans are built once per model and shared by its cases."""
    folder = tmp_path_factory.mktemp("plans")
    cache = {}

    def get(model):
        if model["name"] not in cache:
            plan = folder / f"{model['name']}.plan"
            rc, _, err = kiln("build", os.path.join(HERE, model["model"]), "-o", str(plan),
                              "--quiet", *shape_args(model))
            cache[model["name"]] = (rc, err.strip(), plan)
        rc, err, plan = cache[model["name"]]
        assert rc == 0, f"kiln build failed ({rc}): {err}"
        assert plan.stat().st_size > 0
        return str(plan)

    return get


@pytest.mark.parametrize("model,case", CASES, ids=CASE_IDS)
def test_from_onnx(model, case, tmp_path):
    run_case(os.path.join(HERE, model["model"]), model, case, tmp_path, shape_args(model))


@pytest.mark.parametrize("model,case", CASES, ids=CASE_IDS)
def test_from_plan(model, case, tmp_path, plans):
    run_case(plans(model), model, case, tmp_path)


@pytest.mark.parametrize("model,case", CASES, ids=CASE_IDS)
def test_references_agree_with_onnxruntime(model, case):
    """Guards the checked-in data itself: onnxruntime must reproduce PyTorch's outputs."""
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(os.path.join(HERE, model["model"]),
                                providers=["CPUExecutionProvider"])
    feeds = {k: np.load(os.path.join(HERE, v)) for k, v in case["inputs"].items()}
    outs = sess.run(list(case["outputs"]), feeds)
    for (name, ref_file), got in zip(case["outputs"].items(), outs):
        ref = np.load(os.path.join(HERE, ref_file))
        assert got.shape == ref.shape, name
        assert np.allclose(got, ref, rtol=model["rtol"], atol=model["atol"]), name


def test_manifest_is_complete():
    names = {m["name"] for m in MANIFEST}
    assert len(names) >= 12
    assert {m["opset"] for m in MANIFEST} >= {11, 13, 17}
    for m in MANIFEST:
        assert os.path.exists(os.path.join(HERE, m["model"]))
        if m["dynamic"]:
            assert m["shapes"], m["name"]
            assert len(m["cases"]) >= 2, m["name"]
