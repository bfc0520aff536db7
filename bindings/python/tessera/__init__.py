"""Tessera: Python bindings over the C API of the Tessera ONNX runtime (``libtessera``), through ctypes.

The API follows onnxruntime's::

    import numpy as np
    import tessera

    session = tessera.InferenceSession("model.onnx", providers=["cpu"])
    print(session.get_inputs(), session.get_partitions())
    (y,) = session.run(None, {"x": np.ones((1, 3), np.float32)})

Arrays go in and come out without copies where the layout allows (see ``tessera._values``).  Errors are
:class:`TesseraError` subclasses carrying the runtime's status ``code`` and ``message``.  ``tessera.backend``
implements ``onnx.backend.base.Backend``.  The library is found as ``tessera._capi`` describes (``TESSERA_LIBRARY``
first).
"""

from __future__ import annotations

from . import _capi
from ._values import live_output_values
from .errors import (AbiMismatch, Cancelled, InternalError, InvalidArgument, InvalidModel, NotFound, NotImplemented,
                     OutOfMemory, RuntimeException, StatusCode, TesseraError, Unavailable)
from ._ort import (ExecutionMode, ExecutionOrder, GraphOptimizationLevel, IOBinding, ModelMetadata, OrtValue,
                   SessionOptions,
                   disable_telemetry_events, enable_telemetry_events, get_all_providers, set_default_logger_severity,
                   set_default_logger_verbosity)
from .session import (Environment, InferenceSession, LogLevel, NodeArg, RunOptions, get_available_providers,
                      get_default_environment, get_device, plugins)

# The package is a thin layer over libtessera and carries its version (CMake's project version, the one place it
# is written; tests/python check that pyproject.toml agrees).
__version__ = _capi.version()

#: Path of the loaded ``libtessera``.
library_path = _capi.LIBRARY_PATH


def get_version_string() -> str:
    """onnxruntime's name for the version."""
    return __version__


def get_build_info() -> str:
    return f"tessera {__version__} ({library_path})"


def library_version() -> str:
    """Version of the loaded C library (``tess_version``)."""
    return _capi.version()


__all__ = [
    "__version__",
    "library_path",
    "library_version",
    "get_version_string",
    "get_build_info",
    "Environment",
    "InferenceSession",
    "LogLevel",
    "NodeArg",
    "RunOptions",
    "SessionOptions",
    "GraphOptimizationLevel",
    "IOBinding",
    "ExecutionMode",
    "ExecutionOrder",
    "ModelMetadata",
    "OrtValue",
    "get_device",
    "get_all_providers",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "get_available_providers",
    "get_default_environment",
    "plugins",
    "live_output_values",
    "StatusCode",
    "TesseraError",
    "InvalidArgument",
    "NotFound",
    "InvalidModel",
    "NotImplemented",
    "OutOfMemory",
    "RuntimeException",
    "Unavailable",
    "AbiMismatch",
    "InternalError",
    "Cancelled",
]
