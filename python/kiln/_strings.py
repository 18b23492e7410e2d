"""numpy string arrays <-> kiln's string blocks (docs/strings.md): a header with the array's
shape, count + 1 offsets, then every element's UTF-8 bytes."""

import struct
from typing import Any, List

import numpy as np
from numpy.typing import NDArray

from ._lib import ERR_DTYPE, ERR_INVALID_ARGUMENT, KilnError

STRING = 8  # KILN_DTYPE_STRING
_MAGIC = 0x54534E4B
_HEADER = struct.Struct("<Ii8qQQ")


def is_strings(value: Any) -> bool:
    """Whether a feed is a numpy array of str or bytes (or of Python str objects)."""
    if not isinstance(value, np.ndarray):
        return False
    if value.dtype.kind in "US":
        return True
    return value.dtype == object and all(isinstance(v, (str, bytes)) for v in value.flat)


def encode(name: str, value: Any) -> NDArray[np.uint8]:
    """The string block (a uint8 array) for an array of str or bytes."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "USO":
        raise KilnError(ERR_DTYPE, f"input '{name}' is a string tensor; got an array of "
                                   f"{arr.dtype.name}")
    if arr.ndim > 8:
        raise KilnError(ERR_INVALID_ARGUMENT, f"input '{name}' has rank {arr.ndim}")
    parts: List[bytes] = []
    for v in arr.flat:
        if isinstance(v, bytes):
            parts.append(v)
        elif isinstance(v, str):
            parts.append(v.encode("utf-8"))
        else:
            raise KilnError(ERR_DTYPE, f"input '{name}': element {v!r} is not str or bytes")
    offsets = [0]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    dims = list(arr.shape) + [0] * (8 - arr.ndim)
    total = _HEADER.size + 8 * len(offsets) + offsets[-1]
    head = _HEADER.pack(_MAGIC, arr.ndim, *dims, len(parts), total)
    raw = head + struct.pack(f"<{len(offsets)}Q", *offsets) + b"".join(parts)
    return np.frombuffer(raw, dtype=np.uint8)


def decode(raw: bytes) -> NDArray[Any]:
    """The array of str a block holds (of bytes when an element is not valid UTF-8)."""
    raw = bytes(raw)
    if len(raw) < _HEADER.size:
        raise KilnError(ERR_INVALID_ARGUMENT, "not a kiln string block")
    head = _HEADER.unpack_from(raw, 0)
    magic, rank, dims, count, total = head[0], head[1], head[2:10], head[10], head[11]
    if magic != _MAGIC or total != len(raw) or not 0 <= rank <= 8:
        raise KilnError(ERR_INVALID_ARGUMENT, "not a kiln string block")
    shape = tuple(int(d) for d in dims[:rank])
    if _HEADER.size + 8 * (count + 1) > len(raw):
        raise KilnError(ERR_INVALID_ARGUMENT, "kiln string block: truncated offsets")
    offsets = struct.unpack_from(f"<{count + 1}Q", raw, _HEADER.size)
    base = _HEADER.size + 8 * (count + 1)
    items = [raw[base + offsets[i]:base + offsets[i + 1]] for i in range(count)]
    try:
        texts = [b.decode("utf-8") for b in items]
    except UnicodeDecodeError:
        return np.array(items, dtype=object).reshape(shape)
    if not texts:
        return np.empty(shape, dtype="<U1")
    return np.array(texts, dtype=str).reshape(shape)
