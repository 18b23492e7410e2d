#!/usr/bin/env python3
"""kiln's Triton backend with KIND_GPU instances, on a GPU machine (part of `make test-gpu`).

Starts the real tritonserver (PyPI's nvidia-pytriton, or a copy of its binary and libraries) on loopback ports with a model repository of three kiln models, talks to it over HTTP
(KServe v2 JSON, so no client package is needed), and stops it:

- gpu_plan:  a plan built with --backend cuda,cpu (batch 1..8), two KIND_GPU instances,
             config auto-completed, dynamic batching on;
- gpu_onnx:  model.onnx built at load; KIND_GPU makes the build place it on cuda,cpu;
- cpu_plan:  a host-only plan under a KIND_GPU instance: it serves on the CPU, with a warning.

Checks: outputs equal `kiln run`'s on the same plan (within 1e-4 of the output's magnitude:
batched requests run at another batch size, where cuDNN may pick another algorithm); a load
test at concurrency 1 and 16 with no failed request, Triton's statistics showing batches > 1;
throughput and p50/p99 printed. Exit status 0 when everything holds.
"""

import argparse
import concurrent.futures
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MOBILENET = os.path.join(REPO, "tests", "models", "mobilenetv2_mini")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(*cmd):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)}:\n{res.stdout}\n{res.stderr}")
    return res.stdout


def post(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def infer(base, model, x):
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.ravel().tolist()}]}
    out = post(f"{base}/v2/models/{model}/infer", body)["outputs"][0]
    return np.array(out["data"], np.float32).reshape(out["shape"])


def kiln_run(kiln, plan, x, tmp):
    np.save(os.path.join(tmp, "in.npy"), x)
    out = os.path.join(tmp, "out")
    sh(kiln, "run", plan, "--input", "input=" + os.path.join(tmp, "in.npy"), "--output-dir",
       out)
    files = json.load(open(os.path.join(out, "outputs.json")))
    return np.load(os.path.join(out, files["logits"]))


def write_repository(root, kiln, backend_lib):
    models = os.path.join(root, "models")
    shapes = "input:1x3x64x64,4x3x64x64,8x3x64x64"
    onnx = os.path.join(MOBILENET, "model.onnx")
    for name, backends, config in (
            ("gpu_plan", "cuda,cpu",
             "dynamic_batching { max_queue_delay_microseconds: 5000 }\n"
             "instance_group [{ kind: KIND_GPU, count: 2 }]\n"),
            ("cpu_plan", "cpu", "instance_group [{ kind: KIND_GPU, count: 1 }]\n")):
        os.makedirs(os.path.join(models, name, "1"))
        sh(kiln, "build", onnx, "-o", os.path.join(models, name, "1", "model.plan"),
           "--backend", backends, "--shapes", shapes)
        with open(os.path.join(models, name, "config.pbtxt"), "w") as f:
            f.write('backend: "kiln"\n' + config)
    os.makedirs(os.path.join(models, "gpu_onnx", "1"))
    shutil.copy(onnx, os.path.join(models, "gpu_onnx", "1", "model.onnx"))
    with open(os.path.join(models, "gpu_onnx", "config.pbtxt"), "w") as f:
        f.write('backend: "kiln"\nmax_batch_size: 4\n'
                'input [{ name: "input", data_type: TYPE_FP32, dims: [3, 64, 64] }]\n'
                "instance_group [{ kind: KIND_GPU }]\n")
    backends = os.path.join(root, "backends", "kiln")
    os.makedirs(backends)
    shutil.copy(backend_lib, os.path.join(backends, "libtriton_kiln.so"))
    return models, os.path.dirname(backends)


def load(base, x, concurrency, count):
    def one(_):
        t = time.perf_counter()
        try:
            ok = infer(base, "gpu_plan", x).shape == (x.shape[0], 10)
        except (urllib.error.URLError, OSError, KeyError, ValueError):
            ok = False
        return ok, time.perf_counter() - t

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(count)))
    elapsed = time.perf_counter() - start
    return sum(not ok for ok, _ in results), elapsed, sorted(t for _, t in results)


def stats(base):
    s = get(f"{base}/v2/models/gpu_plan/stats")["model_stats"][0]
    return int(s["inference_count"]), int(s["execution_count"])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True, help="the kiln CLI (CUDA module beside it)")
    ap.add_argument("--backend-lib", required=True, help="libtriton_kiln.so")
    ap.add_argument("--tritonserver-dir",
                    help="folder with bin/tritonserver (default: nvidia-pytriton's)")
    ap.add_argument("--tritonserver-libs",
                    help="folder of its libraries (default: DIR/lib, or nvidia-pytriton's)")
    ap.add_argument("--requests", type=int, default=400, help="requests at concurrency 16")
    args = ap.parse_args()
    if not args.tritonserver_dir:
        spec = importlib.util.find_spec("pytriton")
        if spec is None:
            sys.exit("no --tritonserver-dir and nvidia-pytriton is not installed")
        args.tritonserver_dir = os.path.join(spec.submodule_search_locations[0], "tritonserver")
        args.tritonserver_libs = args.tritonserver_libs or os.path.join(
            os.path.dirname(spec.submodule_search_locations[0]), "nvidia_pytriton.libs")
    libs = args.tritonserver_libs or os.path.join(args.tritonserver_dir, "lib")
    failures = []
    with tempfile.TemporaryDirectory() as root:
        models, backends = write_repository(root, args.kiln, args.backend_lib)
        http = free_port()
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = (libs + os.pathsep +
                                  env.get("LD_LIBRARY_PATH", ""))
        log_path = os.path.join(root, "server.log")
        log = open(log_path, "w")
        proc = subprocess.Popen(
            [os.path.join(args.tritonserver_dir, "bin", "tritonserver"),
             f"--model-repository={models}", f"--backend-directory={backends}",
             "--http-address=127.0.0.1", f"--http-port={http}", "--allow-grpc=false",
             "--allow-metrics=false", "--exit-timeout-secs=10", "--strict-readiness=true"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        base = f"http://127.0.0.1:{http}"
        try:
            deadline = time.time() + 90
            while True:
                if proc.poll() is not None:
                    sys.exit("tritonserver exited:\n" + open(log_path).read()[-4000:])
                try:
                    urllib.request.urlopen(f"{base}/v2/health/ready", timeout=2)
                    break
                except (urllib.error.URLError, OSError):
                    pass
                if time.time() > deadline:
                    sys.exit("tritonserver not ready:\n" + open(log_path).read()[-4000:])
                time.sleep(0.3)
            plan = os.path.join(models, "gpu_plan", "1", "model.plan")
            for case in ("case0_1x3x64x64", "case1_2x3x64x64"):
                x = np.load(os.path.join(MOBILENET, case, "input.npy"))
                want = kiln_run(args.kiln, plan, x, root)
                for model in ("gpu_plan", "gpu_onnx", "cpu_plan"):
                    got = infer(base, model, x)
                    err = float(np.max(np.abs(got - want)) / max(1e-6, np.max(np.abs(want))))
                    ok = got.shape == want.shape and err <= 1e-4
                    print(f"{model} {case}: {'match' if ok else 'MISMATCH'} "
                          f"(max error {err:.2e} of the output's magnitude)")
                    if not ok:
                        failures.append(f"{model} {case}")
            x = np.load(os.path.join(MOBILENET, "case0_1x3x64x64", "input.npy"))
            for conc, count in ((1, max(16, args.requests // 8)), (16, args.requests)):
                inf0, exe0 = stats(base)
                failed, elapsed, lat = load(base, x, conc, count)
                inf1, exe1 = stats(base)
                p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
                print(f"concurrency {conc:2d}: {count} requests, {count / elapsed:7.1f} req/s, "
                      f"p50 {p50 * 1e3:6.2f} ms, p99 {p99 * 1e3:6.2f} ms, {failed} failed, "
                      f"{inf1 - inf0} inferences in {exe1 - exe0} executions")
                if failed:
                    failures.append(f"{failed} failed requests at concurrency {conc}")
                if conc == 16 and exe1 - exe0 >= inf1 - inf0:
                    failures.append("dynamic batching never made a batch > 1")
            text = open(log_path).read()
            if "runs on the CPU" not in text:
                failures.append("no warning for the host-only plan under KIND_GPU")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    print("triton KIND_GPU: all checks passed")


if __name__ == "__main__":
    main()
