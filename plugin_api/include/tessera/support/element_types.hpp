/*
 * Tessera plugin support (header-only C++17, installed with the SDK): element-type facts.
 *
 * One table for every provider and custom-op library: a type's name as error messages and reports spell it, its
 * size, and the byte size of `count` elements (sub-byte types are packed, the last byte zero padded; common.h).
 * Everything here is constexpr and thread-safe; nothing allocates.
 */
#ifndef TESSERA_SUPPORT_ELEMENT_TYPES_HPP_
#define TESSERA_SUPPORT_ELEMENT_TYPES_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/common.h"

namespace tessera::support {

struct ElementTypeInfo {
    const char* name;  // "float", "float16", ...; "undefined" for TESS_ELEMENT_UNDEFINED and unknown values
    size_t bytes;      // per element; 0 for strings (held by the host) and sub-byte types
    size_t bits;       // per element as stored; 0 for strings and undefined
};

constexpr ElementTypeInfo element_type_info(int32_t type) noexcept {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return {"float", 4, 32};
        case TESS_ELEMENT_UINT8: return {"uint8", 1, 8};
        case TESS_ELEMENT_INT8: return {"int8", 1, 8};
        case TESS_ELEMENT_UINT16: return {"uint16", 2, 16};
        case TESS_ELEMENT_INT16: return {"int16", 2, 16};
        case TESS_ELEMENT_INT32: return {"int32", 4, 32};
        case TESS_ELEMENT_INT64: return {"int64", 8, 64};
        case TESS_ELEMENT_STRING: return {"string", 0, 0};
        case TESS_ELEMENT_BOOL: return {"bool", 1, 8};
        case TESS_ELEMENT_FLOAT16: return {"float16", 2, 16};
        case TESS_ELEMENT_FLOAT64: return {"double", 8, 64};
        case TESS_ELEMENT_UINT32: return {"uint32", 4, 32};
        case TESS_ELEMENT_UINT64: return {"uint64", 8, 64};
        case TESS_ELEMENT_COMPLEX64: return {"complex64", 8, 64};
        case TESS_ELEMENT_COMPLEX128: return {"complex128", 16, 128};
        case TESS_ELEMENT_BFLOAT16: return {"bfloat16", 2, 16};
        case TESS_ELEMENT_FLOAT8E4M3FN: return {"float8e4m3fn", 1, 8};
        case TESS_ELEMENT_FLOAT8E4M3FNUZ: return {"float8e4m3fnuz", 1, 8};
        case TESS_ELEMENT_FLOAT8E5M2: return {"float8e5m2", 1, 8};
        case TESS_ELEMENT_FLOAT8E5M2FNUZ: return {"float8e5m2fnuz", 1, 8};
        case TESS_ELEMENT_UINT4: return {"uint4", 0, 4};
        case TESS_ELEMENT_INT4: return {"int4", 0, 4};
        case TESS_ELEMENT_FLOAT4E2M1: return {"float4e2m1", 0, 4};
        case TESS_ELEMENT_FLOAT8E8M0: return {"float8e8m0", 1, 8};
        case TESS_ELEMENT_UINT2: return {"uint2", 0, 2};
        case TESS_ELEMENT_INT2: return {"int2", 0, 2};
        case TESS_ELEMENT_FLOAT6E2M3: return {"float6e2m3", 0, 6};
        case TESS_ELEMENT_FLOAT6E3M2: return {"float6e3m2", 0, 6};
        default: return {"undefined", 0, 0};
    }
}

constexpr const char* element_type_name(int32_t type) noexcept { return element_type_info(type).name; }

/* Bytes per element; 0 for strings, sub-byte types and unknown types. */
constexpr size_t element_size(int32_t type) noexcept { return element_type_info(type).bytes; }

/* Bytes that `count` elements occupy in a tensor's buffer (packed for sub-byte types); 0 for strings. */
constexpr size_t element_storage_bytes(int32_t type, size_t count) noexcept {
    return (count * element_type_info(type).bits + 7) / 8;
}

/* "[1,3,?,224]": a shape as messages print it; negative (unknown) dimensions print as "?". */
inline std::string shape_string(const int64_t* dims, size_t rank) {
    std::string s = "[";
    for (size_t i = 0; i < rank; ++i) {
        if (i != 0) s += ",";
        s += dims[i] < 0 ? std::string("?") : std::to_string(dims[i]);
    }
    return s + "]";
}

}  // namespace tessera::support

#endif  // TESSERA_SUPPORT_ELEMENT_TYPES_HPP_
