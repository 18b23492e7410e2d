"""kiln: Python bindings (ctypes) of the kiln inference engine.

    import numpy as np, kiln
    plan = kiln.build("model.onnx", shapes={"input": ((1, 3, 224, 224), (8, 3, 224, 224),
                                                        (32, 3, 224, 224))})
    engine = kiln.Engine(plan)
    outputs = engine.context().run({"input": np.zeros((4, 3, 224, 224), np.float32)})

A script written for onnxruntime runs on kiln.InferenceSession by changing its import.
Every failure raises kiln.KilnError(status, message). See docs/python.md.
"""

from ._device import DeviceArray
from ._dtypes import DType
from ._lib import KilnError, LIBRARY_PATH, lib as _clib
from .hooks import LogLevel, allocated_bytes, dtype_size, set_logger
from ._build_config import Calibration
from .builder import build, build_to_file, plan_layers
from .engine import Context, Engine, IOInfo, run
from .network import Activation, ElementWise, Network, Pooling, Tensor
from .plugin import (
    BYTES,
    FLOAT32,
    FLOAT32S,
    INT64,
    INT64S,
    STRING,
    FieldType,
    Plugin,
    field,
)
from .registry import Registry, default_registry, load_plugin_library, register_plugin
from .paths import get_cli, get_include, get_library, get_plugin_dir
from .session import (
    ExecutionMode,
    GraphOptimizationLevel,
    InferenceSession,
    NodeArg,
    SessionOptions,
    get_available_providers,
    get_device,
)

__version__ = _clib.kiln_version_string().decode("ascii")

__all__ = [
    "Activation",
    "Calibration",
    "allocated_bytes",
    "build",
    "build_to_file",
    "BYTES",
    "Context",
    "default_registry",
    "DType",
    "dtype_size",
    "ElementWise",
    "Engine",
    "ExecutionMode",
    "field",
    "FieldType",
    "FLOAT32",
    "FLOAT32S",
    "get_available_providers",
    "get_cli",
    "get_device",
    "get_include",
    "get_library",
    "get_plugin_dir",
    "GraphOptimizationLevel",
    "InferenceSession",
    "INT64",
    "INT64S",
    "IOInfo",
    "KilnError",
    "LIBRARY_PATH",
    "load_plugin_library",
    "LogLevel",
    "Network",
    "NodeArg",
    "plan_layers",
    "Plugin",
    "DeviceArray",
    "Pooling",
    "register_plugin",
    "Registry",
    "run",
    "SessionOptions",
    "set_logger",
    "STRING",
    "Tensor",
]
