"""Bad input through the CLI: every failure must be clean.

For each kind of bad input (damaged models, plans and .npy files; wrong input names, dtypes,
ranks and shapes; missing files; malformed graphs; absurd dimensions; bad flags) kiln must exit
non-zero with exactly one line on stderr, never crash (signal, exit code >= 128, sanitizer
report), write nothing into --output-dir, and never damage a plan that already exists.

The kiln binary is $KILN, or build/bin/kiln under the repository root.
"""

import os
import random
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
TIMEOUT = 120
CRASH_MARKS = ("Sanitizer", "runtime error:", "core dumped", "Traceback", "Segmentation fault",
               "Aborted", "Assertion")
PROFILE = "x:1x4,2x4,4x4"


def kiln(*args):
    if not os.access(KILN, os.X_OK):
        pytest.fail(f"kiln binary not found at {KILN} (set KILN)")
    proc = subprocess.run([KILN, *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    return proc.returncode, proc.stderr.decode("utf-8", "replace")


def assert_no_crash(rc, err):
    assert 0 <= rc < 128, f"crashed: exit {rc}; stderr: {err[-2000:]}"
    for mark in CRASH_MARKS:
        assert mark not in err, f"{mark!r} on stderr: {err[-2000:]}"


def assert_clean_failure(rc, err):
    assert_no_crash(rc, err)
    assert rc != 0, "expected a failure, got exit 0"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"expected one line on stderr, got {lines!r}"


# ---------------------------------------------------------------------------------------------
# Inputs


def mlp_model(batch="N", dims=4):
    """y = relu(x @ W + b) with x: [batch, dims] float32."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((dims, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
             helper.make_node("Add", ["xw", "B"], ["xwb"], name="add"),
             helper.make_node("Relu", ["xwb"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, dims])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
                              [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def save_model(model, path):
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


@pytest.fixture
def work(tmp_path):
    """A valid model, a valid input, a built plan and an empty output directory."""
    model = save_model(mlp_model(), tmp_path / "model.onnx")
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 4), np.float32))
    out = tmp_path / "out"
    out.mkdir()

    class Work:
        pass

    w = Work()
    w.dir, w.model, w.x, w.out = tmp_path, model, x, out
    w.plan = tmp_path / "model.plan"
    rc, err = kiln("build", model, "-o", w.plan, "--shapes", PROFILE, "--quiet")
    w.plan_ok = rc == 0
    w.plan_err = err
    return w


def run_fails(w, target, *extra, inputs=None):
    """`kiln run` on target must fail cleanly and leave the output directory empty."""
    inputs = [f"x={w.x}"] if inputs is None else inputs
    args = ["run", target, *extra]
    for i in inputs:
        args += ["--input", i]
    args += ["--output-dir", w.out]
    rc, err = kiln(*args)
    assert_clean_failure(rc, err)
    assert os.listdir(w.out) == [], f"failed run wrote {os.listdir(w.out)}"


def build_fails(w, model, *extra):
    rc, err = kiln("build", model, "-o", w.dir / "new.plan", "--quiet", *extra)
    assert_clean_failure(rc, err)
    assert not (w.dir / "new.plan").exists(), "a failed build left a plan behind"


def damaged(data, how, seed):
    rng = random.Random(seed)
    if how == "truncated":
        return data[: rng.randrange(0, max(1, len(data)))]
    if how == "random":
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 64, 4096])))
    if how == "bitflip":
        b = bytearray(data)
        for _ in range(rng.choice([1, 3, 16])):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    raise ValueError(how)


def test_valid_inputs_work(work):
    """The fixture itself: the undamaged model and plan run."""
    assert work.plan_ok, work.plan_err
    for target in (work.model, work.plan):
        rc, err = kiln("run", target, "--shapes", PROFILE, "--input", f"x={work.x}",
                       "--output-dir", work.out) if target == work.model else \
            kiln("run", target, "--input", f"x={work.x}", "--output-dir", work.out)
        assert rc == 0, err
        assert (work.out / "outputs.json").exists()
        for f in os.listdir(work.out):
            os.remove(work.out / f)


# ---------------------------------------------------------------------------------------------
# Damaged files


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("how", ["truncated", "random"])
def test_damaged_model(work, how, seed):
    bad = work.dir / "bad.onnx"
    bad.write_bytes(damaged(work.model.read_bytes(), how, seed))
    build_fails(work, bad)
    run_fails(work, bad)


@pytest.mark.parametrize("seed", range(12))
def test_bitflipped_model(work, seed):
    """A flipped bit may leave a valid model (e.g. in weight data): then kiln may succeed, but it
    must never crash, and a failure must still be one line."""
    bad = work.dir / "bad.onnx"
    bad.write_bytes(damaged(work.model.read_bytes(), "bitflip", seed))
    rc, err = kiln("run", bad, "--shapes", PROFILE, "--input", f"x={work.x}",
                   "--output-dir", work.out)
    assert_no_crash(rc, err)
    if rc != 0:
        assert len(err.splitlines()) == 1, err
        assert os.listdir(work.out) == []


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("how", ["truncated", "random", "bitflip"])
def test_damaged_plan(work, how, seed):
    """Plans are checksummed: any damage must be detected."""
    assert work.plan_ok, work.plan_err
    bad = work.dir / "bad.plan"
    data = work.plan.read_bytes()
    bad_data = damaged(data, how, seed)
    if bad_data == data:
        bad_data = data[:-1]
    bad.write_bytes(bad_data)
    run_fails(work, bad)
    rc, err = kiln("bench", bad, "--input", f"x={work.x}", "--iterations", 1, "--warmup", 0)
    assert_clean_failure(rc, err)
    rc, err = kiln("inspect", bad)
    assert_clean_failure(rc, err)


def npy_bytes(arr):
    import io
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["truncated_header", "truncated_data", "random", "empty",
                                  "bad_magic", "garbage_header", "huge_shape", "negative_shape",
                                  "object_dtype", "unknown_dtype", "bad_version"])
def test_bad_npy(work, kind):
    good = npy_bytes(np.ones((2, 4), np.float32))
    header_end = good.index(b"\n") + 1
    if kind == "truncated_header":
        data = good[:20]
    elif kind == "truncated_data":
        data = good[:-5]
    elif kind == "random":
        data = bytes(random.Random(1).randrange(256) for _ in range(200))
    elif kind == "empty":
        data = b""
    elif kind == "bad_magic":
        data = b"\x93NUMPZ" + good[6:]
    elif kind == "bad_version":
        data = good[:6] + b"\x09\x00" + good[8:]
    elif kind in ("garbage_header", "huge_shape", "negative_shape", "unknown_dtype"):
        header = {
            "garbage_header": "{'descr': '<f4', 'fortran_order': False, 'shape': (2, }",
            "huge_shape": "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 4), }",
            "negative_shape": "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 4), }",
            "unknown_dtype": "{'descr': '<q9', 'fortran_order': False, 'shape': (2, 4), }",
        }[kind]
        pad = 64 - (10 + len(header) + 1) % 64
        header = header + " " * pad + "\n"
        data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + \
            good[header_end:]
    elif kind == "object_dtype":
        data = npy_bytes(np.array([{"a": 1}, None], dtype=object))
    bad = work.dir / "bad.npy"
    bad.write_bytes(data)
    run_fails(work, work.model, "--shapes", PROFILE, inputs=[f"x={bad}"])


@pytest.mark.parametrize("seed", range(8))
def test_bitflipped_npy(work, seed):
    """A flip in the data leaves a valid file; one in the header usually does not. Either way no
    crash, and a failure is one line with nothing written."""
    bad = work.dir / "flip.npy"
    good = npy_bytes(np.ones((2, 4), np.float32))
    rng = random.Random(seed)
    b = bytearray(good)
    i = rng.randrange(len(b)) if seed % 2 else rng.randrange(good.index(b"\n"))
    b[i] ^= 1 << rng.randrange(8)
    bad.write_bytes(bytes(b))
    rc, err = kiln("run", work.model, "--shapes", PROFILE, "--input", f"x={bad}",
                   "--output-dir", work.out)
    assert_no_crash(rc, err)
    if rc != 0:
        assert len(err.splitlines()) == 1, err
        assert os.listdir(work.out) == []


@pytest.mark.parametrize("kind", ["truncated", "random", "wrong_dtype"])
def test_bad_tensor_proto(work, kind):
    good = numpy_helper.from_array(np.ones((2, 4), np.float32), "x").SerializeToString()
    if kind == "truncated":
        data = good[: len(good) // 2]
    elif kind == "random":
        data = bytes(random.Random(2).randrange(256) for _ in range(100))
    else:
        data = numpy_helper.from_array(np.ones((2, 4), np.int64), "x").SerializeToString()
    bad = work.dir / "bad.pb"
    bad.write_bytes(data)
    run_fails(work, work.model, "--shapes", PROFILE, inputs=[f"x={bad}"])


# ---------------------------------------------------------------------------------------------
# Wrong inputs


def saved(work, name, arr):
    path = work.dir / name
    np.save(path, arr)
    return path


@pytest.mark.parametrize("target", ["model", "plan"])
def test_wrong_inputs(work, target):
    assert work.plan_ok, work.plan_err
    t = work.model if target == "model" else work.plan
    extra = ["--shapes", PROFILE] if target == "model" else []
    run_fails(work, t, *extra, inputs=[f"nope={work.x}"])                       # unknown name
    run_fails(work, t, *extra, inputs=[])                                       # missing input
    run_fails(work, t, *extra, inputs=[f"x={work.x}", f"x={work.x}"])           # given twice
    run_fails(work, t, *extra, inputs=[f"x={work.x}", f"z={work.x}"])           # extra input
    run_fails(work, t, *extra, inputs=[f"x={saved(work, 'i.npy', np.ones((2, 4), np.int32))}"])
    run_fails(work, t, *extra, inputs=[f"x={saved(work, 'd.npy', np.ones((2, 4)))}"])
    run_fails(work, t, *extra, inputs=[f"x={saved(work, 'r3.npy', np.ones((2, 4, 1), np.float32))}"])
    run_fails(work, t, *extra, inputs=[f"x={saved(work, 'r1.npy', np.ones(8, np.float32))}"])
    run_fails(work, t, *extra, inputs=[f"x={saved(work, 'd5.npy', np.ones((2, 5), np.float32))}"])
    run_fails(work, t, *extra, inputs=[f"x={saved(work, 'b8.npy', np.ones((8, 4), np.float32))}"])
    run_fails(work, t, *extra, inputs=[f"x={saved(work, 'b0.npy', np.ones((0, 4), np.float32))}"])
    run_fails(work, t, *extra, inputs=["x"])                                    # no '='
    run_fails(work, t, *extra, inputs=[f"={work.x}"])                           # empty name


def test_missing_files(work):
    run_fails(work, work.dir / "absent.onnx")
    run_fails(work, work.dir / "absent.plan")
    run_fails(work, work.model, "--shapes", PROFILE, inputs=[f"x={work.dir / 'absent.npy'}"])
    run_fails(work, work.dir, "--shapes", PROFILE)                              # a directory
    build_fails(work, work.dir / "absent.onnx")
    rc, err = kiln("build", work.model, "-o", work.dir / "no" / "such" / "dir.plan", "--shapes",
                   PROFILE, "--quiet")
    assert_clean_failure(rc, err)
    rc, err = kiln("inspect", work.dir / "absent.onnx")
    assert_clean_failure(rc, err)
    rc, err = kiln("bench", work.dir / "absent.plan", "--iterations", 1)
    assert_clean_failure(rc, err)


# ---------------------------------------------------------------------------------------------
# Malformed graphs


def graph_model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


MALFORMED = {
    "cycle": lambda: graph_model(
        [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
         helper.make_node("Identity", ["b"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "self_loop": lambda: graph_model(
        [helper.make_node("Add", ["x", "a"], ["a"]), helper.make_node("Identity", ["a"], ["y"])],
        [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "dangling_input": lambda: graph_model(
        [helper.make_node("Add", ["x", "ghost"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "output_never_produced": lambda: graph_model(
        [helper.make_node("Relu", ["x"], ["a"])], [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "two_producers": lambda: graph_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
        [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "unknown_op": lambda: graph_model(
        [helper.make_node("Frobnicate", ["x"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "unknown_domain": lambda: graph_model(
        [helper.make_node("Relu", ["x"], ["y"], domain="com.example.none")],
        [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "invalid_attr": lambda: graph_model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 0]),
         helper.make_node("Identity", ["t"], ["y"])], [vi("x", [2, 4])], [vi("y", [4, 2])]),
    "shape_mismatch": lambda: graph_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 3])],
        [numpy_helper.from_array(np.ones((5, 3), np.float32), "W")]),
    "wrong_arity": lambda: graph_model(
        [helper.make_node("Add", ["x"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])]),
    "bad_initializer": lambda: graph_model(
        [helper.make_node("Add", ["x", "W"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])],
        [helper.make_tensor("W", TensorProto.FLOAT, [2, 4], [1.0, 2.0])]),
    "no_opset": lambda: onnx.ModelProto(ir_version=8, graph=helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x", [2, 4])], [vi("y", [2, 4])])),
    "future_opset": lambda: graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])],
        opset=999),
    "external_data_missing": lambda: graph_model(
        [helper.make_node("Add", ["x", "W"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])],
        [external_tensor()]),
}


# Models that are valid in form but need absurd amounts of memory. Building one may succeed
# (nothing is allocated yet) or fail, cleanly either way; running one must fail cleanly.
ABSURD = {
    "absurd_static_dim": lambda: graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1 << 40, 4])],
        [vi("y", [1 << 40, 4])]),
    "absurd_constant": lambda: graph_model(
        [helper.make_node("ConstantOfShape", ["s"], ["c"]),
         helper.make_node("Add", ["x", "c"], ["y"])], [vi("x", [2, 4])], [vi("y", None)],
        [numpy_helper.from_array(np.array([1 << 40, 1 << 20], np.int64), "s")]),
    "absurd_reshape": lambda: graph_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], [vi("x", [2, 4])], [vi("y", None)],
        [numpy_helper.from_array(np.array([1 << 40, 1 << 40], np.int64), "s")]),
    "absurd_expand": lambda: graph_model(
        [helper.make_node("Expand", ["x", "s"], ["y"])], [vi("x", [2, 4])], [vi("y", None)],
        [numpy_helper.from_array(np.array([1 << 40, 2, 4], np.int64), "s")]),
}


def external_tensor():
    t = helper.make_tensor("W", TensorProto.FLOAT, [2, 4], [])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "does_not_exist.bin"), ("offset", "0"), ("length", "32")):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_graph(work, kind):
    path = save_model(MALFORMED[kind](), work.dir / f"{kind}.onnx")
    build_fails(work, path)
    x = saved(work, "x24.npy", np.ones((2, 4), np.float32))
    run_fails(work, path, inputs=[f"x={x}"])


@pytest.mark.parametrize("kind", sorted(ABSURD))
def test_absurd_model(work, kind):
    path = save_model(ABSURD[kind](), work.dir / f"{kind}.onnx")
    rc, err = kiln("build", path, "-o", work.dir / "absurd.plan", "--quiet")
    assert_no_crash(rc, err)
    if rc != 0:
        assert len(err.splitlines()) == 1, err
    x = saved(work, "x24.npy", np.ones((2, 4), np.float32))
    run_fails(work, path, inputs=[f"x={x}"])


# ---------------------------------------------------------------------------------------------
# Shapes and profiles


@pytest.mark.parametrize("spec", ["x:", "x", ":2x4", "x:2xx4", "x:2x-4", "x:2x4x", "x:abc",
                                  "x:4x4,2x4,1x4", "x:1x4,2x4", "x:1x4,2x4,4x4,8x4",
                                  "x:99999999999999999999x4", "y:2x4",
                                  "x:2x4x1", "x:2x4;x:2x4", "x:2x3"])
def test_bad_shape_spec(work, spec):
    build_fails(work, work.model, "--shapes", spec)
    run_fails(work, work.model, "--shapes", spec)


@pytest.mark.parametrize("spec", ["x:1099511627776x4", "x:1x4,2x4,1099511627776x4",
                                  "x:4611686018427387904x4"])
def test_absurd_shape_spec(work, spec):
    """Building for an absurd profile may succeed or fail, cleanly; a run with it must fail
    (the 2x4 input does not match a fixed 2^40x4, and an arena for the max cannot be had) or,
    for a range that admits 2x4, succeed."""
    rc, err = kiln("build", work.model, "-o", work.dir / "absurd.plan", "--quiet",
                   "--shapes", spec)
    assert_no_crash(rc, err)
    if rc != 0:
        assert len(err.splitlines()) == 1, err
    rc, err = kiln("run", work.model, "--shapes", spec, "--input", f"x={work.x}",
                   "--output-dir", work.out)
    assert_no_crash(rc, err)
    if rc != 0:
        assert len(err.splitlines()) == 1, err
        assert os.listdir(work.out) == []
    else:
        assert "," in spec, "a run with an input outside a fixed shape succeeded"


def test_shape_given_twice(work):
    build_fails(work, work.model, "--shapes", "x:2x4", "--shapes", "x:1x4,2x4,4x4")


def test_outside_profile(work):
    assert work.plan_ok, work.plan_err
    big = saved(work, "big.npy", np.ones((5, 4), np.float32))
    run_fails(work, work.plan, inputs=[f"x={big}"])
    run_fails(work, work.model, "--shapes", PROFILE, inputs=[f"x={big}"])
    rc, err = kiln("bench", work.plan, "--shapes", "x:9x4", "--iterations", 1)
    assert_clean_failure(rc, err)


# ---------------------------------------------------------------------------------------------
# Command line


def test_no_arguments():
    """With no command at all, printing the usage text is the one exception to one line."""
    rc, err = kiln()
    assert_no_crash(rc, err)
    assert rc != 0 and err.startswith("usage:"), err


@pytest.mark.parametrize("argv", [
    ["frobnicate"], ["run"], ["build"], ["bench"], ["inspect"],
    ["run", "{model}", "--bogus"], ["build", "{model}", "-o", "{dir}/a.plan", "--bogus"],
    ["build", "{model}"], ["build", "{model}", "-o"], ["run", "{model}", "--output-dir"],
    ["run", "{model}", "--input"], ["run", "{model}", "--threads", "zero"],
    ["run", "{model}", "--threads", "-3"], ["bench", "{model}", "--iterations", "-1"],
    ["bench", "{model}", "--iterations", "abc"], ["bench", "{model}", "--warmup", "x"],
    ["inspect", "{model}", "--dot"], ["inspect", "{model}", "--bogus"],
    ["run", "{model}", "{model}"],
])
def test_bad_command_line(work, argv):
    args = [a.format(model=work.model, dir=work.dir) for a in argv]
    rc, err = kiln(*args)
    assert_clean_failure(rc, err)
    assert not (work.dir / "a.plan").exists()


def test_failed_build_keeps_existing_plan(work):
    assert work.plan_ok, work.plan_err
    before = work.plan.read_bytes()
    bad = work.dir / "bad.onnx"
    bad.write_bytes(damaged(work.model.read_bytes(), "truncated", 3))
    for args in (["build", bad, "-o", work.plan],
                 ["build", work.model, "-o", work.plan, "--shapes", "x:4x4,2x4,1x4"],
                 ["build", save_model(MALFORMED["cycle"](), work.dir / "c.onnx"), "-o", work.plan],
                 ["build", work.dir / "absent.onnx", "-o", work.plan]):
        rc, err = kiln(*args, "--quiet")
        assert_clean_failure(rc, err)
        assert work.plan.read_bytes() == before, f"{args} changed the existing plan"
    leftovers = sorted(p.name for p in work.dir.iterdir()
                       if p.name.startswith("model.plan") and p.name != "model.plan")
    assert leftovers == [], f"temporary files left behind: {leftovers}"


def test_output_dir_untouched_on_failure(work):
    """A failing run leaves files already in the output directory alone and adds none."""
    keep = work.out / "keep.txt"
    keep.write_text("mine")
    bad = saved(work, "i.npy", np.ones((2, 4), np.int32))
    rc, err = kiln("run", work.model, "--shapes", PROFILE, "--input", f"x={bad}",
                   "--output-dir", work.out)
    assert_clean_failure(rc, err)
    assert sorted(os.listdir(work.out)) == ["keep.txt"] and keep.read_text() == "mine"
