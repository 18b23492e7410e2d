#!/usr/bin/env python3
"""Run kiln's CUDA backend against its CPU backend on a GPU machine.

Models: every case of tests/models/manifest.json runs through `kiln run --backend cpu` and
`kiln run --backend cuda` (from .onnx, at the manifest's profile), and each output must agree
within rtol 1e-4, atol 1e-5 (float32; integers and bools exactly). `kiln inspect --json
--backend cuda` records which nodes ran on the GPU and why the others stayed on the host.

Replays (--replays): each model's plan (`kiln build --backend cuda,cpu`) runs in one context,
through kiln's Python API, every case three times in a row and then the first case again: the
first run at a shape is the warm-up, the second records stream graphs, the third replays them,
and the return to the first shape records anew. Every run must agree with the CPU as above.
(`kiln run` executes once, so the model pass above never replays a graph.)

Node tests (--node-tests): onnx's backend node tests run through tests/conformance/
run_node_tests.py twice, once plainly and once with --backend cuda; every case that passes on
the CPU must pass on CUDA too (against onnx's reference outputs, at onnx's tolerances).

Prints pass counts and writes a JSON report (--json-out). Exits non-zero on any mismatch. Needs
a GPU: without one, `kiln build --backend cuda` fails and so does every case here.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RTOL, ATOL = 1e-4, 1e-5


def run(cmd, timeout=300):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def shape_args(model):
    args = []
    for spec in model.get("shapes", []):
        args += ["--shapes", spec]
    return args


def run_outputs(kiln, path, inputs, shapes, backend, out_dir):
    cmd = [kiln, "run", path, "--output-dir", out_dir, "--backend", backend] + shapes
    for name, f in inputs.items():
        cmd += ["--input", f"{name}={f}"]
    rc, _, err = run(cmd)
    if rc != 0:
        return None, err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
    with open(os.path.join(out_dir, "outputs.json")) as f:
        index = json.load(f)
    return {k: np.load(os.path.join(out_dir, v)) for k, v in index.items()}, ""


def compare(ref, got):
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return f"shape/dtype {got.dtype}{list(got.shape)} vs {ref.dtype}{list(ref.shape)}", 0.0
    if ref.dtype.kind != "f":
        bad = int(np.sum(ref != got))
        return (f"{bad} elements differ" if bad else ""), float(bad)
    diff = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    tol = ATOL + RTOL * np.abs(ref.astype(np.float64))
    nan_ok = np.isnan(ref) == np.isnan(got)
    worst = float(np.nanmax(diff / tol)) if diff.size else 0.0
    if not nan_ok.all() or worst > 1.0:
        return f"max |diff| {float(np.nanmax(diff)):.3g} ({worst:.2f}x the tolerance)", worst
    return "", worst


def placement(kiln, path, shapes, device):
    rc, out, err = run([kiln, "inspect", path, "--json", "--backend", device] + shapes)
    if rc != 0:
        return {"error": err.strip()}
    layers = json.loads(out)["layers"]
    on = collections.Counter()
    host = collections.Counter()
    for layer in layers:
        if layer.get("backend") == device:
            on[layer["op"]] += 1
        elif not layer["op"].startswith("Memcpy"):
            host[f'{layer["op"]}: {layer.get("placement_reason", "")}'] += 1
    return {"cuda": dict(on), "host": dict(host)}


def run_models(kiln, manifest_path, only, device, refs):
    with open(manifest_path) as f:
        manifest = json.load(f)
    base = os.path.dirname(manifest_path)
    results = []
    for model in manifest["models"]:
        if only and model["name"] not in only:
            continue
        path = os.path.join(base, model["model"])
        shapes = shape_args(model)
        entry = {"model": model["name"], "placement": placement(kiln, path, shapes, device),
                 "cases": []}
        for case in model["cases"]:
            inputs = {k: os.path.join(base, v) for k, v in case["inputs"].items()}
            with tempfile.TemporaryDirectory() as tmp:
                cpu, err_cpu = run_outputs(kiln, path, inputs, shapes, "cpu",
                                           os.path.join(tmp, "cpu"))
                gpu, err_gpu = run_outputs(kiln, path, inputs, shapes, device,
                                           os.path.join(tmp, "cuda"))
            if cpu is not None:
                refs[(model["name"], case["name"])] = cpu
            status, message, worst = "passed", "", 0.0
            if cpu is None:
                status, message = "error", "cpu: " + err_cpu
            elif gpu is None:
                status, message = "error", "cuda: " + err_gpu
            else:
                for name, ref in cpu.items():
                    why, w = compare(ref, gpu.get(name, np.zeros(0)))
                    worst = max(worst, w)
                    if why:
                        status, message = "failed", f"{name}: {why}"
                        break
            entry["cases"].append({"case": case["name"], "status": status, "message": message,
                                   "worst_vs_tolerance": round(worst, 4)})
            print(f"{model['name']:26s} {case['name']:24s} {status:7s} "
                  f"worst {worst:.3f}x tol {message}", flush=True)
        results.append(entry)
    return results


def run_replays(kiln, manifest_path, only, device, refs):
    """Repeated runs in one context per model; refs[(model, case)] are the CPU's outputs."""
    sys.path.insert(0, os.path.join(REPO, "python"))
    import kiln as kpy

    with open(manifest_path) as f:
        manifest = json.load(f)
    base = os.path.dirname(manifest_path)
    results = []
    for model in manifest["models"]:
        if (only and model["name"] not in only) or len(model["cases"]) == 0:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            plan = os.path.join(tmp, "m.plan")
            rc, _, err = run([kiln, "build", os.path.join(base, model["model"]), "-o", plan,
                              "--backend", f"{device},cpu", "--quiet"] + shape_args(model))
            if rc != 0:
                results.append({"model": model["name"], "status": "error", "message": err})
                continue
            ctx = kpy.Engine(plan).context()
        order = [c for c in model["cases"] for _ in range(3)] + [model["cases"][0]] * 3
        status, message, worst = "passed", "", 0.0
        for i, case in enumerate(order):
            feeds = {k: np.load(os.path.join(base, v)) for k, v in case["inputs"].items()}
            try:
                got = ctx.run(feeds)
            except Exception as e:  # noqa: BLE001 - reported, not raised
                status, message = "error", f"run {i}: {e}"
                break
            ref = refs.get((model["name"], case["name"]))
            for name, want in (ref or {}).items():
                why, w = compare(want, got.get(name, np.zeros(0)))
                worst = max(worst, w)
                if why:
                    status, message = "failed", f"run {i} ({case['name']}) {name}: {why}"
                    break
            if status != "passed":
                break
        results.append({"model": model["name"], "runs": len(order), "status": status,
                        "message": message, "worst_vs_tolerance": round(worst, 4)})
        print(f"replays {model['name']:26s} {status:7s} worst {worst:.3f}x tol {message}",
              flush=True)
    return results


def run_node_tests(kiln, jobs, workdir, node_data):
    script = os.path.join(REPO, "tests", "conformance", "run_node_tests.py")
    wrapper = os.path.join(workdir, "kiln-cuda")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\nexec "{os.path.abspath(kiln)}" "$@" --backend cuda\n')
    os.chmod(wrapper, 0o755)
    reports = {}
    for label, exe in (("cpu", kiln), ("cuda", wrapper)):
        out = os.path.join(workdir, f"node_{label}.json")
        cmd = [sys.executable, script, "--kiln", exe, "--jobs", str(jobs), "--json-out", out]
        if node_data:
            cmd += ["--data", node_data]
        rc, _, err = run(cmd, timeout=3600)
        if not os.path.exists(out):
            raise RuntimeError(f"node tests ({label}) wrote no report (exit {rc}): {err[-500:]}")
        with open(out) as f:
            data = json.load(f)
        cases = data["cases"] if isinstance(data, dict) and "cases" in data else data
        reports[label] = {c["name"]: c for c in cases}
    cpu_pass = {n for n, c in reports["cpu"].items() if c["status"] == "passed"}
    regress = sorted(n for n in cpu_pass if reports["cuda"].get(n, {}).get("status") != "passed")
    return {"cpu_passed": len(cpu_pass), "cuda_passed_of_those": len(cpu_pass) - len(regress),
            "regressions": {n: reports["cuda"].get(n, {}).get("message", "missing")
                            for n in regress}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN", os.path.join(REPO, "build/bin/kiln")))
    ap.add_argument("--manifest", default=os.path.join(REPO, "tests/models/manifest.json"))
    ap.add_argument("--models", nargs="*", default=[], help="only these models")
    ap.add_argument("--node-tests", action="store_true", help="also run onnx's node tests")
    ap.add_argument("--node-data", help="folder of onnx node test cases (default: the installed "
                    "onnx's; pass the CPU machine's onnx 1.19 cases to compare like with like)")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--json-out")
    ap.add_argument("--replays", action="store_true",
                    help="also run each model repeatedly in one context (stream graphs)")
    ap.add_argument("--device", default="cuda",
                    help="the device backend (default cuda; testdev checks this script "
                    "without a GPU)")
    a = ap.parse_args()
    refs = {}
    report = {"models": run_models(a.kiln, a.manifest, set(a.models), a.device, refs)}
    cases = [c for m in report["models"] for c in m["cases"]]
    passed = sum(c["status"] == "passed" for c in cases)
    print(f"models: {passed}/{len(cases)} cases match the CPU (rtol {RTOL:g}, atol {ATOL:g})")
    ok = passed == len(cases)
    if a.replays:
        report["replays"] = run_replays(a.kiln, a.manifest, set(a.models), a.device, refs)
        good = sum(r["status"] == "passed" for r in report["replays"])
        print(f"replays: {good}/{len(report['replays'])} models match the CPU on every run")
        ok = ok and good == len(report["replays"])
    if a.node_tests:
        with tempfile.TemporaryDirectory() as tmp:
            report["node_tests"] = run_node_tests(a.kiln, a.jobs, tmp, a.node_data)
        nt = report["node_tests"]
        print(f"node tests: {nt['cuda_passed_of_those']}/{nt['cpu_passed']} of those passing on "
              f"the CPU pass with --backend cuda")
        for name, msg in nt["regressions"].items():
            print(f"  {name}: {msg}")
        ok = ok and not nt["regressions"]
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
