"""Load engines, run contexts."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _containers, _device, _strings
from . import _dtypes
from ._containers import CONTAINER
from . import _lib
from . import _plan
from . import registry as _registry
from ._lib import (
    ERR_DTYPE,
    ERR_INVALID_ARGUMENT,
    ERR_NOT_FOUND,
    ERR_SHAPE,
    KilnError,
    check,
    encode,
    int64_array,
    lib,
)
from .builder import _is_path, build
from .network import Network
from .builder import PluginsArg, ShapesArg


class IOInfo:
    """An engine input or output. shape: ints for fixed dims, the dim's symbol (str) for
    dynamic ones; min_shape/opt_shape/max_shape: the profile bounds (inputs)."""

    def __init__(self, info: _lib.IoInfo, is_input: bool) -> None:
        self.name = info.name.decode("utf-8")
        self.kiln_dtype = int(info.dtype)
        self.dtype: Optional[np.dtype[Any]] = (
            _dtypes.to_numpy(info.dtype) if info.dtype not in (8, CONTAINER) else None
        )
        r = info.rank
        syms = [info.symbols[d] for d in range(r)]
        self.shape: Tuple[Union[int, str], ...] = tuple(
            syms[d].decode("utf-8") if syms[d] else int(info.dims[d]) for d in range(r)
        )
        self.is_input = is_input
        #: what a container holds: "sequence", "optional", "optional sequence", or None
        self.kind: Optional[str] = _containers.KINDS.get(int(info.kind))
        self.min_shape = tuple(int(info.min[d]) for d in range(r))
        self.opt_shape = tuple(int(info.opt[d]) for d in range(r))
        self.max_shape = tuple(int(info.max[d]) for d in range(r))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dynamic(self) -> bool:
        return any(isinstance(d, str) for d in self.shape)

    def __repr__(self) -> str:
        dt = self.dtype.name if self.dtype is not None else _dtypes.name(self.kiln_dtype)
        s = f"IOInfo({self.name!r}, {dt}, {self.shape}"
        if self.is_input and self.dynamic:
            s += f", min={self.min_shape}, opt={self.opt_shape}, max={self.max_shape}"
        return s + ")"


class Engine:
    """A loaded plan. plan: a path (mapped) or bytes (copied). plugins: as for kiln.build; the
    registry is kept alive with the engine."""

    def __init__(
        self,
        plan: Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"],
        plugins: Optional[PluginsArg] = None,
    ) -> None:
        self.registry = _registry.resolve(plugins)
        h = ctypes.c_void_p()
        if isinstance(plan, (bytes, bytearray, memoryview)):
            buf = bytes(plan)
            check(lib.kiln_engine_load_memory(buf, len(buf), self.registry.handle, ctypes.byref(h)))
        elif _is_path(plan):
            check(
                lib.kiln_engine_load_file(
                    encode(os.fspath(plan)), self.registry.handle, ctypes.byref(h)
                )
            )
        else:
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"Engine: plan must be a path or bytes, got {type(plan).__name__}",
            )
        self._hobj: Optional[_lib.Handle] = _lib.Handle(
            h, lib.kiln_engine_destroy, self.registry.handle_ref
        )
        self._h = h
        info = _lib.IoInfo()
        self.inputs: List[IOInfo] = []
        for i in range(lib.kiln_engine_num_inputs(h)):
            check(lib.kiln_engine_input_info(h, i, ctypes.byref(info)))
            self.inputs.append(IOInfo(info, True))
        self.outputs: List[IOInfo] = []
        for i in range(lib.kiln_engine_num_outputs(h)):
            check(lib.kiln_engine_output_info(h, i, ctypes.byref(info)))
            self.outputs.append(IOInfo(info, False))
        self._inputs = {i.name: i for i in self.inputs}

    @property
    def handle(self) -> ctypes.c_void_p:
        return self._h

    @property
    def handle_ref(self) -> Optional[_lib.Handle]:
        return self._hobj

    def context(self, threads: Optional[int] = None) -> "Context":
        return Context(self, threads)

    def run(self, feeds: Mapping[str, ArrayLike]) -> Dict[str, NDArray[Any]]:
        """Run once on a fresh context."""
        return self.context().run(feeds)

    def __del__(self) -> None:
        h = getattr(self, "_hobj", None)
        if h is not None:
            h.release()
            self._hobj = None


def _as_input(info: IOInfo, value: ArrayLike) -> NDArray[Any]:
    """value as a C-contiguous array of the input's dtype (converting only same-kind values,
    e.g. float64 -> float32 or int32 -> int64; float -> int is refused)."""
    if info.kiln_dtype == CONTAINER:  # a sequence (list) or optional (None or a value)
        return _containers.encode(info.name, value, info.kind)
    if info.kiln_dtype == _strings.STRING:  # an array of str or bytes
        return _strings.encode(info.name, value)
    want = info.dtype
    if want is None:
        raise KilnError(ERR_DTYPE, f"input '{info.name}' has a dtype Python cannot feed")
    if isinstance(value, np.ndarray):
        if value.dtype != want:
            if not np.can_cast(value.dtype, want, casting="same_kind"):
                raise KilnError(
                    ERR_DTYPE,
                    f"input '{info.name}' is {want.name}; got an array of {value.dtype.name}, "
                    f"which does not convert safely (convert it with .astype(np.{want.name}))",
                )
            value = value.astype(want)
        # np.ascontiguousarray turns a 0-d array into a 1-d one
        return value if value.flags["C_CONTIGUOUS"] else np.ascontiguousarray(value)
    try:
        arr = np.asarray(value)
    except Exception as e:
        raise KilnError(ERR_DTYPE, f"input '{info.name}': {e}") from None
    return _as_input(info, arr)


# Outputs of at least this many bytes are returned in arrays the model writes in place; smaller
# ones are copied out (cheaper than binding an array for each run).
_IN_PLACE_MIN_BYTES = 1 << 16
# kiln's arena alignment (KN_ARENA_ALIGN): a bound host buffer aligned so is written in place.
_ARENA_ALIGN = 64


def _in_place_candidate(o: IOInfo) -> bool:
    """Whether output o may be large enough to return in an array kiln writes in place."""
    if o.dtype is None or o.kind is not None:
        return False
    dims = [d for d in o.shape if isinstance(d, int)]
    if len(dims) < len(o.shape):  # a dynamic dim: the size is known per run
        return True
    return int(np.prod(dims, dtype=np.int64)) * o.dtype.itemsize >= _IN_PLACE_MIN_BYTES


class Context:
    """Mutable execution state for one thread."""

    def __init__(self, engine: Engine, threads: Optional[int] = None) -> None:
        self.engine = engine
        h = ctypes.c_void_p()
        check(lib.kiln_context_create(engine.handle, ctypes.byref(h)))
        self._hobj: Optional[_lib.Handle] = _lib.Handle(
            h, lib.kiln_context_destroy, engine.handle_ref
        )
        self._h = h
        # outputs whose shape depends on data: never bound, their size is known only after run
        self._data_dependent: set[str] = set()
        # outputs never returned in arrays of their own: no numpy form, or fixed and small
        self._copied_out = {o.name for o in engine.outputs if not _in_place_candidate(o)}
        self._bound: set[str] = set()  # outputs bound for the last run
        if threads is not None:
            check(lib.kiln_context_set_threads(h, int(threads)))

    def set_threads(self, threads: int) -> None:
        check(lib.kiln_context_set_threads(self._h, int(threads)))

    def set_input_shape(self, name: str, shape: Sequence[int]) -> None:
        shape = tuple(int(d) for d in shape)
        check(
            lib.kiln_context_set_input_shape(self._h, encode(name), len(shape), int64_array(shape))
        )

    def output_shape(self, name: str) -> Tuple[int, ...]:
        """An output's shape for the input shapes set (before execute)."""
        rank = ctypes.c_int()
        dims = (ctypes.c_int64 * _lib.MAX_RANK)()
        check(lib.kiln_context_get_output_shape(self._h, encode(name), ctypes.byref(rank), dims))
        return tuple(dims[i] for i in range(rank.value))

    def tensor_shape(self, name: str) -> Tuple[int, ...]:
        """Any tensor's shape for the input shapes set: a layer's input or output, by its name
        (`kiln inspect --json` lists each layer's). A tensor fused away or folded at build
        raises KilnError."""
        rank = ctypes.c_int()
        dims = (ctypes.c_int64 * _lib.MAX_RANK)()
        check(lib.kiln_context_get_tensor_shape(self._h, encode(name), ctypes.byref(rank), dims))
        return tuple(dims[i] for i in range(rank.value))

    def run(self, feeds: Mapping[str, Any], outputs: Any = None) -> Dict[str, Any]:
        """Run on {input name: array}; returns {output name: array}.

        Inputs are bound zero-copy when they are C-contiguous arrays of the input's dtype;
        other numpy-compatible values of a compatible dtype are converted first. CUDA arrays
        (torch CUDA tensors, CuPy arrays, anything with __cuda_array_interface__ or a CUDA
        __dlpack__) are bound as device memory without copies, after their stream is done;
        they must be C-contiguous and of the input's dtype, and only feed a plan built for
        the CUDA backend.

        outputs: None returns new numpy arrays (large ones written by the model in place, the
        others copied out). A dict {output name: array} binds those outputs to the arrays
        given (returned as given, written when run returns): CUDA arrays as device memory,
        numpy arrays (C-contiguous, writable, of the output's dtype and shape) as host memory,
        written in place where the producing layer can write them; "torch" returns every
        output as a new torch CUDA tensor."""
        if not isinstance(feeds, dict):
            raise KilnError(ERR_INVALID_ARGUMENT, "run: feeds must be a dict {name: array}")
        if outputs is not None and outputs != "torch" and not isinstance(outputs, dict):
            raise KilnError(
                ERR_INVALID_ARGUMENT, 'run: outputs must be None, "torch" or a dict {name: array}'
            )
        keep = []
        for name, value in feeds.items():
            info = self.engine._inputs.get(name)
            if info is None:
                have = ", ".join(self.engine._inputs) or "none"
                raise KilnError(ERR_NOT_FOUND, f"no input named '{name}' (the model has: {have})")
            nb = encode(name)
            if _device.is_device_array(value):
                holder, ptr, shape, _, nbytes = _device.describe(
                    value, f"input '{name}'", info.dtype
                )
                keep.append(holder)
                self.set_input_shape(name, shape)
                check(
                    lib.kiln_context_set_input_memory(
                        self._h, nb, ctypes.c_void_p(ptr), nbytes, _lib.MEMORY_DEVICE
                    )
                )
                continue
            arr = _as_input(info, value)
            keep.append(arr)
            self.set_input_shape(name, arr.shape)
            check(
                lib.kiln_context_set_input(
                    self._h, nb, arr.ctypes.data_as(ctypes.c_void_p), arr.nbytes
                )
            )
        missing = [n for n in self.engine._inputs if n not in feeds]
        if missing:
            raise KilnError(
                ERR_INVALID_ARGUMENT, f"run: no value given for input(s) {', '.join(missing)}"
            )
        bound = self._bind_outputs(outputs)
        check(lib.kiln_context_execute(self._h))
        del keep
        return {
            o.name: bound[o.name] if o.name in bound else self._output(o.name)
            for o in self.engine.outputs
        }

    def _known_shape(self, name: str) -> Optional[Tuple[int, ...]]:
        """An output's shape before run, or None when it depends on data."""
        if name in self._data_dependent:
            return None
        try:
            return self.output_shape(name)
        except KilnError as e:
            if e.status != ERR_SHAPE:
                raise
            self._data_dependent.add(name)
            return None

    def _new_host_output(self, o: IOInfo) -> Optional[NDArray[Any]]:
        """A new array for a large output of known shape, aligned as kiln's arena is so the
        producing layer can write it in place; None: the output is copied out after run."""
        if o.name in self._copied_out or o.dtype is None:
            return None
        shape = self._known_shape(o.name)
        if shape is None:
            return None
        nbytes = int(np.prod(shape, dtype=np.int64)) * o.dtype.itemsize
        if nbytes < _IN_PLACE_MIN_BYTES:
            return None
        raw = np.empty(nbytes + _ARENA_ALIGN, dtype=np.uint8)
        skip = -raw.ctypes.data % _ARENA_ALIGN
        return raw[skip : skip + nbytes].view(o.dtype).reshape(shape)

    def _bind_host(self, o: IOInfo, value: Any) -> NDArray[Any]:
        """Check a numpy array given for output o and bind it as host memory."""
        if not isinstance(value, np.ndarray):
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"output '{o.name}': outputs binds numpy arrays or CUDA arrays, "
                f"not {type(value).__name__}",
            )
        if o.dtype is None or o.kind is not None:
            raise KilnError(ERR_DTYPE, f"output '{o.name}' has no numpy form to bind")
        if value.dtype != o.dtype:
            raise KilnError(
                ERR_DTYPE, f"output '{o.name}' is {o.dtype}, the array given is {value.dtype}"
            )
        if not value.flags["C_CONTIGUOUS"] or not value.flags["WRITEABLE"]:
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"output '{o.name}': the array given must be C-contiguous and writable",
            )
        shape = self._known_shape(o.name)
        if shape is None:
            raise KilnError(
                ERR_SHAPE,
                f"output '{o.name}' has a data-dependent shape: it cannot be bound before run",
            )
        if tuple(value.shape) != shape:
            raise KilnError(
                ERR_SHAPE,
                f"output '{o.name}' is {shape} for these inputs, the array given is "
                f"{tuple(value.shape)}",
            )
        check(
            lib.kiln_context_set_output(
                self._h, encode(o.name), value.ctypes.data_as(ctypes.c_void_p), value.nbytes
            )
        )
        return value

    def _bind_outputs(self, outputs: Any) -> Dict[str, Any]:
        """Bind the outputs: those the caller gave (numpy arrays as host memory, CUDA arrays or
        the torch tensors asked for as device memory), and a new aligned array for each large
        host output of known shape; unbind what the run before bound and this one does not."""
        names = [o.name for o in self.engine.outputs]
        if outputs == "torch":
            # an output without a numpy dtype (string) gets np.dtype(None), float64
            outputs = {o.name: _device.empty_torch(self.output_shape(o.name), o.dtype)  # type: ignore[arg-type]
                       for o in self.engine.outputs}
        outputs = outputs or {}
        for name in outputs:
            if name not in names:
                raise KilnError(
                    ERR_NOT_FOUND, f"no output named '{name}' (the model has: {', '.join(names)})"
                )
        bound = {}
        for o in self.engine.outputs:
            if o.name in outputs:
                continue
            arr = self._new_host_output(o)
            if arr is not None:
                check(
                    lib.kiln_context_set_output(
                        self._h, encode(o.name), arr.ctypes.data_as(ctypes.c_void_p), arr.nbytes
                    )
                )
                bound[o.name] = arr
            elif o.name in self._bound:  # a binding of an earlier run must not outlive it
                check(lib.kiln_context_set_output(self._h, encode(o.name), None, 0))
        self._bound = set(bound) | set(outputs)
        infos = {o.name: o for o in self.engine.outputs}
        for name, value in outputs.items():
            if not _device.is_device_array(value):
                bound[name] = self._bind_host(infos[name], value)
                continue
            _, ptr, _, _, nbytes = _device.describe(value, f"output '{name}'")
            check(
                lib.kiln_context_set_output_memory(
                    self._h, encode(name), ctypes.c_void_p(ptr), nbytes, _lib.MEMORY_DEVICE
                )
            )
            bound[name] = value
        return bound

    def _output(self, name: str) -> NDArray[Any]:
        view = _lib.TensorView()
        check(lib.kiln_context_get_output(self._h, encode(name), ctypes.byref(view)))
        if view.dtype == CONTAINER:
            return _containers.decode(ctypes.string_at(view.data, view.size))
        if view.dtype == _strings.STRING:
            return _strings.decode(ctypes.string_at(view.data, view.size))
        dt = _dtypes.to_numpy(view.dtype)
        shape = tuple(view.dims[d] for d in range(view.rank))
        out = np.empty(shape, dtype=dt)
        if out.nbytes:
            if view.size < out.nbytes:
                raise KilnError(_lib.ERR_INTERNAL, f"output '{name}' is smaller than its shape")
            ctypes.memmove(out.ctypes.data, view.data, out.nbytes)
        return out

    def __del__(self) -> None:
        h = getattr(self, "_hobj", None)
        if h is not None:
            h.release()
            self._hobj = None


def _profile_shape(name: str, value: Any) -> Tuple[int, ...]:
    """The profile shape of a feed: a block's byte count for strings."""
    if _strings.is_strings(value):
        return (_strings.encode(name, value).size,)
    return tuple(np.shape(value))


def run(
    model_or_plan: Any,
    feeds: Mapping[str, ArrayLike],
    plugins: Optional[PluginsArg] = None,
    shapes: Optional[ShapesArg] = None,
    threads: Optional[int] = None,
) -> Dict[str, NDArray[Any]]:
    """Run a model once: an ONNX path/bytes or a kiln.Network is built in memory first (with
    the feeds' shapes as the profile unless shapes is given); a plan path/bytes is loaded."""
    plan = model_or_plan
    if isinstance(model_or_plan, Network):
        is_model = True
    elif isinstance(model_or_plan, (bytes, bytearray, memoryview)):
        is_model = not _plan.is_plan(model_or_plan)
    elif hasattr(model_or_plan, "SerializeToString"):
        is_model = True
    elif _is_path(model_or_plan):
        with open(model_or_plan, "rb") as f:
            is_model = not _plan.is_plan(f.read(8))
    else:
        raise KilnError(
            ERR_INVALID_ARGUMENT,
            f"run: expected a model or plan (path, bytes or kiln.Network), got "
            f"{type(model_or_plan).__name__}",
        )
    if is_model:
        if shapes is None:
            # a sequence or optional input needs no profile: its value sizes it at run time
            shapes = {n: _profile_shape(n, v) for n, v in feeds.items()
                      if not _containers.looks_like(v)}
        plan = build(model_or_plan, shapes=shapes, threads=threads, plugins=plugins)
    engine = Engine(plan, plugins=plugins)
    return engine.context().run(feeds)
