"""The declared inputs and outputs of an ONNX model, read straight from its protobuf bytes.

InferenceSession reports them before anything is built (a model with dynamic dims is built at
its first run, when the shapes are known), and without needing the onnx package. Only the few
fields on the path ModelProto.graph -> ValueInfoProto -> TypeProto.tensor_type.shape are read;
everything else is skipped by wire type."""

from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from ._lib import ERR_MODEL, KilnError

Dim = Union[int, str, None]
#: (name, type string as onnxruntime writes it, shape or None when the model gives none) of an
#: input or output.
IO = Tuple[str, str, Optional[List[Dim]]]

# Field numbers of onnx.proto3.
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT = 5, 11, 12
_TENSOR_NAME = 8
_VALUE_NAME, _VALUE_TYPE = 1, 2
_TYPE_TENSOR, _TYPE_SEQUENCE, _TYPE_OPTIONAL = 1, 4, 9
_CONTAINER_ELEM = 1  # Sequence.elem_type, Optional.elem_type
_TENSOR_ELEM_TYPE, _TENSOR_SHAPE = 1, 2
_SHAPE_DIM = 1
_DIM_VALUE, _DIM_PARAM = 1, 2


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise KilnError(ERR_MODEL, "ONNX model: truncated or malformed protobuf")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _fields(data: bytes) -> Iterator[Tuple[int, Any]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields (typed
    Any: the field number, known to the caller, decides which)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield field, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise KilnError(ERR_MODEL, "ONNX model: truncated or malformed protobuf")
            yield field, data[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise KilnError(ERR_MODEL, f"ONNX model: unsupported protobuf wire type {wire}")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _type(data: bytes) -> Tuple[str, int, Optional[List[Dim]]]:
    """(onnxruntime's type string, elem_type, shape) of a TypeProto: a tensor's element type and
    shape; a sequence or optional as "seq(...)" or "optional(...)" of its element (elem_type 0,
    no shape: kiln sizes it from the value)."""
    kind, elem = "", 0
    shape: Optional[List[Dim]] = None
    for tf, tv in _fields(data):
        if tf in (_TYPE_SEQUENCE, _TYPE_OPTIONAL):
            inner = "tensor(undefined)"
            for ef, ev in _fields(tv):
                if ef == _CONTAINER_ELEM:
                    inner = _type(ev)[0]
            kind = ("seq(%s)" if tf == _TYPE_SEQUENCE else "optional(%s)") % inner
        if tf != _TYPE_TENSOR:
            continue
        for ef, ev in _fields(tv):
            if ef == _TENSOR_ELEM_TYPE:
                elem = ev
            elif ef == _TENSOR_SHAPE:
                shape = []
                for sf, sv in _fields(ev):
                    if sf != _SHAPE_DIM:
                        continue
                    dim: Dim = None
                    for df, dv in _fields(sv):
                        if df == _DIM_VALUE:
                            dim = _signed(dv)
                        elif df == _DIM_PARAM:
                            dim = dv.decode("utf-8")
                    shape.append(dim)
    if kind:
        return kind, 0, None
    return TYPE_STRINGS.get(elem, "tensor(undefined)"), elem, shape


def _value_info(data: bytes) -> IO:
    name, type_string = "", "tensor(undefined)"
    shape: Optional[List[Dim]] = None
    for f, v in _fields(data):
        if f == _VALUE_NAME:
            name = v.decode("utf-8")
        elif f == _VALUE_TYPE:
            type_string, _, shape = _type(v)
    return name, type_string, shape


def graph_io(model: bytes) -> Tuple[List[IO], List[IO]]:
    """([(name, type string, shape)] of the graph inputs that are not initializers, [... outputs])."""
    graph = None
    for f, v in _fields(model):
        if f == _MODEL_GRAPH:
            graph = v
    if not isinstance(graph, bytes):
        raise KilnError(ERR_MODEL, "ONNX model: no graph")
    inputs: List[IO] = []
    outputs: List[IO] = []
    initializers = set()
    for f, v in _fields(graph):
        if f == _GRAPH_INPUT:
            inputs.append(_value_info(v))
        elif f == _GRAPH_OUTPUT:
            outputs.append(_value_info(v))
        elif f == _GRAPH_INITIALIZER:
            for tf, tv in _fields(v):
                if tf == _TENSOR_NAME:
                    initializers.add(tv.decode("utf-8"))
    return [i for i in inputs if i[0] not in initializers], outputs


TYPE_STRINGS: Dict[int, str] = {
    1: "tensor(float)",
    2: "tensor(uint8)",
    3: "tensor(int8)",
    4: "tensor(uint16)",
    5: "tensor(int16)",
    6: "tensor(int32)",
    7: "tensor(int64)",
    8: "tensor(string)",
    9: "tensor(bool)",
    10: "tensor(float16)",
    11: "tensor(double)",
    12: "tensor(uint32)",
    13: "tensor(uint64)",
    16: "tensor(bfloat16)",
}
