"""Process-wide hooks: the logger, and allocation accounting."""

import enum

from . import _lib
from ._lib import lib


class LogLevel(enum.IntEnum):
    ERROR = 0
    WARNING = 1
    INFO = 2
    VERBOSE = 3


_logger = [None]  # the ctypes callback in use, kept alive while kiln may call it


def set_logger(fn, max_level=LogLevel.WARNING):
    """Send kiln's warnings and progress to fn(level: LogLevel, message: str); None stops.
    Set it before other kiln calls. Exceptions raised by fn are swallowed: logging never
    fails a kiln call."""
    if fn is None:
        lib.kiln_set_logger(_lib.LOGGER_FN(), None, int(max_level))
        _logger[0] = None
        return

    def call(user, level, message):
        try:
            fn(LogLevel(level), message.decode("utf-8", "replace") if message else "")
        except BaseException:
            pass

    cb = _lib.LOGGER_FN(call)
    lib.kiln_set_logger(cb, None, int(max_level))
    _logger[0] = cb


def allocated_bytes():
    """Bytes kiln currently has allocated (weights mapped from plan files excluded)."""
    return int(lib.kiln_allocated_bytes())


def dtype_size(dtype):
    from ._dtypes import from_any

    return int(lib.kiln_dtype_size(from_any(dtype)))


