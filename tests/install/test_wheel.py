"""`pip install .` into a fresh virtual environment, then kiln used from it with no environment
variables: import, the CLI on PATH and as `python -m kiln`, the version from include/kiln/kiln.h,
an outside plugin compiled against the installed header, and an InferenceSession run."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CC = os.environ.get("CC") or "cc"
MODEL = os.path.join(REPO, "tests", "models", "mobilenetv2_mini")


def header_version():
    text = open(os.path.join(REPO, "include", "kiln", "kiln.h")).read()
    return ".".join(re.search(rf"#define KILN_VERSION_{p} (\d+)", text).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))


def clean_env(venv):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KILN") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    return env


def sh(*cmd, env=None, cwd=None, timeout=900):
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    venv = str(root / "venv")
    sh(sys.executable, "-m", "venv", venv)
    env = clean_env(venv)
    # The wheel is built from the source tree with its own CMake build folder.
    sh(os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check",
       "-C", f"build-dir={root / 'build'}", REPO, env=env, cwd=str(root))
    return venv, env, root


def py(venv, code):
    v, env, root = venv
    return sh(os.path.join(v, "bin", "python"), "-c", code, env=env, cwd=str(root))


def test_import_finds_the_library_inside_the_package(venv):
    out = py(venv, "import kiln, importlib.metadata as m; "
                   "print(kiln.__version__, m.version('kiln'), kiln.LIBRARY_PATH)").split()
    assert out[0] == out[1] == header_version()
    assert out[2].startswith(venv[0]) and out[2].endswith("libkiln.so")


def test_the_cli_is_on_path_and_python_m_kiln(venv):
    v, env, root = venv
    want = f"kiln {header_version()}"
    assert sh("kiln", "--version", env=env, cwd=str(root)).strip() == want
    assert sh(os.path.join(v, "bin", "python"), "-m", "kiln", "--version", env=env,
              cwd=str(root)).strip() == want


def test_an_outside_plugin_compiles_against_the_installed_header(venv):
    v, env, root = venv
    include = py(venv, "import kiln; print(kiln.get_include())").strip()
    assert include.startswith(v) and os.path.exists(os.path.join(include, "kiln", "kiln_plugin.h"))
    lib = str(root / "libtimes_three.so")
    sh(CC, "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{include}",
       os.path.join(HERE, "plugin", "times_three.c"), "-o", lib)
    out = py(venv, f"""
import numpy as np, kiln
reg = kiln.Registry()
reg.load_library({lib!r})
net = kiln.Network(registry=reg)
x = net.add_input("x", np.float32, (2, 3))
net.mark_output(net.add_plugin("TimesThree", [x], name="t3"), name="y")
y = kiln.Engine(net.build(), plugins=reg).context().run({{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}})["y"]
print(y.ravel().tolist())
""")
    assert out.strip() == str([3.0 * i for i in range(6)])
    sh("kiln", "plugin-check", lib, env=env, cwd=str(root))
    plugins = py(venv, "import kiln, os; print(sorted(os.listdir(kiln.get_plugin_dir())))")
    assert "libswish.so" in plugins


def test_inference_session_from_the_wheel_matches_onnxruntime(venv):
    ort = pytest.importorskip("onnxruntime")
    x = np.load(os.path.join(MODEL, "case1_2x3x64x64", "input.npy"))
    np.save(os.path.join(str(venv[2]), "x.npy"), x)
    out = py(venv, f"""
import numpy as np, kiln
sess = kiln.InferenceSession({os.path.join(MODEL, 'model.onnx')!r})
np.save("y.npy", sess.run(None, {{"input": np.load("x.npy")}})[0])
""")
    assert out == ""
    want = ort.InferenceSession(os.path.join(MODEL, "model.onnx")).run(None, {"input": x})[0]
    np.testing.assert_allclose(np.load(os.path.join(str(venv[2]), "y.npy")), want, rtol=1e-4,
                               atol=1e-4)
