"""bench/bf16_floor.py: the error of a model whose products see bf16-rounded operands (and
nothing else rounded), against the manifest's float32 references."""

import json
import os
import subprocess
import sys

from tools_helpers import REPO

SCRIPT = os.path.join(REPO, "bench", "bf16_floor.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120)


def test_floor_rounds_the_products(tmp_path):
    out = tmp_path / "floor.json"
    r = run("--models", "vgg_mini,resnet_mini,mobilenetv2_mini", "--json-out", str(out))
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    cases = {(x["model"], x["case"]) for x in rows}
    assert cases == {("vgg_mini", "case0_1x3x32x32"), ("vgg_mini", "case1_5x3x32x32"),
                     ("resnet_mini", "case0_1x3x64x64"), ("resnet_mini", "case1_3x3x48x80")}
    # float32 alone matches the references to ~1e-6; bf16's 8-bit significand shows (2^-9 per
    # rounding), yet the logits stay recognisable
    for x in rows:
        assert 1e-4 < x["floor"] < 0.2, x
    # resnet_mini's floor is above the 1e-2 some would ask of bf16
    assert max(x["floor"] for x in rows if x["model"] == "resnet_mini") > 1e-2
    assert "mobilenetv2_mini: opset 11 has no bfloat16 Cast; skipped" in r.stdout


def test_unknown_model_fails():
    r = run("--models", "no_such_model")
    assert r.returncode == 2
    assert "no model named no_such_model" in r.stderr
