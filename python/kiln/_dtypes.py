"""kiln dtypes (ONNX TensorProto numbering) <-> numpy dtypes."""

import enum

import numpy as np

from ._lib import ERR_DTYPE, KilnError


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


_TO_NUMPY = {
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
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items() if k != DType.BFLOAT16}


def to_numpy(dtype):
    """numpy dtype of a kiln dtype number."""
    try:
        return _TO_NUMPY[DType(int(dtype))]
    except (KeyError, ValueError):
        raise KilnError(ERR_DTYPE, f"dtype {int(dtype)} has no numpy equivalent") from None


def from_any(dtype):
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


def name(dtype):
    try:
        return DType(int(dtype)).name.lower()
    except ValueError:
        return str(dtype)
