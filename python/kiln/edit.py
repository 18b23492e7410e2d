"""Graph surgery on ONNX models through libkiln (kiln_model_*), the operations of `kiln edit`.

    import kiln.edit
    m = kiln.edit.Model("model.onnx")
    m.replace_pattern("swish", "Swish")          # every x*sigmoid(x)(+b) becomes one plugin node
    m.extract(inputs=["a"], outputs=["b"])
    m.fold_constants().cleanup().save("out.onnx")

Each operation either succeeds or leaves the model unchanged and raises kiln.KilnError.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_void_p

import numpy as np

from . import _lib
from ._lib import ERR_INVALID_ARGUMENT, Handle, KilnError, check, encode

_d = _lib._declare
_d("kiln_model_load", _lib.status_t, c_char_p, POINTER(c_void_p))
_d("kiln_model_destroy", None, c_void_p)
_d("kiln_model_save", _lib.status_t, c_void_p, c_char_p, c_size_t)
_d("kiln_model_num_nodes", c_int, c_void_p)
_d("kiln_model_node", _lib.status_t, c_void_p, c_int, POINTER(c_char_p), POINTER(c_char_p))
_d("kiln_model_extract", _lib.status_t, c_void_p, c_int, POINTER(c_char_p), c_int,
   POINTER(c_char_p))
_d("kiln_model_remove_node", _lib.status_t, c_void_p, c_char_p)
_d("kiln_model_insert_after", _lib.status_t, c_void_p, c_char_p, c_char_p, c_int,
   POINTER(_lib.Attribute))
_d("kiln_model_rename", _lib.status_t, c_void_p, c_char_p, c_char_p)
_d("kiln_model_replace_pattern", _lib.status_t, c_void_p, c_char_p, c_char_p, c_char_p, c_char_p,
   c_int, POINTER(_lib.Attribute), POINTER(c_int))
_d("kiln_model_fold_constants", _lib.status_t, c_void_p)
_d("kiln_model_cleanup", _lib.status_t, c_void_p)
_d("kiln_model_toposort", _lib.status_t, c_void_p)
_d("kiln_model_set_shape", _lib.status_t, c_void_p, c_char_p, c_int, POINTER(c_int64),
   POINTER(c_char_p))
_d("kiln_model_set_opset", _lib.status_t, c_void_p, c_int)
_c = _lib.lib

#: A path to an ONNX file.
PathArg = Union[str, "os.PathLike[str]"]


def _names(values: Sequence[str]) -> Tuple[ctypes.Array[c_char_p], int]:
    enc = [encode(v) for v in values]
    return (c_char_p * max(len(enc), 1))(*enc), len(enc)


def _attrs(
    attrs: Optional[Mapping[str, Any]],
) -> Tuple[ctypes.Array[_lib.Attribute], int, List[Any]]:
    """dict -> kiln_attribute array (ints, floats, strings, and lists of ints or floats)."""
    attrs = attrs or {}
    arr = (_lib.Attribute * max(len(attrs), 1))()
    keep: List[Any] = []
    for a, (name, value) in zip(arr, attrs.items()):
        a.name = encode(name)
        keep.append(a.name)
        if isinstance(value, (bool, int, np.integer)):
            a.type, a.i = 2, int(value)
        elif isinstance(value, (float, np.floating)):
            a.type, a.f = 1, float(value)
        elif isinstance(value, (str, bytes)):
            a.type, a.s = 3, encode(value)
            keep.append(a.s)
        else:
            v = np.asarray(value).reshape(-1)
            if v.dtype.kind in "iub":
                buf = np.ascontiguousarray(v, dtype=np.int64)
                a.type, a.n, a.ints = 7, buf.size, buf.ctypes.data_as(POINTER(c_int64))
            elif v.dtype.kind == "f":
                buf = np.ascontiguousarray(v, dtype=np.float32)
                a.type, a.n = 6, buf.size
                a.floats = buf.ctypes.data_as(POINTER(ctypes.c_float))
            else:
                raise KilnError(ERR_INVALID_ARGUMENT, f"attribute '{name}': {value!r} is not "
                                "an int, float, string or list of them")
            keep.append(buf)
    return arr, len(attrs), keep


class Model:
    """An ONNX model open for editing; methods return the model so edits chain."""

    def __init__(self, path: PathArg) -> None:
        ptr = c_void_p()
        check(_c.kiln_model_load(encode(path), ctypes.byref(ptr)))
        self._h = Handle(ptr, _c.kiln_model_destroy)

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None:
            h.release()

    @property
    def _p(self) -> Optional[ctypes.c_void_p]:
        return self._h.ptr

    def nodes(self) -> List[Tuple[str, str]]:
        """[(name, op_type)] in order."""
        out: List[Tuple[str, str]] = []
        for i in range(_c.kiln_model_num_nodes(self._p)):
            name, op = c_char_p(), c_char_p()
            check(_c.kiln_model_node(self._p, i, ctypes.byref(name), ctypes.byref(op)))
            out.append(((name.value or b"").decode(), (op.value or b"").decode()))
        return out

    def save(self, path: PathArg, external_threshold: int = 1 << 20) -> Model:
        check(_c.kiln_model_save(self._p, encode(path), external_threshold))
        return self

    def extract(self, inputs: Sequence[str], outputs: Sequence[str]) -> Model:
        (ia, ni), (oa, no) = _names(inputs), _names(outputs)
        check(_c.kiln_model_extract(self._p, ni, ia, no, oa))
        return self

    def remove(self, node: str) -> Model:
        check(_c.kiln_model_remove_node(self._p, encode(node)))
        return self

    def insert_after(self, tensor: str, op_type: str, **attrs: Any) -> Model:
        arr, n, _keep = _attrs(attrs)
        check(_c.kiln_model_insert_after(self._p, encode(tensor), encode(op_type), n, arr))
        return self

    def rename(self, old: str, new: str) -> Model:
        check(_c.kiln_model_rename(self._p, encode(old), encode(new)))
        return self

    def replace_pattern(
        self,
        pattern: str,
        plugin: str,
        version: Optional[str] = None,
        namespace: Optional[str] = None,
        **attrs: Any,
    ) -> int:
        """Returns the number of matches replaced."""
        arr, n, _keep = _attrs(attrs)
        count = c_int()
        check(_c.kiln_model_replace_pattern(self._p, encode(pattern), encode(plugin),
                                            encode(version), encode(namespace), n, arr,
                                            ctypes.byref(count)))
        return count.value

    def fold_constants(self) -> Model:
        check(_c.kiln_model_fold_constants(self._p))
        return self

    def cleanup(self) -> Model:
        check(_c.kiln_model_cleanup(self._p))
        return self

    def toposort(self) -> Model:
        check(_c.kiln_model_toposort(self._p))
        return self

    def set_shape(self, name: str, dims: Sequence[Union[int, str]]) -> Model:
        """dims: ints, or strings naming dynamic dims."""
        vals = [d if isinstance(d, int) else -1 for d in dims]
        syms = [None if isinstance(d, int) else encode(d) for d in dims]
        check(_c.kiln_model_set_shape(self._p, encode(name), len(vals), _lib.int64_array(vals),
                                      (c_char_p * max(len(syms), 1))(*syms)))
        return self

    def set_opset(self, opset: int) -> Model:
        check(_c.kiln_model_set_opset(self._p, int(opset)))
        return self
