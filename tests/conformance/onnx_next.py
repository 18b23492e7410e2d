#!/usr/bin/env python3
"""onnx 1.23.2's node test cases (opsets up to 28), made from its own case scripts.

onnx stopped shipping its node test data in wheels after 1.19, so `make test`'s node tests run
onnx 1.19.0's (pinned). This script makes the newer set: it installs onnx 1.23.2 from PyPI into
OUT/site (apart from the onnx the rest of the tests use), takes the case scripts from the same
release's source archive on PyPI (checked against the index's sha256), and runs them with numpy's
random seed fixed (numpy's legacy generator gives the same stream in every numpy version), with
ml_dtypes pinned beside it (its casts to 4-bit integers decide some expected outputs, and they
changed after 0.5), so the same cases come out on every machine. The cases
land in OUT/data/node/<case>/, the layout run_node_tests.py --data reads. A second call finds
OUT/data/node complete and does nothing.

    python3 tests/conformance/onnx_next.py build/onnx-next
"""

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import urllib.request

VERSION = "1.23.2"
ML_DTYPES = "0.5.4"
INDEX = "https://pypi.org/simple/onnx/"
CASES = f"onnx-{VERSION}/onnx/backend/test/case/node/"

GENERATE = """
import argparse, sys
import numpy as np
np.random.seed(0)
import ml_dtypes, onnx
assert onnx.__version__ == sys.argv[2], onnx.__version__
assert ml_dtypes.__version__ == sys.argv[3], ml_dtypes.__version__
import onnx.backend.test.case.model as model_test
import onnx.backend.test.cmd_tools as cmd_tools
from onnx.backend.test.case import node
cases = node.collect_testcases(None)
model_test.collect_testcases = lambda: cases
cmd_tools.generate_data(argparse.Namespace(output=sys.argv[1]))
print(len(cases))
"""


def fail(msg):
    sys.exit(f"onnx_next: {msg}")


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except OSError as e:
        fail(f"cannot fetch {url}: {e}")


def sdist():
    page = fetch(INDEX).decode("utf-8", "replace")
    m = re.search(r'href="([^"#]*onnx-%s\.tar\.gz)#sha256=([0-9a-f]{64})"' % re.escape(VERSION),
                  page)
    if m is None:
        fail(f"{INDEX} lists no onnx-{VERSION}.tar.gz")
    data = fetch(m.group(1))
    if hashlib.sha256(data).hexdigest() != m.group(2):
        fail(f"onnx-{VERSION}.tar.gz does not match the index's sha256")
    return data


def main():
    if len(sys.argv) != 2:
        fail("usage: onnx_next.py OUT_DIR")
    out = os.path.abspath(sys.argv[1])
    site, data, stamp = (os.path.join(out, "site"), os.path.join(out, "data"),
                         os.path.join(out, "data", "complete"))
    if os.path.exists(stamp):
        print(f"onnx {VERSION} node cases: {os.path.join(data, 'node')} (made before)")
        return 0
    os.makedirs(out, exist_ok=True)
    if not os.path.isdir(os.path.join(site, "onnx")):
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                            site, f"onnx=={VERSION}", f"ml_dtypes=={ML_DTYPES}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"pip install onnx=={VERSION}: {r.stderr.strip()[-400:]}")
    node_dir = os.path.join(site, "onnx", "backend", "test", "case", "node")
    with tarfile.open(fileobj=io.BytesIO(sdist()), mode="r:gz") as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith(CASES) and m.isfile() and "/" not in m.name[len(CASES):]]
        if len(members) < 100:
            fail(f"onnx-{VERSION}.tar.gz holds {len(members)} case scripts under {CASES}")
        for m in members:
            with open(os.path.join(node_dir, m.name[len(CASES):]), "wb") as f:
                f.write(tar.extractfile(m).read())
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", GENERATE, data, VERSION, ML_DTYPES], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"generating the cases: {r.stderr.strip()[-600:]}")
    with open(stamp, "w") as f:
        f.write(VERSION + "\n")
    print(f"onnx {VERSION} node cases: {r.stdout.strip()} in {os.path.join(data, 'node')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
