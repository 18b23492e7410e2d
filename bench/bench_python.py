#!/usr/bin/env python3
"""kiln's Python API against onnxruntime's, on one model, in one process.

What a Python user sees: `Context.run(feeds)` against `InferenceSession.run(None, feeds)`,
each returning new numpy arrays, timed with time.perf_counter() around each call (binding,
execution and the outputs' arrays included). The two alternate round by round on the same
input; each round reports its median, and the table gives the median and the best of the
rounds' medians, and onnxruntime / kiln (> 1: kiln is faster).

    PYTHONPATH=python KILN_LIBRARY=build/lib/libkiln.so \\
        python3 bench/bench_python.py --model model.onnx --threads 1 --rounds 5
"""

import argparse
import os
import statistics
import time

import numpy as np
import onnxruntime as ort

import kiln


def _feeds(sess, batch, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in i.shape]
        if "float" in i.type:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64)
    return feeds


def _median_ms(fn, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="an .onnx file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1, help="size of each input's dynamic dims")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=200, help="timed calls a round")
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        ap.error(f"no model file {args.model}")

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    feeds = _feeds(sess, args.batch)
    shapes = {k: v.shape for k, v in feeds.items()}
    ctx = kiln.Engine(kiln.build(args.model, shapes=shapes)).context(threads=args.threads)

    want = sess.run(None, feeds)
    got = ctx.run(feeds)
    worst = max(float(np.max(np.abs(got[o.name] - w)) / (np.max(np.abs(w)) or 1.0))
                for o, w in zip(sess.get_outputs(), want))

    def run_kiln():
        return ctx.run(feeds)

    def run_ort():
        return sess.run(None, feeds)

    for fn in (run_kiln, run_ort):
        for _ in range(args.warmup):
            fn()
    k_ms, o_ms = [], []
    for _ in range(args.rounds):
        k_ms.append(_median_ms(run_kiln, args.runs))
        o_ms.append(_median_ms(run_ort, args.runs))
    km, om = statistics.median(k_ms), statistics.median(o_ms)
    print(f"model {args.model}, {args.threads} thread(s), batch {args.batch}, {args.rounds} "
          f"rounds x {args.runs} calls; largest difference {worst:.2e} of the output's max")
    print("| | kiln ms | onnxruntime ms | onnxruntime / kiln |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| median of rounds | {km:.4f} | {om:.4f} | {om / km:.2f} |")
    print(f"| best round | {min(k_ms):.4f} | {min(o_ms):.4f} | {min(o_ms) / min(k_ms):.2f} |")


if __name__ == "__main__":
    main()
