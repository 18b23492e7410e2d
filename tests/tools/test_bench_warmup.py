"""bench/bench.py's warm-up a turn: --warmup runs, or as many as last --warmup-seconds by one
warm run's time (both engines get the count), capped; 0 seconds keeps --warmup as given."""

import argparse
import os
import sys
import time

from tools_helpers import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench  # noqa: E402


class Session:
    """Stands in for an onnxruntime session whose every run takes `ms`."""

    def __init__(self, ms):
        self.ms, self.calls = ms, 0

    def run(self, outputs, feeds):
        self.calls += 1
        if self.ms:
            time.sleep(self.ms / 1000.0)


def warmup(ms, runs, seconds):
    sess = Session(ms)
    n = bench.warmup_runs(sess, {}, argparse.Namespace(warmup=runs, warmup_seconds=seconds))
    return n, sess.calls


def test_runs_fill_the_seconds():
    n, calls = warmup(10, 5, 0.2)
    assert 12 <= n <= 20, n  # 0.2 s of 10 ms runs (a sleep may oversleep)
    assert calls == 2  # one to warm up, one timed


def test_runs_never_below_warmup():
    assert warmup(10, 30, 0.05)[0] == 30


def test_zero_seconds_keeps_warmup_and_runs_nothing():
    assert warmup(10, 7, 0.0) == (7, 0)


def test_fast_models_are_capped():
    assert warmup(0, 5, 10.0)[0] == 2000
