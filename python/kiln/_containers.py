"""Sequence and optional values <-> kiln's container blocks (docs/sequences.md): a list of arrays
is a sequence, None an empty optional, an array given for an optional input its one element."""

import struct
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _dtypes, _strings
from ._lib import ERR_INVALID_ARGUMENT, KilnError

CONTAINER = 64  # KILN_DTYPE_CONTAINER
_MAGIC = 0x51534E4B
_HEADER = struct.Struct("=IiiiQ")
_RECORD = struct.Struct("=ii8qQQ")
_ALIGN = 64


def _up(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


Part = Tuple[int, Tuple[int, ...], bytes]  # dtype, shape, bytes of one element


def _block(kind: int, elem: int, parts: Sequence[Part]) -> Any:
    at = _up(_HEADER.size + len(parts) * _RECORD.size)
    total = at + sum(_up(len(b)) for _, _, b in parts)
    out = bytearray(total)
    _HEADER.pack_into(out, 0, _MAGIC, kind, elem, len(parts), total)
    for i, (dt, shape, b) in enumerate(parts):
        dims = list(shape) + [0] * (8 - len(shape))
        _RECORD.pack_into(out, _HEADER.size + i * _RECORD.size, dt, len(shape), *dims, at, len(b))
        out[at:at + len(b)] = b
        at += _up(len(b))
    return np.frombuffer(bytes(out), dtype=np.uint8)


def _element(name: str, value: Any) -> Part:
    if isinstance(value, (list, tuple)):
        b = encode(name, value).tobytes()
        return CONTAINER, (len(b),), b
    if _strings.is_strings(value):
        b = _strings.encode(name, value).tobytes()
        return _strings.STRING, (len(b),), b
    arr = np.ascontiguousarray(np.asarray(value))
    if arr.ndim > 8:
        raise KilnError(ERR_INVALID_ARGUMENT, f"input '{name}': an element has rank {arr.ndim}")
    return _dtypes.from_any(arr.dtype), tuple(arr.shape), arr.tobytes()


#: kiln_io_kind of a container input or output
KINDS = {1: "sequence", 2: "optional", 3: "optional sequence"}


def encode(name: str, value: Any, kind: Optional[str] = None) -> Any:
    """The container block (a uint8 array) for a list (sequence), None or one value (optional)
    given for input `name`, which holds `kind` (None: undeclared)."""
    if value is None:
        if kind == "sequence":
            raise KilnError(ERR_INVALID_ARGUMENT,
                            f"input '{name}' is a sequence: give a list of arrays, not None")
        return _block(1, 0, [])
    is_list = isinstance(value, (list, tuple))
    if kind == "sequence" and not is_list:
        raise KilnError(ERR_INVALID_ARGUMENT,
                        f"input '{name}' is a sequence: give a list of arrays, not "
                        f"{type(value).__name__}")
    if kind == "optional sequence" and is_list:  # the optional's one element, a sequence
        part = _element(name, value)
        return _block(1, part[0], [part])
    if is_list and kind != "optional":
        parts = [_element(name, v) for v in value]
        if len({p[0] for p in parts}) > 1:
            raise KilnError(ERR_INVALID_ARGUMENT,
                            f"input '{name}': a sequence's elements must share one dtype")
        return _block(0, parts[0][0] if parts else 0, parts)
    part = _element(name, np.asarray(value) if is_list else value)  # an optional tensor
    return _block(1, part[0], [part])


def looks_like(value: Any) -> bool:
    """Whether a feed is meant as a sequence (a non-empty list of arrays) or an empty optional
    (None), before the model says so; a nested list of numbers stays a tensor."""
    return value is None or (isinstance(value, (list, tuple)) and len(value) > 0 and
                             all(isinstance(v, np.ndarray) for v in value))


def decode(raw: bytes) -> Any:
    """A list (sequence), None (empty optional) or the element of an optional."""
    raw = bytes(raw)
    magic, kind, _, count, total = _HEADER.unpack_from(raw, 0)
    if magic != _MAGIC or total != len(raw):
        raise KilnError(ERR_INVALID_ARGUMENT, "not a kiln sequence/optional block")
    items: List[Any] = []
    for i in range(count):
        rec = _RECORD.unpack_from(raw, _HEADER.size + i * _RECORD.size)
        dt, rank, dims, off, nb = rec[0], rec[1], rec[2:10], rec[10], rec[11]
        data = raw[off:off + nb]
        if dt == CONTAINER:
            items.append(decode(data))
        elif dt == _strings.STRING:
            items.append(_strings.decode(data))
        else:
            items.append(np.frombuffer(data, dtype=_dtypes.to_numpy(dt)).reshape(dims[:rank]).copy())
    if kind == 1:
        return items[0] if items else None
    return items
