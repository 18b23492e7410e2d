"""Networks built by code: kiln.Network mirrors kiln_network_* of kiln.h. Every call is checked
by the library at once, so a wrong call raises KilnError where it is made."""

import ctypes
import enum

import numpy as np

from . import _dtypes
from . import _lib
from . import plugin as _plugin
from . import registry as _registry
from ._build_config import build_plan
from ._lib import ERR_INVALID_ARGUMENT, KilnError, check, encode, int64_array, lib


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


def _enum(kind, value, what):
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

    def __init__(self, network, tid, name=None):
        self.network = network
        self.id = int(tid)
        self._name = name

    @property
    def name(self):
        return self._name

    @name.setter
    def name(self, value):
        self.network.set_tensor_name(self, value)

    def _info(self):
        dt, rank = ctypes.c_int(), ctypes.c_int()
        dims = (ctypes.c_int64 * _lib.MAX_RANK)()
        check(
            lib.kiln_network_tensor_info(
                self.network._h, self.id, ctypes.byref(dt), ctypes.byref(rank), dims
            )
        )
        return dt.value, (tuple(dims[i] for i in range(rank.value)) if rank.value >= 0 else None)

    @property
    def dtype(self):
        """numpy dtype as far as known (None before inference)."""
        dt, _ = self._info()
        return _dtypes.to_numpy(dt) if dt else None

    @property
    def shape(self):
        """Shape as far as known: -1 for symbolic dims, None when the rank is unknown."""
        return self._info()[1]

    def __repr__(self):
        return f"kiln.Tensor(id={self.id}, name={self._name!r})"


def _attribute(name, value, keep):
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


def _infer_field_type(fname, value):
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

    def __init__(self, opset=17, registry=None):
        self.registry = _registry.resolve(registry)
        b = ctypes.c_void_p()
        check(lib.kiln_builder_create(ctypes.byref(b)))
        self._bobj = _lib.Handle(b, lib.kiln_builder_destroy, self.registry.handle_ref)
        self._b = b
        check(lib.kiln_builder_set_registry(b, self.registry.handle))
        h = ctypes.c_void_p()
        check(lib.kiln_network_create(b, int(opset), ctypes.byref(h)))
        self._hobj = _lib.Handle(h, lib.kiln_network_destroy, self._bobj)
        self._h = h
        self.opset = int(opset)
        self.outputs = []

    # ---- helpers ----

    def _tid(self, t, what, allow_none=False):
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

    def _ids(self, tensors, what):
        if isinstance(tensors, (Tensor, int)):
            tensors = [tensors]
        ids = [self._tid(t, f"{what} input {i}", allow_none=True) for i, t in enumerate(tensors)]
        return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)

    def _one(self, fn, *args, name=None):
        out = ctypes.c_int32()
        check(fn(self._h, encode(name), *args, ctypes.byref(out)))
        return Tensor(self, out.value)

    # ---- inputs, constants, outputs ----

    def add_input(self, name, dtype, shape):
        """shape entries: an int (fixed), None or -1 (dynamic) or a str (a named dynamic dim,
        shared by every input using the same name)."""
        shape = tuple(shape)
        dims, symbols, keep = [], [], []
        for d in shape:
            if isinstance(d, str):
                dims.append(-1)
                s = d.encode("utf-8")
                keep.append(s)
                symbols.append(s)
            else:
                dims.append(-1 if d is None else int(d))
                symbols.append(None)
        syms = (ctypes.c_char_p * max(len(shape), 1))(*symbols)
        out = ctypes.c_int32()
        check(
            lib.kiln_network_add_input(
                self._h,
                encode(name),
                _dtypes.from_any(dtype),
                len(shape),
                int64_array(dims),
                syms,
                ctypes.byref(out),
            )
        )
        return Tensor(self, out.value, name)

    def add_constant(self, value, name=None, dtype=None):
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

    def set_tensor_name(self, tensor, name):
        tid = self._tid(tensor, "set_tensor_name")
        check(lib.kiln_network_set_tensor_name(self._h, tid, encode(name)))
        if isinstance(tensor, Tensor):
            tensor._name = name

    def mark_output(self, tensor, name=None):
        """Make tensor a network output, renamed to name when given."""
        if name is not None:
            self.set_tensor_name(tensor, name)
        check(lib.kiln_network_mark_output(self._h, self._tid(tensor, "mark_output")))
        self.outputs.append(tensor)
        return tensor

    @property
    def num_layers(self):
        return lib.kiln_network_num_layers(self._h)

    # ---- layers ----

    def add_layer(self, op_type, inputs, attrs=None, name=None, num_outputs=1):
        """Any built-in ONNX op. inputs may hold None for an omitted optional input; attrs maps
        names to ints, floats, strings or lists of ints/floats. Returns a Tensor, or a list of
        num_outputs Tensors when num_outputs > 1."""
        ids, n_in = self._ids(inputs, f"layer '{name or op_type}'")
        keep = []
        attrs = dict(attrs or {})
        arr = (_lib.Attribute * max(len(attrs), 1))()
        for i, (k, v) in enumerate(attrs.items()):
            arr[i] = _attribute(k, v, keep)
        outs = (ctypes.c_int32 * max(int(num_outputs), 1))()
        check(
            lib.kiln_network_add_layer(
                self._h,
                encode(name),
                encode(op_type),
                n_in,
                ids,
                len(attrs),
                arr,
                int(num_outputs),
                outs,
            )
        )
        res = [Tensor(self, outs[i]) for i in range(int(num_outputs))]
        return res[0] if num_outputs == 1 else res

    def add_convolution(
        self, x, w, b=None, strides=None, pads=None, dilations=None, group=1, name=None
    ):
        """Conv over NCHW x with weights w [M, C/group, kH, kW] and optional bias b; strides
        and dilations: 2 values, pads: 4 (top, left, bottom, right). w and b may be arrays
        (added as constants)."""
        w = self._const_or_tensor(w, name, "W")
        b = self._const_or_tensor(b, name, "B")

        def opt(v, n, what):
            if v is None:
                return None
            v = [int(x) for x in v]
            if len(v) != n:
                raise KilnError(
                    ERR_INVALID_ARGUMENT,
                    f"layer '{name or 'Conv'}': {what} needs {n} values, got {len(v)}",
                )
            return int64_array(v)

        return self._one(
            lib.kiln_network_add_convolution,
            self._tid(x, "add_convolution x"),
            self._tid(w, "add_convolution w"),
            self._tid(b, "add_convolution b", allow_none=True),
            opt(strides, 2, "strides"),
            opt(pads, 4, "pads"),
            opt(dilations, 2, "dilations"),
            int(group),
            name=name,
        )

    def add_matmul(self, a, b, c=None, trans_b=False, name=None):
        """a @ b (numpy MatMul), or Gemm a * b^T + c when trans_b or c is given."""
        b = self._const_or_tensor(b, name, "B")
        c = self._const_or_tensor(c, name, "C")
        return self._one(
            lib.kiln_network_add_matmul,
            self._tid(a, "add_matmul a"),
            self._tid(b, "add_matmul b"),
            self._tid(c, "add_matmul c", allow_none=True),
            1 if trans_b else 0,
            name=name,
        )

    def add_activation(self, x, kind, alpha=0.0, beta=0.0, name=None):
        """kind: kiln.Activation or its name ("relu", "sigmoid", "leaky_relu", ...)."""
        return self._one(
            lib.kiln_network_add_activation,
            self._tid(x, "add_activation x"),
            _enum(Activation, kind, "activation"),
            float(alpha),
            float(beta),
            name=name,
        )

    def add_elementwise(self, a, b, op, name=None):
        """op: kiln.ElementWise or its name ("add", "sub", "mul", "div", "max", "min", "pow")."""
        return self._one(
            lib.kiln_network_add_elementwise,
            self._tid(a, "add_elementwise a"),
            self._tid(b, "add_elementwise b"),
            _enum(ElementWise, op, "element-wise op"),
            name=name,
        )

    def add_pooling(
        self, x, kind, kernel=None, strides=None, pads=None, global_pool=False, name=None
    ):
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

    def add_reshape(self, x, shape, name=None):
        shape = [int(d) for d in shape]
        return self._one(
            lib.kiln_network_add_reshape,
            self._tid(x, "add_reshape x"),
            len(shape),
            int64_array(shape),
            name=name,
        )

    def add_transpose(self, x, perm, name=None):
        perm = [int(d) for d in perm]
        return self._one(
            lib.kiln_network_add_transpose,
            self._tid(x, "add_transpose x"),
            len(perm),
            int64_array(perm),
            name=name,
        )

    def add_concat(self, inputs, axis, name=None):
        ids, n = self._ids(inputs, f"layer '{name or 'Concat'}'")
        return self._one(lib.kiln_network_add_concat, n, ids, int(axis), name=name)

    def add_softmax(self, x, axis=-1, name=None):
        return self._one(
            lib.kiln_network_add_softmax, self._tid(x, "add_softmax x"), int(axis), name=name
        )

    def add_normalization(
        self, x, scale, bias, mean=None, var=None, epsilon=1e-5, name=None
    ):
        """BatchNormalization (inference) when mean/var are given, else LayerNormalization over
        the last axis. scale, bias, mean, var may be arrays (added as constants)."""
        scale = self._const_or_tensor(scale, name, "scale")
        bias = self._const_or_tensor(bias, name, "bias")
        mean = self._const_or_tensor(mean, name, "mean")
        var = self._const_or_tensor(var, name, "var")
        return self._one(
            lib.kiln_network_add_normalization,
            self._tid(x, "add_normalization x"),
            self._tid(scale, "add_normalization scale"),
            self._tid(bias, "add_normalization bias"),
            self._tid(mean, "add_normalization mean", allow_none=True),
            self._tid(var, "add_normalization var", allow_none=True),
            float(epsilon),
            name=name,
        )

    def add_plugin(
        self, plugin, inputs, fields=None, version=None, namespace=None, name=None, num_outputs=1
    ):
        """A plugin layer. plugin: a plugin name or a kiln.Plugin subclass (registered into the
        network's registry if it is not there yet). fields: {name: value}; for Python plugins
        values follow the declared field types, otherwise the type comes from the value (int:
        int64, float: float32, str: string, bytes, list of ints/floats)."""
        cls = None
        if isinstance(plugin, type):
            cls = plugin
            self.registry.add(cls)
            plugin, version, namespace = cls.name, str(cls.version or ""), str(cls.namespace or "")
        else:
            cls = self.registry.python_plugin(plugin, version, namespace)
        ids, n_in = self._ids(inputs, f"layer '{name or plugin}'")
        items = []
        for fname, value in dict(fields or {}).items():
            spec = cls._kiln_specs.get(fname) if cls is not None else None
            ftype = spec.type if spec is not None else _infer_field_type(fname, value)
            items.append((fname, ftype, value))
        try:
            farr, keep = _plugin.make_field_array(items)
        except (TypeError, ValueError) as e:
            raise KilnError(ERR_INVALID_ARGUMENT, f"layer '{name or plugin}': {e}") from None
        outs = (ctypes.c_int32 * max(int(num_outputs), 1))()
        check(
            lib.kiln_network_add_plugin(
                self._h,
                encode(name),
                encode(plugin),
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

    def _const_or_tensor(self, v, layer, what):
        if v is None or isinstance(v, Tensor) or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        if not isinstance(v, np.ndarray):
            v = np.asarray(v, dtype=np.float32)
        return self.add_constant(v, name=f"{layer}_{what}" if layer else None)

    # ---- building ----

    def build(
        self,
        shapes=None,
        threads=None,
        prefer_plugins=None,
        progress=None,
        backends=None,
        precision=None,
    ):
        """The plan (bytes); see kiln.build."""
        return build_plan(
            self._b,
            self._h,
            shapes,
            threads,
            prefer_plugins,
            progress,
            backends=backends,
            precision=precision,
        )

    def __del__(self):
        for attr in ("_hobj", "_bobj"):
            if getattr(self, attr, None) is not None:
                getattr(self, attr).release()
                setattr(self, attr, None)
