"""kiln.InferenceSession against onnxruntime: one onnxruntime script, run unchanged and with only
its import changed to kiln, must report the same inputs and outputs and compute the same
values; plus the session's own edges (plans, providers, bad feeds, threads)."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from pykiln_helpers import REPO

import kiln

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "ort_script.py")
MODELS = os.path.join(REPO, "tests", "models")


def run_script(path, model, out):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python"), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, path, model, out], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    return np.load(out)


@pytest.mark.parametrize("name", ["mobilenetv2_mini", "transformer_encoder", "lstm_bidir"])
def test_an_onnxruntime_script_runs_on_kiln_by_changing_its_import(name, tmp_path):
    source = open(SCRIPT).read()
    assert source.count("import onnxruntime as ort\n") == 1
    kiln_script = tmp_path / "kiln_script.py"
    kiln_script.write_text(source.replace("import onnxruntime as ort\n", "import kiln as ort\n"))
    model = os.path.join(MODELS, name, "model.onnx")
    want = run_script(SCRIPT, model, str(tmp_path / "ort.npz"))
    got = run_script(str(kiln_script), model, str(tmp_path / "kiln.npz"))
    assert json.loads(str(got["io"])) == json.loads(str(want["io"]))
    keys = sorted(k for k in want.files if k != "io")
    assert sorted(k for k in got.files if k != "io") == keys and len(keys) >= 6
    for k in keys:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=k)


def test_a_plan_loads_with_its_profile(relu_add_model, tmp_path):
    plan = kiln.build(relu_add_model, shapes={"a": ((1, 4), (2, 4), (8, 4)),
                                              "b": ((1, 4), (2, 4), (8, 4))})
    path = tmp_path / "m.plan"
    path.write_bytes(plan)
    sess = kiln.InferenceSession(str(path))
    assert sess.get_inputs()[0] == kiln.NodeArg("a", "tensor(float)", ["batch", 4])
    assert sess.get_outputs()[0].name == "y"
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 6
    b = np.ones((3, 4), np.float32)
    (y,) = sess.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(y, np.maximum(a + b, 0))
    with pytest.raises(kiln.KilnError, match="a"):  # outside the plan's profile
        sess.run(None, {"a": np.zeros((9, 4), np.float32), "b": np.zeros((9, 4), np.float32)})


def test_dynamic_model_is_rebuilt_only_when_a_shape_leaves_the_profile(relu_add_model):
    sess = kiln.InferenceSession(relu_add_model)
    assert sess.engine is None
    feeds = lambda n: {"a": np.ones((n, 4), np.float32), "b": np.ones((n, 4), np.float32)}
    sess.run(None, feeds(2))
    first = sess.engine
    sess.run(None, feeds(6))
    widened = sess.engine
    assert widened is not first and widened.inputs[0].min_shape == (2, 4)
    assert widened.inputs[0].max_shape == (6, 4)
    sess.run(None, feeds(4))
    assert sess.engine is widened
    so = kiln.SessionOptions()
    so.profile = {"a": ((1, 4), (4, 4), (16, 4)), "b": ((1, 4), (4, 4), (16, 4))}
    fixed = kiln.InferenceSession(relu_add_model, sess_options=so)
    engine = fixed.engine
    fixed.run(None, feeds(16))
    assert fixed.engine is engine


def test_bad_feeds_and_names_are_clear_errors(relu_add_model):
    sess = kiln.InferenceSession(relu_add_model)
    with pytest.raises(ValueError, match=r"\(\['b'\]\) are missing"):
        sess.run(None, {"a": np.ones((1, 4), np.float32)})
    with pytest.raises(kiln.KilnError, match="Invalid output name: zz"):
        sess.run(["zz"], {"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)})
    with pytest.raises(kiln.KilnError, match="rank 1"):
        sess.run(None, {"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)})
    with pytest.raises(TypeError, match="unexpected arguments"):
        kiln.InferenceSession(relu_add_model, bogus=1)
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess = kiln.InferenceSession(relu_add_model, providers=["CUDAExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"] == kiln.get_available_providers()


def test_one_session_serves_many_threads(relu_add_model):
    so = kiln.SessionOptions()
    so.profile = {"a": ((1, 4), (4, 4), (8, 4)), "b": ((1, 4), (4, 4), (8, 4))}
    sess = kiln.InferenceSession(relu_add_model, sess_options=so)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(50):
            n = int(rng.integers(1, 9))
            a = rng.standard_normal((n, 4)).astype(np.float32)
            b = rng.standard_normal((n, 4)).astype(np.float32)
            (y,) = sess.run(["y"], {"a": a, "b": b})
            if not np.array_equal(y, np.maximum(a + b, 0)):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_sequences_and_optionals_as_onnxruntime_reports_and_runs_them(tmp_path):
    """A sequence input (list of arrays of different shapes), an optional one (None or an
    array) and a Loop that returns a sequence: the same input/output types as onnxruntime, the
    same values, and several runs of one session without a rebuild (a container needs no
    profile)."""
    import onnx
    import onnxruntime as ort
    sys.path.insert(0, MODELS)
    import test_sequences as ts
    rng = np.random.RandomState(7)
    cases = [(ts.edit_model(), [{"seq": [rng.randn(r, 3).astype(np.float32) for r in rows],
                                 "x": rng.randn(2, 3).astype(np.float32)}
                                for rows in ((1, 4, 2), (3,))]),
             (ts.optional_model(), [{"o": None}, {"o": np.array([1, 2], np.float32)}]),
             (ts.loop_model(), [{"M": np.array(m, np.int64), "x": np.ones(2, np.float32)}
                                for m in (0, 3)])]
    for i, (m, feeds) in enumerate(cases):
        path = str(tmp_path / f"m{i}.onnx")
        onnx.save(m, path)
        want_s, got_s = ort.InferenceSession(path), kiln.InferenceSession(path)
        for want_io, got_io in ((want_s.get_inputs(), got_s.get_inputs()),
                                (want_s.get_outputs(), got_s.get_outputs())):
            assert [(a.name, a.type) for a in want_io] == [(b.name, b.type) for b in got_io]
        engines = set()
        for feed in feeds:
            for want, got in zip(want_s.run(None, feed), got_s.run(None, feed)):
                if isinstance(want, list):
                    assert isinstance(got, list) and len(got) == len(want)
                    for w, g in zip(want, got):
                        np.testing.assert_allclose(g, w, rtol=1e-6)
                elif want is None:
                    assert got is None
                else:
                    np.testing.assert_allclose(got, want, rtol=1e-6)
            engines.add(id(got_s.engine))
        assert len(engines) == 1
