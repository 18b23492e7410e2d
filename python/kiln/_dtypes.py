"""kiln dtypes (ONNX TensorProto numbering) <-> numpy dtypes.

The 8-bit floats, int4/uint4, float4e2m1 and int2/uint2 are storage types of one byte per element
(the 4- and 2-bit ones in the low bits). With ml_dtypes installed (onnx depends on it) they map to its
dtypes, whose byte layout is the same; without it they travel as uint8 arrays of the codes.
bfloat16 travels as uint16 bit patterns either way, as it always has."""

from __future__ import annotations

import enum
from typing import Any, Dict

import numpy as np

try:
    import ml_dtypes
except ImportError:  # the uint8 form below needs nothing
    ml_dtypes = None  # type: ignore[assignment]

from ._lib import ERR_DTYPE, KilnError

#: A kiln.DType, its number, a numpy dtype or anything np.dtype takes ("float32", np.int64).
DTypeArg = Any


class DType(enum.IntEnum):
    UNDEFINED = 0
    FLOAT32 = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    FLOAT64 = 11
    UINT32 = 12
    UINT64 = 13
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26


_TO_NUMPY: Dict[DType, np.dtype[Any]] = {
    DType.FLOAT32: np.dtype(np.float32),
    DType.UINT8: np.dtype(np.uint8),
    DType.INT8: np.dtype(np.int8),
    DType.UINT16: np.dtype(np.uint16),
    DType.INT16: np.dtype(np.int16),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.BOOL: np.dtype(np.bool_),
    DType.FLOAT16: np.dtype(np.float16),
    DType.FLOAT64: np.dtype(np.float64),
    DType.UINT32: np.dtype(np.uint32),
    DType.UINT64: np.dtype(np.uint64),
    # numpy has no bfloat16: its 16-bit patterns travel as uint16.
    DType.BFLOAT16: np.dtype(np.uint16),
}
_ML_DTYPES = {
    DType.FLOAT8E4M3FN: "float8_e4m3fn",
    DType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    DType.FLOAT8E5M2: "float8_e5m2",
    DType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    DType.UINT4: "uint4",
    DType.INT4: "int4",
    DType.UINT2: "uint2",
    DType.INT2: "int2",
    DType.FLOAT4E2M1: "float4_e2m1fn",
    DType.FLOAT8E8M0: "float8_e8m0fnu",
}
for _k, _name in _ML_DTYPES.items():
    _t = getattr(ml_dtypes, _name, None) if ml_dtypes is not None else None
    _TO_NUMPY[_k] = np.dtype(_t) if _t is not None else np.dtype(np.uint8)
# Only dtypes that name one kiln dtype map back: uint8 stays UINT8, uint16 stays UINT16.
_FROM_NUMPY: Dict[np.dtype[Any], DType] = {}
for _k, _v in _TO_NUMPY.items():
    _FROM_NUMPY.setdefault(_v, _k)


def narrow_as_numpy() -> bool:
    """True when the 8- and 4-bit storage types map to ml_dtypes dtypes, False when they
    travel as uint8 codes."""
    return ml_dtypes is not None


def to_numpy(dtype: int) -> np.dtype[Any]:
    """numpy dtype of a kiln dtype number."""
    if int(dtype) == DType.STRING:
        raise KilnError(ERR_DTYPE, "string tensors have no numpy buffer form in kiln")
    try:
        return _TO_NUMPY[DType(int(dtype))]
    except (KeyError, ValueError):
        raise KilnError(ERR_DTYPE, f"dtype {int(dtype)} has no numpy equivalent") from None


def from_any(dtype: DTypeArg) -> int:
    """kiln dtype number from a kiln.DType, an int, a numpy dtype or anything np.dtype takes."""
    if isinstance(dtype, DType):
        return int(dtype)
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return int(DType(dtype))
    try:
        nd = np.dtype(dtype)
    except TypeError:
        raise KilnError(ERR_DTYPE, f"{dtype!r} is not a data type") from None
    if nd not in _FROM_NUMPY:
        raise KilnError(ERR_DTYPE, f"numpy dtype {nd} has no kiln equivalent")
    return int(_FROM_NUMPY[nd])


def name(dtype: int) -> str:
    try:
        return DType(int(dtype)).name.lower()
    except ValueError:
        return str(dtype)
