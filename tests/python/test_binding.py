"""The binding: build, engines, contexts, shapes and profiles, and errors as KilnError."""

import os
import threading

import numpy as np
import pytest

import kiln

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _err(excinfo, status, *words):
    e = excinfo.value
    assert isinstance(e, kiln.KilnError)
    assert e.status_name == status, e
    for w in words:
        assert w in e.message, e.message


def test_version_and_library():
    assert kiln.__version__.count(".") == 2
    assert kiln.LIBRARY_PATH.endswith(".so")


def test_run_builds_in_memory_with_feed_shapes(relu_add_model, rng):
    a = rng.randn(3, 4).astype(np.float32)
    b = rng.randn(3, 4).astype(np.float32)
    out = kiln.run(relu_add_model, {"a": a, "b": b})
    assert list(out) == ["y"]
    np.testing.assert_array_equal(out["y"], np.maximum(a + b, 0))


def test_build_from_path_bytes_and_modelproto(tmp_path, fixed_model):
    import onnx

    path = tmp_path / "m.onnx"
    path.write_bytes(fixed_model)
    p1 = kiln.build(str(path))
    p2 = kiln.build(path)  # os.PathLike
    p3 = kiln.build(fixed_model)
    p4 = kiln.build(onnx.load_from_string(fixed_model))
    assert p1[:8] == b"KILNPLAN"
    assert p1 == p2 == p3 == p4
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = kiln.Engine(p1).context().run({"x": x})
    np.testing.assert_array_equal(out["y"], x * 2 + 1)
    assert out["z"].dtype == np.int64
    np.testing.assert_array_equal(out["z"], x.astype(np.int64))


def test_engine_io_info_and_profiles(relu_add_model):
    shapes = {"a": ((1, 4), (2, 4), (8, 4)), "b": ((1, 4), (2, 4), (8, 4))}
    e = kiln.Engine(kiln.build(relu_add_model, shapes=shapes))
    assert [i.name for i in e.inputs] == ["a", "b"]
    a = e.inputs[0]
    assert a.dtype == np.float32
    assert a.shape == ("batch", 4) and a.dynamic and a.rank == 2
    assert (a.min_shape, a.opt_shape, a.max_shape) == ((1, 4), (2, 4), (8, 4))
    (y,) = e.outputs
    assert y.name == "y" and y.shape == ("batch", 4) and y.dtype == np.float32
    assert "batch" in repr(a)


def test_context_runs_every_shape_in_the_profile(relu_add_model, rng):
    shapes = {"a": ((1, 4), (2, 4), (8, 4)), "b": ((1, 4), (2, 4), (8, 4))}
    ctx = kiln.Engine(kiln.build(relu_add_model, shapes=shapes, threads=2)).context()
    for n in (1, 5, 8, 2):
        a, b = rng.randn(n, 4).astype(np.float32), rng.randn(n, 4).astype(np.float32)
        y = ctx.run({"a": a, "b": b})["y"]
        assert y.shape == (n, 4)
        np.testing.assert_array_equal(y, np.maximum(a + b, 0))


def test_output_shape_before_execute(relu_add_model):
    shapes = {"a": ((1, 4), (2, 4), (8, 4)), "b": ((1, 4), (2, 4), (8, 4))}
    ctx = kiln.Engine(kiln.build(relu_add_model, shapes=shapes)).context()
    ctx.set_input_shape("a", (6, 4))
    ctx.set_input_shape("b", (6, 4))
    assert ctx.output_shape("y") == (6, 4)


def test_outputs_are_copies_that_survive_the_next_run(fixed_model):
    ctx = kiln.Engine(kiln.build(fixed_model)).context()
    x = np.ones((2, 3), np.float32)
    first = ctx.run({"x": x})["y"]
    ctx.run({"x": x * 10})
    np.testing.assert_array_equal(first, np.full((2, 3), 3, np.float32))


def test_plan_file_round_trip(tmp_path, fixed_model):
    path = tmp_path / "m.plan"
    path.write_bytes(kiln.build(fixed_model))
    x = np.full((2, 3), -1.5, np.float32)
    np.testing.assert_array_equal(kiln.Engine(path).run({"x": x})["y"], x * 2 + 1)
    np.testing.assert_array_equal(kiln.run(str(path), {"x": x})["y"], x * 2 + 1)


def test_run_accepts_plan_bytes(fixed_model):
    plan = kiln.build(fixed_model)
    x = np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(kiln.run(plan, {"x": x})["y"], np.ones((2, 3), np.float32))


def test_plan_layers(relu_add_model):
    shapes = {"a": (2, 4), "b": (2, 4)}
    layers = kiln.plan_layers(kiln.build(relu_add_model, shapes=shapes))
    names = [n for n, _, _ in layers]
    assert names and all(isinstance(n, str) for n in names)
    # Add and Relu, possibly fused into one element-wise layer
    assert 1 <= len(layers) <= 2
    assert all(isinstance(op, str) and op for _, op, _ in layers)


def test_dtype_conversion_and_zero_copy_inputs(fixed_model, int_model):
    ctx = kiln.Engine(kiln.build(fixed_model)).context()
    x64 = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(ctx.run({"x": x64})["y"], x64.astype(np.float32) * 2 + 1)
    # a list and a non-contiguous view are converted too
    np.testing.assert_array_equal(ctx.run({"x": [[0, 1, 2], [3, 4, 5]]})["y"], x64 * 2 + 1)
    t = np.arange(6, dtype=np.float32).reshape(3, 2).T
    np.testing.assert_array_equal(ctx.run({"x": t})["y"], t * 2 + 1)
    ictx = kiln.Engine(kiln.build(int_model)).context()
    i32 = np.array([1, 2, 3], np.int32)
    y = ictx.run({"i": i32, "j": np.array([10, 20, 30], np.int64)})["y"]
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, [11, 22, 33])


def test_wrong_dtype_is_refused(int_model):
    ctx = kiln.Engine(kiln.build(int_model)).context()
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"i": np.array([1.5, 2, 3]), "j": np.array([1, 2, 3])})
    _err(ei, "DTYPE", "input 'i'", "int64", "float64")


def test_wrong_input_name(fixed_model):
    ctx = kiln.Engine(kiln.build(fixed_model)).context()
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"nope": np.zeros((2, 3), np.float32)})
    _err(ei, "NOT_FOUND", "no input named 'nope'", "x")


def test_missing_input(relu_add_model):
    ctx = kiln.Engine(kiln.build(relu_add_model, shapes={"a": (1, 4), "b": (1, 4)})).context()
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"a": np.zeros((1, 4), np.float32)})
    _err(ei, "INVALID_ARGUMENT", "b")


def test_wrong_rank_and_fixed_dim(fixed_model):
    ctx = kiln.Engine(kiln.build(fixed_model)).context()
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"x": np.zeros((6,), np.float32)})
    _err(ei, "SHAPE", "input 'x'", "rank 2", "rank 1")
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"x": np.zeros((2, 4), np.float32)})
    _err(ei, "SHAPE", "input 'x'", "axis 1", "fixed at 3")
    # the context is still usable after refusing
    y = ctx.run({"x": np.zeros((2, 3), np.float32)})["y"]
    np.testing.assert_array_equal(y, np.ones((2, 3), np.float32))


def test_shape_outside_profile(relu_add_model):
    shapes = {"a": ((1, 4), (2, 4), (8, 4)), "b": ((1, 4), (2, 4), (8, 4))}
    ctx = kiln.Engine(kiln.build(relu_add_model, shapes=shapes)).context()
    big = np.zeros((9, 4), np.float32)
    with pytest.raises(kiln.KilnError) as ei:
        ctx.run({"a": big, "b": big})
    _err(ei, "SHAPE", "input 'a'", "axis 0", "9", "[1, 8]")


def test_build_errors(tmp_path, relu_add_model):
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(str(tmp_path / "missing.onnx"))
    _err(ei, "IO", "missing.onnx")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(b"not an onnx model")
    _err(ei, "MODEL")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(relu_add_model)
    _err(ei, "SHAPE", "input 'a'", "dynamic")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(relu_add_model, shapes={"a": (1, 4), "b": (1, 4), "c": (1,)})
    _err(ei, "INVALID_ARGUMENT", "'c'")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(relu_add_model, shapes={"a": ((4, 4), (2, 4), (8, 4)), "b": (1, 4)})
    assert "a" in ei.value.message
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(relu_add_model, shapes={"a": "1x4"})
    _err(ei, "INVALID_ARGUMENT", "shapes['a']")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build(42)
    _err(ei, "INVALID_ARGUMENT", "int")


def test_bad_plans():
    with pytest.raises(kiln.KilnError) as ei:
        kiln.Engine(b"garbage")
    _err(ei, "PLAN", "truncated")
    with pytest.raises(kiln.KilnError) as ei:
        kiln.Engine(b"X" * 128)
    _err(ei, "PLAN", "magic")
    with pytest.raises(kiln.KilnError):
        kiln.Engine(12)


def test_kiln_error_carries_status_and_message(fixed_model):
    with pytest.raises(kiln.KilnError) as ei:
        kiln.Engine(kiln.build(fixed_model)).context().run({"bad": 1})
    e = ei.value
    assert e.status == 10 and e.status_name == "NOT_FOUND"
    assert str(e).startswith("[NOT_FOUND] ")
    assert isinstance(e, RuntimeError)


def test_contexts_on_threads(relu_add_model):
    shapes = {"a": ((1, 4), (4, 4), (16, 4)), "b": ((1, 4), (4, 4), (16, 4))}
    engine = kiln.Engine(kiln.build(relu_add_model, shapes=shapes))
    errors = []

    def work(seed):
        r = np.random.RandomState(seed)
        ctx = engine.context(threads=1)
        for _ in range(20):
            n = r.randint(1, 17)
            a, b = r.randn(n, 4).astype(np.float32), r.randn(n, 4).astype(np.float32)
            if not np.array_equal(ctx.run({"a": a, "b": b})["y"], np.maximum(a + b, 0)):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_progress_logger_and_accounting(fixed_model):
    stages = []
    plan = kiln.build(fixed_model, progress=lambda stage, f: stages.append((stage, f)))
    assert stages and all(0.0 <= f <= 1.0 for _, f in stages)
    assert stages[-1][1] == 1.0
    kiln.build(fixed_model, progress=lambda stage, f: 1 / 0)  # a failing callback is ignored
    messages = []
    kiln.set_logger(lambda level, msg: messages.append((level, msg)), kiln.LogLevel.VERBOSE)
    try:
        kiln.Engine(plan).context().run({"x": np.zeros((2, 3), np.float32)})
    finally:
        kiln.set_logger(None)
    assert all(isinstance(m, str) for _, m in messages)
    before = kiln.allocated_bytes()
    engine = kiln.Engine(plan)
    assert kiln.allocated_bytes() > before
    del engine
    assert kiln.allocated_bytes() == before
    assert kiln.dtype_size(np.float16) == 2 and kiln.dtype_size(kiln.DType.INT64) == 8


def test_build_to_file(tmp_path, fixed_model):
    path = tmp_path / "direct.plan"
    kiln.build_to_file(fixed_model, path, threads=1)
    assert path.read_bytes()[:8] == b"KILNPLAN"
    with pytest.raises(kiln.KilnError) as ei:
        kiln.build_to_file(fixed_model, tmp_path / "no" / "dir" / "x.plan")
    assert ei.value.status_name == "IO"
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(kiln.Engine(path).run({"x": x})["y"], x * 3)


def test_tensor_shape_of_intermediate_tensors():
    """Any layer's output by its ONNX name, at the input shape set; a tensor fused away (the
    BatchNormalization folded into the stem conv) is a KilnError naming it."""
    model = os.path.join(REPO, "tests", "models", "resnet_mini", "model.onnx")
    shapes = {"input": ((1, 3, 32, 32), (1, 3, 40, 40), (2, 3, 96, 96))}
    ctx = kiln.Engine(kiln.build(model, shapes=shapes)).context()
    ctx.set_input_shape("input", (1, 3, 40, 40))
    assert ctx.tensor_shape("/stem/stem.2/Relu_output_0") == (1, 8, 20, 20)
    assert ctx.tensor_shape("/stem/stem.3/MaxPool_output_0") == (1, 8, 10, 10)
    ctx.set_input_shape("input", (2, 3, 96, 64))
    assert ctx.tensor_shape("/stem/stem.3/MaxPool_output_0") == (2, 8, 24, 16)
    assert ctx.tensor_shape("logits") == ctx.output_shape("logits") == (2, 10)
    with pytest.raises(kiln.KilnError, match="no tensor named '/stem/stem.1/BatchNorm"):
        ctx.tensor_shape("/stem/stem.1/BatchNormalization_output_0")
