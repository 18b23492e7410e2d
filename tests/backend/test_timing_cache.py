"""`kiln build --timing-cache FILE` and Python's timing_cache=, without a GPU.

On a CPU-only build for one thread nothing is tuned: the file is neither read nor written (a
missing one is not created, a garbage one is left byte for byte). For more threads the build
times each host layer on fewer of them and keeps the counts in the cache ("cpu threads"
entries), so a rebuild with it times nothing, takes the counts from the file and writes a
byte-identical plan; on a machine too busy to give the build its threads' CPU time, layers keep
all threads, untimed and uncached, with one warning. testdev (tests/testdev/testdev.c) tunes its convolutions
deterministically, and as on CUDA a build times them when it has a timing cache or --tactics
timed (never with --tactics heuristic), so with it the cache is written after a cold build, a
rebuild with it tunes nothing and writes a byte-identical plan, and a corrupt or foreign cache
gives one warning line, a successful build and a rewritten cache. The testdev builds run for one thread, so their
caches hold testdev's tactics only.
"""

import json
import os
import sys

import numpy as np
import pytest

from test_testdev import BUILD, MANIFEST, MODELS, kiln, shape_args

RESNET = next(m for m in MANIFEST if m["name"] == "resnet_mini")
ONNX = os.path.join(MODELS, RESNET["model"])
HEADER = "kiln-timing-cache 1\n"


# Every timing counts, however busy the machine: the reproducibility checks below must not
# depend on what else CI runs (test_busy_machine_keeps_all_threads covers the default).
ANY_SHARE = {"KILN_CPU_THREAD_TUNE_MIN_SHARE": "0"}


def build(plan, *extra, threads=1, env_extra=None):
    return kiln("build", ONNX, "-o", str(plan), *shape_args(RESNET), "--threads", str(threads),
                *extra, env_extra=dict(ANY_SHARE, **(env_extra or {})))


def tuned_line(err):
    """(timed, from file) of the verbose summary line."""
    line = next(ln for ln in err.splitlines() if ln.startswith("kiln: tuned "))
    parts = line.split(": ", 2)[2].split(", ")
    return int(parts[0].split()[0]), int(parts[1].split()[0])


def threads_line(err):
    """(timed, from file, on fewer) of the verbose thread-count line."""
    line = next(ln for ln in err.splitlines() if ln.startswith("kiln: threads: "))
    nums = [int(w) for w in line.replace(";", ",").split() if w.isdigit()]
    return nums[0], nums[2], nums[4]


def layer_threads(plan):
    info = json.loads(kiln("inspect", str(plan), "--json")[1])
    return {ly["name"]: ly.get("threads") for ly in info["layers"]}


def test_cpu_build_leaves_the_cache_alone(tmp_path):
    cache = tmp_path / "cache.txt"
    build(tmp_path / "a.plan", "--timing-cache", str(cache))
    assert not cache.exists(), "a CPU build created the timing cache"
    cache.write_bytes(b"\x00garbage\xff")
    _, _, err = build(tmp_path / "b.plan", "--timing-cache", str(cache), "--verbose")
    assert cache.read_bytes() == b"\x00garbage\xff"
    assert "timing cache" not in err  # not read: nothing to tune
    assert (tmp_path / "a.plan").read_bytes() == (tmp_path / "b.plan").read_bytes()
    # more threads, but thread counts turned off
    build(tmp_path / "c.plan", "--timing-cache", str(cache), threads=2,
          env_extra={"KILN_CPU_THREAD_TUNE": "0"})
    assert cache.read_bytes() == b"\x00garbage\xff"


def test_cpu_thread_counts_are_kept_in_the_cache(tmp_path):
    cache = tmp_path / "cache.txt"
    a, b, c = tmp_path / "a.plan", tmp_path / "b.plan", tmp_path / "c.plan"
    _, _, err = build(a, "--timing-cache", str(cache), "--verbose", threads=2)
    timed, from_file, fewer = threads_line(err)
    assert timed > 0 and from_file == 0
    text = cache.read_text()
    entries = text.splitlines()[1:]
    assert text.startswith(HEADER) and len(entries) == timed and entries == sorted(entries)
    assert all(e.startswith("cpu threads 1|") and "|2 threads|" in e for e in entries)
    counts = [int(e.split("\t")[1]) for e in entries]
    assert all(n in (0, 1) for n in counts) and sum(counts) == len(
        {e.split("|")[-1] for e in entries if e.endswith("\t1")})
    assert sum(1 for t in layer_threads(a).values() if t == 1) == fewer

    # warm: nothing timed, every count from the file, the same plan, the file untouched
    _, _, err = build(b, "--timing-cache", str(cache), "--verbose", threads=2)
    timed2, from_file2, fewer2 = threads_line(err)
    assert timed2 == 0 and from_file2 >= timed and fewer2 == fewer
    assert a.read_bytes() == b.read_bytes()
    assert cache.read_text() == text

    # the counts are the file's: every layer on one thread when the file says so
    cache.write_text(HEADER + "".join(e.rsplit("\t", 1)[0] + "\t1\n" for e in entries))
    _, _, err = build(c, "--timing-cache", str(cache), "--verbose", threads=2)
    timed3, from_file3, fewer3 = threads_line(err)
    assert timed3 == 0 and fewer3 == from_file3 == from_file2 > fewer
    assert sum(1 for t in layer_threads(c).values() if t == 1) == fewer3
    # and the plan with them runs, and gives the same outputs as without
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = []
    for plan in (a, c):
        folder = tmp_path / (plan.stem + "_out")
        kiln("run", str(plan), "--input", f"input={tmp_path / 'x.npy'}", "--output-dir",
             str(folder))
        outs.append(sorted(folder.glob("*.npy")))
    assert outs[0] and len(outs[0]) == len(outs[1])
    for p, q in zip(*outs):
        np.testing.assert_allclose(np.load(p), np.load(q), rtol=1e-5, atol=1e-5)


def test_flag_needs_a_value(tmp_path):
    rc, _, err = kiln("build", ONNX, "-o", str(tmp_path / "a.plan"), "--timing-cache",
                      check=False)
    assert rc != 0
    assert len(err.strip().splitlines()) == 1 and "--timing-cache" in err


def test_warm_cache_rebuild_is_identical_and_times_nothing(tmp_path):
    cache = tmp_path / "cache.txt"
    a, b = tmp_path / "a.plan", tmp_path / "b.plan"
    _, _, err = build(a, "--backend", "testdev,cpu", "--timing-cache", str(cache), "--verbose")
    timed, from_file = tuned_line(err)
    assert timed > 0 and from_file == 0
    assert "building: tuning 1/" in err  # the progress counter
    text = cache.read_text()
    assert text.startswith(HEADER)
    entries = text.splitlines()[1:]
    assert len(entries) == timed and entries == sorted(entries)
    assert all(e.startswith("testdev 1|") and "\t" in e for e in entries)
    assert b"kiln_tactic" in a.read_bytes()
    info = json.loads(kiln("inspect", str(a), "--json")[1])
    convs = [ly for ly in info["layers"] if ly["op"] in ("Conv", "FusedConv")]
    assert convs and all(len(ly.get("tactic", [])) == 3 for ly in convs)
    _, _, err = build(b, "--backend", "testdev,cpu", "--timing-cache", str(cache), "--verbose")
    timed2, from_file2 = tuned_line(err)
    assert timed2 == 0 and from_file2 >= timed  # repeated signatures count once per layer
    assert a.read_bytes() == b.read_bytes()
    assert cache.read_text() == text  # nothing new: not rewritten


@pytest.mark.parametrize("content", [
    b"", b"garbage\n", b"kiln-timing-cache 9\nk\t1\n", HEADER.encode() + b"key\t1 2",
    HEADER.encode() + b"key without tab\n", b"\x7fELF\x02\x01\x00\x00",
], ids=["empty", "garbage", "other-version", "truncated", "malformed", "binary"])
def test_corrupt_cache_warns_once_and_is_rewritten(tmp_path, content):
    cache = tmp_path / "cache.txt"
    ref = tmp_path / "ref.plan"
    build(ref, "--backend", "testdev,cpu", "--tactics", "timed")
    cache.write_bytes(content)
    _, _, err = build(tmp_path / "a.plan", "--backend", "testdev,cpu", "--timing-cache",
                      str(cache))
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "timing cache" in warnings[0] and str(cache) in warnings[0]
    assert cache.read_text().startswith(HEADER)
    # testdev's choices depend only on the layer, so the plan is the one timed without a cache
    assert (tmp_path / "a.plan").read_bytes() == ref.read_bytes()


def test_foreign_entries_are_kept_and_unused(tmp_path):
    cache = tmp_path / "cache.txt"
    foreign = "cuda conv 1|Some GPU sm_80|float32|x 1x3x8x8\t1 0 1 0 1 3 8 8\n"
    cache.write_text(HEADER + foreign)
    _, _, err = build(tmp_path / "a.plan", "--backend", "testdev,cpu", "--timing-cache",
                      str(cache), "--verbose")
    timed, from_file = tuned_line(err)
    assert timed > 0 and from_file == 0
    assert foreign in cache.read_text()


def test_tactics_choice(tmp_path):
    """--tactics auto (the default) times a device backend's layers only when the build has a
    timing cache; timed times them without one (the plan the cached build writes), heuristic
    never (a cache given is neither read nor created)."""
    dev = ("--backend", "testdev,cpu", "--verbose")
    plans = {n: tmp_path / f"{n}.plan" for n in ("auto", "auto2", "timed", "cached", "heur")}
    _, _, err = build(plans["auto"], *dev)
    assert "kiln: tuned" not in err
    assert b"kiln_tactic" not in plans["auto"].read_bytes()
    build(plans["auto2"], *dev, "--tactics", "auto")
    assert plans["auto2"].read_bytes() == plans["auto"].read_bytes()
    _, _, err = build(plans["timed"], *dev, "--tactics", "timed")
    timed, from_file = tuned_line(err)
    assert timed > 0 and from_file == 0
    assert b"kiln_tactic" in plans["timed"].read_bytes()
    build(plans["cached"], *dev, "--timing-cache", str(tmp_path / "cache.txt"))
    assert plans["cached"].read_bytes() == plans["timed"].read_bytes()
    unused = tmp_path / "unused.txt"
    _, _, err = build(plans["heur"], *dev, "--tactics", "heuristic", "--timing-cache", str(unused))
    assert "kiln: tuned" not in err and not unused.exists()
    assert plans["heur"].read_bytes() == plans["auto"].read_bytes()


@pytest.mark.parametrize("args", [("--tactics", "fastest"), ("--tactics",)],
                         ids=["unknown", "no-value"])
def test_tactics_flag_errors(tmp_path, args):
    plan = tmp_path / "a.plan"
    rc, _, err = kiln("build", ONNX, "-o", str(plan), *args, check=False)
    assert rc != 0 and not plan.exists()
    assert len(err.strip().splitlines()) == 1 and "--tactics" in err


def test_python_timing_cache(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python"))
    os.environ.setdefault("KILN_LIBRARY", os.path.join(BUILD, "lib", "libkiln.so"))
    import kiln as kpy

    cache = tmp_path / "py.cache"
    shapes = {"input": ((1, 3, 32, 32), (2, 3, 64, 64), (4, 3, 96, 96))}
    a = kpy.build(ONNX, shapes=shapes, backends="testdev,cpu", timing_cache=cache)
    assert cache.read_text().startswith(HEADER)
    b = kpy.build(ONNX, shapes=shapes, backends="testdev,cpu", timing_cache=str(cache))
    assert a == b


def test_busy_machine_keeps_all_threads(tmp_path):
    """Other processes on every core: no layer goes to fewer threads on a whole-pool timing
    that got under 80 % of its threads' CPU time (a descheduled thread makes the pool look
    slow); such layers keep all threads, stay out of the cache (a later build times them
    again) and the build says so once. Every layer timed is logged with its share and choice.
    On an idle machine the same build warns of nothing."""
    import multiprocessing
    import time

    def spin(stop):
        while time.time() < stop:
            pass

    cpus = os.cpu_count() or 2
    stop = time.time() + 60
    procs = [multiprocessing.Process(target=spin, args=(stop,), daemon=True)
             for _ in range(min(2 * cpus, 64))]
    for p in procs:
        p.start()
    try:
        time.sleep(0.3)
        cache = tmp_path / "cache.txt"
        _, _, err = kiln("build", ONNX, "-o", str(tmp_path / "a.plan"), *shape_args(RESNET),
                         "--threads", "2", "--timing-cache", str(cache), "--verbose")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
    timed, _, _ = threads_line(err)
    lines = [ln for ln in err.splitlines() if ln.startswith("kiln: thread timing: ")]
    assert len(lines) == timed + sum("not kept" in ln for ln in lines), err
    for ln in lines:
        share = float(ln.split(" with ")[1].split()[0])
        chosen = int(ln.split("; ")[1].split()[0])
        assert chosen == 2 or share >= 0.8, ln  # fewer threads only from a fair timing
        if "not kept" in ln:
            assert chosen == 2 and share < 0.8, ln
    kept_out = sum("not kept" in ln for ln in lines)
    warnings = [ln for ln in err.splitlines() if "threads' CPU time" in ln]
    assert len(warnings) == (1 if kept_out else 0), err
    if kept_out:
        assert int(warnings[0].split("threads: ", 1)[1].split()[0]) == kept_out
    entries = cache.read_text().splitlines()[1:] if cache.exists() else []
    assert len(entries) == timed
    _, _, err = build(tmp_path / "b.plan", "--timing-cache", str(tmp_path / "c2.txt"),
                      "--verbose", threads=2)
    assert "threads' CPU time" not in err


def test_python_tactics(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python"))
    os.environ.setdefault("KILN_LIBRARY", os.path.join(BUILD, "lib", "libkiln.so"))
    import kiln as kpy

    shapes = {"input": ((1, 3, 32, 32), (2, 3, 64, 64), (4, 3, 96, 96))}
    auto = kpy.build(ONNX, shapes=shapes, backends="testdev,cpu")
    timed = kpy.build(ONNX, shapes=shapes, backends="testdev,cpu", tactics="timed")
    assert b"kiln_tactic" not in auto and b"kiln_tactic" in timed
    unused = tmp_path / "unused.txt"
    heur = kpy.build(ONNX, shapes=shapes, backends="testdev,cpu", tactics="heuristic",
                     timing_cache=unused)
    assert heur == auto and not unused.exists()
    with pytest.raises(kpy.KilnError, match="tactics='fastest'"):
        kpy.build(ONNX, shapes=shapes, backends="testdev,cpu", tactics="fastest")
