"""The op lists stay the one source: src/ops/op_list.h's arity columns equal the onnx package's
schemas, and every CPU kernel in src/backend/cpu/kernel_list.h runs an op that op_list.h
defines, and every op has a CPU kernel except the copies between memory spaces, which the
executor runs through the backend's copy, and the control-flow ops (KN_OP_SUBGRAPH), whose
bodies the runtime's sub-executor runs."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OP_ROW = re.compile(r"^KN_OP\(([^,]+), ([^,]+),", re.M)
SUBGRAPH_ROW = re.compile(r"^KN_OP\(([^,]+), ([^,]+), [^,]+, KN_OP_SUBGRAPH,", re.M)
KERNEL_ROW = re.compile(r"^KN_CPU_KERNEL(?:_STATE)?\(([^,]+), ([^,]+),", re.M)


def rows(path, pattern):
    with open(os.path.join(REPO, path)) as f:
        return pattern.findall(f.read())


def test_arity_columns_match_onnx():
    r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gen_arity.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, "op_list.h arity differs from onnx:\n" + r.stdout + r.stderr


def test_each_op_listed_once_and_kernels_match_ops():
    ops = rows("src/ops/op_list.h", OP_ROW)
    kernels = rows("src/backend/cpu/kernel_list.h", KERNEL_ROW)
    assert len(ops) > 150 and len(kernels) > 150
    assert len(set(ops)) == len(ops), "an op is listed twice in op_list.h"
    assert len(set(kernels)) == len(kernels), "an op has two CPU kernels in kernel_list.h"
    assert set(kernels) - set(ops) == set(), "CPU kernels for ops op_list.h does not define"
    copies = {("KN_COPY_DOMAIN", "KN_OP_COPY_TO_DEVICE"), ("KN_COPY_DOMAIN", "KN_OP_COPY_TO_HOST")}
    control_flow = set(rows("src/ops/op_list.h", SUBGRAPH_ROW))
    assert {op for _, op in control_flow} == {'"If"', '"Loop"', '"Scan"', '"SequenceMap"'}
    assert set(ops) - set(kernels) == copies | control_flow
