"""Plugins written in Python.

A subclass of kiln.Plugin describes one plugin; kiln.register_plugin(cls) registers a creator
for it (through kiln_registry_register with ctypes function tables), after which the builder
and runtime use it like a plugin from a shared library: ONNX nodes whose op_type is its name
(or custom Plugin nodes with name=...), plugin layers of a kiln.Network, and plans that name
it. A plan that uses a Python plugin can only be loaded once the module defining and
registering the plugin has been imported.

Every callback catches every exception, reports it through the host API's set_error and
returns a failure code, so a bug in a plugin becomes a KilnError, never a crash.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import traceback
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union, cast

import numpy as np
from numpy.typing import DTypeLike, NDArray

from . import _device
from . import _dtypes
from . import _lib
from ._lib import KilnError


class FieldType(enum.IntEnum):
    INT64 = 1
    FLOAT32 = 2
    STRING = 3
    INT64S = 4
    FLOAT32S = 5
    BYTES = 6


INT64 = FieldType.INT64
FLOAT32 = FieldType.FLOAT32
STRING = FieldType.STRING
INT64S = FieldType.INT64S
FLOAT32S = FieldType.FLOAT32S
BYTES = FieldType.BYTES

_NO_DEFAULT = object()


class field:
    """A field declaration with options: fields = {"alpha": kiln.field(kiln.FLOAT32,
    default=0.01)} or kiln.field(kiln.INT64S, required=True). A bare type (kiln.FLOAT32) is an
    optional field without a default."""

    def __init__(self, type: int, required: bool = False, default: Any = _NO_DEFAULT) -> None:
        self.type = FieldType(type)
        self.required = bool(required)
        self.default = default


def _spec(value: Union[field, int]) -> field:
    if isinstance(value, field):
        return value
    return field(value)


class Plugin:
    """Base class of Python plugins. Subclasses set the class attributes name, version,
    namespace, fields ({field name: kiln.FLOAT32 | kiln.field(...)}) and dtypes (the dtypes
    every input and output may have; float32 only by default), and implement num_outputs,
    output_shapes and compute. An instance's self.fields holds its field values.

    backends names where compute may run: "cpu" (numpy views of host memory) and "cuda"
    (kiln.DeviceArray views of device memory, with the context's cudaStream_t as .stream;
    wrap them with torch.as_tensor(a, device="cuda") or cupy.asarray(a)). Python plugins are
    never recorded into CUDA graphs: compute runs Python on the host."""

    name: ClassVar[Optional[str]] = None
    version: ClassVar[Optional[str]] = "1"
    namespace: ClassVar[Optional[str]] = ""
    fields: Dict[str, Any] = {}
    dtypes: ClassVar[Sequence[DTypeLike]] = (np.float32,)
    backends: ClassVar[Sequence[str]] = ("cpu",)
    # set by kiln.register_plugin: the declared fields, each as a kiln.field
    _kiln_specs: ClassVar[Dict[str, field]]

    def __init__(self, fields: Optional[Mapping[str, Any]] = None) -> None:
        self.fields = dict(fields or {})

    def num_outputs(self) -> int:
        return 1

    def output_dtypes(self, in_dtypes: Sequence[np.dtype[Any]]) -> Sequence[DTypeLike]:
        """numpy dtypes of the outputs from those of the inputs (default: input 0's)."""
        return [in_dtypes[0]] * self.num_outputs()

    def output_shapes(self, input_shapes: Sequence[Tuple[int, ...]]) -> Sequence[Any]:
        """Output shapes (tuples of ints) from the input shapes (tuples of ints; kiln always
        calls with concrete dims)."""
        raise NotImplementedError("output_shapes")

    def supports_format(self, pos: int, dtypes: Sequence[Optional[np.dtype[Any]]]) -> bool:
        """Whether position pos (inputs first, then outputs) may have dtypes[pos]; dtypes holds
        the numpy dtypes chosen for positions 0..pos."""
        allowed = [np.dtype(d) for d in self.dtypes]
        return dtypes[pos] in allowed

    def compute(
        self, inputs: Sequence[NDArray[Any]], outputs: Sequence[NDArray[Any]]
    ) -> Optional[Union[NDArray[Any], Sequence[Any]]]:
        """Fill outputs (writable numpy views of kiln's buffers) from inputs (read-only
        views). Write in place (out[...] = ..., np.foo(..., out=out)); or return a list of
        arrays, which are copied into the outputs. On the CUDA backend inputs and outputs are
        kiln.DeviceArray: write the outputs in place with work ordered on their .stream (or
        finished before returning)."""
        raise NotImplementedError("compute")

    def clone(self) -> Plugin:
        """A copy for another execution context (default: a new instance from the fields)."""
        return type(self)(dict(self.fields))


# ---- instances seen by C ------------------------------------------------------------------


class _Instance:
    __slots__ = ("obj", "keep")

    def __init__(self, obj: Plugin) -> None:
        self.obj = obj
        self.keep: Optional[List[Any]] = None  # buffers of the last get_fields answer


_instances: Dict[int, _Instance] = {}
_handles = itertools.count(1)
_host = _lib.lib.kiln_host_api_get().contents


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _report(where: str, exc: BaseException) -> None:
    """Give kiln the reason of a failed callback."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = ""
    if frames:
        f = frames[-1]
        at = f" (at {f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name})"
    msg = _one_line(f"{where}: {type(exc).__name__}: {exc}{at}")
    try:
        _host.set_error(b"%s", msg.encode("utf-8", "replace"))
    except Exception:
        pass


def _add_instance(obj: Plugin) -> int:
    h = next(_handles)
    _instances[h] = _Instance(obj)
    return h


def _get(handle: Any) -> _Instance:
    inst = _instances.get(handle)
    if inst is None:
        raise RuntimeError(f"unknown plugin instance {handle}")
    return inst


def _num_outputs(handle: Any) -> int:
    try:
        n = int(_get(handle).obj.num_outputs())
        if n < 1:
            raise ValueError(f"num_outputs returned {n}; a plugin makes at least one output")
        return n
    except BaseException as e:
        _report("num_outputs", e)
        return -1


def _output_dtypes(
    handle: Any, n_in: int, in_dtypes: Any, n_out: int, out_dtypes: Any
) -> int:
    try:
        ins = [_dtypes.to_numpy(in_dtypes[i]) for i in range(n_in)]
        outs = list(_get(handle).obj.output_dtypes(ins))
        if len(outs) != n_out:
            raise ValueError(f"output_dtypes returned {len(outs)} dtypes for {n_out} outputs")
        for i, d in enumerate(outs):
            out_dtypes[i] = _dtypes.from_any(d)
        return 0
    except BaseException as e:
        _report("output_dtypes", e)
        return -1


def _is_shape(x: object) -> bool:
    return isinstance(x, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in x
    )


def _output_shapes(
    handle: Any, n_in: int, ins: Any, n_out: int, outs: Any, builder: Optional[int]
) -> int:
    try:
        shapes = []
        for i in range(n_in):
            dims = []
            for d in range(ins[i].rank):
                v = ctypes.c_int64()
                if not _host.expr_value(ins[i].dims[d], ctypes.byref(v)):
                    raise ValueError(f"input {i} dim {d} has no known value")
                dims.append(v.value)
            shapes.append(tuple(dims))
        res: List[Any] = list(_get(handle).obj.output_shapes(shapes))
        if n_out == 1 and _is_shape(res) and len(res) > 0:
            res = [res]  # one shape given without the enclosing list
        if len(res) != n_out:
            raise ValueError(f"output_shapes returned {len(res)} shapes for {n_out} outputs")
        for i, shape in enumerate(res):
            shape = tuple(shape)
            if not _is_shape(shape) or len(shape) > _lib.MAX_RANK:
                raise ValueError(f"output {i}: {shape!r} is not a shape of at most 8 ints")
            if any(int(d) < 0 for d in shape):
                raise ValueError(f"output {i}: shape {shape} has a negative dim")
            outs[i].rank = len(shape)
            for d, v in enumerate(shape):
                e = _host.expr_constant(builder, int(v))
                if not e:
                    raise ValueError("out of dimension expressions")
                outs[i].dims[d] = e
        return 0
    except BaseException as e:
        _report("output_shapes", e)
        return -1


def _supports_format(handle: Any, pos: int, descs: Any, n_in: int, n_out: int) -> int:
    try:
        if descs[pos].layout != 0:
            return 0
        dts = []
        for p in range(pos + 1):
            dts.append(_dtypes.to_numpy(descs[p].dtype) if descs[p].dtype else None)
        return 1 if _get(handle).obj.supports_format(pos, dts) else 0
    except BaseException as e:
        _report("supports_format", e)
        return 0


def _view(ptr: Any, desc: Any, writable: bool) -> NDArray[Any]:
    dt = _dtypes.to_numpy(desc.dtype)
    shape = tuple(desc.dims[d] for d in range(desc.rank))
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if n == 0 or not ptr:
        arr = np.zeros(shape, dtype=dt)
    else:
        buf = (ctypes.c_char * (n * dt.itemsize)).from_address(ptr)
        arr = np.frombuffer(buf, dtype=dt).reshape(shape)  # type: ignore[call-overload]
    if not writable:
        arr.flags.writeable = False
    return arr


def _device_view(ptr: Any, desc: Any, stream: Any, writable: bool) -> Any:
    shape = tuple(desc.dims[d] for d in range(desc.rank))
    return _device.DeviceArray(ptr, shape, _dtypes.to_numpy(desc.dtype), stream, writable)


def _enqueue(
    handle: Any,
    n_in: int,
    in_desc: Any,
    inputs: Any,
    n_out: int,
    out_desc: Any,
    outputs: Any,
    workspace: Optional[int],
    stream: Any,
) -> int:
    try:
        if stream and stream[0].backend == _lib.BACKEND_CUDA:
            s = stream[0].handle or 0
            ins = [_device_view(inputs[i], in_desc[i], s, False) for i in range(n_in)]
            outs = [_device_view(outputs[i], out_desc[i], s, True) for i in range(n_out)]
            if _get(handle).obj.compute(ins, outs) is not None:
                raise ValueError("on the CUDA backend compute writes its outputs in place")
            return 0
        ins = [_view(inputs[i], in_desc[i], False) for i in range(n_in)]
        outs = [_view(outputs[i], out_desc[i], True) for i in range(n_out)]
        res = _get(handle).obj.compute(ins, outs)
        if res is not None:
            if isinstance(res, np.ndarray):
                res = [res]
            res = list(res)
            if len(res) != n_out:
                raise ValueError(f"compute returned {len(res)} arrays for {n_out} outputs")
            for i, r in enumerate(res):
                r = np.asarray(r)
                if r.shape != outs[i].shape:
                    raise ValueError(
                        f"compute returned shape {r.shape} for output {i} of shape "
                        f"{outs[i].shape}"
                    )
                np.copyto(outs[i], r, casting="same_kind")
        return 0
    except BaseException as e:
        _report("compute", e)
        return -1


def _field_value(ftype: FieldType, count: int, data: Any) -> Any:
    if ftype == FieldType.INT64:
        return ctypes.cast(data, ctypes.POINTER(ctypes.c_int64))[0]
    if ftype == FieldType.FLOAT32:
        return float(ctypes.cast(data, ctypes.POINTER(ctypes.c_float))[0])
    if ftype in (FieldType.STRING, FieldType.BYTES):
        raw = ctypes.string_at(data, count) if count > 0 else b""
        return raw.decode("utf-8") if ftype == FieldType.STRING else raw
    if ftype == FieldType.INT64S:
        p: Any = ctypes.cast(data, ctypes.POINTER(ctypes.c_int64))
        return [p[i] for i in range(count)]
    if ftype == FieldType.FLOAT32S:
        p = ctypes.cast(data, ctypes.POINTER(ctypes.c_float))
        return [float(p[i]) for i in range(count)]
    raise ValueError(f"unknown field type {ftype}")


def _coerce(
    plugin: Optional[str], fname: str, want: FieldType, have: FieldType, value: Any
) -> Any:
    """A field value given as `have` converted to the declared type `want`."""
    if want == have:
        return value
    if want == FieldType.FLOAT32 and have == FieldType.INT64:
        return float(value)
    if want == FieldType.FLOAT32S and have == FieldType.INT64S:
        return [float(v) for v in value]
    if want == FieldType.BYTES and have == FieldType.STRING:
        return value.encode("utf-8")
    if want == FieldType.STRING and have == FieldType.BYTES:
        return value.decode("utf-8")
    raise ValueError(
        f"plugin '{plugin}' field '{fname}' must be {want.name.lower()}, got "
        f"{FieldType(have).name.lower()}"
    )


def parse_fields(cls: Type[Plugin], field_list: Any) -> Dict[str, Any]:
    """{name: value} from a kiln_field_list, checked against the class's declared fields."""
    specs = cls._kiln_specs
    values: Dict[str, Any] = {}
    for i in range(field_list.count if field_list else 0):
        f = field_list.fields[i]
        fname = f.name.decode("utf-8") if f.name else ""
        if fname not in specs:
            known = ", ".join(specs) or "none"
            raise ValueError(f"plugin '{cls.name}' has no field '{fname}' (its fields: {known})")
        ftype = FieldType(f.type)
        value = _field_value(ftype, f.count, f.data)
        values[fname] = _coerce(cls.name, fname, specs[fname].type, ftype, value)
    for fname, spec in specs.items():
        if fname in values:
            continue
        if spec.required:
            raise ValueError(f"plugin '{cls.name}' needs field '{fname}'")
        if spec.default is not _NO_DEFAULT:
            values[fname] = spec.default
    return values


def field_buffers(ftype: int, fname: str, value: Any) -> Tuple[int, Any]:
    """(count, ctypes buffer) holding value as field type ftype."""
    if ftype == FieldType.INT64:
        return 1, ctypes.c_int64(int(value))
    if ftype == FieldType.FLOAT32:
        return 1, ctypes.c_float(float(value))
    if ftype in (FieldType.STRING, FieldType.BYTES):
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return len(raw), ctypes.create_string_buffer(raw, len(raw) + 1)
    if ftype == FieldType.INT64S:
        vals: List[Any] = [int(v) for v in np.asarray(value).reshape(-1)]
        return len(vals), (ctypes.c_int64 * max(len(vals), 1))(*vals)
    if ftype == FieldType.FLOAT32S:
        vals = [float(v) for v in np.asarray(value).reshape(-1)]
        return len(vals), (ctypes.c_float * max(len(vals), 1))(*vals)
    raise ValueError(f"field '{fname}': unknown field type {ftype}")


def make_field_array(
    items: Sequence[Tuple[str, int, Any]],
) -> Tuple[ctypes.Array[_lib.Field], List[Any]]:
    """items: [(name, FieldType, value)] -> (ctypes Field array, objects to keep alive)."""
    keep: List[Any] = []
    arr = (_lib.Field * max(len(items), 1))()
    for i, (fname, ftype, value) in enumerate(items):
        try:
            count, buf = field_buffers(ftype, fname, value)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"field '{fname}' ({FieldType(ftype).name.lower()}) cannot hold {value!r}: {e}"
            ) from None
        nb = fname.encode("utf-8")
        keep += [nb, buf]
        arr[i].name = nb
        arr[i].type = int(ftype)
        arr[i].count = count
        arr[i].data = ctypes.addressof(buf)
    keep.append(arr)
    return arr, keep


def _get_fields(handle: Any, out: Any) -> int:
    try:
        inst = _get(handle)
        cls = type(inst.obj)
        items = [
            (n, cls._kiln_specs[n].type, v)
            for n, v in inst.obj.fields.items()
            if n in cls._kiln_specs and v is not None
        ]
        arr, keep = make_field_array(items)
        inst.keep = keep
        out[0].count = len(items)
        out[0].fields = ctypes.cast(arr, ctypes.POINTER(_lib.Field))
        return 0
    except BaseException as e:
        _report("get_fields", e)
        return -1


def _clone(handle: Any) -> Optional[int]:
    try:
        obj = _get(handle).obj.clone()
        if not isinstance(obj, Plugin):
            raise TypeError("clone() must return a Plugin instance")
        return _add_instance(obj)
    except BaseException as e:
        _report("clone", e)
        return None


def _destroy(handle: Any) -> None:
    _instances.pop(handle, None)


def _supports_backend(handle: Any, backend: Optional[bytes]) -> int:
    try:
        name = backend.decode("utf-8") if backend else ""
        return 1 if name in tuple(_get(handle).obj.backends) else 0
    except BaseException as e:
        _report("supports_backend", e)
        return 0


_ops = _lib.PluginOps(
    struct_size=ctypes.sizeof(_lib.PluginOps),
    abi_version=_lib.PLUGIN_ABI_VERSION,
    num_outputs=_lib.NUM_OUTPUTS_FN(_num_outputs),
    output_dtypes=_lib.OUTPUT_DTYPES_FN(_output_dtypes),
    output_shapes=_lib.OUTPUT_SHAPES_FN(_output_shapes),
    supports_format=_lib.SUPPORTS_FORMAT_FN(_supports_format),
    enqueue=_lib.ENQUEUE_FN(_enqueue),
    get_fields=_lib.GET_FIELDS_FN(_get_fields),
    clone=_lib.CLONE_FN(_clone),
    destroy=_lib.DESTROY_FN(_destroy),
    supports_backend=_lib.SUPPORTS_BACKEND_FN(_supports_backend),
    flags=0,  # compute runs Python on the host: never graph-safe
)


def _make_create(cls: Type[Plugin]) -> Any:
    def create(creator: Any, field_list: Any, out: Any) -> int:
        try:
            values = parse_fields(cls, field_list.contents if field_list else None)
            obj = cls(values)
            if not isinstance(obj, Plugin):
                raise TypeError(f"{cls.__name__}() did not make a kiln.Plugin")
            out[0].ops = ctypes.pointer(_ops)
            out[0].self = _add_instance(obj)
            return 0
        except BaseException as e:
            _report("create", e)
            return -1

    return _lib.CREATE_FN(create)


# Function tables and creators must outlive every registry that holds them: kept forever.
_keepalive: List[Tuple[Any, ...]] = []


def check_plugin_class(cls: object) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Plugin)):
        raise KilnError(_lib.ERR_INVALID_ARGUMENT, f"{cls!r} is not a subclass of kiln.Plugin")
    if not cls.name or not isinstance(cls.name, str):
        raise KilnError(_lib.ERR_INVALID_ARGUMENT, f"plugin class {cls.__name__} has no name")
    specs: Dict[str, field] = {}
    for fname, decl in dict(cls.fields or {}).items():
        try:
            specs[str(fname)] = _spec(decl)
        except ValueError:
            raise KilnError(
                _lib.ERR_INVALID_ARGUMENT,
                f"plugin '{cls.name}' field '{fname}': {decl!r} is not a field type",
            ) from None
    cls._kiln_specs = specs


def make_creator(cls: Type[Plugin]) -> _lib.PluginCreator:
    """A kiln_plugin_creator for a Plugin subclass (kept alive for the process)."""
    check_plugin_class(cls)
    specs = cls._kiln_specs
    names = [n.encode("utf-8") for n in specs]
    spec_arr = (_lib.FieldSpec * max(len(specs), 1))()
    for i, (n, s) in enumerate(specs.items()):
        spec_arr[i].name = names[i]
        spec_arr[i].type = int(s.type)
        spec_arr[i].required = 1 if s.required else 0
    strings = [
        cast(str, cls.name).encode("utf-8"),  # check_plugin_class made sure it is a str
        str(cls.version or "").encode("utf-8"),
        str(cls.namespace or "").encode("utf-8"),
    ]
    create = _make_create(cls)
    creator = _lib.PluginCreator(
        struct_size=ctypes.sizeof(_lib.PluginCreator),
        abi_version=_lib.PLUGIN_ABI_VERSION,
        name=strings[0],
        version=strings[1],
        plugin_namespace=strings[2],
        n_field_specs=len(specs),
        field_specs=ctypes.cast(spec_arr, ctypes.POINTER(_lib.FieldSpec)),
        create=create,
        user=None,
    )
    _keepalive.append((cls, names, spec_arr, strings, create, creator))
    return creator


def live_instances() -> int:
    """Number of Python plugin instances kiln currently holds (for leak checks)."""
    return len(_instances)
