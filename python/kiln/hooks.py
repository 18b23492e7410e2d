"""Process-wide hooks: the logger, and allocation accounting."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from . import _lib
from ._lib import lib

if TYPE_CHECKING:
    from ._dtypes import DTypeArg


class LogLevel(enum.IntEnum):
    ERROR = 0
    WARNING = 1
    INFO = 2
    VERBOSE = 3


_logger: List[Any] = [None]  # the ctypes callback in use, kept alive while kiln may call it


def set_logger(
    fn: Optional[Callable[[LogLevel, str], object]], max_level: int = LogLevel.WARNING
) -> None:
    """Send kiln's warnings and progress to fn(level: LogLevel, message: str); None stops.
    Set it before other kiln calls. Exceptions raised by fn are swallowed: logging never
    fails a kiln call."""
    if fn is None:
        lib.kiln_set_logger(_lib.LOGGER_FN(), None, int(max_level))
        _logger[0] = None
        return

    def call(user: Optional[int], level: int, message: Optional[bytes]) -> None:
        try:
            fn(LogLevel(level), message.decode("utf-8", "replace") if message else "")
        except BaseException:
            pass

    cb = _lib.LOGGER_FN(call)
    lib.kiln_set_logger(cb, None, int(max_level))
    _logger[0] = cb


def allocated_bytes() -> int:
    """Bytes kiln currently has allocated (weights mapped from plan files excluded)."""
    return int(lib.kiln_allocated_bytes())


def dtype_size(dtype: DTypeArg) -> int:
    """Bytes of one element of a dtype (a kiln.DType, a number or a numpy dtype)."""
    from ._dtypes import from_any

    return int(lib.kiln_dtype_size(from_any(dtype)))


