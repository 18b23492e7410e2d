"""Networks built by code: kiln.Network mirrors kiln_network_* of kiln.h. Every call is checked
by the library at once, so a wrong call raises KilnError where it is made."""

from __future__ import annotations

import ctypes
import enum
import os
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
    overload,
)

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import _dtypes
from . import _lib
from . import plugin as _plugin
from . import registry as _registry
from ._build_config import CalibrationArg, PrecisionArg, build_plan
from ._lib import ERR_INVALID_ARGUMENT, KilnError, check, encode, int64_array, lib

if TYPE_CHECKING:
    from ._dtypes import DTypeArg


class Activation(enum.IntEnum):
    RELU = 0
    SIGMOID = 1
    TANH = 2
    LEAKY_RELU = 3
    CLIP = 4
    GELU = 5
    SWISH = 6
    HARD_SWISH = 7
    ELU = 8


class ElementWise(enum.IntEnum):
    ADD = 0
    SUB = 1
    MUL = 2
    DIV = 3
    MAX = 4
    MIN = 5
    POW = 6


class Pooling(enum.IntEnum):
    MAX = 0
    AVERAGE = 1


#: A tensor of this network, or its raw id.
TensorArg = Union["Tensor", int]
#: A tensor, or an array added as a constant (weights, biases).
WeightArg = Union["Tensor", int, ArrayLike]
T = TypeVar("T", "Tensor", int)


E = TypeVar("E", bound=enum.IntEnum)


def _enum(kind: Type[E], value: Union[str, int], what: str) -> int:
    if isinstance(value, str):
        try:
            return kind[value.upper()]
        except KeyError:
            names = ", ".join(m.name.lower() for m in kind)
            raise KilnError(ERR_INVALID_ARGUMENT, f"{what} '{value}' is not one of: {names}")
    return int(value)


class Tensor:
    """A tensor of a Network: an id local to it, plus the name given to it here if any."""

    __slots__ = ("network", "id", "_name")

    def __init__(self, network: Network, tid: int, name: Optional[str] = None) -> None:
        self.network = network
        self.id = int(tid)
        self._name = name

    @property
    def name(self) -> Optional[str]:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self.network.set_tensor_name(self, value)

    def _info(self) -> Tuple[int, Optional[Tuple[int, ...]]]:
        dt, rank = ctypes.c_int(), ctypes.c_int()
        dims = (ctypes.c_int64 * _lib.MAX_RANK)()
        check(
            lib.kiln_network_tensor_info(
                self.network._h, self.id, ctypes.byref(dt), ctypes.byref(rank), dims
            )
        )
        return dt.value, (tuple(dims[i] for i in range(rank.value)) if rank.value >= 0 else None)

    @property
    def dtype(self) -> Optional[np.dtype[Any]]:
        """numpy dtype as far as known (None before inference)."""
        dt, _ = self._info()
        return _dtypes.to_numpy(dt) if dt else None

    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        """Shape as far as known: -1 for symbolic dims, None when the rank is unknown."""
        return self._info()[1]

    def __repr__(self) -> str:
        return f"kiln.Tensor(id={self.id}, name={self._name!r})"


def _attribute(name: str, value: Any, keep: List[Any]) -> _lib.Attribute:
    a = _lib.Attribute()
    nb = encode(name)
    keep.append(nb)
    a.name = nb
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (int, np.integer)):
        a.type, a.i = 2, int(value)
    elif isinstance(value, (float, np.floating)):
        a.type, a.f = 1, float(value)
    elif isinstance(value, (str, bytes)):
        s = encode(value)
        keep.append(s)
        a.type, a.s = 3, s
    else:
        arr = np.asarray(value)
        if arr.ndim != 1 and arr.size > 0:
            raise KilnError(
                ERR_INVALID_ARGUMENT, f"attribute '{name}': {value!r} is not a scalar or a list"
            )
        arr = arr.reshape(-1)
        if arr.dtype.kind in "iub" or arr.size == 0:
            buf = np.ascontiguousarray(arr, dtype=np.int64)
            a.type, a.n = 7, buf.size
            a.ints = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        elif arr.dtype.kind == "f":
            buf = np.ascontiguousarray(arr, dtype=np.float32)
            a.type, a.n = 6, buf.size
            a.floats = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        else:
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"attribute '{name}': {value!r} is not an int, float, string or list of them",
            )
        keep.append(buf)
    return a


def _infer_field_type(fname: str, value: Any) -> _plugin.FieldType:
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return _plugin.INT64
    if isinstance(value, (float, np.floating)):
        return _plugin.FLOAT32
    if isinstance(value, str):
        return _plugin.STRING
    if isinstance(value, (bytes, bytearray)):
        return _plugin.BYTES
    arr = np.asarray(value)
    if arr.ndim == 1 and (arr.dtype.kind in "iu" or arr.size == 0):
        return _plugin.INT64S
    if arr.ndim == 1 and arr.dtype.kind == "f":
        return _plugin.FLOAT32S
    raise KilnError(ERR_INVALID_ARGUMENT, f"field '{fname}': cannot pass {value!r} as a field")


class Network:
    """A network built call by call. opset: the default-domain ONNX opset its layers follow.
    registry: where plugin layers are looked up (default: kiln's default registry)."""

    def __init__(self, opset: int = 17, registry: Optional[_registry.Registry] = None) -> None:
        self.registry = _registry.resolve(registry)
        b = ctypes.c_void_p()
        check(lib.kiln_builder_create(ctypes.byref(b)))
        self._bobj: Optional[_lib.Handle] = _lib.Handle(
            b, lib.kiln_builder_destroy, self.registry.handle_ref
        )
        self._b = b
        check(lib.kiln_builder_set_registry(b, self.registry.handle))
        h = ctypes.c_void_p()
        check(lib.kiln_network_create(b, int(opset), ctypes.byref(h)))
        self._hobj: Optional[_lib.Handle] = _lib.Handle(h, lib.kiln_network_destroy, self._bobj)
        self._h = h
        self.opset = int(opset)
        self.outputs: List[TensorArg] = []

    # ---- helpers ----

    def _tid(self, t: Optional[TensorArg], what: str, allow_none: bool = False) -> int:
        if t is None:
            if allow_none:
                return -1
            raise KilnError(ERR_INVALID_ARGUMENT, f"{what}: a tensor is required, got None")
        if isinstance(t, Tensor):
            if t.network is not self:
                raise KilnError(
                    ERR_INVALID_ARGUMENT,
                    f"{what}: tensor {t.id} belongs to another network",
                )
            return t.id
        if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
            return int(t)  # a raw id: the library checks it exists
        raise KilnError(ERR_INVALID_ARGUMENT, f"{what}: {t!r} is not a kiln.Tensor")

    def _ids(
        self, tensors: Union[TensorArg, Sequence[Optional[TensorArg]]], what: str
    ) -> Tuple[ctypes.Array[ctypes.c_int32], int]:
        seq = [tensors] if isinstance(tensors, (Tensor, int)) else tensors
        ids = [self._tid(t, f"{what} input {i}", allow_none=True) for i, t in enumerate(seq)]
        return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)

    def _one(self, fn: Callable[..., int], *args: Any, name: Optional[str] = None) -> Tensor:
        out = ctypes.c_int32()
        check(fn(self._h, encode(name), *args, ctypes.byref(out)))
        return Tensor(self, out.value)

    # ---- inputs, constants, outputs ----

    def add_input(
        self, name: str, dtype: DTypeArg, shape: Sequence[Union[int, str, None]]
    ) -> Tensor:
        """shape entries: an int (fixed), None or -1 (dynamic) or a str (a named dynamic dim,
        shared by every input using the same name)."""
        dims: List[int] = []
        symbols: List[Optional[bytes]] = []
        keep: List[bytes] = []
        for d in shape:
            if isinstance(d, str):
                dims.append(-1)
                s = d.encode("utf-8")
                keep.append(s)
                symbols.append(s)
            else:
                dims.append(-1 if d is None else int(d))
                symbols.append(None)
        syms = (ctypes.c_char_p * max(len(dims), 1))(*symbols)
        out = ctypes.c_int32()
        check(
            lib.kiln_network_add_input(
                self._h,
                encode(name),
                _dtypes.from_any(dtype),
                len(dims),
                int64_array(dims),
                syms,
                ctypes.byref(out),
            )
        )
        return Tensor(self, out.value, name)

    def add_constant(
        self, value: ArrayLike, name: Optional[str] = None, dtype: Optional[DTypeLike] = None
    ) -> Tensor:
        """A constant (weights) from an array (copied now)."""
        arr = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
        arr = np.ascontiguousarray(arr)
        dt = _dtypes.from_any(arr.dtype)
        out = ctypes.c_int32()
        check(
            lib.kiln_network_add_constant(
                self._h,
                encode(name),
                dt,
                arr.ndim,
                int64_array(arr.shape),
                arr.ctypes.data_as(ctypes.c_void_p),
                1,
                ctypes.byref(out),
            )
        )
        return Tensor(self, out.value, name)

    def set_tensor_name(self, tensor: TensorArg, name: str) -> None:
        tid = self._tid(tensor, "set_tensor_name")
        check(lib.kiln_network_set_tensor_name(self._h, tid, encode(name)))
        if isinstance(tensor, Tensor):
            tensor._name = name

    def mark_output(self, tensor: T, name: Optional[str] = None) -> T:
        """Make tensor a network output, renamed to name when given."""
        if name is not None:
            self.set_tensor_name(tensor, name)
        check(lib.kiln_network_mark_output(self._h, self._tid(tensor, "mark_output")))
        self.outputs.append(tensor)
        return tensor

    @property
    def num_layers(self) -> int:
        return lib.kiln_network_num_layers(self._h)

    # ---- layers ----

    @overload
    def add_layer(
        self,
        op_type: str,
        inputs: Union[TensorArg, Sequence[Optional[TensorArg]]],
        attrs: Optional[Mapping[str, Any]] = None,
        name: Optional[str] = None,
        num_outputs: Literal[1] = 1,
    ) -> Tensor: ...

    @overload
    def add_layer(
        self,
        op_type: str,
        inputs: Union[TensorArg, Sequence[Optional[TensorArg]]],
        attrs: Optional[Mapping[str, Any]] = None,
        name: Optional[str] = None,
        num_outputs: int = 1,
    ) -> Union[Tensor, List[Tensor]]: ...

    def add_layer(
        self,
        op_type: str,
        inputs: Union[TensorArg, Sequence[Optional[TensorArg]]],
        attrs: Optional[Mapping[str, Any]] = None,
        name: Optional[str] = None,
        num_outputs: int = 1,
    ) -> Union[Tensor, List[Tensor]]:
        """Any built-in ONNX op. inputs may hold None for an omitted optional input; attrs maps
        names to ints, floats, strings or lists of ints/floats. Returns a Tensor, or a list of
        num_outputs Tensors when num_outputs > 1."""
        ids, n_in = self._ids(inputs, f"layer '{name or op_type}'")
        keep: List[Any] = []
        attr_items = dict(attrs or {})
        arr = (_lib.Attribute * max(len(attr_items), 1))()
        for i, (k, v) in enumerate(attr_items.items()):
            arr[i] = _attribute(k, v, keep)
        outs = (ctypes.c_int32 * max(int(num_outputs), 1))()
        check(
            lib.kiln_network_add_layer(
                self._h,
                encode(name),
                encode(op_type),
                n_in,
                ids,
                len(attr_items),
                arr,
                int(num_outputs),
                outs,
            )
        )
        res = [Tensor(self, outs[i]) for i in range(int(num_outputs))]
        return res[0] if num_outputs == 1 else res

    def add_convolution(
        self,
        x: TensorArg,
        w: WeightArg,
        b: Optional[WeightArg] = None,
        strides: Optional[Sequence[int]] = None,
        pads: Optional[Sequence[int]] = None,
        dilations: Optional[Sequence[int]] = None,
        group: int = 1,
        name: Optional[str] = None,
    ) -> Tensor:
        """Conv over NCHW x with weights w [M, C/group, kH, kW] and optional bias b; strides
        and dilations: 2 values, pads: 4 (top, left, bottom, right). w and b may be arrays
        (added as constants)."""
        wt = self._const_or_tensor(w, name, "W")
        bt = self._const_or_tensor(b, name, "B")

        def opt(
            v: Optional[Sequence[int]], n: int, what: str
        ) -> Optional[ctypes.Array[ctypes.c_int64]]:
            if v is None:
                return None
            vals = [int(x) for x in v]
            if len(vals) != n:
                raise KilnError(
                    ERR_INVALID_ARGUMENT,
                    f"layer '{name or 'Conv'}': {what} needs {n} values, got {len(vals)}",
                )
            return int64_array(vals)

        return self._one(
            lib.kiln_network_add_convolution,
            self._tid(x, "add_convolution x"),
            self._tid(wt, "add_convolution w"),
            self._tid(bt, "add_convolution b", allow_none=True),
            opt(strides, 2, "strides"),
            opt(pads, 4, "pads"),
            opt(dilations, 2, "dilations"),
            int(group),
            name=name,
        )

    def add_matmul(
        self,
        a: TensorArg,
        b: WeightArg,
        c: Optional[WeightArg] = None,
        trans_b: bool = False,
        name: Optional[str] = None,
    ) -> Tensor:
        """a @ b (numpy MatMul), or Gemm a * b^T + c when trans_b or c is given."""
        bt = self._const_or_tensor(b, name, "B")
        ct = self._const_or_tensor(c, name, "C")
        return self._one(
            lib.kiln_network_add_matmul,
            self._tid(a, "add_matmul a"),
            self._tid(bt, "add_matmul b"),
            self._tid(ct, "add_matmul c", allow_none=True),
            1 if trans_b else 0,
            name=name,
        )

    def add_activation(
        self,
        x: TensorArg,
        kind: Union[Activation, str, int],
        alpha: float = 0.0,
        beta: float = 0.0,
        name: Optional[str] = None,
    ) -> Tensor:
        """kind: kiln.Activation or its name ("relu", "sigmoid", "leaky_relu", ...)."""
        return self._one(
            lib.kiln_network_add_activation,
            self._tid(x, "add_activation x"),
            _enum(Activation, kind, "activation"),
            float(alpha),
            float(beta),
            name=name,
        )

    def add_elementwise(
        self,
        a: TensorArg,
        b: TensorArg,
        op: Union[ElementWise, str, int],
        name: Optional[str] = None,
    ) -> Tensor:
        """op: kiln.ElementWise or its name ("add", "sub", "mul", "div", "max", "min", "pow")."""
        return self._one(
            lib.kiln_network_add_elementwise,
            self._tid(a, "add_elementwise a"),
            self._tid(b, "add_elementwise b"),
            _enum(ElementWise, op, "element-wise op"),
            name=name,
        )

    def add_pooling(
        self,
        x: TensorArg,
        kind: Union[Pooling, str, int],
        kernel: Optional[Sequence[int]] = None,
        strides: Optional[Sequence[int]] = None,
        pads: Optional[Sequence[int]] = None,
        global_pool: bool = False,
        name: Optional[str] = None,
    ) -> Tensor:
        """kind: "max" or "average"; kernel/strides: 2 values, pads: 4; global_pool ignores
        them."""
        if not global_pool and kernel is None:
            raise KilnError(
                ERR_INVALID_ARGUMENT, f"layer '{name or 'pool'}': pooling needs a kernel size"
            )
        return self._one(
            lib.kiln_network_add_pooling,
            self._tid(x, "add_pooling x"),
            _enum(Pooling, kind, "pooling"),
            1 if global_pool else 0,
            None if kernel is None else int64_array(kernel),
            None if strides is None else int64_array(strides),
            None if pads is None else int64_array(pads),
            name=name,
        )

    def add_reshape(self, x: TensorArg, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
        dims = [int(d) for d in shape]
        return self._one(
            lib.kiln_network_add_reshape,
            self._tid(x, "add_reshape x"),
            len(dims),
            int64_array(dims),
            name=name,
        )

    def add_transpose(
        self, x: TensorArg, perm: Sequence[int], name: Optional[str] = None
    ) -> Tensor:
        axes = [int(d) for d in perm]
        return self._one(
            lib.kiln_network_add_transpose,
            self._tid(x, "add_transpose x"),
            len(axes),
            int64_array(axes),
            name=name,
        )

    def add_concat(
        self, inputs: Sequence[TensorArg], axis: int, name: Optional[str] = None
    ) -> Tensor:
        ids, n = self._ids(inputs, f"layer '{name or 'Concat'}'")
        return self._one(lib.kiln_network_add_concat, n, ids, int(axis), name=name)

    def add_softmax(self, x: TensorArg, axis: int = -1, name: Optional[str] = None) -> Tensor:
        return self._one(
            lib.kiln_network_add_softmax, self._tid(x, "add_softmax x"), int(axis), name=name
        )

    def add_normalization(
        self,
        x: TensorArg,
        scale: WeightArg,
        bias: WeightArg,
        mean: Optional[WeightArg] = None,
        var: Optional[WeightArg] = None,
        epsilon: float = 1e-5,
        name: Optional[str] = None,
    ) -> Tensor:
        """BatchNormalization (inference) when mean/var are given, else LayerNormalization over
        the last axis. scale, bias, mean, var may be arrays (added as constants)."""
        scale_t = self._const_or_tensor(scale, name, "scale")
        bias_t = self._const_or_tensor(bias, name, "bias")
        mean_t = self._const_or_tensor(mean, name, "mean")
        var_t = self._const_or_tensor(var, name, "var")
        return self._one(
            lib.kiln_network_add_normalization,
            self._tid(x, "add_normalization x"),
            self._tid(scale_t, "add_normalization scale"),
            self._tid(bias_t, "add_normalization bias"),
            self._tid(mean_t, "add_normalization mean", allow_none=True),
            self._tid(var_t, "add_normalization var", allow_none=True),
            float(epsilon),
            name=name,
        )

    @overload
    def add_plugin(
        self,
        plugin: Union[str, Type[_plugin.Plugin]],
        inputs: Union[TensorArg, Sequence[Optional[TensorArg]]],
        fields: Optional[Mapping[str, Any]] = None,
        version: Optional[str] = None,
        namespace: Optional[str] = None,
        name: Optional[str] = None,
        num_outputs: Literal[1] = 1,
    ) -> Tensor: ...

    @overload
    def add_plugin(
        self,
        plugin: Union[str, Type[_plugin.Plugin]],
        inputs: Union[TensorArg, Sequence[Optional[TensorArg]]],
        fields: Optional[Mapping[str, Any]] = None,
        version: Optional[str] = None,
        namespace: Optional[str] = None,
        name: Optional[str] = None,
        num_outputs: int = 1,
    ) -> Union[Tensor, List[Tensor]]: ...

    def add_plugin(
        self,
        plugin: Union[str, Type[_plugin.Plugin]],
        inputs: Union[TensorArg, Sequence[Optional[TensorArg]]],
        fields: Optional[Mapping[str, Any]] = None,
        version: Optional[str] = None,
        namespace: Optional[str] = None,
        name: Optional[str] = None,
        num_outputs: int = 1,
    ) -> Union[Tensor, List[Tensor]]:
        """A plugin layer. plugin: a plugin name or a kiln.Plugin subclass (registered into the
        network's registry if it is not there yet). fields: {name: value}; for Python plugins
        values follow the declared field types, otherwise the type comes from the value (int:
        int64, float: float32, str: string, bytes, list of ints/floats)."""
        cls: Optional[Type[_plugin.Plugin]] = None
        if isinstance(plugin, type):
            cls = plugin
            self.registry.add(cls)
            pname, version, namespace = cls.name, str(cls.version or ""), str(cls.namespace or "")
        else:
            pname = plugin
            cls = self.registry.python_plugin(plugin, version, namespace)
        ids, n_in = self._ids(inputs, f"layer '{name or pname}'")
        items: List[Tuple[str, _plugin.FieldType, Any]] = []
        for fname, value in dict(fields or {}).items():
            spec = cls._kiln_specs.get(fname) if cls is not None else None
            ftype = spec.type if spec is not None else _infer_field_type(fname, value)
            items.append((fname, ftype, value))
        try:
            farr, keep = _plugin.make_field_array(items)
        except (TypeError, ValueError) as e:
            raise KilnError(ERR_INVALID_ARGUMENT, f"layer '{name or pname}': {e}") from None
        outs = (ctypes.c_int32 * max(int(num_outputs), 1))()
        check(
            lib.kiln_network_add_plugin(
                self._h,
                encode(name),
                encode(pname),
                encode(version),
                encode(namespace),
                n_in,
                ids,
                len(items),
                farr,
                int(num_outputs),
                outs,
            )
        )
        res = [Tensor(self, outs[i]) for i in range(int(num_outputs))]
        return res[0] if num_outputs == 1 else res

    def _const_or_tensor(
        self, v: Optional[WeightArg], layer: Optional[str], what: str
    ) -> Optional[TensorArg]:
        if v is None or isinstance(v, Tensor) or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        if not isinstance(v, np.ndarray):
            v = np.asarray(v, dtype=np.float32)
        return self.add_constant(v, name=f"{layer}_{what}" if layer else None)

    # ---- building ----

    def build(
        self,
        shapes: Optional[Mapping[str, Any]] = None,
        threads: Optional[int] = None,
        prefer_plugins: Optional[Union[str, Sequence[str]]] = None,
        progress: Optional[Callable[[str, float], None]] = None,
        backends: Optional[Union[str, Sequence[str]]] = None,
        precision: Optional[PrecisionArg] = None,
        timing_cache: Optional[Union[str, "os.PathLike[str]"]] = None,
        int8: bool = False,
        calibration: Optional[CalibrationArg] = None,
        tactics: Optional[str] = None,
    ) -> bytes:
        """The plan (bytes); see kiln.build."""
        plan = build_plan(
            self._b,
            self._h,
            shapes,
            threads,
            prefer_plugins,
            progress,
            backends=backends,
            precision=precision,
            timing_cache=timing_cache,
            int8=int8,
            calibration=calibration,
            tactics=tactics,
        )
        return cast(bytes, plan)  # bytes whenever no path is given

    def __del__(self) -> None:
        for attr in ("_hobj", "_bobj"):
            if getattr(self, attr, None) is not None:
                getattr(self, attr).release()
                setattr(self, attr, None)
