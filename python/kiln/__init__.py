"""kiln: Python bindings (ctypes) of the kiln inference engine.

    import numpy as np, kiln
    plan = kiln.build("model.onnx", shapes={"input": ((1, 3, 224, 224), (8, 3, 224, 224),
                                                        (32, 3, 224, 224))})
    engine = kiln.Engine(plan)
    outputs = engine.context().run({"input": np.zeros((4, 3, 224, 224), np.float32)})

Every failure raises kiln.KilnError(status, message). See docs/python.md.
"""

from ._dtypes import DType
from ._lib import KilnError, LIBRARY_PATH, lib as _clib
from .hooks import LogLevel, allocated_bytes, dtype_size, set_logger
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

__version__ = _clib.kiln_version_string().decode("ascii")

__all__ = [
    "Activation",
    "BYTES",
    "Context",
    "DType",
    "ElementWise",
    "Engine",
    "FLOAT32",
    "FLOAT32S",
    "FieldType",
    "INT64",
    "INT64S",
    "IOInfo",
    "KilnError",
    "LIBRARY_PATH",
    "LogLevel",
    "Network",
    "Plugin",
    "Pooling",
    "Registry",
    "STRING",
    "Tensor",
    "allocated_bytes",
    "build",
    "build_to_file",
    "default_registry",
    "dtype_size",
    "field",
    "load_plugin_library",
    "plan_layers",
    "register_plugin",
    "run",
    "set_logger",
]
