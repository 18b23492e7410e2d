"""bench/mobilenet_blocks.py: MobileNetV2's blocks and depthwise convs, valid models whose kiln
run matches onnxruntime's, each layer matched to onnxruntime's nodes by bench/layer_compare.py."""

import os
import re
import subprocess
import sys

import numpy as np

from tools_helpers import REPO, check_full, kiln, run_ort

SCRIPT = os.path.join(REPO, "bench", "mobilenet_blocks.py")


def test_blocks_run_as_onnxruntime_runs_them(tmp_path):
    p = subprocess.run([sys.executable, SCRIPT, tmp_path], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    names = sorted(f for f in os.listdir(tmp_path) if f.endswith(".onnx"))
    assert names == sorted(f"{kind}{c}_{hw}_b{b}.onnx" for kind in ("blk", "dw")
                           for c, hw in ((960, 7), (576, 14)) for b in (1, 8))
    rng = np.random.default_rng(1)
    for name in ("blk576_14_b8.onnx", "dw960_7_b1.onnx"):
        path = str(tmp_path / name)
        check_full(path)
        c = {"blk576_14_b8.onnx": (8, 96, 14), "dw960_7_b1.onnx": (1, 960, 7)}[name]
        x = rng.standard_normal((c[0], c[1], c[2], c[2])).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        out = tmp_path / ("out_" + name[:-5])
        kiln("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", out,
             "--threads", 2)
        got = np.load(out / "y.npy")
        want = run_ort(path, {"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_layer_compare_names_each_block_layer(tmp_path):
    subprocess.run([sys.executable, SCRIPT, tmp_path], check=True, capture_output=True,
                   timeout=120)
    from tools_helpers import KILN
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "layer_compare.py"),
                        tmp_path / "blk960_7_b1.onnx", "--kiln", KILN, "--threads", "1",
                        "--rounds", "1", "--iterations", "3"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\s+[\d.]+\s+[\d.na]+\s+[-\d.na]+\s+(\w+) \(.*\) <- (.*)$", p.stdout,
                        re.M)}
    assert set(rows) == {"expand", "dw", "project"}, p.stdout
    assert all(v != "-" for v in rows.values()), p.stdout
