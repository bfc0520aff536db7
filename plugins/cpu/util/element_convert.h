// CPU provider: element type conversion as ONNX Cast defines it, shared by Cast/CastLike and by kernels that must
// write a number into a tensor of any element type (EyeLike, Dropout masks, Pad values).
//
// Types fall in two groups.  "Value types" have a C++ representation and convert with one template
// (convert_value<D>(s)): the arithmetic types, bool, float16 and bfloat16.  The remaining fixed-size formats
// (float8 family, float8e8m0, float6e2m3/float6e3m2, float4e2m1, int4/uint4/int2/uint2) are converted in blocks
// through a double (or, for packed integer targets, an int64) intermediate, which every one of them converts to or
// from exactly.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "runtime/kernel.h"
#include "util/float_formats.h"

namespace tessera::cpu {

template <> constexpr int32_t element_type_of<fp::Half>() { return TESS_ELEMENT_FLOAT16; }
template <> constexpr int32_t element_type_of<fp::BFloat16>() { return TESS_ELEMENT_BFLOAT16; }

namespace convert {

using fp::BFloat16;
using fp::Half;

// Calls fn.template operator()<T>() for a value type; throws KernelError for other types.
template <typename Fn> void dispatch_value_type(int32_t type, Fn&& fn) {
    dispatch<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bool, Half,
             BFloat16>(type, std::forward<Fn>(fn));
}

inline bool is_value_type(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32:
        case TESS_ELEMENT_FLOAT64:
        case TESS_ELEMENT_INT8:
        case TESS_ELEMENT_INT16:
        case TESS_ELEMENT_INT32:
        case TESS_ELEMENT_INT64:
        case TESS_ELEMENT_UINT8:
        case TESS_ELEMENT_UINT16:
        case TESS_ELEMENT_UINT32:
        case TESS_ELEMENT_UINT64:
        case TESS_ELEMENT_BOOL:
        case TESS_ELEMENT_FLOAT16:
        case TESS_ELEMENT_BFLOAT16: return true;
        default: return false;
    }
}

// The formats converted through the block pipeline.
inline bool is_special_format(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT8E4M3FN:
        case TESS_ELEMENT_FLOAT8E4M3FNUZ:
        case TESS_ELEMENT_FLOAT8E5M2:
        case TESS_ELEMENT_FLOAT8E5M2FNUZ:
        case TESS_ELEMENT_FLOAT8E8M0:
        case TESS_ELEMENT_FLOAT4E2M1:
        case TESS_ELEMENT_FLOAT6E2M3:
        case TESS_ELEMENT_FLOAT6E3M2:
        case TESS_ELEMENT_UINT4:
        case TESS_ELEMENT_INT4:
        case TESS_ELEMENT_UINT2:
        case TESS_ELEMENT_INT2: return true;
        default: return false;
    }
}

inline bool is_packed_integer(int32_t type) {
    return type == TESS_ELEMENT_UINT4 || type == TESS_ELEMENT_INT4 || type == TESS_ELEMENT_UINT2 ||
           type == TESS_ELEMENT_INT2;
}

// float -> integer without undefined behaviour: truncation toward zero, wrapping into narrower types the way a
// two-step C conversion through int64 does; nan and values outside int64 give the wrapped INT64_MIN.
template <typename D, typename F> inline D float_to_integer(F x) {
    constexpr double kTwo63 = 9223372036854775808.0;
    if constexpr (std::is_same_v<D, uint64_t>) {
        if (x >= F(kTwo63) && double(x) < 2 * kTwo63) return uint64_t(x);
    }
    const int64_t wide = (x >= F(-kTwo63) && x < F(kTwo63)) ? int64_t(x) : std::numeric_limits<int64_t>::min();
    return static_cast<D>(wide);
}

template <typename D, typename S> inline D convert_value(S s) {
    if constexpr (std::is_same_v<S, Half>) {
        return convert_value<D>(fp::half_to_float(s.bits));
    } else if constexpr (std::is_same_v<S, BFloat16>) {
        return convert_value<D>(fp::bfloat16_to_float(s.bits));
    } else if constexpr (std::is_same_v<D, S>) {
        return s;
    } else if constexpr (std::is_same_v<D, Half>) {
        if constexpr (std::is_same_v<S, double>) return Half{fp::double_to_half(s)};
        // Integers that float rounds are far beyond float16's range, so going through float is exact enough.
        else
            return Half{fp::float_to_half(float(s))};
    } else if constexpr (std::is_same_v<D, BFloat16>) {
        if constexpr (std::is_same_v<S, float>) {
            return BFloat16{fp::float_to_bfloat16(s)};
        } else if constexpr (std::is_same_v<S, bool>) {
            return BFloat16{fp::float_to_bfloat16(s ? 1.0f : 0.0f)};
        } else {
            // One rounding only: through float would round twice for wide integers and doubles.
            if constexpr (std::is_integral_v<S>) {
                if (s <= S(1 << 24) && (std::is_unsigned_v<S> || s >= S(-(1 << 24))))
                    return BFloat16{fp::float_to_bfloat16(float(s))};
            }
            return BFloat16{fp::double_to_bfloat16(double(s))};
        }
    } else if constexpr (std::is_same_v<D, bool>) {
        return s != S(0);
    } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
        return float_to_integer<D>(s);
    } else {
        return static_cast<D>(s);
    }
}

struct CastOptions {
    // float8 targets: clamp out-of-range values to the largest finite number.  float4 and float6 have no infinity or
    // nan codes and always saturate, as ONNX's reference (ml_dtypes) does.
    bool saturate = true;
    fp::E8M0Rounding e8m0_rounding = fp::E8M0Rounding::Up;
};

inline const fp::MiniFloat* minifloat_of(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT8E4M3FN: return &fp::kFloat8E4M3FN;
        case TESS_ELEMENT_FLOAT8E4M3FNUZ: return &fp::kFloat8E4M3FNUZ;
        case TESS_ELEMENT_FLOAT8E5M2: return &fp::kFloat8E5M2;
        case TESS_ELEMENT_FLOAT8E5M2FNUZ: return &fp::kFloat8E5M2FNUZ;
        case TESS_ELEMENT_FLOAT4E2M1: return &fp::kFloat4E2M1;
        case TESS_ELEMENT_FLOAT6E2M3: return &fp::kFloat6E2M3;
        case TESS_ELEMENT_FLOAT6E3M2: return &fp::kFloat6E3M2;
        default: return nullptr;
    }
}

// Decoding table of a float8 format (256 entries), float6 (64) or float4 (16).
inline const float* minifloat_table(int32_t type) {
    static const auto build = [](const fp::MiniFloat& fmt) {
        std::array<float, 256> table{};
        const uint32_t codes = 1u << fmt.total_bits();
        for (uint32_t code = 0; code < codes; ++code) table[code] = fp::decode_minifloat(fmt, code);
        return table;
    };
    static const std::array<float, 256> e4m3fn = build(fp::kFloat8E4M3FN);
    static const std::array<float, 256> e4m3fnuz = build(fp::kFloat8E4M3FNUZ);
    static const std::array<float, 256> e5m2 = build(fp::kFloat8E5M2);
    static const std::array<float, 256> e5m2fnuz = build(fp::kFloat8E5M2FNUZ);
    static const std::array<float, 256> e2m1 = build(fp::kFloat4E2M1);
    static const std::array<float, 256> e2m3 = build(fp::kFloat6E2M3);
    static const std::array<float, 256> e3m2 = build(fp::kFloat6E3M2);
    switch (type) {
        case TESS_ELEMENT_FLOAT8E4M3FN: return e4m3fn.data();
        case TESS_ELEMENT_FLOAT8E4M3FNUZ: return e4m3fnuz.data();
        case TESS_ELEMENT_FLOAT8E5M2: return e5m2.data();
        case TESS_ELEMENT_FLOAT8E5M2FNUZ: return e5m2fnuz.data();
        case TESS_ELEMENT_FLOAT4E2M1: return e2m1.data();
        case TESS_ELEMENT_FLOAT6E2M3: return e2m3.data();
        case TESS_ELEMENT_FLOAT6E3M2: return e3m2.data();
        default: return nullptr;
    }
}

// Elements [begin, end) of a tensor of any fixed-size type, as doubles (exact for every type but 64-bit integers
// beyond 2^53).
inline void load_doubles(int32_t type, const void* data, int64_t begin, int64_t end, double* out) {
    if (is_value_type(type)) {
        dispatch_value_type(type, [&]<typename T>() {
            const T* src = static_cast<const T*>(data);
            for (int64_t i = begin; i < end; ++i) out[i - begin] = convert_value<double>(src[i]);
        });
        return;
    }
    const int bits = fp::packed_bits(type);
    if (type == TESS_ELEMENT_FLOAT8E8M0) {
        const auto* src = static_cast<const uint8_t*>(data);
        for (int64_t i = begin; i < end; ++i) out[i - begin] = fp::e8m0_to_float(src[i]);
    } else if (const float* table = minifloat_table(type)) {
        if (bits) {
            for (int64_t i = begin; i < end; ++i) out[i - begin] = table[fp::load_packed(data, bits, i)];
        } else {
            const auto* src = static_cast<const uint8_t*>(data);
            for (int64_t i = begin; i < end; ++i) out[i - begin] = table[src[i]];
        }
    } else if (is_packed_integer(type)) {
        for (int64_t i = begin; i < end; ++i)
            out[i - begin] = fp::packed_code_value(type, fp::load_packed(data, bits, i));
    } else {
        throw_unsupported_type("conversion", type);
    }
}

// As load_doubles, but integers stay exact; floating-point values are truncated toward zero.
inline void load_int64s(int32_t type, const void* data, int64_t begin, int64_t end, int64_t* out) {
    if (is_value_type(type)) {
        dispatch_value_type(type, [&]<typename T>() {
            const T* src = static_cast<const T*>(data);
            for (int64_t i = begin; i < end; ++i) out[i - begin] = convert_value<int64_t>(src[i]);
        });
    } else if (is_packed_integer(type)) {
        const int bits = fp::packed_bits(type);
        for (int64_t i = begin; i < end; ++i)
            out[i - begin] = fp::packed_code_value(type, fp::load_packed(data, bits, i));
    } else {
        double buffer[256];
        for (int64_t b = begin; b < end; b += 256) {
            const int64_t e = std::min(end, b + 256);
            load_doubles(type, data, b, e, buffer);
            for (int64_t i = b; i < e; ++i) out[i - begin] = float_to_integer<int64_t>(buffer[i - b]);
        }
    }
}

// Writes elements [begin, end) of a tensor of any fixed-size non-packed-integer type from doubles.  For packed
// formats `begin` must be a multiple of 4 so that concurrent blocks never share a byte.
inline void store_doubles(int32_t type, void* data, int64_t begin, int64_t end, const double* in,
                          const CastOptions& options) {
    if (is_value_type(type)) {
        dispatch_value_type(type, [&]<typename T>() {
            T* dst = static_cast<T*>(data);
            for (int64_t i = begin; i < end; ++i) dst[i] = convert_value<T>(in[i - begin]);
        });
        return;
    }
    if (type == TESS_ELEMENT_FLOAT8E8M0) {
        auto* dst = static_cast<uint8_t*>(data);
        for (int64_t i = begin; i < end; ++i)
            dst[i] = fp::float_to_e8m0(float(in[i - begin]), options.saturate, options.e8m0_rounding);
    } else if (const fp::MiniFloat* fmt = minifloat_of(type)) {
        const bool saturate = options.saturate || fmt->specials == fp::Specials::None;
        if (const int bits = fp::packed_bits(type)) {
            for (int64_t i = begin; i < end; ++i)
                fp::store_packed(data, bits, i, uint8_t(fp::encode_minifloat(*fmt, in[i - begin], saturate)));
        } else {
            auto* dst = static_cast<uint8_t*>(data);
            for (int64_t i = begin; i < end; ++i) dst[i] = uint8_t(fp::encode_minifloat(*fmt, in[i - begin], saturate));
        }
    } else if (is_packed_integer(type)) {
        const int bits = fp::packed_bits(type);
        for (int64_t i = begin; i < end; ++i)
            fp::store_packed(data, bits, i, uint8_t(float_to_integer<int64_t>(in[i - begin])));
    } else {
        throw_unsupported_type("conversion", type);
    }
}

// Packed integer targets wrap the integer value into their bits.
inline void store_packed_int64s(int32_t type, void* data, int64_t begin, int64_t end, const int64_t* in) {
    const int bits = fp::packed_bits(type);
    for (int64_t i = begin; i < end; ++i) fp::store_packed(data, bits, i, uint8_t(in[i - begin]));
}

// Converts elements [begin, end) between two fixed-size types (not strings).  `begin` must be a multiple of 4.
inline void convert_block(int32_t src_type, const void* src, int32_t dst_type, void* dst, int64_t begin, int64_t end,
                          const CastOptions& options) {
    if (is_value_type(src_type) && is_value_type(dst_type)) {
        dispatch_value_type(src_type, [&]<typename S>() {
            dispatch_value_type(dst_type, [&]<typename D>() {
                const S* in = static_cast<const S*>(src);
                D* out = static_cast<D*>(dst);
                for (int64_t i = begin; i < end; ++i) out[i] = convert_value<D>(in[i]);
            });
        });
        return;
    }
    constexpr int64_t kBlock = 256;
    if (is_packed_integer(dst_type)) {
        int64_t buffer[kBlock];
        for (int64_t b = begin; b < end; b += kBlock) {
            const int64_t e = std::min(end, b + kBlock);
            load_int64s(src_type, src, b, e, buffer);
            store_packed_int64s(dst_type, dst, b, e, buffer);
        }
        return;
    }
    double buffer[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t e = std::min(end, b + kBlock);
        load_doubles(src_type, src, b, e, buffer);
        if (const fp::MiniFloat* fmt = minifloat_of(dst_type); fmt && options.saturate) {
            // ONNX saturates float8 by clamping first (infinities included), then rounding.
            const double limit = fmt->max_value();
            for (int64_t i = 0; i < e - b; ++i)
                if (!std::isnan(buffer[i])) buffer[i] = std::clamp(buffer[i], -limit, limit);
        }
        store_doubles(dst_type, dst, b, e, buffer, options);
    }
}

// Writes `value` into element `index` of a tensor of any fixed-size type.
inline void store_number(int32_t type, void* data, int64_t index, double value) {
    if (is_packed_integer(type)) {
        const int64_t as_int = float_to_integer<int64_t>(value);
        store_packed_int64s(type, data, index, index + 1, &as_int);
    } else {
        store_doubles(type, data, index, index + 1, &value, CastOptions{});
    }
}

// ---- strings -------------------------------------------------------------------------------------------------

// Text of element `index` the way numpy's astype(str) writes it (shortest round-trip digits).
inline std::string format_element(int32_t type, const void* data, int64_t index) {
    char buffer[64];
    auto finish_float = [&](char* end) {
        std::string text(buffer, end);
        if (text.find_first_of(".en") == std::string::npos) text += ".0";  // "1.0", not "1"; keeps "inf"/"nan"
        return text;
    };
    switch (type) {
        case TESS_ELEMENT_BOOL: return static_cast<const bool*>(data)[index] ? "True" : "False";
        case TESS_ELEMENT_FLOAT64: {
            auto result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<const double*>(data)[index]);
            return finish_float(result.ptr);
        }
        default: break;
    }
    if (is_value_type(type) && type != TESS_ELEMENT_FLOAT32 && type != TESS_ELEMENT_FLOAT16 &&
        type != TESS_ELEMENT_BFLOAT16) {
        std::string text;
        dispatch<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>(type, [&]<typename T>() {
            auto result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<const T*>(data)[index]);
            text.assign(buffer, result.ptr);
        });
        return text;
    }
    double value;
    load_doubles(type, data, index, index + 1, &value);
    auto result = std::to_chars(buffer, buffer + sizeof buffer, float(value));
    return finish_float(result.ptr);
}

// Parses a string element into element `index` of a fixed-size tensor.  Accepts what strtod accepts (decimal and
// scientific notation, "inf", "infinity", "nan", any case, leading whitespace and '+').  Returns false when the
// text is not a number.
inline bool parse_element(std::string_view text, int32_t type, void* data, int64_t index, const CastOptions& options) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\n'))
        text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n')) text.remove_suffix(1);
    if (!text.empty() && text.front() == '+') text.remove_prefix(1);
    const char* first = text.data();
    const char* last = text.data() + text.size();
    // Integers stay exact when they are written as integers.
    const bool integer_target = is_value_type(type) && type != TESS_ELEMENT_FLOAT32 && type != TESS_ELEMENT_FLOAT64 &&
                                type != TESS_ELEMENT_FLOAT16 && type != TESS_ELEMENT_BFLOAT16 &&
                                type != TESS_ELEMENT_BOOL;
    if (integer_target || is_packed_integer(type)) {
        int64_t as_int = 0;
        auto result = std::from_chars(first, last, as_int);
        if (result.ec == std::errc() && result.ptr == last) {
            if (is_packed_integer(type)) {
                store_packed_int64s(type, data, index, index + 1, &as_int);
            } else {
                dispatch<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>(
                    type, [&]<typename T>() { static_cast<T*>(data)[index] = static_cast<T>(as_int); });
            }
            return true;
        }
        uint64_t as_uint = 0;
        result = std::from_chars(first, last, as_uint);
        if (result.ec == std::errc() && result.ptr == last && type == TESS_ELEMENT_UINT64) {
            static_cast<uint64_t*>(data)[index] = as_uint;
            return true;
        }
    }
    double value = 0;
    auto result = std::from_chars(first, last, value);
    if (result.ec == std::errc::result_out_of_range) {
        // from_chars reports overflow without a value; strtod's answer is what numpy gives.
        value = std::strtod(std::string(text).c_str(), nullptr);
    } else if (result.ec != std::errc() || result.ptr != last || text.empty()) {
        return false;
    }
    if (type == TESS_ELEMENT_FLOAT32) {
        // Round the text once, straight to float.
        float as_float = 0;
        auto float_result = std::from_chars(first, last, as_float);
        if (float_result.ec == std::errc()) {
            static_cast<float*>(data)[index] = as_float;
            return true;
        }
    }
    if (const fp::MiniFloat* fmt = minifloat_of(type);
        fmt && options.saturate && !std::isnan(value))
        value = std::clamp(value, -fmt->max_value(), fmt->max_value());
    store_doubles(type, data, index, index + 1, &value, options);
    return true;
}

}  // namespace convert
}  // namespace tessera::cpu
