"""Conversions between Python objects and ``TessValue`` handles.

Inputs (:func:`to_value`): numpy arrays (or anything ``numpy.asarray`` takes) become tensors, lists and tuples become
sequences where the model expects a sequence, ``None`` is an empty optional.  A C-contiguous, aligned array of a
supported dtype is *not copied*: the tensor is created over the array's memory with
``tess_value_create_tensor_over`` and the array is kept in the caller's ``keep`` list until the value is released.
Strings are copied element by element; packed sub-byte types are packed into a new buffer.

Outputs (:func:`from_value`): a tensor becomes a numpy array over the value's own memory, *not copied*.  The array's
``base`` is a small object that describes the memory (``__array_interface__``) and keeps an :class:`OutputValue`
alive, and that one releases the ``TessValue`` (``tess_value_release``) when the last array over it is
garbage-collected (for the ``ml_dtypes`` types the array is a view of such a wrapped carrier array).  Sequences
become lists, optionals ``None`` or their content, string tensors ``object`` arrays of ``str`` (``bytes`` where an
element is not UTF-8).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any

import numpy as np

from . import _types as T
from ._capi import Handle, check, lib
from .errors import InvalidArgument, NotImplemented as TessNotImplemented

_live_lock = threading.Lock()
_live_outputs = 0


def live_output_values() -> int:
    """How many output ``TessValue`` handles are still held by Python objects (for tests and leak hunting)."""
    return _live_outputs


# ---- Inputs ------------------------------------------------------------------------------------------------------

def _dims(shape: tuple[int, ...]) -> ctypes.Array:
    return (ctypes.c_int64 * max(len(shape), 1))(*shape)


def tensor_value(obj: Any, declared_type: int, keep: list, name: str) -> int:
    """A new tensor handle (owned by the caller) for ``obj``; arrays it points into are appended to ``keep``."""
    if isinstance(obj, np.ndarray):
        array = obj
    elif declared_type not in (T.UNDEFINED, T.STRING) and not isinstance(obj, (str, bytes)):
        array = np.asarray(obj, dtype=T.dtype_of(declared_type))  # Python scalars and lists take the model's type
    else:
        array = np.asarray(obj)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))  # byte-swapped data: one copy into native order
    element_type = T.element_type_of(array.dtype, declared_type)
    if element_type is None:
        raise InvalidArgument(f"input '{name}': numpy dtype {array.dtype} has no Tessera element type")
    shape = tuple(int(d) for d in array.shape)
    out = Handle()

    if element_type == T.STRING:
        check(lib.tess_value_create_tensor(T.STRING, _dims(shape), len(shape), ctypes.byref(out)))
        try:
            for i, item in enumerate(array.reshape(-1)):
                data = item if isinstance(item, bytes) else str(item).encode("utf-8")
                check(lib.tess_tensor_set_string(out, i, data, len(data)))
        except BaseException:
            lib.tess_value_release(out)
            raise
        return out.value

    if element_type in T.SUB_BYTE:
        array = T.pack(array, element_type)  # a new buffer: Tessera stores these packed
    elif not (array.flags.c_contiguous and array.flags.aligned):
        array = np.ascontiguousarray(array)  # the only copy on this path
    keep.append(array)  # the value points into it: alive until the caller releases the value
    check(lib.tess_value_create_tensor_over(element_type, _dims(shape), len(shape), array.ctypes.data, array.nbytes,
                                            None, None, ctypes.byref(out)))
    return out.value


def to_value(obj: Any, kind: int, element_type: int, keep: list, name: str) -> int:
    """A new handle (owned by the caller) for a run input declared as ``kind`` of ``element_type``.

    ``kind`` and ``element_type`` may be unknown (0): the value's Python type decides then.
    """
    if kind == T.KIND_OPTIONAL:
        inner = None
        if obj is not None:
            inner_kind = T.KIND_SEQUENCE if isinstance(obj, (list, tuple)) else T.KIND_TENSOR
            inner = to_value(obj, inner_kind, element_type, keep, name)
        out = Handle()
        check(lib.tess_value_create_optional(element_type, inner, ctypes.byref(out)))  # owns `inner` even on failure
        return out.value
    if kind == T.KIND_SEQUENCE or (kind == T.KIND_UNKNOWN and isinstance(obj, (list, tuple))):
        if not isinstance(obj, (list, tuple)):
            raise InvalidArgument(f"input '{name}' is a sequence: pass a list of arrays, not {type(obj).__name__}")
        items: list[int] = []
        try:
            for item in obj:
                items.append(tensor_value(item, element_type, keep, name))
        except BaseException:
            for handle in items:
                lib.tess_value_release(handle)
            raise
        if element_type == T.UNDEFINED and items:
            element_type = lib.tess_value_element_type(items[0])
        array = (Handle * max(len(items), 1))(*items)
        out = Handle()
        check(lib.tess_value_create_sequence(element_type, array, len(items), ctypes.byref(out)))  # owns the items
        return out.value
    if obj is None:
        raise InvalidArgument(f"input '{name}' is None but the model declares a tensor, not an optional")
    return tensor_value(obj, element_type, keep, name)


# ---- Outputs -----------------------------------------------------------------------------------------------------

class OutputValue:
    """Owns one output ``TessValue`` handle and whatever must outlive it (the session, hence its environment and the
    plugin whose allocator made the memory).  Releases the handle when garbage-collected."""

    __slots__ = ("handle", "session", "_finalizer", "__weakref__")

    def __init__(self, handle: int, session: Any) -> None:
        global _live_outputs
        self.handle = handle
        self.session = session
        with _live_lock:
            _live_outputs += 1
        self._finalizer = weakref.finalize(self, _release_output, handle)

    def release(self) -> None:
        """Releases the handle now (arrays still over it must not be used afterwards)."""
        self._finalizer()


def _release_output(handle: int) -> None:
    global _live_outputs
    lib.tess_value_release(handle)
    with _live_lock:
        _live_outputs -= 1


class _TensorMemory:
    """The ``base`` of an output array: describes the tensor's memory through ``__array_interface__`` (so numpy wraps
    it without a copy) and keeps the owning :class:`OutputValue` alive."""

    __slots__ = ("owner", "__array_interface__")

    def __init__(self, owner: OutputValue, address: int, shape: tuple[int, ...], typestr: str) -> None:
        self.owner = owner
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "data": (address, False), "version": 3}


def _strings(handle: int, count: int) -> list:
    data, length = ctypes.c_void_p(), ctypes.c_size_t()
    out = []
    for i in range(count):
        check(lib.tess_tensor_get_string(handle, i, ctypes.byref(data), ctypes.byref(length)))
        raw = ctypes.string_at(data.value, length.value) if length.value else b""
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(raw)
    return out


def _tensor(handle: int, owner: OutputValue) -> np.ndarray:
    element_type = lib.tess_value_element_type(handle)
    rank = lib.tess_tensor_rank(handle)
    dims = lib.tess_tensor_dims(handle)
    shape = tuple(int(dims[i]) for i in range(rank))
    count = lib.tess_tensor_element_count(handle)
    if element_type == T.STRING:
        result = np.empty(count, dtype=object)
        result[:] = _strings(handle, count)
        return result.reshape(shape)
    try:
        dtype = T.dtype_of(element_type)
    except ValueError:
        raise TessNotImplemented(f"output element type {element_type} has no numpy equivalent") from None
    nbytes = lib.tess_tensor_byte_size(handle)
    address = lib.tess_tensor_data(handle)
    if count == 0 or not address:
        return np.empty(shape, dtype=dtype)
    if element_type in T.SUB_BYTE:  # a copy: Tessera stores these packed, numpy one element per byte
        packed = np.asarray(_TensorMemory(owner, address, (nbytes,), "|u1"))
        return T.unpack(packed, element_type, shape)
    if dtype in T.NATIVE_DTYPES:
        return np.asarray(_TensorMemory(owner, address, shape, dtype.str))
    # ml_dtypes types have no type string numpy parses: wrap the same-sized unsigned carrier, then view it.
    return np.asarray(_TensorMemory(owner, address, shape, f"<u{dtype.itemsize}")).view(dtype)


def _convert(handle: int, owner: OutputValue) -> Any:
    kind = lib.tess_value_kind(handle)
    if kind == T.KIND_TENSOR:
        return _tensor(handle, owner)
    if kind == T.KIND_SEQUENCE:
        return [_convert(lib.tess_sequence_at(handle, i), owner) for i in range(lib.tess_sequence_length(handle))]
    if kind == T.KIND_OPTIONAL:
        return _convert(lib.tess_optional_value(handle), owner) if lib.tess_optional_has_value(handle) else None
    raise TessNotImplemented(f"values of kind {kind} (maps) have no Python form yet")


def from_value(handle: int, session: Any) -> Any:
    """Converts an output handle the caller owns; ownership passes to the returned object (released with it)."""
    owner = OutputValue(handle, session)
    try:
        return _convert(handle, owner)
    except BaseException:
        owner.release()
        raise
