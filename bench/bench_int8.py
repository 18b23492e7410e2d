#!/usr/bin/env python3
"""int8 on the CPU: kiln running a QDQ model (quantized by onnxruntime.quantization.quantize_static,
per-channel int8 weights, uint8 activations) and kiln's own int8 of the float32 model
(kiln build --int8 --calibration, over the same calibration inputs) against onnxruntime fp32
and onnxruntime on the QDQ model, batch 1, side by side in one run (engines alternate, medians
over --rounds), with the accuracy of each int8 engine against onnxruntime fp32: top-1
agreement over --samples random inputs and the mean cosine similarity of the outputs. The
bench models have random weights and the inputs are random, so top-1 agreement only says how
often int8 keeps the float model's largest output (logits of random weights are close
together: a hard case); cosine similarity is the better measure here.

    python3 bench/bench_int8.py                          # ResNet-50 and the transformer encoder,
                                                         # 1 and 2 threads
    python3 bench/bench_int8.py --threads 1,2,16 --models resnet50 --method minmax

Models come from bench.py's cache (bench/models/, exported from torchvision when torch is
there, else built with onnx.helper); the QDQ copies are cached beside them.
"""

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402


class Reader:
    def __init__(self, name, shape, n):
        rng = np.random.default_rng(7)
        self.data = iter([{name: rng.standard_normal(shape).astype(np.float32)}
                          for _ in range(n)])

    def get_next(self):
        return next(self.data, None)

    def rewind(self):
        pass


def quantized(path, name, shape, n_calib):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out = path.replace(".onnx", ".qdq.onnx")
    if not os.path.exists(out):
        pre = path.replace(".onnx", ".pre.onnx")
        # The quantizer leaves temporary files in the working directory.
        here = os.getcwd()
        os.chdir(os.path.dirname(path))
        try:
            quant_pre_process(path, pre, skip_symbolic_shape=True)
            quantize_static(pre, out, Reader(name, shape, n_calib),
                            quant_format=QuantFormat.QDQ, per_channel=True,
                            weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
        finally:
            os.chdir(here)
    return out


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,transformer")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--samples", type=int, default=8, help="inputs for the accuracy check")
    ap.add_argument("--calibration", type=int, default=8,
                    help="inputs for quantize_static and kiln's calibration")
    ap.add_argument("--method", default="entropy", choices=("entropy", "minmax"),
                    help="kiln's calibration method")
    ap.add_argument("--kiln", default=bench.default_kiln())
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            fp32, _ = bench.ensure_full_model(name, "auto")
            _, files, specs = bench.make_inputs(fp32, work)
            inp = onnx.load(fp32, load_external_data=False).graph.input[0]
            shape = list(np.load(files[inp.name]).shape)
            qdq = quantized(fp32, inp.name, shape, args.calibration)
            feeds = {inp.name: np.load(files[inp.name])}
            # kiln's calibration reads the inputs quantize_static saw, one .npy a sample.
            calib = os.path.join(work, f"{name}.calibration")
            os.makedirs(calib)
            for i, sample in enumerate(Reader(inp.name, shape, args.calibration).data):
                np.save(os.path.join(calib, f"{i:03d}.npy"), sample[inp.name])
            cache = os.path.join(work, f"{name}.scales")

            def kiln_int8(plan, t):
                shapes = [a for spec in specs for a in ("--shapes", spec)]
                bench.kiln_cmd(args.kiln, "build", fp32, "-o", plan, "--quiet", "--threads", t,
                               *shapes, "--int8", "--calibration", calib,
                               "--calibration-method", args.method, "--calibration-cache", cache)

            # Accuracy against onnxruntime fp32 over several inputs.
            ref = bench.ort_session(fp32, 2)
            oq = bench.ort_session(qdq, 2)
            plan = os.path.join(work, f"{name}.int8.plan")
            bench.kiln_build(args.kiln, qdq, plan, max(threads), specs)
            cplan = os.path.join(work, f"{name}.calibrated.plan")
            kiln_int8(cplan, max(threads))
            rng = np.random.default_rng(11)
            tags = ("kiln", "kiln cal", "ort")
            agree = {t: 0 for t in tags}
            cos = {t: [] for t in tags}
            for s in range(args.samples):
                x = rng.standard_normal(shape).astype(np.float32)
                path = os.path.join(work, f"s{s}.npy")
                np.save(path, x)
                r = ref.run(None, {inp.name: x})[0]
                k = list(bench.kiln_outputs(args.kiln, plan, {inp.name: path}, work).values())[0]
                kc = list(bench.kiln_outputs(args.kiln, cplan, {inp.name: path},
                                             work).values())[0]
                o = oq.run(None, {inp.name: x})[0]
                for tag, y in (("kiln", k), ("kiln cal", kc), ("ort", o)):
                    cos[tag].append(cosine(y, r))
                    agree[tag] += int(np.argmax(y.reshape(y.shape[0], -1)[0]) ==
                                      np.argmax(r.reshape(r.shape[0], -1)[0]))
            del ref, oq  # their workers must not spin through the timed rounds
            for t in threads:
                fplan = os.path.join(work, f"{name}.fp32.{t}.plan")
                bench.kiln_build(args.kiln, fp32, fplan, t, specs)
                qplan = os.path.join(work, f"{name}.int8.{t}.plan")
                bench.kiln_build(args.kiln, qdq, qplan, t, specs)
                cplan = os.path.join(work, f"{name}.calibrated.{t}.plan")
                kiln_int8(cplan, t)  # from the cache: no calibration runs
                lat = {"ort fp32": [], "ort int8": [], "kiln fp32": [], "kiln int8": [],
                       "kiln cal": []}
                for _ in range(args.rounds):
                    lat["ort fp32"].append(
                        bench.ort_turn(fp32, t, feeds, args.warmup, args.iterations)["median"])
                    lat["ort int8"].append(
                        bench.ort_turn(qdq, t, feeds, args.warmup, args.iterations)["median"])
                    for key, p in (("kiln fp32", fplan), ("kiln int8", qplan),
                                   ("kiln cal", cplan)):
                        lat[key].append(bench.kiln_bench(
                            args.kiln, p, files, t, args.warmup, args.iterations)["median"])
                med = {k: statistics.median(v) for k, v in lat.items()}
                rows.append((name, t, med, agree, cos, args.samples))
    print(f"kiln cal: kiln build --int8 --calibration-method {args.method} on the float32 "
          f"model, {args.calibration} calibration inputs; kiln int8 / ORT int8: the QDQ model")
    print()
    print("| model | threads | ORT fp32 ms | ORT int8 ms | kiln fp32 ms | kiln int8 ms | "
          "kiln cal ms | ORT fp32 / kiln cal | kiln fp32 / kiln cal | ORT fp32 / kiln int8 | "
          "top-1 agree kiln cal / kiln int8 / ORT int8 | cosine kiln cal / kiln int8 / ORT int8 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, t, m, agree, cos, n in rows:
        print(f"| {name} | {t} | {m['ort fp32']:.2f} | {m['ort int8']:.2f} | "
              f"{m['kiln fp32']:.2f} | {m['kiln int8']:.2f} | {m['kiln cal']:.2f} | "
              f"{m['ort fp32'] / m['kiln cal']:.2f} | {m['kiln fp32'] / m['kiln cal']:.2f} | "
              f"{m['ort fp32'] / m['kiln int8']:.2f} | "
              f"{agree['kiln cal']}/{n} / {agree['kiln']}/{n} / {agree['ort']}/{n} | "
              f"{statistics.fmean(cos['kiln cal']):.4f} / {statistics.fmean(cos['kiln']):.4f} / "
              f"{statistics.fmean(cos['ort']):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
