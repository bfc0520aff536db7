"""onnxruntime's exception classes, as Tessera's: ``except onnxruntime.capi.onnxruntime_pybind11_state.X`` in code
written for onnxruntime catches the Tessera error of the same meaning when tessera stands in for onnxruntime."""

# Absolute: under the name onnxruntime.capi... a relative import would load a second copy of the error classes.
from tessera.errors import (Cancelled, InternalError, InvalidArgument, InvalidModel, NotFound, NotImplemented,
                            RuntimeException, TesseraError, Unavailable)

Fail = TesseraError                 # onnxruntime's catch-all
InvalidArgument = InvalidArgument   # noqa: PLW0127 - the same name in both APIs
NoSuchFile = NotFound
NoModel = InvalidModel
InvalidProtobuf = InvalidModel
InvalidGraph = InvalidModel
ModelLoaded = InvalidArgument
RuntimeException = RuntimeException  # noqa: PLW0127
NotImplemented = NotImplemented      # noqa: A001, PLW0127
EngineError = InternalError
EPFail = Unavailable
Cancelled = Cancelled                # noqa: PLW0127 - Tessera's, for RunOptions.terminate

__all__ = ["Fail", "InvalidArgument", "NoSuchFile", "NoModel", "InvalidProtobuf", "InvalidGraph", "ModelLoaded",
           "RuntimeException", "NotImplemented", "EngineError", "EPFail", "Cancelled"]
