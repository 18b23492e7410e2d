"""Device (CUDA) arrays at the Python boundary: torch CUDA tensors, CuPy arrays and anything
else exposing __cuda_array_interface__ (or a CUDA __dlpack__, read through torch), bound to a
context without copies, and the device arrays Python plugins get on the CUDA backend.

Nothing here imports torch or CuPy unless the caller's object comes from them."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from ._lib import ERR_DTYPE, ERR_INVALID_ARGUMENT, KilnError

_DLPACK_CUDA = 2  # DLDeviceType kDLCUDA


def _torch() -> Any:
    return sys.modules.get("torch")


def is_device_array(value: Any) -> bool:
    """Whether value lives in CUDA device memory (checked without copying it)."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    dev = getattr(value, "__dlpack_device__", None)
    if dev is None or isinstance(value, np.ndarray):
        return False
    try:
        return int(dev()[0]) == _DLPACK_CUDA
    except Exception:
        return False


def _interface(value: Any, what: str) -> Tuple[Any, dict]:
    """(the object holding the memory, its __cuda_array_interface__)."""
    if not hasattr(value, "__cuda_array_interface__"):
        torch = _torch()
        if torch is None:
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"{what}: a DLPack CUDA array without __cuda_array_interface__ needs torch to "
                "be read (import torch, or pass a torch/CuPy array)",
            )
        value = torch.from_dlpack(value)
    return value, value.__cuda_array_interface__


_cudart = None


def _stream_sync(handle: int, what: str) -> None:
    """Wait for the producer's stream (the interface's 'stream' key) before kiln reads."""
    global _cudart
    torch = _torch()
    if torch is not None:
        torch.cuda.ExternalStream(handle).synchronize()
        return
    if _cudart is None:
        for name in ("libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")):
            try:
                _cudart = ctypes.CDLL(name) if name else None
            except OSError:
                continue
            if _cudart is not None:
                break
    if _cudart is None:
        raise KilnError(
            ERR_INVALID_ARGUMENT,
            f"{what}: the array names a CUDA stream to wait for, and neither torch nor "
            "libcudart is available to wait on it",
        )
    _cudart.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    if _cudart.cudaStreamSynchronize(ctypes.c_void_p(handle)) != 0:
        raise KilnError(_lib.ERR_INTERNAL, f"{what}: waiting for the array's CUDA stream failed")


def describe(
    value: Any, what: str, want: Optional[np.dtype] = None
) -> Tuple[Any, int, Tuple[int, ...], np.dtype, int]:
    """(holder, device pointer, shape, numpy dtype, bytes) of a C-contiguous device array,
    after its producer's stream has finished writing it. Refuses strided arrays and, when
    want is given, any other dtype: converting would copy."""
    holder, cai = _interface(value, what)
    shape = tuple(int(d) for d in cai["shape"])
    dt = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None:
        expect, step = [], dt.itemsize
        for d in reversed(shape):
            expect.append(step)
            step *= max(d, 1)
        if any(d > 1 and s != e for d, s, e in zip(reversed(shape), reversed(strides), expect)):
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"{what}: the device array is not C-contiguous (call .contiguous() first)",
            )
    if want is not None and dt != want:
        raise KilnError(
            ERR_DTYPE,
            f"{what} is {want.name}; got a device array of {dt.name} (convert it on the device "
            "first: kiln binds device arrays without copies)",
        )
    ptr = int(cai["data"][0] or 0)
    stream = cai.get("stream")
    if stream is not None and int(stream) != 0:
        _stream_sync(int(stream), what)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return holder, ptr, shape, dt, n * dt.itemsize


def empty_torch(shape: Sequence[int], dtype: np.dtype) -> Any:
    """An uninitialised torch CUDA tensor of this shape and numpy dtype."""
    torch = _torch()
    if torch is None:
        try:
            import torch  # type: ignore[no-redef]  # noqa: F811 - asked for by name: outputs="torch"
        except ImportError:
            raise KilnError(ERR_INVALID_ARGUMENT, 'outputs="torch" needs torch') from None
    tdt = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    return torch.empty(tuple(shape), dtype=tdt, device="cuda")


class DeviceArray:
    """A plugin's view of a tensor in CUDA device memory (the CUDA backend). It holds no
    memory: shape, dtype, ptr (a device pointer) and stream (the context's cudaStream_t, as an
    int), and __cuda_array_interface__, so torch.as_tensor(a, device="cuda") or
    cupy.asarray(a) wrap it without copies (inputs have writable False: never write them).
    Work on it must be ordered on `stream` (e.g.
    inside torch.cuda.stream(torch.cuda.ExternalStream(a.stream))) or finished before compute
    returns."""

    __slots__ = ("shape", "dtype", "ptr", "stream", "writable")

    def __init__(
        self, ptr: int, shape: Sequence[int], dtype: np.dtype, stream: int, writable: bool
    ) -> None:
        self.ptr = int(ptr or 0)
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.stream = int(stream or 0)
        self.writable = writable

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        cai = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            # Consumers such as torch refuse read-only arrays; inputs must still not be written.
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
        }
        if self.stream not in (0, None):
            cai["stream"] = self.stream
        return cai

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, ptr=0x{self.ptr:x})"
