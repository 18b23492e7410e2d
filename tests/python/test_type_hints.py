"""The package's hints have teeth: mypy, with the project's settings, rejects misuses of the
public API that would otherwise fail only at run time (typed_usage.py shows correct use passes)."""

import os
import subprocess
import sys

from pykiln_helpers import REPO

MISUSE = """\
import kiln
kiln.build("m.onnx", precision="fp8")
kiln.Engine(3)
kiln.Engine(b"").context().run(["x"])
n = kiln.Network()
n.add_activation(n.add_input("x", "float32", (1, 2)), "relu", alpha="big")
kiln.Registry().load_library(42)
"""


def test_mypy_rejects_misuse(tmp_path):
    script = tmp_path / "misuse.py"
    script.write_text(MISUSE)
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", os.path.join(REPO, "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), str(script)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    errors = [line for line in res.stdout.splitlines() if ": error:" in line]
    lines = sorted(int(e.split(":")[1]) for e in errors)
    assert res.returncode == 1, res.stdout + res.stderr
    assert lines == [2, 3, 4, 6, 7], res.stdout
    assert 'Argument "precision" to "build"' in errors[0]
