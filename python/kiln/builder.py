"""kiln.build and kiln.build_to_file: ONNX models and kiln.Networks to plans."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union, cast

from . import _plan
from . import registry as _registry
from ._build_config import CalibrationArg, Precision, PrecisionArg, build_plan
from ._lib import ERR_INVALID_ARGUMENT, KilnError, check, encode, lib
from .network import Network


#: A shape, or a (min, opt, max) triple of shapes, per input name.
ShapesArg = Mapping[str, Any]
#: A kiln.Registry, or plugin library paths and kiln.Plugin subclasses.
PluginsArg = Any
#: A path, ONNX bytes, an onnx.ModelProto or a kiln.Network.
ModelArg = Any


def _is_path(x: object) -> bool:
    return isinstance(x, (str, os.PathLike))


def _model_bytes(model: Any) -> Optional[bytes]:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if hasattr(model, "SerializeToString"):  # an onnx.ModelProto
        return model.SerializeToString()
    return None


def build(
    model: ModelArg,
    shapes: Optional[ShapesArg] = None,
    threads: Optional[int] = None,
    plugins: Optional[PluginsArg] = None,
    prefer_plugins: Optional[Union[str, Sequence[str]]] = None,
    progress: Optional[Callable[[str, float], None]] = None,
    backends: Optional[Union[str, Sequence[str]]] = None,
    precision: Optional[PrecisionArg] = None,
    timing_cache: Optional[Union[str, "os.PathLike[str]"]] = None,
    int8: bool = False,
    calibration: Optional[CalibrationArg] = None,
    tactics: Optional[str] = None,
) -> bytes:
    """Build a plan and return it as bytes.

    model: a path to an .onnx file, the bytes of an ONNX model (or an onnx.ModelProto), or a
    kiln.Network. shapes: {input: shape} or {input: (min, opt, max)} for inputs with dynamic
    dims. threads: default threads of the engine's contexts. plugins: a kiln.Registry, or
    library paths / kiln.Plugin subclasses added to the default registry. prefer_plugins: op
    types a plugin of the same name may replace. progress: called as progress(stage, fraction)
    during the build. backends: the backends to place nodes on, in order of preference (e.g.
    ["cuda", "cpu"] or "cuda,cpu"; default the CPU alone); the host takes what none runs.
    precision: "fp32" (default), "tf32", "fp16" or "bf16", or a dict of layer-name patterns to
    those ("*" sets the default), e.g. {"*": "fp16", "*attn*": "fp32"}. timing_cache: a file
    keeping what the build chooses by timing, device backends' tactics and (for more than one
    thread) the CPU's per-layer thread counts (read before, written after; see
    kiln_build_config_set_timing_cache). int8: run a float32 model's Conv, Gemm and MatMul
    layers in int8, calibrated on the CPU by calibration: a folder of .npy samples (one
    sub-folder per sample holding INPUT.npy for each input, or .npy files for a one-input model)
    or a kiln.Calibration(data, method="entropy"|"minmax", cache=FILE). tactics: how device
    backends choose among a layer's algorithms (cuDNN convolutions, cuBLASLt products):
    "timed" (each timed on the device, the fastest kept in the plan), "heuristic" (the
    libraries' first choice) or "auto" (the default: timed when timing_cache is given)."""
    plan = _build(
        model,
        None,
        shapes,
        threads,
        plugins,
        prefer_plugins,
        progress,
        backends,
        precision,
        timing_cache,
        int8,
        calibration,
        tactics,
    )
    return cast(bytes, plan)  # bytes whenever no path is given


def build_to_file(
    model: ModelArg,
    path: Union[str, "os.PathLike[str]"],
    shapes: Optional[ShapesArg] = None,
    threads: Optional[int] = None,
    plugins: Optional[PluginsArg] = None,
    prefer_plugins: Optional[Union[str, Sequence[str]]] = None,
    progress: Optional[Callable[[str, float], None]] = None,
    backends: Optional[Union[str, Sequence[str]]] = None,
    precision: Optional[PrecisionArg] = None,
    timing_cache: Optional[Union[str, "os.PathLike[str]"]] = None,
    int8: bool = False,
    calibration: Optional[CalibrationArg] = None,
    tactics: Optional[str] = None,
) -> None:
    """Build a plan straight into a file (written beside it, then renamed, so a failed build
    never damages an existing plan). Arguments as for kiln.build."""
    _build(
        model,
        path,
        shapes,
        threads,
        plugins,
        prefer_plugins,
        progress,
        backends,
        precision,
        timing_cache,
        int8,
        calibration,
        tactics,
    )


def _build(
    model: ModelArg,
    path: Optional[Union[str, "os.PathLike[str]"]],
    shapes: Optional[ShapesArg],
    threads: Optional[int],
    plugins: Optional[PluginsArg],
    prefer_plugins: Optional[Union[str, Sequence[str]]],
    progress: Optional[Callable[[str, float], None]],
    backends: Optional[Union[str, Sequence[str]]] = None,
    precision: Optional[PrecisionArg] = None,
    timing_cache: Optional[Union[str, "os.PathLike[str]"]] = None,
    int8: bool = False,
    calibration: Optional[CalibrationArg] = None,
    tactics: Optional[str] = None,
) -> Optional[bytes]:
    if isinstance(model, Network):
        if isinstance(plugins, _registry.Registry) and plugins is not model.registry:
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                "build: a kiln.Network uses the registry it was created with "
                "(kiln.Network(registry=...)); another was given",
            )
        if plugins is not None:
            model.registry.add(plugins)
        return build_plan(
            model._b,
            model._h,
            shapes,
            threads,
            prefer_plugins,
            progress,
            path,
            backends,
            precision,
            timing_cache,
            int8,
            calibration,
            tactics,
        )
    reg = _registry.resolve(plugins)
    b = ctypes.c_void_p()
    check(lib.kiln_builder_create(ctypes.byref(b)))
    net = ctypes.c_void_p()
    try:
        check(lib.kiln_builder_set_registry(b, reg.handle))
        data = _model_bytes(model)
        if data is not None:
            check(lib.kiln_network_from_onnx_memory(b, data, len(data), ctypes.byref(net)))
        elif _is_path(model):
            check(lib.kiln_network_from_onnx_file(b, encode(os.fspath(model)), ctypes.byref(net)))
        else:
            raise KilnError(
                ERR_INVALID_ARGUMENT,
                f"build: model must be a path, ONNX bytes or a kiln.Network, got "
                f"{type(model).__name__}",
            )
        return build_plan(
            b,
            net,
            shapes,
            threads,
            prefer_plugins,
            progress,
            path,
            backends,
            precision,
            timing_cache,
            int8,
            calibration,
            tactics,
        )
    finally:
        if net:
            lib.kiln_network_destroy(net)
        lib.kiln_builder_destroy(b)


def plan_layers(
    plan: Union[bytes, str, "os.PathLike[str]"],
) -> List[Tuple[Optional[str], Optional[str], Optional[str]]]:
    """[(name, op_type, domain)] of a plan's live layers (plan: bytes or a path)."""
    if isinstance(plan, (str, os.PathLike)):
        with open(plan, "rb") as f:
            return _plan.layers(f.read())
    return _plan.layers(plan)
