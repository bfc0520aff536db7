// CPU provider: compile-time lists of element types, so that a kernel names its supported types once and uses
// the same list both for registration (type ids) and for template dispatch.
//
//     using MyTypes = TypeList<float, double, int32_t>;
//     registry.add({.op_type = "Op", .input_types = {{0, type_ids(MyTypes{})}}, ...});
//     dispatch_list(MyTypes{}, t.type, [&]<typename T>() { ... });
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/kernel.h"

namespace tessera::cpu {

template <typename... Ts> struct TypeList {};

template <typename... Ts, typename Fn> void dispatch_list(TypeList<Ts...>, int32_t type, Fn&& fn) {
    dispatch<Ts...>(type, std::forward<Fn>(fn));
}

template <typename... Ts> std::vector<int32_t> type_ids(TypeList<Ts...>) { return {element_type_of<Ts>()...}; }

template <typename T, typename... Ts> constexpr bool list_contains(TypeList<Ts...>) {
    return (std::is_same_v<T, Ts> || ...);
}

// Registration ids of a list plus float16 and bfloat16, for kernels that compute those in float
// (util/float16_compute.h).
template <typename... Ts> std::vector<int32_t> type_ids_with_16bit_floats(TypeList<Ts...> list) {
    std::vector<int32_t> ids = type_ids(list);
    ids.push_back(TESS_ELEMENT_FLOAT16);
    ids.push_back(TESS_ELEMENT_BFLOAT16);
    return ids;
}

// Registration ids of a list, plus float16 and bfloat16 when the list holds float: for kernels that run those two
// types through their float code.
template <typename... Ts> std::vector<int32_t> type_ids_16bit_via_float(TypeList<Ts...> list) {
    if constexpr (list_contains<float>(TypeList<Ts...>{})) return type_ids_with_16bit_floats(list);
    else return type_ids(list);
}

// The highest TessElementType: element types are numbered 1 (float) to this one, strings included.
inline constexpr int32_t kLastElementType = TESS_ELEMENT_FLOAT6E3M2;

// Registration ids of every element type ONNX defines for which `accepts(type)` holds: for kernels whose support
// is decided by a property of the type (its size, a conversion it goes through), registered with the very
// predicate compute() checks.
template <typename Accepts> std::vector<int32_t> element_types_where(Accepts accepts) {
    std::vector<int32_t> ids;
    for (int32_t type = TESS_ELEMENT_FLOAT32; type <= kLastElementType; ++type)
        if (accepts(type)) ids.push_back(type);
    return ids;
}

using FloatTypes = TypeList<float, double>;
using SignedIntTypes = TypeList<int8_t, int16_t, int32_t, int64_t>;
using UnsignedIntTypes = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;
using IntTypes = TypeList<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using SignedNumericTypes = TypeList<float, double, int8_t, int16_t, int32_t, int64_t>;
using NumericTypes = TypeList<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using NumericBoolTypes =
    TypeList<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bool>;
using BoolTypes = TypeList<bool>;

}  // namespace tessera::cpu
