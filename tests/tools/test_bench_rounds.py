"""bench/bench.py's paired rounds: each round's ORT / kiln from its two turns, the count of
rounds kiln was faster in, and their range, in the table and the JSON."""

import json
import os
import subprocess
import sys

from tools_helpers import KILN, MODELS, REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench  # noqa: E402


def turns(*medians):
    return [{"median": m} for m in medians]


def test_ratios_pair_each_round():
    kiln = turns(10.0, 20.0, 8.0)
    ort = turns(11.0, 18.0, 8.8)
    assert bench.paired_ratios(kiln, ort) == [1.1, 0.9, 1.1]


def test_cell_counts_rounds_ahead_and_gives_the_range():
    assert bench.rounds_cell({"paired": [1.1, 0.9, 1.2, 1.0]}) == "2/4 (0.90-1.20)"
    assert bench.rounds_cell({"paired": [0.8]}) == "0/1 (0.80-0.80)"


def test_runs_saved_without_rounds_still_render():
    row = {"model": "m", "threads": 1, "kiln_ms": 2.0, "ort_ms": 3.0, "speedup": 1.5,
           "kiln_p90": 2.1, "ort_p90": 3.1, "build_s": 0.1, "max_rel_diff": 1e-6}
    line = bench.table([row]).splitlines()[2]
    assert line.split("|")[6].strip() == "-"
    assert line.split("|")[5].strip() == "1.50×"


def test_a_real_run_keeps_one_ratio_a_round(tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "bench.py"), "--kiln", KILN, "--model",
         os.path.join(MODELS, "resnet_mini", "model.onnx"), "--threads", "1", "--rounds", "3",
         "--iterations", "3", "--warmup", "1", "--warmup-seconds", "0", "--json-out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(out.read_text())["rows"][0]
    assert len(row["paired"]) == 3 and all(x > 0 for x in row["paired"])
    # the table's cell is the JSON's rounds: their count above 1 and their range
    ahead = sum(1 for x in row["paired"] if x > 1.0)
    cell = [c.strip() for c in proc.stdout.splitlines()[2].split("|")][6]
    assert cell.startswith(f"{ahead}/3 (")
    assert cell == bench.rounds_cell(row)
