"""Exceptions raised by the Tessera bindings.

Every error the C library reports becomes a :class:`TesseraError` subclass chosen by the status code; the status is
released before the exception is raised, so nothing leaks.  Errors the bindings detect on their own (an argument that
cannot be converted, a finished object) use the same classes and codes, so callers handle one family.

Some classes also derive from the matching built-in exception, so ``except ValueError`` keeps working for
:class:`InvalidArgument` and ``except NotImplementedError`` for :class:`NotImplemented`.
"""

from __future__ import annotations

import builtins
import enum

__all__ = [
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
    "error_for",
]


class StatusCode(enum.IntEnum):
    """``TessStatusCode`` from ``tessera/common.h``."""

    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    INVALID_MODEL = 3
    NOT_IMPLEMENTED = 4
    OUT_OF_MEMORY = 5
    RUNTIME_ERROR = 6
    UNAVAILABLE = 7
    ABI_MISMATCH = 8
    INTERNAL = 9
    CANCELLED = 10


class TesseraError(Exception):
    """Base class of every Tessera error.  ``code`` is a :class:`StatusCode`, ``message`` the status message."""

    default_code = StatusCode.INTERNAL

    def __init__(self, message: str, code: int | None = None) -> None:
        code = self.default_code if code is None else code
        try:
            code = StatusCode(code)
        except ValueError:  # a code newer than these bindings: keep the number
            pass
        self.code = code
        self.message = message
        name = code.name if isinstance(code, StatusCode) else str(code)
        super().__init__(f"[{name}] {message}")


class InvalidArgument(TesseraError, builtins.ValueError):
    """The caller passed something wrong: an input name, type or shape, an option."""

    default_code = StatusCode.INVALID_ARGUMENT


class NotFound(TesseraError):
    """A file, plugin, provider or value does not exist."""

    default_code = StatusCode.NOT_FOUND


class InvalidModel(TesseraError):
    """The model is malformed or uses something it must not."""

    default_code = StatusCode.INVALID_MODEL


class NotImplemented(TesseraError, builtins.NotImplementedError):  # noqa: A001 - mirrors onnxruntime's name
    """No provider can run an operator, or a feature is missing."""

    default_code = StatusCode.NOT_IMPLEMENTED


class OutOfMemory(TesseraError, builtins.MemoryError):
    default_code = StatusCode.OUT_OF_MEMORY


class RuntimeException(TesseraError, builtins.RuntimeError):
    """A kernel failed while running."""

    default_code = StatusCode.RUNTIME_ERROR


class Unavailable(TesseraError):
    """A provider or device is not usable on this machine."""

    default_code = StatusCode.UNAVAILABLE


class AbiMismatch(TesseraError):
    """A plugin and the core share no ABI version."""

    default_code = StatusCode.ABI_MISMATCH


class InternalError(TesseraError):
    """A bug in Tessera or one of its plugins."""

    default_code = StatusCode.INTERNAL


class Cancelled(TesseraError):
    """A run was terminated (``RunOptions.terminate``) or took longer than its ``RunOptions.timeout_ms``."""

    default_code = StatusCode.CANCELLED


_BY_CODE: dict[int, type[TesseraError]] = {
    cls.default_code: cls
    for cls in (InvalidArgument, NotFound, InvalidModel, NotImplemented, OutOfMemory, RuntimeException, Unavailable,
                AbiMismatch, InternalError, Cancelled)
}


def error_for(code: int, message: str) -> TesseraError:
    """The exception for a status code (unknown codes give a plain :class:`TesseraError`)."""
    return _BY_CODE.get(int(code), TesseraError)(message, code)
