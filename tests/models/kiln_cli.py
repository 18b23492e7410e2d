"""The kiln CLI for tests: the binary (KILN, else build/bin/kiln) and a runner that fails the
test with kiln's stderr when a command fails."""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")


def kiln(*args):
    """Runs `kiln ARGS`; returns its stdout."""
    p = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=300)
    assert p.returncode == 0, f"kiln {' '.join(args)}: {p.stderr.decode(errors='replace')}"
    return p.stdout.decode(errors="replace")
