"""Read the layer list of a plan (docs/plan-format.md): enough of STRINGS and GRAPH to name the
live nodes, for comparing what two builds produced."""

from __future__ import annotations

import struct
from typing import Dict, List, Optional, Tuple, Union

from ._lib import ERR_PLAN, KilnError

_MAGIC = b"KILNPLAN"
_STRINGS, _GRAPH = 1, 2
_ATTR_FIXED = {1: 4, 2: 8, 3: 4, 5: 0}


def is_plan(data: Union[bytes, bytearray, memoryview]) -> bool:
    return bytes(data[:8]) == _MAGIC


def _sections(buf: memoryview) -> Dict[int, Tuple[int, int]]:
    if not is_plan(buf):
        raise KilnError(ERR_PLAN, "not a kiln plan (bad magic)")
    (count,) = struct.unpack_from("<I", buf, 48)
    out = {}
    for i in range(count):
        sid, _flags, off, size, _sum = struct.unpack_from("<IIQQQ", buf, 64 + 32 * i)
        out[sid] = (off, size)
    return out


def _strings(buf: memoryview, off: int) -> List[str]:
    count, _ = struct.unpack_from("<II", buf, off)
    blob = off + 8 + 8 * count
    out = []
    for i in range(count):
        so, sl = struct.unpack_from("<II", buf, off + 8 + 8 * i)
        out.append(bytes(buf[blob + so : blob + so + sl]).decode("utf-8", "replace"))
    return out


def layers(
    plan: Union[bytes, bytearray, memoryview],
) -> List[Tuple[Optional[str], Optional[str], Optional[str]]]:
    """[(name, op_type, domain)] of the plan's live nodes, in execution order."""
    buf = memoryview(bytes(plan))
    secs = _sections(buf)
    if _STRINGS not in secs or _GRAPH not in secs:
        raise KilnError(ERR_PLAN, "plan lacks its STRINGS or GRAPH section")
    strs = _strings(buf, secs[_STRINGS][0])

    def s(i: int) -> Optional[str]:
        return None if i == 0xFFFFFFFF else strs[i]

    p = secs[_GRAPH][0]
    _name, n_values, n_nodes = struct.unpack_from("<III", buf, p)
    p += 36  # name, five counts, reserved, i64 ir_version
    for _ in range(n_values):
        (rank,) = struct.unpack_from("<i", buf, p + 8)
        p += 32 + 16 * max(rank, 0)
    out = []
    for _ in range(n_nodes):
        name, op, dom, _opset, flags, n_in, n_out, n_attr = struct.unpack_from(
            "<IIIiIIII", buf, p
        )
        p += 32 + 4 * n_in + 4 * n_out
        for _ in range(n_attr):
            (atype,) = struct.unpack_from("<I", buf, p + 4)
            p += 8
            if atype in _ATTR_FIXED:
                p += _ATTR_FIXED[atype]
            elif atype == 4:
                (rank,) = struct.unpack_from("<i", buf, p + 4)
                p += 8 + 8 * rank + 16
            elif atype in (6, 7, 8):
                (n,) = struct.unpack_from("<I", buf, p)
                p += 4 + n * (8 if atype == 7 else 4)
            else:
                raise KilnError(ERR_PLAN, f"unknown attribute type {atype} in the plan")
        if not flags & 1:
            out.append((s(name), s(op), s(dom)))
    return out
