"""Build configurations (profiles, threads, preferred plugins, backends, progress) and the one call that
turns a C network into a plan. Both kiln.build and kiln.Network.build end here, so this module
sits below them and imports neither."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import ERR_INVALID_ARGUMENT, KilnError, check, encode, int64_array, lib


Shape = Tuple[int, ...]
#: "fp32", "tf32", "fp16", "bf16", or {layer-name pattern: one of them} ("*" the default).
Precision = Literal["fp32", "tf32", "fp16", "bf16"]
PrecisionArg = Union[Precision, Mapping[str, Precision]]


PathArg = Union[str, "os.PathLike[str]"]
CalibrationMethod = Literal["entropy", "minmax"]


@dataclass(frozen=True)
class Calibration:
    """int8 calibration of a float32 model (see kiln_build_config_set_int8): data is the folder
    of samples (one sub-folder per sample holding INPUT.npy for each input, or .npy files for a
    one-input model); method "entropy" (KL-divergence threshold) or "minmax"; cache a file of
    the scales, read when it exists (no calibration runs), else written."""

    data: Optional[PathArg] = None
    method: CalibrationMethod = "entropy"
    cache: Optional[PathArg] = None


#: A folder of samples, or a kiln.Calibration.
CalibrationArg = Union[str, "os.PathLike[str]", Calibration]
_METHODS: Dict[str, int] = {"entropy": 0, "minmax": 1}


def _set_int8(h: ctypes.c_void_p, calibration: Optional[CalibrationArg]) -> None:
    c = calibration if isinstance(calibration, Calibration) else Calibration(data=calibration)
    if c.method not in _METHODS:
        raise KilnError(
            ERR_INVALID_ARGUMENT, f"calibration method {c.method!r}: expected entropy or minmax"
        )
    if c.data is None and c.cache is None:
        raise KilnError(
            ERR_INVALID_ARGUMENT,
            "int8=True needs calibration= (a folder of samples, or a kiln.Calibration with a "
            "cache of an earlier build)",
        )
    data = encode(os.fspath(c.data)) if c.data is not None else None
    cache = encode(os.fspath(c.cache)) if c.cache is not None else None
    check(lib.kiln_build_config_set_int8(h, data, _METHODS[c.method], cache))


def _profile(name: str, spec: Any) -> Tuple[Shape, Shape, Shape]:
    """(min, opt, max) tuples from a shape or a (min, opt, max) triple."""
    spec = list(spec)
    if len(spec) == 3 and all(isinstance(s, (tuple, list)) for s in spec):
        mn, op, mx = (tuple(int(d) for d in s) for s in spec)
    elif all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in spec):
        mn = op = mx = tuple(int(d) for d in spec)
    else:
        raise KilnError(
            ERR_INVALID_ARGUMENT,
            f"shapes['{name}']: give a shape (ints) or a (min, opt, max) triple of shapes, "
            f"got {spec!r}",
        )
    if not len(mn) == len(op) == len(mx):
        raise KilnError(
            ERR_INVALID_ARGUMENT, f"shapes['{name}']: min, opt and max have different ranks"
        )
    return mn, op, mx


PRECISIONS: Dict[str, int] = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}


def _precision_code(p: str) -> int:
    if p not in PRECISIONS:
        raise KilnError(
            ERR_INVALID_ARGUMENT, f"precision {p!r}: expected one of {', '.join(PRECISIONS)}"
        )
    return PRECISIONS[p]


def _set_precision(h: ctypes.c_void_p, precision: PrecisionArg) -> None:
    """precision: "fp16", or {"*": "fp16", "*attn*": "fp32"} ("*" alone sets the default;
    other keys are layer-name patterns, applied in order)."""
    if isinstance(precision, str):
        precision = {"*": precision}
    for pattern, p in dict(precision).items():
        if pattern == "*":
            check(lib.kiln_build_config_set_precision(h, _precision_code(p)))
        else:
            check(
                lib.kiln_build_config_set_layer_precision(h, encode(pattern), _precision_code(p))
            )


_TACTICS = {"auto": 0, "timed": 1, "heuristic": 2}  # kiln_tactics


def _tactics_code(tactics: str) -> int:
    if not isinstance(tactics, str) or tactics not in _TACTICS:
        raise KilnError(
            ERR_INVALID_ARGUMENT,
            f"tactics={tactics!r}: expected 'auto', 'timed' or 'heuristic'",
        )
    return _TACTICS[tactics]


class _Config:
    def __init__(
        self,
        shapes: Optional[Mapping[str, Any]],
        threads: Optional[int],
        prefer_plugins: Optional[Union[str, Sequence[str]]],
        progress: Optional[Callable[[str, float], object]] = None,
        backends: Optional[Union[str, Sequence[str]]] = None,
        precision: Optional[PrecisionArg] = None,
        timing_cache: Optional[Union[str, "os.PathLike[str]"]] = None,
        int8: bool = False,
        calibration: Optional[CalibrationArg] = None,
        tactics: Optional[str] = None,
    ) -> None:
        h = ctypes.c_void_p()
        check(lib.kiln_build_config_create(ctypes.byref(h)))
        self.h: Optional[ctypes.c_void_p] = h
        self.progress: Any = None
        try:
            if progress is not None:

                def call(user: Optional[int], stage: Optional[bytes], fraction: float) -> None:
                    try:
                        progress(stage.decode("utf-8", "replace") if stage else "", fraction)
                    except BaseException:
                        pass  # a progress display must not fail the build

                self.progress = _lib.PROGRESS_FN(call)
                check(lib.kiln_build_config_set_progress(h, self.progress, None))
            if threads is not None:
                check(lib.kiln_build_config_set_threads(h, int(threads)))
            for name, spec in dict(shapes or {}).items():
                mn, op, mx = _profile(name, spec)
                check(
                    lib.kiln_build_config_add_profile(
                        h, encode(name), len(mn), int64_array(mn), int64_array(op), int64_array(mx)
                    )
                )
            if isinstance(prefer_plugins, str):
                prefer_plugins = [prefer_plugins]
            for op_type in prefer_plugins or ():
                check(lib.kiln_build_config_prefer_plugin(h, encode(op_type)))
            if backends is not None:
                if isinstance(backends, str):
                    backends = backends.split(",")
                names = [encode(str(b)) for b in backends]
                arr = (ctypes.c_char_p * max(len(names), 1))(*names)
                check(lib.kiln_build_config_set_backends(h, arr, len(names)))
            if precision is not None:
                _set_precision(h, precision)
            if timing_cache is not None:
                check(lib.kiln_build_config_set_timing_cache(h, encode(os.fspath(timing_cache))))
            if tactics is not None:
                check(lib.kiln_build_config_set_tactics(h, _tactics_code(tactics)))
            if int8:
                _set_int8(h, calibration)
            elif calibration is not None:
                raise KilnError(ERR_INVALID_ARGUMENT, "calibration= needs int8=True")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.h:
            lib.kiln_build_config_destroy(self.h)
            self.h = None



def build_plan(
    builder: ctypes.c_void_p,
    net: ctypes.c_void_p,
    shapes: Optional[Mapping[str, Any]],
    threads: Optional[int],
    prefer_plugins: Optional[Union[str, Sequence[str]]],
    progress: Optional[Callable[[str, float], object]] = None,
    path: Optional[Union[str, os.PathLike[str]]] = None,
    backends: Optional[Union[str, Sequence[str]]] = None,
    precision: Optional[PrecisionArg] = None,
    timing_cache: Optional[Union[str, "os.PathLike[str]"]] = None,
    int8: bool = False,
    calibration: Optional[CalibrationArg] = None,
    tactics: Optional[str] = None,
) -> Optional[bytes]:
    cfg = _Config(
        shapes, threads, prefer_plugins, progress, backends, precision, timing_cache, int8,
        calibration, tactics,
    )
    data, size = ctypes.c_void_p(), ctypes.c_size_t()
    try:
        if path is not None:
            check(lib.kiln_build_to_file(builder, net, cfg.h, encode(os.fspath(path))))
            return None
        check(lib.kiln_build(builder, net, cfg.h, ctypes.byref(data), ctypes.byref(size)))
        try:
            return ctypes.string_at(data, size.value)
        finally:
            lib.kiln_free(data)
    finally:
        cfg.close()
