"""Element types (``TessElementType``, ONNX's TensorProto.DataType numbers) and their numpy dtypes.

numpy has no bfloat16, float8 or sub-byte types.  When the ``ml_dtypes`` package is importable (onnx depends on
it, so it usually is), those types map to its dtypes, which is also what ``onnx.numpy_helper`` produces.  Without it:

* bfloat16 comes out as ``uint16`` and the float8 types as ``uint8``: the raw bit patterns, same shape, no copy;
* the packed 6-, 4- and 2-bit types come out unpacked, one element per byte: ``int8`` (sign-extended) for
  int4/int2, ``uint8`` codes for uint4/uint2/float4e2m1/float6e2m3/float6e3m2.

As inputs, arrays of those carrier dtypes are accepted wherever the model declares the corresponding type.  Tessera
stores the sub-byte types packed (one bit stream, low bits first: two or four elements per byte, four 6-bit elements
per three bytes), so they are always converted with a copy, in both directions.
"""

from __future__ import annotations

import math

import numpy as np

try:  # optional: exact dtypes for bfloat16, float8 and the sub-byte types
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes comes with onnx
    ml_dtypes = None

UNDEFINED, FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, STRING, BOOL = range(10)
FLOAT16, DOUBLE, UINT32, UINT64, COMPLEX64, COMPLEX128, BFLOAT16 = range(10, 17)
FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ = range(17, 21)
UINT4, INT4, FLOAT4E2M1, FLOAT8E8M0, UINT2, INT2 = range(21, 27)
FLOAT6E2M3, FLOAT6E3M2 = range(27, 29)

# TessValueKind
KIND_UNKNOWN, KIND_TENSOR, KIND_SEQUENCE, KIND_OPTIONAL, KIND_MAP = range(5)

_NATIVE = {
    FLOAT: np.float32, UINT8: np.uint8, INT8: np.int8, UINT16: np.uint16, INT16: np.int16, INT32: np.int32,
    INT64: np.int64, BOOL: np.bool_, FLOAT16: np.float16, DOUBLE: np.float64, UINT32: np.uint32,
    UINT64: np.uint64, COMPLEX64: np.complex64, COMPLEX128: np.complex128,
}

#: dtypes numpy itself knows (their ``dtype.str`` round-trips through ``__array_interface__``).
NATIVE_DTYPES = frozenset(np.dtype(d) for d in _NATIVE.values())

# Types numpy lacks: (ml_dtypes attribute, carrier dtype without ml_dtypes).
_EXTENDED = {
    BFLOAT16: ("bfloat16", np.uint16),
    FLOAT8E4M3FN: ("float8_e4m3fn", np.uint8),
    FLOAT8E4M3FNUZ: ("float8_e4m3fnuz", np.uint8),
    FLOAT8E5M2: ("float8_e5m2", np.uint8),
    FLOAT8E5M2FNUZ: ("float8_e5m2fnuz", np.uint8),
    FLOAT8E8M0: ("float8_e8m0fnu", np.uint8),
    UINT4: ("uint4", np.uint8),
    INT4: ("int4", np.int8),
    FLOAT4E2M1: ("float4_e2m1fn", np.uint8),
    UINT2: ("uint2", np.uint8),
    INT2: ("int2", np.int8),
    FLOAT6E2M3: ("float6_e2m3fn", np.uint8),
    FLOAT6E3M2: ("float6_e3m2fn", np.uint8),
}

# Packed types: bits per element, and whether the codes are signed integers.
SUB_BYTE = {UINT4: (4, False), INT4: (4, True), FLOAT4E2M1: (4, False), UINT2: (2, False), INT2: (2, True),
            FLOAT6E2M3: (6, False), FLOAT6E3M2: (6, False)}

_TO_DTYPE: dict[int, np.dtype] = {t: np.dtype(d) for t, d in _NATIVE.items()}
_TO_DTYPE[STRING] = np.dtype(object)
for _t, (_attr, _carrier) in _EXTENDED.items():
    _exact = getattr(ml_dtypes, _attr, None) if ml_dtypes is not None else None
    _TO_DTYPE[_t] = np.dtype(_exact if _exact is not None else _carrier)

# Reverse map for inputs; native types win over carriers (uint8 means UINT8 unless the model says otherwise).
_FROM_DTYPE: dict[np.dtype, int] = {}
for _t in sorted(_TO_DTYPE, reverse=True):
    if _t != STRING:
        _FROM_DTYPE[_TO_DTYPE[_t]] = _t
for _t, _d in _NATIVE.items():
    _FROM_DTYPE[np.dtype(_d)] = _t


def dtype_of(element_type: int) -> np.dtype:
    """The numpy dtype outputs of ``element_type`` have (``object`` for strings)."""
    try:
        return _TO_DTYPE[element_type]
    except KeyError:
        raise ValueError(f"element type {element_type} has no numpy dtype") from None


def is_string_dtype(dtype: np.dtype) -> bool:
    return dtype.kind in "OUS"


def element_type_of(dtype: np.dtype, declared: int = UNDEFINED) -> int | None:
    """The element type for an input array of ``dtype``, given the type the model declares (UNDEFINED if unknown).

    A carrier dtype (uint16 for bfloat16, uint8/int8 for float8 and sub-byte types) takes the declared type when
    the model asks for one of those; None when the dtype maps to nothing.
    """
    if is_string_dtype(dtype):
        return STRING
    if declared in _EXTENDED and dtype in (np.dtype(_EXTENDED[declared][1]), _TO_DTYPE[declared]):
        return declared
    if declared in SUB_BYTE and dtype in (np.dtype(np.uint8), np.dtype(np.int8)):
        return declared
    return _FROM_DTYPE.get(dtype)


def _groups(bits: int) -> tuple[int, int]:
    """Elements and bytes of the smallest whole-byte group of a packed type: (2, 1) for 4 bits, (4, 3) for 6."""
    elements = math.lcm(bits, 8) // bits
    return elements, elements * bits // 8


def pack(codes: np.ndarray, element_type: int) -> np.ndarray:
    """Elements of a sub-byte type (one per byte, any shape) → Tessera's packed bytes (1-D uint8)."""
    bits, _ = SUB_BYTE[element_type]
    elements, group_bytes = _groups(bits)
    flat = np.ascontiguousarray(codes).reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    padded = np.zeros(-(-flat.size // elements) * elements, np.uint32)
    padded[: flat.size] = flat
    # Each group of elements becomes one little-endian word of at most 24 bits, then its bytes.
    lanes = padded.reshape(-1, elements)
    words = np.zeros(lanes.shape[0], np.uint32)
    for i in range(elements):
        words |= lanes[:, i] << np.uint32(bits * i)
    packed = np.stack([(words >> np.uint32(8 * j)).astype(np.uint8) for j in range(group_bytes)], axis=-1)
    return packed.reshape(-1)[: -(-flat.size * bits // 8)]


def unpack(packed: np.ndarray, element_type: int, shape: tuple[int, ...]) -> np.ndarray:
    """Tessera's packed bytes → one element per byte, as :func:`dtype_of` says (a new array of ``shape``)."""
    bits, signed = SUB_BYTE[element_type]
    elements, group_bytes = _groups(bits)
    count = int(np.prod(shape, dtype=np.int64))
    padded = np.zeros(-(-packed.size // group_bytes) * group_bytes, np.uint32)
    padded[: packed.size] = packed
    groups = padded.reshape(-1, group_bytes)
    words = np.zeros(groups.shape[0], np.uint32)
    for j in range(group_bytes):
        words |= groups[:, j] << np.uint32(8 * j)
    mask = np.uint32((1 << bits) - 1)
    lanes = [((words >> np.uint32(bits * i)) & mask).astype(np.uint8) for i in range(elements)]
    codes = np.stack(lanes, axis=-1).reshape(-1)[:count]
    target = _TO_DTYPE[element_type]
    if signed and target == np.dtype(np.int8):  # no ml_dtypes: sign-extend the codes
        codes = codes.astype(np.int8)
        codes[codes >= (1 << (bits - 1))] -= np.int8(1 << bits)
        return codes.reshape(shape)
    return codes.view(target).reshape(shape)  # ml_dtypes reads the low bits of each byte
