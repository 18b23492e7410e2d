"""bench/ab.py: two kiln binaries, or one under two environments, in turns on the same models;
--layers adds each side's per-layer minimums and the layers that moved most."""

import json
import os
import re
import stat
import subprocess
import sys

from tools_helpers import KILN, MODELS, REPO

SCRIPT = os.path.join(REPO, "bench", "ab.py")


def ab(*argv, timeout=300):
    return subprocess.run([sys.executable, SCRIPT, *map(str, argv)], capture_output=True,
                          text=True, timeout=timeout)


def probe(tmp_path):
    """A stand-in for kiln that logs each call's AB_SIDE and verb, then runs the real kiln."""
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "kiln-probe"
    wrapper.write_text(f"#!/bin/sh\necho \"$AB_SIDE $1 $*\" >> {log}\nexec {KILN} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


def test_environments_reach_each_side_and_layers_are_the_plans(tmp_path):
    """One binary under two environments: every build and run of A sees A's settings and every
    one of B sees B's, in turns; the layer rows name the plan's layers with their minimums."""
    wrapper, log = probe(tmp_path)
    proc = ab("--a", wrapper, "--env-a", "AB_SIDE=a", "--env-b", "AB_SIDE=b KILN_CPU_CONV_PIXELS=0",
              "--only", "resnet_mini", "--rounds", 2, "--iterations", 3, "--warmup", 1,
              "--layers", 4)
    assert proc.returncode == 0, proc.stderr
    calls = [line.split()[:2] for line in log.read_text().splitlines()]
    assert calls[:2] == [["a", "build"], ["b", "build"]]
    # a round: one side timed and profiled, then the other; the first side alternates
    assert calls[2:] == [["a", "bench"], ["a", "bench"], ["b", "bench"], ["b", "bench"],
                         ["b", "bench"], ["b", "bench"], ["a", "bench"], ["a", "bench"]]
    profiled = [line for line in log.read_text().splitlines() if "--profile" in line]
    assert len(profiled) == 4
    row = re.search(r"^resnet_mini\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", proc.stdout, re.M)
    assert row, proc.stdout
    a, b, ratio = (float(g) for g in row.groups())
    assert a > 0 and b > 0 and abs(ratio - a / b) < 0.01 + 0.01 * ratio
    # "B ahead": the rounds whose B median is below that round's A median
    line = next(l for l in proc.stdout.splitlines() if l.startswith("resnet_mini "))
    ahead, rounds = line.split()[7], line.split(None, 8)[8]
    ra, rb = ([float(x) for x in half.split()] for half in rounds.split("|"))
    assert len(ra) == len(rb) == 2
    k, n = (int(x) for x in ahead.split("/"))
    # the rounds print to 3 decimals: a tie there may be either way
    assert n == 2 and sum(y < x for x, y in zip(ra, rb)) <= k <= sum(
        y <= x for x, y in zip(ra, rb)), line
    sums = re.search(r"resnet_mini: sum of per-layer minimums over (\d+) layers, A ([\d.]+) ms, "
                     r"B ([\d.]+) ms", proc.stdout)
    assert sums, proc.stdout
    with open(os.path.join(MODELS, "manifest.json")) as f:
        entry = next(m for m in json.load(f)["models"] if m["name"] == "resnet_mini")
    plan = tmp_path / "r.plan"
    shapes = [arg for s in entry["shapes"] for arg in ("--shapes", s)]
    subprocess.run([KILN, "build", os.path.join(MODELS, entry["model"]), "-o", plan, *shapes],
                   check=True, capture_output=True)
    out = subprocess.run([KILN, "bench", plan, "--json", "--profile", "--iterations", "2",
                          "--warmup", "1"], check=True, capture_output=True, text=True).stdout
    names = {layer["name"] for layer in json.loads(out)["layers"]}
    assert int(sums.group(1)) == len(names)
    rows = re.findall(r"^\s+([\d.]+)\s+([\d.]+)\s+([-+][\d.]+)\s+(\S+)$", proc.stdout, re.M)
    assert 4 <= len(rows) <= 8, proc.stdout
    for a_ms, b_ms, delta, name in rows:
        assert name in names
        assert abs(float(b_ms) - float(a_ms) - float(delta)) < 2e-4
    # the most-moved-down rows first (ascending deltas), then the most-moved-up (descending)
    deltas = [float(r[2]) for r in rows]
    assert deltas[:4] == sorted(deltas[:4])


def test_batch_builds_a_copy_with_n_images(tmp_path):
    """--batch N: each side builds a copy of the model whose inputs and outputs lead with N, with
    the bundled model's --shapes given N too, and both sides run it."""
    import onnx

    log = tmp_path / "calls.log"
    wrapper = tmp_path / "kiln-copy"
    # keep each build's model and log its --shapes
    wrapper.write_text("#!/bin/sh\nif [ \"$1\" = build ]; then cp \"$2\" "
                       f"{tmp_path}/built-$AB_SIDE.onnx; echo \"$*\" >> {log}; fi\n"
                       f"exec {KILN} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    proc = ab("--a", wrapper, "--env-a", "AB_SIDE=a", "--env-b", "AB_SIDE=b", "--only",
              "resnet_mini", "--batch", 3, "--rounds", 1, "--iterations", 2, "--warmup", 1)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^resnet_mini\s+[\d.]+\s+[\d.]+", proc.stdout, re.M), proc.stdout
    for side in ("a", "b"):
        model = onnx.load(str(tmp_path / f"built-{side}.onnx"))
        for v in list(model.graph.input) + list(model.graph.output):
            if v.name in {t.name for t in model.graph.initializer}:
                continue
            assert v.type.tensor_type.shape.dim[0].dim_value == 3, v
    builds = log.read_text().splitlines()
    assert len(builds) == 2
    for line in builds:
        assert "--shapes input:3x3x32x32,3x3x64x64,3x3x96x96" in line, line


def test_bad_input_is_one_line_and_exit_1(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x0a\xff\xff\xff")
    cases = [(["--a", KILN], "nothing to compare"),
             (["--a", KILN, "--env-b", "NOEQUALS"], "is not NAME=VALUE"),
             (["--a", tmp_path / "no-kiln", "--env-b", "X=1"], "not an executable kiln binary"),
             (["--a", KILN, "--env-b", "X=1", "--model", tmp_path / "missing.onnx"],
              "no such file"),
             (["--a", KILN, "--env-b", "X=1", "--model", junk, "--rounds", 1],
              "junk: A's kiln build failed"),
             (["--a", KILN, "--env-b", "X=1", "--batch", 0], "--batch: 0")]
    for argv, words in cases:
        proc = ab(*argv, timeout=120)
        assert proc.returncode == 1, (argv, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
