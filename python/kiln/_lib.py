"""ctypes declarations of libkiln's public C API (include/kiln/kiln.h, kiln_plugin.h).

The library is found through the KILN_LIBRARY environment variable, else inside the installed
package (kiln/lib/libkiln.so, where the wheel puts it), else at <repo>/build/lib/libkiln.so
relative to this package in a source tree.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Callable, Iterable, List, Optional, SupportsInt
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_void_p,
)

MAX_RANK = 8

# kiln_status
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_IO = 2
ERR_MODEL = 3
ERR_UNSUPPORTED = 4
ERR_SHAPE = 5
ERR_DTYPE = 6
ERR_OUT_OF_MEMORY = 7
ERR_PLAN = 8
ERR_PLUGIN = 9
ERR_NOT_FOUND = 10
ERR_INTERNAL = 11

STATUS_NAMES = {
    0: "OK",
    1: "INVALID_ARGUMENT",
    2: "IO",
    3: "MODEL",
    4: "UNSUPPORTED",
    5: "SHAPE",
    6: "DTYPE",
    7: "OUT_OF_MEMORY",
    8: "PLAN",
    9: "PLUGIN",
    10: "NOT_FOUND",
    11: "INTERNAL",
}


class KilnError(RuntimeError):
    """A failed kiln call: `status` is the kiln_status code, `message` the library's one-line
    reason (kiln_last_error())."""

    def __init__(self, status: int, message: str) -> None:
        self.status = int(status)
        self.message = message
        super().__init__(f"[{STATUS_NAMES.get(self.status, self.status)}] {message}")

    @property
    def status_name(self) -> str:
        return STATUS_NAMES.get(self.status, str(self.status))


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# In a source tree the package is <repo>/python/kiln; installed, these paths do not exist.
REPO_DIR = os.path.dirname(os.path.dirname(PACKAGE_DIR))


def installed(*parts: str) -> Optional[str]:
    """A path inside the installed package (the wheel's CMake prefix), or None."""
    path = os.path.join(PACKAGE_DIR, *parts)
    return path if os.path.exists(path) else None


def _find_library() -> str:
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return env
    return installed("lib", "libkiln.so") or os.path.join(REPO_DIR, "build", "lib", "libkiln.so")


LIBRARY_PATH = _find_library()
if not os.path.exists(LIBRARY_PATH):
    raise ImportError(
        f"kiln: shared library not found at {LIBRARY_PATH}: build it with "
        "`cmake -S . -B build && cmake --build build` or set KILN_LIBRARY"
    )
lib = ctypes.CDLL(LIBRARY_PATH)

status_t = c_int
tensor_id = c_int32


class IoInfo(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_int),
        ("rank", c_int),
        ("dims", c_int64 * MAX_RANK),
        ("symbols", c_char_p * MAX_RANK),
        ("min", c_int64 * MAX_RANK),
        ("opt", c_int64 * MAX_RANK),
        ("max", c_int64 * MAX_RANK),
        ("kind", c_int),
    ]


class TensorView(Structure):
    _fields_ = [
        ("dtype", c_int),
        ("rank", c_int),
        ("dims", c_int64 * MAX_RANK),
        ("data", c_void_p),
        ("size", c_size_t),
    ]


class Attribute(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("type", c_int32),
        ("i", c_int64),
        ("f", c_float),
        ("s", c_char_p),
        ("n", c_int64),
        ("ints", POINTER(c_int64)),
        ("floats", POINTER(c_float)),
    ]


# ---- kiln_plugin.h ------------------------------------------------------------------------

PLUGIN_ABI_VERSION = 2
BACKEND_CPU = 0
BACKEND_CUDA = 1
MEMORY_HOST = 0
MEMORY_DEVICE = 2


class Field(Structure):
    _fields_ = [("name", c_char_p), ("type", c_int32), ("count", c_int64), ("data", c_void_p)]


class FieldList(Structure):
    _fields_ = [("count", c_int32), ("fields", POINTER(Field))]


class FieldSpec(Structure):
    _fields_ = [("name", c_char_p), ("type", c_int32), ("required", c_int32)]


class TensorDesc(Structure):
    _fields_ = [
        ("dtype", c_int32),
        ("layout", c_int32),
        ("rank", c_int32),
        ("dims", c_int64 * MAX_RANK),
    ]


class DynamicDesc(Structure):
    _fields_ = [("desc", TensorDesc), ("min", c_int64 * MAX_RANK), ("max", c_int64 * MAX_RANK)]


class ShapeExpr(Structure):
    _fields_ = [("rank", c_int32), ("dims", c_void_p * MAX_RANK)]


class Stream(Structure):
    _fields_ = [("backend", c_int32), ("handle", c_void_p), ("host_private", c_void_p)]


NUM_OUTPUTS_FN = CFUNCTYPE(c_int32, c_void_p)
OUTPUT_DTYPES_FN = CFUNCTYPE(
    c_int32, c_void_p, c_int32, POINTER(c_int32), c_int32, POINTER(c_int32)
)
OUTPUT_SHAPES_FN = CFUNCTYPE(
    c_int32, c_void_p, c_int32, POINTER(ShapeExpr), c_int32, POINTER(ShapeExpr), c_void_p
)
SUPPORTS_FORMAT_FN = CFUNCTYPE(c_int32, c_void_p, c_int32, POINTER(TensorDesc), c_int32, c_int32)
CONFIGURE_FN = CFUNCTYPE(
    c_int32, c_void_p, c_int32, POINTER(DynamicDesc), c_int32, POINTER(DynamicDesc)
)
WORKSPACE_FN = CFUNCTYPE(
    c_size_t, c_void_p, c_int32, POINTER(TensorDesc), c_int32, POINTER(TensorDesc)
)
SHAPE_CHANGE_FN = CFUNCTYPE(
    c_int32, c_void_p, c_int32, POINTER(TensorDesc), c_int32, POINTER(TensorDesc)
)
ENQUEUE_FN = CFUNCTYPE(
    c_int32,
    c_void_p,
    c_int32,
    POINTER(TensorDesc),
    POINTER(c_void_p),
    c_int32,
    POINTER(TensorDesc),
    POINTER(c_void_p),
    c_void_p,
    POINTER(Stream),
)
GET_FIELDS_FN = CFUNCTYPE(c_int32, c_void_p, POINTER(FieldList))
CLONE_FN = CFUNCTYPE(c_void_p, c_void_p)
DESTROY_FN = CFUNCTYPE(None, c_void_p)
SUPPORTS_BACKEND_FN = CFUNCTYPE(c_int32, c_void_p, c_char_p)


class PluginOps(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("abi_version", c_uint32),
        ("num_outputs", NUM_OUTPUTS_FN),
        ("output_dtypes", OUTPUT_DTYPES_FN),
        ("output_shapes", OUTPUT_SHAPES_FN),
        ("supports_format", SUPPORTS_FORMAT_FN),
        ("configure", CONFIGURE_FN),
        ("workspace_size", WORKSPACE_FN),
        ("on_shape_change", SHAPE_CHANGE_FN),
        ("enqueue", ENQUEUE_FN),
        ("get_fields", GET_FIELDS_FN),
        ("clone", CLONE_FN),
        ("destroy", DESTROY_FN),
        ("supports_backend", SUPPORTS_BACKEND_FN),
        ("flags", c_uint32),
    ]


class PluginInstance(Structure):
    _fields_ = [("ops", POINTER(PluginOps)), ("self", c_void_p)]


class PluginCreator(Structure):
    pass


CREATE_FN = CFUNCTYPE(c_int32, POINTER(PluginCreator), POINTER(FieldList), POINTER(PluginInstance))

PluginCreator._fields_ = [
    ("struct_size", c_uint32),
    ("abi_version", c_uint32),
    ("name", c_char_p),
    ("version", c_char_p),
    ("plugin_namespace", c_char_p),
    ("n_field_specs", c_int32),
    ("field_specs", POINTER(FieldSpec)),
    ("create", CREATE_FN),
    ("user", c_void_p),
]

# set_error is printf-style; it is always called here as set_error("%s", message).
SET_ERROR_FN = CFUNCTYPE(None, c_char_p, c_char_p)
LOG_FN = CFUNCTYPE(None, c_int32, c_char_p)
EXPR_CONSTANT_FN = CFUNCTYPE(c_void_p, c_void_p, c_int64)
EXPR_OP_FN = CFUNCTYPE(c_void_p, c_void_p, c_int32, c_void_p, c_void_p)
EXPR_VALUE_FN = CFUNCTYPE(c_int32, c_void_p, POINTER(c_int64))


class HostApi(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("abi_version", c_uint32),
        ("register_creator", c_void_p),
        ("set_error", SET_ERROR_FN),
        ("log", LOG_FN),
        ("expr_constant", EXPR_CONSTANT_FN),
        ("expr_op", EXPR_OP_FN),
        ("expr_value", EXPR_VALUE_FN),
        ("parallel_for", c_void_p),
    ]


ALLOC_FN = CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_size_t)
FREE_FN = CFUNCTYPE(None, c_void_p, c_void_p)


class Allocator(Structure):
    _fields_ = [("alloc", ALLOC_FN), ("free", FREE_FN), ("user", c_void_p)]


PROGRESS_FN = CFUNCTYPE(None, c_void_p, c_char_p, c_double)
LOGGER_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


def _declare(name: str, restype: Any, *argtypes: Any) -> Any:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_P = POINTER
_declare("kiln_last_error", c_char_p)
_declare("kiln_status_name", c_char_p, status_t)
_declare("kiln_version_string", c_char_p)
_declare("kiln_dtype_name", c_char_p, c_int)
_declare("kiln_dtype_size", c_size_t, c_int)
_declare("kiln_allocated_bytes", c_size_t)
_declare("kiln_set_logger", None, LOGGER_FN, c_void_p, c_int)
# Declared for completeness; not wrapped: an allocator written in Python would hold the GIL on
# every allocation of every thread.
_declare("kiln_set_allocator", None, POINTER(Allocator))

_declare("kiln_registry_create", status_t, _P(c_void_p))
_declare("kiln_registry_destroy", None, c_void_p)
_declare("kiln_registry_load_library", status_t, c_void_p, c_char_p)
_declare("kiln_registry_load_env", status_t, c_void_p)
_declare("kiln_registry_register", status_t, c_void_p, _P(PluginCreator))
_declare("kiln_registry_deregister", status_t, c_void_p, c_char_p, c_char_p, c_char_p)
_declare("kiln_registry_count", c_int, c_void_p)
_declare("kiln_registry_get", status_t, c_void_p, c_int, _P(c_char_p), _P(c_char_p), _P(c_char_p))
_declare("kiln_host_api_get", _P(HostApi))

_declare("kiln_builder_create", status_t, _P(c_void_p))
_declare("kiln_builder_destroy", None, c_void_p)
_declare("kiln_builder_set_registry", status_t, c_void_p, c_void_p)
_declare("kiln_network_from_onnx_file", status_t, c_void_p, c_char_p, _P(c_void_p))
_declare("kiln_network_from_onnx_memory", status_t, c_void_p, c_char_p, c_size_t, _P(c_void_p))
_declare("kiln_network_destroy", None, c_void_p)

_declare("kiln_network_create", status_t, c_void_p, c_int, _P(c_void_p))
_declare(
    "kiln_network_add_input",
    status_t,
    c_void_p,
    c_char_p,
    c_int,
    c_int,
    _P(c_int64),
    _P(c_char_p),
    _P(tensor_id),
)
_declare(
    "kiln_network_add_constant",
    status_t,
    c_void_p,
    c_char_p,
    c_int,
    c_int,
    _P(c_int64),
    c_void_p,
    c_int,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_layer",
    status_t,
    c_void_p,
    c_char_p,
    c_char_p,
    c_int,
    _P(tensor_id),
    c_int,
    _P(Attribute),
    c_int,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_convolution",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    tensor_id,
    tensor_id,
    _P(c_int64),
    _P(c_int64),
    _P(c_int64),
    c_int64,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_matmul",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    tensor_id,
    tensor_id,
    c_int,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_activation",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    c_int,
    c_float,
    c_float,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_elementwise",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    tensor_id,
    c_int,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_pooling",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    c_int,
    c_int,
    _P(c_int64),
    _P(c_int64),
    _P(c_int64),
    _P(tensor_id),
)
_declare(
    "kiln_network_add_reshape",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    c_int,
    _P(c_int64),
    _P(tensor_id),
)
_declare(
    "kiln_network_add_transpose",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    c_int,
    _P(c_int64),
    _P(tensor_id),
)
_declare(
    "kiln_network_add_concat",
    status_t,
    c_void_p,
    c_char_p,
    c_int,
    _P(tensor_id),
    c_int64,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_softmax", status_t, c_void_p, c_char_p, tensor_id, c_int64, _P(tensor_id)
)
_declare(
    "kiln_network_add_normalization",
    status_t,
    c_void_p,
    c_char_p,
    tensor_id,
    tensor_id,
    tensor_id,
    tensor_id,
    tensor_id,
    c_float,
    _P(tensor_id),
)
_declare(
    "kiln_network_add_plugin",
    status_t,
    c_void_p,
    c_char_p,
    c_char_p,
    c_char_p,
    c_char_p,
    c_int,
    _P(tensor_id),
    c_int,
    _P(Field),
    c_int,
    _P(tensor_id),
)
_declare("kiln_network_set_tensor_name", status_t, c_void_p, tensor_id, c_char_p)
_declare("kiln_network_mark_output", status_t, c_void_p, tensor_id)
_declare(
    "kiln_network_tensor_info", status_t, c_void_p, tensor_id, _P(c_int), _P(c_int), _P(c_int64)
)
_declare("kiln_network_num_layers", c_int, c_void_p)

_declare("kiln_build_config_create", status_t, _P(c_void_p))
_declare("kiln_build_config_destroy", None, c_void_p)
_declare("kiln_build_config_set_threads", status_t, c_void_p, c_int)
_declare(
    "kiln_build_config_add_profile",
    status_t,
    c_void_p,
    c_char_p,
    c_int,
    _P(c_int64),
    _P(c_int64),
    _P(c_int64),
)
_declare("kiln_build_config_prefer_plugin", status_t, c_void_p, c_char_p)
_declare("kiln_build_config_set_backends", status_t, c_void_p, _P(c_char_p), ctypes.c_int)
_declare("kiln_build_config_set_precision", status_t, c_void_p, ctypes.c_int)
_declare("kiln_build_config_set_tactics", status_t, c_void_p, ctypes.c_int)
_declare("kiln_build_config_set_timing_cache", status_t, c_void_p, ctypes.c_char_p)
_declare(
    "kiln_build_config_set_int8", status_t, c_void_p, ctypes.c_char_p, ctypes.c_int,
    ctypes.c_char_p,
)
_declare("kiln_build_config_set_layer_precision", status_t, c_void_p, c_char_p, ctypes.c_int)
_declare("kiln_build_config_set_progress", status_t, c_void_p, PROGRESS_FN, c_void_p)
_declare("kiln_build", status_t, c_void_p, c_void_p, c_void_p, _P(c_void_p), _P(c_size_t))
_declare("kiln_build_to_file", status_t, c_void_p, c_void_p, c_void_p, c_char_p)
_declare("kiln_free", None, c_void_p)

_declare("kiln_engine_load_file", status_t, c_char_p, c_void_p, _P(c_void_p))
_declare("kiln_engine_load_memory", status_t, c_void_p, c_size_t, c_void_p, _P(c_void_p))
_declare("kiln_engine_destroy", None, c_void_p)
_declare("kiln_engine_num_inputs", c_int, c_void_p)
_declare("kiln_engine_num_outputs", c_int, c_void_p)
_declare("kiln_engine_input_info", status_t, c_void_p, c_int, _P(IoInfo))
_declare("kiln_engine_output_info", status_t, c_void_p, c_int, _P(IoInfo))

_declare("kiln_context_create", status_t, c_void_p, _P(c_void_p))
_declare("kiln_context_destroy", None, c_void_p)
_declare("kiln_context_set_threads", status_t, c_void_p, c_int)
_declare("kiln_context_set_input_shape", status_t, c_void_p, c_char_p, c_int, _P(c_int64))
_declare("kiln_context_get_output_shape", status_t, c_void_p, c_char_p, _P(c_int), _P(c_int64))
_declare("kiln_context_get_tensor_shape", status_t, c_void_p, c_char_p, _P(c_int), _P(c_int64))
_declare("kiln_context_set_input", status_t, c_void_p, c_char_p, c_void_p, c_size_t)
_declare("kiln_context_set_output", status_t, c_void_p, c_char_p, c_void_p, c_size_t)
_declare("kiln_context_set_input_memory", status_t, c_void_p, c_char_p, c_void_p, c_size_t, c_int)
_declare("kiln_context_set_output_memory", status_t, c_void_p, c_char_p, c_void_p, c_size_t, c_int)
_declare("kiln_context_execute", status_t, c_void_p)
_declare("kiln_context_get_output", status_t, c_void_p, c_char_p, _P(TensorView))


def last_error() -> str:
    msg = lib.kiln_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int) -> None:
    """Raise KilnError for a failed status, with the library's message."""
    if status != OK:
        raise KilnError(status, last_error())


def encode(s: object) -> Optional[bytes]:
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    return os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode("utf-8")


def int64_array(values: Iterable[SupportsInt]) -> ctypes.Array[c_int64]:
    ints = [int(v) for v in values]
    return (c_int64 * max(len(ints), 1))(*ints)


# True once the interpreter is shutting down: destructors then leave C objects alone (the
# process is ending) rather than call into a half-torn-down interpreter.
finalizing: List[bool] = [False]


def _mark_finalizing() -> None:
    finalizing[0] = True


import atexit  # noqa: E402

atexit.register(_mark_finalizing)


class Handle:
    """A C object with a reference count, released by its Python owners' __del__.

    The garbage collector finalizes the objects of a reference cycle in no particular order, so
    an engine's Python object may be finalized before a context of it. Counting instead makes
    the C object go only after everything that depends on it: a Handle holds a reference to
    each handle it depends on (a context to its engine, an engine to its registry) until it is
    destroyed itself."""

    __slots__ = ("ptr", "_destroy", "_deps", "_refs", "_lock")

    def __init__(
        self,
        ptr: Optional[ctypes.c_void_p],
        destroy: Callable[[Any], None],
        *deps: Optional[Handle],
    ) -> None:
        self.ptr = ptr
        self._destroy = destroy
        self._deps: List[Handle] = [d for d in deps if d is not None]
        self._refs = 1
        self._lock = threading.Lock()
        for d in self._deps:
            d.acquire()

    def acquire(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if not last or finalizing[0]:
            return
        ptr, self.ptr = self.ptr, None
        if ptr:
            self._destroy(ptr)
        for d in self._deps:
            d.release()
