#!/usr/bin/env python3
"""Tactic selection by timing on a GPU machine (part of `make test-gpu`).

For each model of tests/models with convolutions, and transformer_encoder for the products
(MatMul and Gemm: cuBLASLt's algorithms), at fp32 and fp16:

- a cold build (`kiln build --backend cuda,cpu --timing-cache FILE --verbose`) times its
  convolutions and products (the verbose summary must report layers timed; for
  transformer_encoder the per-layer lines must name products, and the cache must hold their
  `cuda gemm` entries) and records a kiln_tactic in the plan; the plan runs against the CPU's
  float32 plan at every manifest case and at the profile's min, opt and max shapes (the tactic
  is used at opt, the heuristic elsewhere), each three times in one context (warm-up,
  stream-graph recording, replay): fp32 within rtol 1e-4, atol 1e-5, fp16 within 1e-2 of the
  output's largest magnitude (tests/cuda/diff_backends.py's bars);
- a rebuild with the warm cache times nothing and writes a byte-identical plan;
- a corrupt cache gives one warning line and a successful build that times again and rewrites
  the cache;
- without a cache (`--tactics auto`, the default) and with `--tactics heuristic` nothing is
  timed and the plan holds no tactic; `--tactics timed` without a cache times as the cold build
  did.

Exits non-zero on any failure. Needs a GPU.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

from diff_backends import compare, compare_reduced, profile_feeds, shape_args  # noqa: E402

MODELS = ("resnet_mini", "mobilenetv2_mini", "efficientnet_mini", "transformer_encoder")
# Models whose products must be timed (on CUDA; testdev times convolutions only).
PRODUCT_MODELS = ("transformer_encoder",)
PRODUCTS = ("Gemm", "MatMul", "FusedGemm", "FusedMatMul")
os.environ.pop("KILN_CUDA_TUNE", None)  # the default: timed with a cache (docs/cuda.md)


def build(kiln, model, base, plan, precision, cache, backend, extra=()):
    cmd = [kiln, "build", os.path.join(base, model["model"]), "-o", plan, "--backend", backend,
           "--verbose", *extra] + shape_args(model)
    if precision != "fp32":
        cmd += ["--precision", precision]
    if cache:
        cmd += ["--timing-cache", cache]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600,
                       stdin=subprocess.DEVNULL)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise RuntimeError(f"kiln build failed: {err.strip().splitlines()[-1:]}")
    timed = None
    for line in err.splitlines():
        if line.startswith("kiln: tuned "):  # kiln: tuned N layers: T timed, ...
            timed = int(line.split(":")[2].split()[0])
    return timed, err


def products_timed(err):
    """How many products the build's per-layer lines (kiln: timed OP 'name': ...) report."""
    return sum(1 for ln in err.splitlines()
               if ln.startswith("kiln: timed ") and ln.split()[2] in PRODUCTS)


def check_runs(kpy, plan, ref_ctx, model, base, precision):
    """Worst error as a fraction of the tolerance over every case and profile shape."""
    rng = np.random.default_rng(0)
    feeds = [(c["name"], {k: np.load(os.path.join(base, v)) for k, v in c["inputs"].items()})
             for c in model["cases"]]
    feeds += profile_feeds(model, base, rng)
    ctx = kpy.Engine(plan).context()
    worst = 0.0
    for label, f in feeds:
        want = ref_ctx.run(f)
        for i in range(3):
            got = ctx.run(f)
            for name, ref in want.items():
                if precision == "fp32":
                    why, w = compare(ref, got[name])
                else:
                    why, w = compare_reduced(ref, got[name], precision, set())
                worst = max(worst, w)
                if why:
                    raise AssertionError(f"{label} run {i} {name}: {why}")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", nargs="*", help=f"default: {' '.join(MODELS)} (without the "
                    "products' models on testdev, which tunes convolutions only)")
    ap.add_argument("--precision", nargs="*", default=["fp32", "fp16"])
    ap.add_argument("--device", default="cuda", help="the backend tuned (testdev checks this "
                    "script without a GPU)")
    args = ap.parse_args()
    dev = f"{args.device},cpu"
    import kiln as kpy

    base = os.path.join(REPO, "tests", "models")
    with open(os.path.join(base, "manifest.json")) as f:
        manifest = {m["name"]: m for m in json.load(f)["models"]}
    models = args.models or [m for m in MODELS
                             if args.device == "cuda" or m not in PRODUCT_MODELS]
    failures = 0
    for name in models:
        model = manifest[name]
        with tempfile.TemporaryDirectory() as tmp:
            cpu_plan = os.path.join(tmp, "cpu.plan")
            build(args.kiln, model, base, cpu_plan, "fp32", None, "cpu")
            ref_ctx = kpy.Engine(cpu_plan).context()
            for prec in args.precision:
                cache = os.path.join(tmp, f"{prec}.cache")
                a, b = os.path.join(tmp, f"{prec}_a.plan"), os.path.join(tmp, f"{prec}_b.plan")
                try:
                    timed, err = build(args.kiln, model, base, a, prec, cache, dev)
                    assert timed and timed > 0, f"cold build timed {timed} layers"
                    products = products_timed(err)
                    with open(a, "rb") as f:
                        assert b"kiln_tactic" in f.read(), "no tactic in the plan"
                    with open(cache) as f:
                        assert f.readline() == "kiln-timing-cache 1\n", "cache header"
                        gemm_entries = sum(1 for ln in f if ln.startswith("cuda gemm "))
                    if name in PRODUCT_MODELS and args.device == "cuda":
                        assert products > 0, "no product timed"
                        assert gemm_entries > 0, "no product in the timing cache"
                    worst = check_runs(kpy, a, ref_ctx, model, base, prec)
                    timed2, _ = build(args.kiln, model, base, b, prec, cache, dev)
                    assert timed2 == 0, f"warm build timed {timed2} layers"
                    with open(a, "rb") as fa, open(b, "rb") as fb:
                        assert fa.read() == fb.read(), "warm-cache plan differs"
                    with open(cache, "w") as f:
                        f.write("kiln-timing-cache 1\nbroken line\n")
                    timed3, err = build(args.kiln, model, base, b, prec, cache, dev)
                    warns = [ln for ln in err.splitlines() if "warning: timing cache" in ln]
                    assert len(warns) == 1, f"corrupt cache: {len(warns)} warnings"
                    assert timed3 == timed, f"corrupt cache: timed {timed3}, not {timed}"
                    with open(cache) as f:
                        assert f.readline() == "kiln-timing-cache 1\n", "cache not rewritten"
                    for extra, cached in (((), None), (("--tactics", "heuristic"), cache)):
                        t, _ = build(args.kiln, model, base, b, prec, cached, dev, extra)
                        with open(b, "rb") as f:
                            assert t is None and b"kiln_tactic" not in f.read(), \
                                f"{' '.join(extra) or 'no cache'}: timed {t} layers"
                    t, _ = build(args.kiln, model, base, b, prec, None, dev, ("--tactics", "timed"))
                    assert t == timed, f"--tactics timed: timed {t}, not {timed}"
                    print(f"tactics {name:20s} {prec}: passed, {timed} layers timed "
                          f"({products} products), worst {worst:.3f}x tol, warm rebuild "
                          f"identical", flush=True)
                except (AssertionError, RuntimeError) as e:
                    failures += 1
                    print(f"tactics {name:20s} {prec}: FAILED {e}", flush=True)
    print(f"tactics: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
