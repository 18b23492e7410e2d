"""kiln's Triton backend under the real tritonserver (from PyPI's nvidia-pytriton wheel), with
tritonclient over HTTP and gRPC. The test starts the server on loopback ports with a model
repository of two kiln models, and stops it at the end:

- mobilenet: a kiln plan (batch 1..8), config auto-completed, dynamic batching on;
- swish:     an ONNX model with the Swish plugin, built at load from the config's dims.

Outputs must equal `kiln run`'s; bad requests get errors and the server keeps serving; a load
test of bounded count at concurrency 1 and 16 reports throughput and p50/p99 (written to
$KILN_BUILD/triton/load_report.txt) and must see batches larger than one in Triton's statistics.
"""

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("KILN_BUILD") or os.path.join(REPO, "build"))
KILN = os.path.join(BUILD, "bin", "kiln")
BACKEND = os.path.join(BUILD, "triton", "libtriton_kiln.so")
SWISH_LIB = os.path.join(BUILD, "plugins", "libswish.so")
MOBILENET = os.path.join(REPO, "tests", "models", "mobilenetv2_mini")
SWISH = os.path.join(REPO, "examples", "swish")
# make deps installs nvidia-pytriton without its Python dependencies: only its tritonserver
# binary and libraries are used, so it is located without being imported.
PYTRITON = importlib.util.find_spec("pytriton")
assert PYTRITON is not None, "nvidia-pytriton is not installed (make deps)"
TRITON_DIR = os.path.join(PYTRITON.submodule_search_locations[0], "tritonserver")
TRITON_LIBS = os.path.join(os.path.dirname(PYTRITON.submodule_search_locations[0]),
                           "nvidia_pytriton.libs")
START_TIMEOUT = 60
LOAD_REQUESTS = {1: 48, 16: 320}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(*cmd, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **(env or {})))
    assert res.returncode == 0, f"{' '.join(cmd)}:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def kiln_run(model, name, x, tmp, *extra):
    np.save(tmp / "in.npy", x)
    out = tmp / "out"
    sh(KILN, "run", model, "--input", f"{name}=" + str(tmp / "in.npy"), "--output-dir", str(out),
       *extra)
    files = json.loads((out / "outputs.json").read_text())
    return {k: np.load(out / v) for k, v in files.items()}


def write_repository(root):
    models = root / "models"
    (models / "mobilenet" / "1").mkdir(parents=True)
    sh(KILN, "build", os.path.join(MOBILENET, "model.onnx"), "-o",
       str(models / "mobilenet" / "1" / "model.plan"),
       "--shapes", "input:1x3x64x64,4x3x64x64,8x3x64x64")
    # Inputs, outputs and max_batch_size are left out: the backend completes them from the plan.
    (models / "mobilenet" / "config.pbtxt").write_text(
        'backend: "kiln"\n'
        "dynamic_batching { max_queue_delay_microseconds: 5000 }\n"
        "instance_group [{ kind: KIND_CPU, count: 1 }]\n")
    (models / "swish" / "1").mkdir(parents=True)
    shutil.copy(os.path.join(SWISH, "swish.onnx"), models / "swish" / "1" / "model.onnx")
    (models / "swish" / "config.pbtxt").write_text(
        'backend: "kiln"\nmax_batch_size: 4\n'
        'input [{ name: "x", data_type: TYPE_FP32, dims: [3, 8, 8] }]\n'
        'output [{ name: "y", data_type: TYPE_FP32, dims: [-1, 8, 8] }]\n'
        f'parameters {{ key: "plugins" value {{ string_value: "{SWISH_LIB}" }} }}\n'
        "instance_group [{ kind: KIND_CPU, count: 2 }]\n")
    backends = root / "backends" / "kiln"
    backends.mkdir(parents=True)
    os.symlink(BACKEND, backends / "libtriton_kiln.so")
    return models, root / "backends"


@contextlib.contextmanager
def tritonserver(root, models, backends, *extra, env_extra=None):
    """A tritonserver on loopback ports for the body of the with; killed at the end."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = TRITON_LIBS + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env.update(env_extra or {})
    log_path = root / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [os.path.join(TRITON_DIR, "bin", "tritonserver"), f"--model-repository={models}",
         f"--backend-directory={backends}", "--http-address=127.0.0.1",
         f"--http-port={http}", "--grpc-address=127.0.0.1", f"--grpc-port={grpc}",
         "--allow-metrics=false", f"--metrics-port={metrics}", "--exit-timeout-secs=10",
         *extra],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
    deadline = time.time() + START_TIMEOUT
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail("tritonserver exited:\n" + log_path.read_text()[-4000:])
            try:
                if client.is_server_ready():
                    break
            except Exception:
                pass
            if time.time() > deadline:
                pytest.fail("tritonserver not ready:\n" + log_path.read_text()[-4000:])
            time.sleep(0.2)
        yield {"http": f"127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}", "proc": proc,
               "log": log_path}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert os.path.exists(BACKEND), f"{BACKEND}: configure with -DKILN_TRITON=ON (make build)"
    root = tmp_path_factory.mktemp("triton")
    models, backends = write_repository(root)
    with tritonserver(root, models, backends, "--strict-readiness=true") as s:
        yield s


def infer(module, url, model, name, x, dtype="FP32", outputs=None):
    client = module.InferenceServerClient(url)
    inp = module.InferInput(name, list(x.shape), dtype)
    inp.set_data_from_numpy(x)
    outs = [module.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, [inp], outputs=outs)


def test_config_is_completed_from_the_plan(server):
    cfg = httpclient.InferenceServerClient(server["http"]).get_model_config("mobilenet")
    assert cfg["max_batch_size"] == 8
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("input", "TYPE_FP32", [3, 64, 64])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == [
        ("logits", "TYPE_FP32", [10])]


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_outputs_equal_kiln_run(server, module, tmp_path):
    url = server["http"] if module is httpclient else server["grpc"]
    plan = os.path.join(os.path.dirname(str(server["log"])), "models", "mobilenet", "1",
                        "model.plan")
    for case in ("case0_1x3x64x64", "case1_2x3x64x64"):
        x = np.load(os.path.join(MOBILENET, case, "input.npy"))
        want = kiln_run(plan, "input", x, tmp_path)["logits"]
        got = infer(module, url, "mobilenet", "input", x).as_numpy("logits")
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    sample = np.load(os.path.join(SWISH, "data", "input_0.npy"))  # [1, 3, 8, 8]
    rng = np.random.default_rng(0)
    for x in (sample, rng.standard_normal((3, 3, 8, 8)).astype(np.float32)):
        want = kiln_run(os.path.join(SWISH, "swish.onnx"), "x", x, tmp_path, "--plugins",
                        SWISH_LIB)["y"]
        got = infer(module, url, "swish", "x", x).as_numpy("y")
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_bad_requests_get_errors_and_the_server_keeps_serving(server, module):
    url = server["http"] if module is httpclient else server["grpc"]
    good = np.load(os.path.join(MOBILENET, "case0_1x3x64x64", "input.npy"))
    bad = [
        ("wrong name", "mobilenet", "pixels", good, "FP32", "pixels"),
        ("wrong dtype", "mobilenet", "input", good.astype(np.float64), "FP64", "input"),
        ("wrong shape", "mobilenet", "input", np.zeros((1, 3, 32, 32), np.float32), "FP32",
         "input"),
        ("batch too large", "mobilenet", "input", np.zeros((9, 3, 64, 64), np.float32), "FP32",
         "batch"),
        ("plugin model shape", "swish", "x", np.zeros((1, 3, 4, 4), np.float32), "FP32", "x"),
    ]
    for what, model, name, x, dtype, needle in bad:
        with pytest.raises(InferenceServerException) as e:
            infer(module, url, model, name, x, dtype)
        assert needle in str(e.value), f"{what}: {e.value}"
    with pytest.raises(InferenceServerException, match="nosuch"):
        infer(module, url, "mobilenet", "input", good, outputs=["nosuch"])
    assert infer(module, url, "mobilenet", "input", good).as_numpy("logits").shape == (1, 10)
    assert server["proc"].poll() is None


def load(url, x, concurrency, count):
    """count requests over gRPC from `concurrency` threads; (failures, seconds, latencies)."""
    def one(_):
        client = grpcclient.InferenceServerClient(url)
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        t = time.perf_counter()
        try:
            out = client.infer("mobilenet", [inp], client_timeout=60).as_numpy("logits")
            ok = out.shape == (x.shape[0], 10)
        except InferenceServerException:
            ok = False
        return ok, time.perf_counter() - t

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(count)))
    elapsed = time.perf_counter() - start
    return sum(not ok for ok, _ in results), elapsed, sorted(t for _, t in results)


def model_stats(url):
    stats = httpclient.InferenceServerClient(url).get_inference_statistics("mobilenet")
    s = stats["model_stats"][0]
    return int(s["inference_count"]), int(s["execution_count"])


def test_load_at_concurrency_16_batches_requests(server):
    x = np.load(os.path.join(MOBILENET, "case0_1x3x64x64", "input.npy"))
    lines = []
    for conc, count in LOAD_REQUESTS.items():
        inf0, exe0 = model_stats(server["http"])
        failed, elapsed, lat = load(server["grpc"], x, conc, count)
        inf1, exe1 = model_stats(server["http"])
        assert failed == 0
        assert inf1 - inf0 == count
        p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        lines.append(f"concurrency {conc:2d}: {count} requests, {count / elapsed:7.1f} req/s, "
                     f"p50 {p50 * 1e3:6.2f} ms, p99 {p99 * 1e3:6.2f} ms, "
                     f"{inf1 - inf0} inferences in {exe1 - exe0} executions "
                     f"(mean batch {(inf1 - inf0) / max(1, exe1 - exe0):.2f})")
        if conc == 16:
            assert exe1 - exe0 < inf1 - inf0, "dynamic batching never made a batch > 1"
    report = os.path.join(BUILD, "triton", "load_report.txt")
    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


def test_instance_kind_and_build_parameters_are_checked_at_load(tmp_path):
    """A KIND_CPU instance of a plan placed on a device backend, and bad build parameters of a
    model.onnx, fail the model's load with a message saying what to change; the server lives."""
    models = tmp_path / "models"
    testdev = os.path.join(BUILD, "tests", "lib")
    (models / "devplan" / "1").mkdir(parents=True)
    sh(KILN, "build", os.path.join(MOBILENET, "model.onnx"), "-o",
       str(models / "devplan" / "1" / "model.plan"), "--backend", "testdev,cpu",
       "--shapes", "input:1x3x64x64,1x3x64x64,4x3x64x64", env={"KILN_BACKEND_PATH": testdev})
    (models / "devplan" / "config.pbtxt").write_text(
        'backend: "kiln"\ninstance_group [{ kind: KIND_CPU }]\n')
    for name, param, value in (("badprecision", "precision", "fp8"),
                               ("badbackend", "backends", "nosuch,cpu")):
        (models / name / "1").mkdir(parents=True)
        shutil.copy(os.path.join(MOBILENET, "model.onnx"), models / name / "1" / "model.onnx")
        (models / name / "config.pbtxt").write_text(
            'backend: "kiln"\nmax_batch_size: 2\n'
            'input [{ name: "input", data_type: TYPE_FP32, dims: [3, 64, 64] }]\n'
            f'parameters {{ key: "{param}" value {{ string_value: "{value}" }} }}\n'
            "instance_group [{ kind: KIND_CPU }]\n")
    backends = tmp_path / "backends" / "kiln"
    backends.mkdir(parents=True)
    os.symlink(BACKEND, backends / "libtriton_kiln.so")
    with tritonserver(tmp_path, models, tmp_path / "backends", "--model-control-mode=explicit",
                      env_extra={"KILN_BACKEND_PATH": testdev}) as s:
        client = httpclient.InferenceServerClient(s["http"])
        for name, needle in (("devplan", "KIND_CPU but the model's plan places layers on "
                                         "'testdev'"),
                             ("badprecision", "parameter 'precision' is 'fp8'"),
                             ("badbackend", "nosuch")):
            with pytest.raises(InferenceServerException) as e:
                client.load_model(name)
            assert needle in str(e.value), f"{name}: {e.value}"
            assert not client.is_model_ready(name)
        assert s["proc"].poll() is None
