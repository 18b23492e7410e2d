"""kiln.InferenceSession: onnxruntime's session API over kiln, so a script written for
onnxruntime runs on kiln by changing its import.

    import kiln as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    logits, = sess.run(None, {sess.get_inputs()[0].name: batch})

onnxruntime runs any shape; a kiln engine runs the shapes of its build profile. A model whose
inputs are all fixed is built at once. One with dynamic dims is built at its first run with
the feeds' shapes as the profile, and built again with a profile widened to cover every shape
seen when a later run falls outside it (SessionOptions.profile gives the profile up front and
avoids rebuilds). A kiln plan (path or bytes) is loaded as it is, with its own profile.
"""

import enum
import os
import threading
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import NDArray

from . import _onnx_io
from . import _plan
from ._lib import ERR_INVALID_ARGUMENT, ERR_NOT_FOUND, ERR_SHAPE, KilnError
from .builder import build
from .engine import Context, Engine, IOInfo

Shape = Tuple[int, ...]
PROVIDERS = ["CPUExecutionProvider"]


class GraphOptimizationLevel(enum.IntEnum):
    """Accepted for onnxruntime scripts; kiln always runs its full optimization."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """onnxruntime's options that mean something to kiln, plus two of kiln's own.

    intra_op_num_threads: threads of each run (0: one per core). profile: kiln only,
    {input: shape or (min, opt, max)} as for kiln.build. plugins: kiln only, a kiln.Registry or
    plugin libraries, as for kiln.build. The other attributes are accepted and ignored."""

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level = 2
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.profile: Optional[Dict[str, Any]] = None
        self.plugins: Any = None


class NodeArg:
    """An input or output as onnxruntime describes it: name, shape (ints, the dim's symbol, or
    None for an unnamed dynamic dim) and type ("tensor(float)")."""

    def __init__(self, name: str, type: str, shape: List[Union[int, str, None]]) -> None:
        self.name = name
        self.type = type
        self.shape = shape

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeArg) and (self.name, self.type, self.shape) == (
            other.name,
            other.type,
            other.shape,
        )


def get_available_providers() -> List[str]:
    return list(PROVIDERS)


def get_device() -> str:
    return "CPU"


def _providers(providers: Optional[Sequence[Any]]) -> List[str]:
    chosen: List[str] = []
    for p in providers or PROVIDERS:
        name = p[0] if isinstance(p, (tuple, list)) else p
        if name in PROVIDERS:
            chosen.append(name)
        else:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(PROVIDERS)}'",
                stacklevel=3,
            )
    return chosen or list(PROVIDERS)


_KIND_TYPES = {"sequence": "seq(tensor(undefined))", "optional": "optional(tensor(undefined))",
               "optional sequence": "optional(seq(tensor(undefined)))"}


def _node_arg(io: IOInfo) -> NodeArg:
    if io.kind is not None:  # a plan keeps the kind, not the element type
        return NodeArg(io.name, _KIND_TYPES[io.kind], [])
    return NodeArg(io.name, _onnx_io.TYPE_STRINGS.get(io.kiln_dtype, "tensor(undefined)"),
                   list(io.shape))


def _is_container(arg: "NodeArg") -> bool:
    return arg.type.startswith(("seq(", "optional("))


class InferenceSession:
    """onnxruntime.InferenceSession on kiln: path_or_bytes is an ONNX model or a kiln plan."""

    def __init__(
        self,
        path_or_bytes: Union[str, "os.PathLike[str]", bytes],
        sess_options: Optional[SessionOptions] = None,
        providers: Optional[Sequence[Any]] = None,
        provider_options: Optional[Sequence[Dict[str, Any]]] = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"InferenceSession: unexpected arguments {sorted(kwargs)}")
        self._options = sess_options or SessionOptions()
        self._providers = _providers(providers)
        if isinstance(path_or_bytes, (str, os.PathLike)):
            with open(path_or_bytes, "rb") as f:
                data = f.read()
            self._model_path: Optional[str] = os.fspath(path_or_bytes)
        elif isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            data, self._model_path = bytes(path_or_bytes), None
        else:
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"InferenceSession: expected a model or plan path or bytes, got "
                f"{type(path_or_bytes).__name__}",
            )
        self._lock = threading.Lock()
        self._local = threading.local()
        self._engine: Optional[Engine] = None
        self._bounds: Dict[str, Tuple[Shape, Shape]] = {}
        if _plan.is_plan(data):
            self._model = None
            self._engine = Engine(data, plugins=self._options.plugins)
            self._inputs = [_node_arg(i) for i in self._engine.inputs]
            self._outputs = [_node_arg(o) for o in self._engine.outputs]
            return
        # The model's bytes are kept only to build; a path lets external data be found.
        self._model = data if self._model_path is None else self._model_path
        ins, outs = _onnx_io.graph_io(data)
        self._inputs = [NodeArg(n, t, s or []) for n, t, s in ins]
        self._outputs = [NodeArg(n, t, s or []) for n, t, s in outs]
        fixed = all(all(isinstance(d, int) and d >= 0 for d in i.shape) for i in self._inputs
                    if not _is_container(i))
        if fixed or self._options.profile:
            self._engine = self._build(self._options.profile)

    # ---- onnxruntime's API ----

    def get_inputs(self) -> List[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> List[NodeArg]:
        return []

    def get_providers(self) -> List[str]:
        return list(self._providers)

    def get_provider_options(self) -> Dict[str, Dict[str, Any]]:
        return {p: {} for p in self._providers}

    def get_session_options(self) -> SessionOptions:
        return self._options

    def set_providers(
        self, providers: Optional[Sequence[Any]] = None, provider_options: Any = None
    ) -> None:
        self._providers = _providers(providers)

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> List[NDArray[Any]]:
        """The outputs named (all, in the model's order, when None or empty) for these feeds."""
        names = list(output_names) if output_names else [o.name for o in self._outputs]
        known = {o.name for o in self._outputs}
        for n in names:
            if n not in known:
                raise KilnError(ERR_NOT_FOUND, f"Invalid output name: {n}")
        missing = [i.name for i in self._inputs if i.name not in input_feed]
        if missing:
            raise ValueError(
                f"Required inputs ({missing}) are missing from input feed ({list(input_feed)})."
            )
        feeds = {k: v for k, v in input_feed.items()}
        outs = self._context(feeds).run(feeds)
        return [outs[n] for n in names]

    def run_with_ort_values(self, *args: Any, **kwargs: Any) -> None:
        raise KilnError(ERR_INVALID_ARGUMENT, "run_with_ort_values: kiln takes numpy arrays (run)")

    # ---- kiln's side ----

    @property
    def engine(self) -> Optional[Engine]:
        """The kiln engine now serving runs (None before the first run of a dynamic model)."""
        return self._engine

    def _build(self, profile: Optional[Dict[str, Any]]) -> Engine:
        threads = self._options.intra_op_num_threads or None
        plan = build(self._model, shapes=profile, threads=threads, plugins=self._options.plugins)
        return Engine(plan, plugins=self._options.plugins)

    def _fits(self, engine: Engine, feeds: Mapping[str, Any]) -> bool:
        for io in engine.inputs:
            if io.kind is not None:  # a sequence or optional needs no profile
                continue
            shape = np.shape(feeds[io.name])
            if len(shape) != io.rank or any(
                not lo <= d <= hi for d, lo, hi in zip(shape, io.min_shape, io.max_shape)
            ):
                return False
        return True

    def _context(self, feeds: Mapping[str, Any]) -> Context:
        engine = self._engine
        if engine is None or not self._fits(engine, feeds):
            if self._model is None:  # a plan keeps its profile: kiln's error names the dim
                assert engine is not None  # a plan's engine is loaded in __init__
                return self._thread_context(engine)
            with self._lock:
                engine = self._engine
                if engine is None or not self._fits(engine, feeds):
                    engine = self._engine = self._build(self._widened(feeds))
        return self._thread_context(engine)

    def _widened(self, feeds: Mapping[str, Any]) -> Dict[str, Tuple[Shape, Shape, Shape]]:
        profile: Dict[str, Tuple[Shape, Shape, Shape]] = {}
        for i in self._inputs:
            if _is_container(i):  # sized by its value at run time (docs/sequences.md)
                continue
            shape = tuple(int(d) for d in np.shape(feeds[i.name]))
            if len(shape) != len(i.shape):
                raise KilnError(
                    ERR_SHAPE,
                    f"input '{i.name}' has rank {len(shape)}; the model declares "
                    f"{len(i.shape)} ({i.shape})",
                )
            lo, hi = self._bounds.get(i.name, (shape, shape))
            lo = tuple(min(a, b) for a, b in zip(lo, shape))
            hi = tuple(max(a, b) for a, b in zip(hi, shape))
            self._bounds[i.name] = (lo, hi)
            profile[i.name] = (lo, shape, hi)
        return profile

    def _thread_context(self, engine: Engine) -> Context:
        """One kiln context per thread and engine: onnxruntime sessions run from many threads."""
        ctx = getattr(self._local, "ctx", None)
        if ctx is None or getattr(self._local, "engine", None) is not engine:
            ctx = engine.context()
            self._local.ctx, self._local.engine = ctx, engine
        return ctx
