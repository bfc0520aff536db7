// CPU provider: linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer
// products MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.
//
// Quantize/Dequantize work on pieces of the flattened tensor: for each piece the scale and zero point of every
// element are gathered first (per-tensor, per-axis or blocked), then the arithmetic runs as plain loops over the
// piece.  Element formats (float16, bfloat16, float8, float4, int4/uint4/int2/uint2, float8e8m0 scales) are read and
// written through util/element_convert.h.
//
// The integer products subtract the zero points, then multiply on a floating-point gemm whose result is provably
// the exact integer sum (see exact_accumulator), and finish in an epilogue (int32 output, or requantization).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/element_convert.h"
#include "util/gemm.h"
#include "util/im2col.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kPiece = 2048;  // elements per piece; a multiple of 4 so that packed outputs never share a byte

// ---- scale / zero-point layout ---------------------------------------------------------------------------------

// How a scale (and its zero point) maps onto the data, viewed as [outer, axis_dim, inner]:
//  per-tensor: one value;  per-axis: one value per index along the axis;  blocked: the data's shape with the axis
//  dimension divided into blocks of `block` elements.
struct ParamLayout {
    int64_t outer = 1, axis_dim = 1, inner = 1;
    int64_t block = 0;           // blocked only
    int64_t param_axis_dim = 1;  // blocked only: the scale's extent along the axis
    bool per_tensor = true;

    // Parameter index of every element in [begin, begin + count).
    void indices(int64_t begin, int64_t count, int64_t* index) const {
        if (per_tensor) {
            std::fill(index, index + count, 0);
            return;
        }
        int64_t i = begin % inner;
        int64_t a = (begin / inner) % axis_dim;
        int64_t o = begin / (inner * axis_dim);
        for (int64_t k = 0; k < count; ++k) {
            index[k] = block ? (o * param_axis_dim + a / block) * inner + i : a;
            if (++i == inner) {
                i = 0;
                if (++a == axis_dim) {
                    a = 0;
                    ++o;
                }
            }
        }
    }
};

// What each opset of QuantizeLinear/DequantizeLinear allows.
struct QuantizeFeatures {
    bool per_axis = false;      // opset 13: the "axis" attribute, 1-D scales
    bool saturate = false;      // opset 19: float8 outputs, the "saturate" attribute
    bool blocked = false;       // opset 21: "block_size"; QuantizeLinear's "output_dtype"
    bool output_dtype = false;  // QuantizeLinear opset 21, DequantizeLinear opset 23
    bool precision = false;     // QuantizeLinear opset 23
};

ParamLayout resolve_param_layout(const std::string& op, const Shape& data, const Shape& scale, int64_t axis_attr,
                                 int64_t block_size) {
    ParamLayout layout;
    if (shape_size(scale) == 1) {
        layout.inner = shape_size(data);
        return layout;
    }
    layout.per_tensor = false;
    const size_t axis = normalize_axis(op, axis_attr, data.size());
    for (size_t d = 0; d < data.size(); ++d) {
        if (d < axis) layout.outer *= data[d];
        else if (d > axis) layout.inner *= data[d];
    }
    layout.axis_dim = data[axis];
    if (block_size == 0) {
        if (scale.size() != 1 || scale[0] != data[axis]) {
            throw KernelError(op + ": scale " + shape_string(scale) + " must be a scalar or [" +
                              std::to_string(data[axis]) + "] (per-axis quantization along axis " +
                              std::to_string(axis) + " of " + shape_string(data) + ")");
        }
        return layout;
    }
    layout.block = block_size;
    layout.param_axis_dim = (data[axis] + block_size - 1) / block_size;
    Shape expected = data;
    expected[axis] = layout.param_axis_dim;
    if (scale != expected) {
        throw KernelError(op + ": scale " + shape_string(scale) + " must be " + shape_string(expected) +
                          " for blocked quantization of " + shape_string(data) + " with block_size " +
                          std::to_string(block_size) + " along axis " + std::to_string(axis));
    }
    return layout;
}

void check_zero_point_shape(const std::string& op, const Tensor& scale, const Tensor* zero_point,
                            const ParamLayout& layout) {
    if (zero_point == nullptr) return;
    // A scalar scale may come with a [1] zero point (and the reverse): compare element counts, and full shapes for
    // blocked quantization.
    if (zero_point->size() != scale.size() || (layout.block && zero_point->shape != scale.shape)) {
        throw KernelError(op + ": zero point " + shape_string(zero_point->shape) + " must have the shape of scale " +
                          shape_string(scale.shape));
    }
}

// All elements of a small tensor (scales, zero points) as doubles.
std::vector<double> load_all(const Tensor& t) {
    std::vector<double> values(static_cast<size_t>(t.size()));
    convert::load_doubles(t.type, t.data, 0, t.size(), values.data());
    return values;
}

// Runs fn(begin, end) over the elements [0, total) in pieces of at most kPiece, across the pool.
template <typename Fn> void for_each_piece(ThreadPool& pool, int64_t total, const Fn& fn) {
    const int64_t pieces = (total + kPiece - 1) / kPiece;
    pool.parallel_for(pieces, std::max<int64_t>(1, 32768 / kPiece), [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) fn(p * kPiece, std::min(total, (p + 1) * kPiece));
    });
}

// ---- quantized element types -----------------------------------------------------------------------------------

struct IntegerRange {
    double low, high;
};

std::optional<IntegerRange> integer_range(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_UINT8: return IntegerRange{0, 255};
        case TESS_ELEMENT_INT8: return IntegerRange{-128, 127};
        case TESS_ELEMENT_UINT16: return IntegerRange{0, 65535};
        case TESS_ELEMENT_INT16: return IntegerRange{-32768, 32767};
        case TESS_ELEMENT_UINT4: return IntegerRange{0, 15};
        case TESS_ELEMENT_INT4: return IntegerRange{-8, 7};
        case TESS_ELEMENT_UINT2: return IntegerRange{0, 3};
        case TESS_ELEMENT_INT2: return IntegerRange{-2, 1};
        default: return std::nullopt;
    }
}

bool is_float8(int32_t type) {
    return type == TESS_ELEMENT_FLOAT8E4M3FN || type == TESS_ELEMENT_FLOAT8E4M3FNUZ ||
           type == TESS_ELEMENT_FLOAT8E5M2 || type == TESS_ELEMENT_FLOAT8E5M2FNUZ;
}

bool is_quantized_type(int32_t type) {
    return integer_range(type).has_value() || is_float8(type) || type == TESS_ELEMENT_FLOAT4E2M1;
}

bool is_float_type(int32_t type) {
    return type == TESS_ELEMENT_FLOAT32 || type == TESS_ELEMENT_FLOAT16 || type == TESS_ELEMENT_BFLOAT16;
}

// y[k] = clamp(round_half_even(q[k]) + zero_point[k]) written as an integer type (packed ones included).
void store_quantized_integers(const float* q, const double* zero_point, int64_t count, int32_t type, void* data,
                              int64_t begin) {
    const IntegerRange range = *integer_range(type);
    // std::max(low, std::min(v, high)) sends NaN to `low`, as the reference's integer cast of NaN does.
    auto quantize = [&](int64_t k) {
        return std::max(range.low, std::min(std::nearbyint(double(q[k])) + zero_point[k], range.high));
    };
    auto store = [&]<typename Out>() {
        Out* out = static_cast<Out*>(data) + begin;
        for (int64_t k = 0; k < count; ++k) out[k] = static_cast<Out>(quantize(k));
    };
    switch (type) {
        case TESS_ELEMENT_UINT8: store.template operator()<uint8_t>(); return;
        case TESS_ELEMENT_INT8: store.template operator()<int8_t>(); return;
        case TESS_ELEMENT_UINT16: store.template operator()<uint16_t>(); return;
        case TESS_ELEMENT_INT16: store.template operator()<int16_t>(); return;
        default: break;
    }
    int64_t values[kPiece];
    for (int64_t k = 0; k < count; ++k) values[k] = static_cast<int64_t>(quantize(k));
    convert::store_packed_int64s(type, data, begin, begin + count, values);
}

// ---- QuantizeLinear --------------------------------------------------------------------------------------------

// The precision of the division x / scale.  The quotient is computed in float and rounded to the precision: for
// 16-bit operands that equals a division carried out in the 16-bit type (float has more than 2p+2 bits).
enum class Precision { Float, Half, BFloat16 };

Precision precision_of(const std::string& op, int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return Precision::Float;
        case TESS_ELEMENT_FLOAT16: return Precision::Half;
        case TESS_ELEMENT_BFLOAT16: return Precision::BFloat16;
        default: throw KernelError(op + ": unsupported precision " + std::string(element_type_name(type)));
    }
}

inline float round_to(Precision p, float v) {
    switch (p) {
        case Precision::Float: return v;
        case Precision::Half: return fp::half_to_float(fp::float_to_half(v));
        case Precision::BFloat16: return fp::bfloat16_to_float(fp::float_to_bfloat16(v));
    }
    return v;
}

struct QuantizeParams {
    ParamLayout layout;
    std::vector<float> scales;       // rounded to the precision
    std::vector<double> zero_points;  // one per scale (zeros when absent)
    Precision precision = Precision::Float;
    int32_t output_type = TESS_ELEMENT_UINT8;
    bool saturate = true;
};

// Fast path of quantize(): y = clamp(round_half_even(x / scale) + zero_point) for float x divided in float into an
// 8- or 16-bit integer type, vectorized.  `uniform`: scale[0] and zero_point[0] hold for the whole run.  Values are
// limited to just outside the output range before rounding, so that the rounding trick (v + 1.5 * 2^23) - 1.5 * 2^23
// (exact round-half-even for |v| < 2^22) applies; NaN ends at `low` as in the generic path.
// vec::kLanes lanes of an 8- or 16-bit integer type (vector_size cannot apply to a template parameter directly).
template <typename T> struct NarrowLanes;
template <> struct NarrowLanes<uint8_t> { using type = uint8_t __attribute__((vector_size(vec::kLanes))); };
template <> struct NarrowLanes<int8_t> { using type = int8_t __attribute__((vector_size(vec::kLanes))); };
template <> struct NarrowLanes<uint16_t> { using type = uint16_t __attribute__((vector_size(2 * vec::kLanes))); };
template <> struct NarrowLanes<int16_t> { using type = int16_t __attribute__((vector_size(2 * vec::kLanes))); };

template <typename Out>
void quantize_float_run(const float* x, const float* scale, const float* zero_point, bool uniform, int64_t n,
                        IntegerRange range, Out* y) {
    using Narrow = typename NarrowLanes<Out>::type;
    const float low = static_cast<float>(range.low), high = static_cast<float>(range.high);
    vec::run_best_isa([=] {
        constexpr float kMagic = 12582912.0f;
        for (int64_t k = 0; k < n; k += vec::kLanes) {
            const int64_t lanes = std::min<int64_t>(vec::kLanes, n - k);
            const vec::Vf s = uniform ? vec::splat(scale[0]) : vec::load_n(scale + k, lanes);
            const vec::Vf z = uniform ? vec::splat(zero_point[0]) : vec::load_n(zero_point + k, lanes);
            vec::Vf v = vec::load_n(x + k, lanes) / s;
            v = vec::min(vec::max(v, (low - 1.0f) - z), (high + 1.0f) - z);  // max first: NaN -> low - 1 - z
            v = (v + kMagic) - kMagic;
            v = vec::min(vec::max(v + z, vec::splat(low)), vec::splat(high));
            const Narrow q = __builtin_convertvector(__builtin_convertvector(v, vec::Vi), Narrow);
            std::memcpy(y + k, &q, static_cast<size_t>(lanes) * sizeof(Out));
        }
    });
}

// Calls fn.template operator()<Out>() for the 8- and 16-bit integer types.
template <typename Fn> bool dispatch_wide_integer(int32_t type, const Fn& fn) {
    switch (type) {
        case TESS_ELEMENT_UINT8: fn.template operator()<uint8_t>(); return true;
        case TESS_ELEMENT_INT8: fn.template operator()<int8_t>(); return true;
        case TESS_ELEMENT_UINT16: fn.template operator()<uint16_t>(); return true;
        case TESS_ELEMENT_INT16: fn.template operator()<int16_t>(); return true;
        default: return false;
    }
}

// The scale and zero point of every element of a piece, as floats (filled only when not per-tensor).
struct PieceParams {
    float scale[kPiece];
    float zero_point[kPiece];
};

template <typename T> void gather_params(const ParamLayout& layout, const std::vector<T>& scales,
                                         const std::vector<double>& zero_points, int64_t begin, int64_t count,
                                         PieceParams& out) {
    int64_t index[kPiece];
    layout.indices(begin, count, index);
    for (int64_t k = 0; k < count; ++k) {
        out.scale[k] = static_cast<float>(scales[index[k]]);
        out.zero_point[k] = static_cast<float>(zero_points[index[k]]);
    }
}

// y = saturate(round(x / scale) + zero_point) for x of any type load_doubles reads (float, float16, bfloat16,
// int32).  Float8 and float4 outputs round (x / scale) + zero_point to the format.
void quantize(ThreadPool& pool, const Tensor& x, const QuantizeParams& params, Tensor& y) {
    if (fp::packed_bits(y.type)) std::memset(y.data, 0, y.byte_size());  // defined padding bits in the last byte
    const bool integer_output = integer_range(y.type).has_value();
    const bool fast = x.type == TESS_ELEMENT_FLOAT32 && params.precision == Precision::Float &&
                      dispatch_wide_integer(y.type, []<typename>() {});
    const bool uniform = params.layout.per_tensor;
    for_each_piece(pool, x.size(), [&](int64_t begin, int64_t end) {
        const int64_t count = end - begin;
        if (fast) {
            PieceParams piece;
            if (uniform) {
                piece.scale[0] = params.scales[0];
                piece.zero_point[0] = static_cast<float>(params.zero_points[0]);
            } else {
                gather_params(params.layout, params.scales, params.zero_points, begin, count, piece);
            }
            dispatch_wide_integer(y.type, [&]<typename Out>() {
                quantize_float_run(x.ptr<float>() + begin, piece.scale, piece.zero_point, uniform, count,
                                   *integer_range(y.type), y.ptr<Out>() + begin);
            });
            return;
        }
        int64_t index[kPiece];
        double values[kPiece];
        float quotient[kPiece];
        double zero_point[kPiece];
        params.layout.indices(begin, count, index);
        convert::load_doubles(x.type, x.data, begin, end, values);
        for (int64_t k = 0; k < count; ++k) {
            const float xk = round_to(params.precision, static_cast<float>(values[k]));
            quotient[k] = round_to(params.precision, xk / params.scales[index[k]]);
            zero_point[k] = params.zero_points[index[k]];
        }
        if (integer_output) {
            store_quantized_integers(quotient, zero_point, count, y.type, y.data, begin);
            return;
        }
        for (int64_t k = 0; k < count; ++k) values[k] = double(quotient[k]) + zero_point[k];
        convert::CastOptions options;
        options.saturate = params.saturate;
        convert::store_doubles(y.type, y.data, begin, end, values, options);
    });
}

class QuantizeLinearKernel final : public Kernel {
public:
    QuantizeLinearKernel(const NodeInfo& info, QuantizeFeatures features)
        : axis_(features.per_axis ? info.attr_int("axis", 1) : 1),
          saturate_(features.saturate ? info.attr_int("saturate", 1) != 0 : true),
          block_size_(features.blocked ? info.attr_int("block_size", 0) : 0),
          output_dtype_(features.output_dtype ? static_cast<int32_t>(info.attr_int("output_dtype", 0)) : 0) {
        if (block_size_ < 0) throw KernelError("QuantizeLinear: block_size must be positive");
        if (output_dtype_ != 0 && !is_quantized_type(output_dtype_)) {
            throw KernelError("QuantizeLinear: output_dtype " + std::to_string(output_dtype_) +
                              " is not a quantized type");
        }
        const int64_t precision = features.precision ? info.attr_int("precision", 0) : 0;
        if (precision != 0) precision_ = precision_of("QuantizeLinear", static_cast<int32_t>(precision));
        if (!features.per_axis) per_tensor_only_ = true;
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "QuantizeLinear";
        const Tensor& x = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        const Tensor* zero_point = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (!is_float_type(x.type) && x.type != TESS_ELEMENT_INT32) throw_unsupported_type(op + " x", x.type);
        if (!is_float_type(scale.type) && scale.type != TESS_ELEMENT_INT32 && scale.type != TESS_ELEMENT_FLOAT8E8M0)
            throw_unsupported_type(op + " y_scale", scale.type);

        QuantizeParams params;
        params.output_type = zero_point ? zero_point->type : (output_dtype_ ? output_dtype_ : TESS_ELEMENT_UINT8);
        if (zero_point && output_dtype_ && output_dtype_ != zero_point->type) {
            throw KernelError(op + ": output_dtype " + std::to_string(output_dtype_) +
                              " differs from the zero point's element type " + std::to_string(zero_point->type));
        }
        if (!is_quantized_type(params.output_type)) throw_unsupported_type(op + " y", params.output_type);
        if (per_tensor_only_ && scale.size() != 1) {
            throw KernelError(op + ": opset 10 takes a scalar scale, got " + shape_string(scale.shape));
        }
        params.layout = resolve_param_layout(op, x.shape, scale.shape, axis_, block_size_);
        check_zero_point_shape(op, scale, zero_point, params.layout);
        // Without the precision attribute the scale's type decides; scales that are no float type (int32,
        // float8e8m0 powers of two) divide in float.
        params.precision = precision_ ? *precision_
                                      : (is_float_type(scale.type) ? precision_of(op, scale.type) : Precision::Float);
        for (double s : load_all(scale)) params.scales.push_back(round_to(params.precision, static_cast<float>(s)));
        params.zero_points = zero_point ? load_all(*zero_point) : std::vector<double>(params.scales.size(), 0.0);
        params.saturate = saturate_;

        Tensor& y = ctx.output(0, params.output_type, x.shape);
        quantize(ctx.pool(), x, params, y);
    }

private:
    int64_t axis_;
    bool saturate_;
    int64_t block_size_;
    int32_t output_dtype_;
    std::optional<Precision> precision_;
    bool per_tensor_only_ = false;
};

// ---- DequantizeLinear ------------------------------------------------------------------------------------------

// y = (x - zero_point) * scale: the difference is taken in double (exact for every input type) and rounded to
// float, the product is a float product rounded to the output type, as ONNX's reference computes it.
class DequantizeLinearKernel final : public Kernel {
public:
    DequantizeLinearKernel(const NodeInfo& info, QuantizeFeatures features)
        : axis_(features.per_axis ? info.attr_int("axis", 1) : 1),
          block_size_(features.blocked ? info.attr_int("block_size", 0) : 0),
          output_dtype_(features.output_dtype ? static_cast<int32_t>(info.attr_int("output_dtype", 0)) : 0),
          declared_output_type_(info.output_type(0)),
          per_tensor_only_(!features.per_axis) {
        if (block_size_ < 0) throw KernelError("DequantizeLinear: block_size must be positive");
        if (output_dtype_ != 0 && !is_float_type(output_dtype_)) {
            throw KernelError("DequantizeLinear: output_dtype " + std::to_string(output_dtype_) +
                              " must be float, float16 or bfloat16");
        }
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "DequantizeLinear";
        const Tensor& x = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        const Tensor* zero_point = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (!is_quantized_type(x.type) && x.type != TESS_ELEMENT_INT32) throw_unsupported_type(op + " x", x.type);
        if (!is_float_type(scale.type) && scale.type != TESS_ELEMENT_FLOAT8E8M0)
            throw_unsupported_type(op + " x_scale", scale.type);
        if (zero_point && zero_point->type != x.type) {
            throw KernelError(op + ": the zero point's element type " + std::to_string(zero_point->type) +
                              " differs from x's " + std::to_string(x.type));
        }
        if (per_tensor_only_ && scale.size() != 1) {
            throw KernelError(op + ": opset 10 takes a scalar scale, got " + shape_string(scale.shape));
        }
        const ParamLayout layout = resolve_param_layout(op, x.shape, scale.shape, axis_, block_size_);
        check_zero_point_shape(op, scale, zero_point, layout);
        std::vector<float> scales;
        for (double s : load_all(scale)) scales.push_back(static_cast<float>(s));
        const std::vector<double> zero_points = zero_point ? load_all(*zero_point) : std::vector<double>(scales.size());

        int32_t output_type = output_dtype_;
        if (output_type == 0) output_type = is_float_type(scale.type) ? scale.type : declared_output_type_;
        if (!is_float_type(output_type)) output_type = TESS_ELEMENT_FLOAT32;
        Tensor& y = ctx.output(0, output_type, x.shape);

        // Fast path: 8/16-bit integers into float, where x - zero_point is exact in float.
        const bool fast = output_type == TESS_ELEMENT_FLOAT32 && x.type != TESS_ELEMENT_INT32 &&
                          dispatch_wide_integer(x.type, []<typename>() {});
        for_each_piece(ctx.pool(), x.size(), [&](int64_t begin, int64_t end) {
            const int64_t count = end - begin;
            if (fast) {
                PieceParams piece;
                if (!layout.per_tensor) gather_params(layout, scales, zero_points, begin, count, piece);
                const float s = scales[0], z = static_cast<float>(zero_points[0]);
                float* out = y.ptr<float>() + begin;
                dispatch_wide_integer(x.type, [&]<typename X>() {
                    const X* in = x.ptr<X>() + begin;
                    if (layout.per_tensor) {
                        for (int64_t k = 0; k < count; ++k) out[k] = (static_cast<float>(in[k]) - z) * s;
                    } else {
                        for (int64_t k = 0; k < count; ++k)
                            out[k] = (static_cast<float>(in[k]) - piece.zero_point[k]) * piece.scale[k];
                    }
                });
                return;
            }
            int64_t index[kPiece];
            double values[kPiece];
            layout.indices(begin, count, index);
            convert::load_doubles(x.type, x.data, begin, end, values);
            for (int64_t k = 0; k < count; ++k) {
                const float difference = static_cast<float>(values[k] - zero_points[index[k]]);
                values[k] = difference * scales[index[k]];
            }
            convert::store_doubles(y.type, y.data, begin, end, values, convert::CastOptions{});
        });
    }

private:
    int64_t axis_;
    int64_t block_size_;
    int32_t output_dtype_;
    int32_t declared_output_type_;
    bool per_tensor_only_;
};

// ---- DynamicQuantizeLinear -------------------------------------------------------------------------------------

// uint8 quantization with a scale and zero point chosen from the data range (widened to include 0):
// scale = (max - min) / 255 (1/255 for a constant-zero range), zero_point = round(clamp(-min / scale, 0, 255)).
class DynamicQuantizeLinearKernel final : public Kernel {
public:
    explicit DynamicQuantizeLinearKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type("DynamicQuantizeLinear x", x.type);
        const float* data = x.ptr<float>();
        const int64_t n = x.size();
        const int64_t chunks = (n + kPiece * 8 - 1) / (kPiece * 8);
        std::vector<float> chunk_min(static_cast<size_t>(chunks), 0.0f), chunk_max(static_cast<size_t>(chunks), 0.0f);
        ctx.pool().parallel_for(chunks, 1, [&](int64_t first, int64_t last) {
            for (int64_t c = first; c < last; ++c) {
                const int64_t begin = c * kPiece * 8, end = std::min(n, (c + 1) * kPiece * 8);
                vec::run_best_isa([&] {
                    vec::Vf lo{}, hi{};  // the range always includes 0; padding lanes load as 0
                    for (int64_t i = begin; i < end; i += vec::kLanes) {
                        const vec::Vf v = vec::load_n(data + i, std::min<int64_t>(vec::kLanes, end - i));
                        lo = vec::min(lo, v);
                        hi = vec::max(hi, v);
                    }
                    chunk_min[c] = -vec::horizontal_max(-lo);
                    chunk_max[c] = vec::horizontal_max(hi);
                });
            }
        });
        float lo = 0.0f, hi = 0.0f;
        for (int64_t c = 0; c < chunks; ++c) {
            lo = std::min(lo, chunk_min[c]);
            hi = std::max(hi, chunk_max[c]);
        }
        const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
        const float zero_point = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));

        QuantizeParams params;
        params.scales = {scale};
        params.zero_points = {zero_point};
        params.output_type = TESS_ELEMENT_UINT8;
        params.layout.inner = n;
        Tensor& y = ctx.output(0, TESS_ELEMENT_UINT8, x.shape);
        quantize(ctx.pool(), x, params, y);
        if (ctx.output_wanted(1)) ctx.output(1, TESS_ELEMENT_FLOAT32, {}).ptr<float>()[0] = scale;
        if (ctx.output_wanted(2))
            ctx.output(2, TESS_ELEMENT_UINT8, {}).ptr<uint8_t>()[0] = static_cast<uint8_t>(zero_point);
    }
};

// ---- exact integer products ------------------------------------------------------------------------------------

// Floating-point gemm as an exact integer product.  Each product of two centered 8-bit values is an integer of
// magnitude at most max_a * max_b, and every partial sum a gemm forms (in whatever order, blocking or FMA use) is a
// sum of at most `depth` such products, so when depth * max_a * max_b <= 2^24 (float) or 2^53 (double) every
// intermediate value is an integer the type represents exactly, and the result is the exact integer sum.
enum class Accumulator { Float, Double };

Accumulator exact_accumulator(const std::string& op, int64_t depth, int32_t max_a, int32_t max_b) {
    const double bound = double(depth) * double(max_a) * double(max_b);
    if (bound <= 16777216.0) return Accumulator::Float;
    if (bound <= 9007199254740992.0) return Accumulator::Double;
    throw KernelError(op + ": reduction depth " + std::to_string(depth) + " is too large for exact accumulation");
}

// Sums wrap to 32 bits, as ONNX allows ("accumulation may overflow if and only if in 32 bits").
template <typename F> inline int32_t wrap_int32(F exact_integer) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(exact_integer)));
}

// Where the scale or zero point of element (row, column) of an operand viewed as [rows, columns] lives:
// (row % row_modulo, or row / row_divisor * row_multiplier) + column * column_step.
struct ParamIndex {
    int64_t row_modulo = 0;
    int64_t row_divisor = 1;
    int64_t row_multiplier = 0;
    int64_t column_step = 0;

    int64_t row_base(int64_t row) const { return row_modulo ? row % row_modulo : row / row_divisor * row_multiplier; }
    int64_t operator()(int64_t row, int64_t column) const { return row_base(row) + column * column_step; }
};

enum class MatrixSide { A, B };  // A: parameters per row, B: per column

// The layout of a MatMul operand's scale or zero point: a scalar (per tensor), or per row of A / per column of B,
// given either as a 1-D vector shared by every matrix of the batch or with the operand's shape and the reduced
// dimension set to 1.
ParamIndex matrix_param_index(const std::string& op, const char* name, const Shape& param, const Shape& operand,
                              MatrixSide side) {
    ParamIndex index;
    if (shape_size(param) == 1) return index;
    const size_t rank = operand.size();
    if (rank >= 2) {
        const int64_t rows = operand[rank - 2], columns = operand[rank - 1];
        Shape full = operand;
        full[side == MatrixSide::A ? rank - 1 : rank - 2] = 1;
        if (side == MatrixSide::A) {
            if (param == Shape{rows}) {
                index.row_modulo = rows;
                return index;
            }
            if (param == full) {
                index.row_multiplier = 1;
                return index;
            }
        } else {
            if (param == Shape{columns}) {
                index.column_step = 1;
                return index;
            }
            if (param == full) {
                index.row_divisor = rows;
                index.row_multiplier = columns;
                index.column_step = 1;
                return index;
            }
        }
    }
    throw KernelError(op + ": " + name + " " + shape_string(param) + " must be a scalar or per-" +
                      (side == MatrixSide::A ? "row" : "column") + " values for " + shape_string(operand));
}

// An int8/uint8 operand viewed as [rows, columns] with its zero points.
struct IntegerOperand {
    const Tensor* data = nullptr;
    int64_t rows = 0, columns = 0;
    std::vector<int32_t> zero_points{0};
    ParamIndex zero_point_index;
};

std::vector<int32_t> load_zero_points(const std::string& op, const Tensor* zero_point, const Tensor& data) {
    if (zero_point == nullptr) return {0};
    if (zero_point->type != data.type) {
        throw KernelError(op + ": a zero point's element type " + std::to_string(zero_point->type) +
                          " differs from its input's " + std::to_string(data.type));
    }
    std::vector<int64_t> wide(static_cast<size_t>(zero_point->size()));
    convert::load_int64s(zero_point->type, zero_point->data, 0, zero_point->size(), wide.data());
    return std::vector<int32_t>(wide.begin(), wide.end());
}

void check_8bit(const std::string& op, const char* name, const Tensor& t) {
    if (t.type != TESS_ELEMENT_INT8 && t.type != TESS_ELEMENT_UINT8) throw_unsupported_type(op + " " + name, t.type);
}

// out = operand - zero point (when kStore); returns the largest magnitude of the centered values.
template <typename F, bool kStore> int32_t center_operand(ThreadPool& pool, const IntegerOperand& operand, F* out) {
    std::atomic<int32_t> largest{0};
    dispatch<int8_t, uint8_t>(operand.data->type, [&]<typename T>() {
        const T* src = operand.data->ptr<T>();
        const int64_t columns = operand.columns;
        const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, columns));
        pool.parallel_for(operand.rows, grain, [&](int64_t first, int64_t last) {
            int32_t local = 0;
            for (int64_t r = first; r < last; ++r) {
                const T* row = src + r * columns;
                const int32_t* zp = operand.zero_points.data() + operand.zero_point_index.row_base(r);
                const int64_t step = operand.zero_point_index.column_step;
                for (int64_t c = 0; c < columns; ++c) {
                    const int32_t v = int32_t(row[c]) - zp[c * step];
                    local = std::max(local, v < 0 ? -v : v);
                    if constexpr (kStore) out[r * columns + c] = F(v);
                }
            }
            int32_t seen = largest.load();
            while (local > seen && !largest.compare_exchange_weak(seen, local)) {
            }
        });
    });
    return largest.load();
}

// Runs body.template operator()<F>() with F the narrowest float type in which the products are exact.
template <typename Body>
void with_exact_accumulator(const std::string& op, int64_t depth, int32_t max_a, int32_t max_b, const Body& body) {
    if (exact_accumulator(op, depth, max_a, max_b) == Accumulator::Float) body.template operator()<float>();
    else body.template operator()<double>();
}

// C = (A - a_zero_point) x (B - b_zero_point) for MatMul-shaped operands; epilogue(plan, C) gets the exact sums.
template <typename Epilogue>
void integer_matmul(ThreadPool& pool, const std::string& op, const MatMulPlan& plan, const IntegerOperand& a,
                    const IntegerOperand& b, const Epilogue& epilogue) {
    const int32_t max_a = center_operand<float, false>(pool, a, nullptr);
    const int32_t max_b = center_operand<float, false>(pool, b, nullptr);
    with_exact_accumulator(op, plan.K, max_a, max_b, [&]<typename F>() {
        std::vector<F> A(static_cast<size_t>(a.rows * a.columns)), B(static_cast<size_t>(b.rows * b.columns));
        std::vector<F> C(static_cast<size_t>(shape_size(plan.output_shape)), F(0));
        center_operand<F, true>(pool, a, A.data());
        center_operand<F, true>(pool, b, B.data());
        if (plan.K > 0) run_matmul<F>(pool, plan, A.data(), B.data(), C.data());
        epilogue(C.data());
    });
}

// The MatMul operands as [rows, columns] matrices (a 1-D A is one row, a 1-D B one column).
IntegerOperand matmul_operand(const Tensor& t, const MatMulPlan& plan, MatrixSide side) {
    IntegerOperand operand;
    operand.data = &t;
    operand.columns = side == MatrixSide::A ? plan.K : (t.rank() == 1 ? 1 : plan.N);
    operand.rows = operand.columns ? t.size() / operand.columns : 0;
    return operand;
}

// Calls fn(product, m, a_row, b_row) for every output row, split across the pool: a_row is the global row of A
// the output row comes from, b_row the global row of B where its matrix starts (for parameter lookups).
template <typename Fn> void for_each_output_row(ThreadPool& pool, const MatMulPlan& plan, const Fn& fn) {
    const int64_t rows = plan.batch * plan.M;
    pool.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plan.N)), [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r) {
            const int64_t p = r / plan.M, m = r % plan.M;
            // A folded batch has no offset tables: A's matrices are contiguous and B is shared.
            const int64_t a_offset = plan.fold_batch_into_rows ? p * plan.M * plan.K : plan.a_offsets[p];
            const int64_t b_offset = plan.fold_batch_into_rows ? 0 : plan.b_offsets[p];
            const int64_t a_row = (plan.K ? a_offset / plan.K : 0) + m;  // K = 0: every sum is 0 anyway
            const int64_t b_row = plan.N ? b_offset / plan.N : 0;
            fn(r, a_row, b_row);
        }
    });
}

class MatMulIntegerKernel final : public Kernel {
public:
    explicit MatMulIntegerKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "MatMulInteger";
        const Tensor& A = ctx.input(0);
        const Tensor& B = ctx.input(1);
        check_8bit(op, "A", A);
        check_8bit(op, "B", B);
        const MatMulPlan plan = plan_matmul(A.shape, B.shape, op);
        IntegerOperand a = matmul_operand(A, plan, MatrixSide::A);
        IntegerOperand b = matmul_operand(B, plan, MatrixSide::B);
        if (ctx.has_input(2)) {
            a.zero_points = load_zero_points(op, &ctx.input(2), A);
            a.zero_point_index = matrix_param_index(op, "a_zero_point", ctx.input(2).shape, A.shape, MatrixSide::A);
        }
        if (ctx.has_input(3)) {
            b.zero_points = load_zero_points(op, &ctx.input(3), B);
            b.zero_point_index = matrix_param_index(op, "b_zero_point", ctx.input(3).shape, B.shape, MatrixSide::B);
        }
        Tensor& Y = ctx.output(0, TESS_ELEMENT_INT32, plan.output_shape);
        int32_t* y = Y.ptr<int32_t>();
        integer_matmul(ctx.pool(), op, plan, a, b, [&]<typename F>(const F* c) {
            ctx.pool().parallel_for(Y.size(), 16384, [&](int64_t first, int64_t last) {
                for (int64_t i = first; i < last; ++i) y[i] = wrap_int32(c[i]);
            });
        });
    }
};

// The quantization parameters of a requantized output: y = saturate(round(sum * multiplier) + zero_point).
struct OutputQuantization {
    int32_t type = TESS_ELEMENT_UINT8;
    double zero_point = 0;
    IntegerRange range{0, 255};
};

inline double requantize(int32_t sum, double multiplier, const OutputQuantization& q) {
    return std::max(q.range.low, std::min(std::nearbyint(double(sum) * multiplier) + q.zero_point, q.range.high));
}

template <typename Fn> void dispatch_8bit(int32_t type, const Fn& fn) { dispatch<int8_t, uint8_t>(type, fn); }

// Scales of QLinearMatMul: float, float16 or bfloat16 (opset 21), all of one type.  The multiplier
// a_scale * b_scale / y_scale is computed in that type, as the reference does.
class QLinearMatMulKernel final : public Kernel {
public:
    explicit QLinearMatMulKernel(const NodeInfo& info) : declared_output_type_(info.output_type(0)) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "QLinearMatMul";
        const Tensor& A = ctx.input(0);
        const Tensor& a_scale = ctx.input(1);
        const Tensor& B = ctx.input(3);
        const Tensor& b_scale = ctx.input(4);
        const Tensor& y_scale = ctx.input(6);
        check_8bit(op, "a", A);
        check_8bit(op, "b", B);
        for (const Tensor* s : {&a_scale, &b_scale, &y_scale}) {
            if (!is_float_type(s->type)) throw_unsupported_type(op + " scale", s->type);
            if (s->type != a_scale.type) throw KernelError(op + ": the scales must have one element type");
        }
        const Precision precision = precision_of(op, a_scale.type);
        const MatMulPlan plan = plan_matmul(A.shape, B.shape, op);
        IntegerOperand a = matmul_operand(A, plan, MatrixSide::A);
        IntegerOperand b = matmul_operand(B, plan, MatrixSide::B);
        const ParamIndex a_scale_index = matrix_param_index(op, "a_scale", a_scale.shape, A.shape, MatrixSide::A);
        const ParamIndex b_scale_index = matrix_param_index(op, "b_scale", b_scale.shape, B.shape, MatrixSide::B);
        if (ctx.has_input(2)) {
            a.zero_points = load_zero_points(op, &ctx.input(2), A);
            a.zero_point_index = matrix_param_index(op, "a_zero_point", ctx.input(2).shape, A.shape, MatrixSide::A);
        }
        if (ctx.has_input(5)) {
            b.zero_points = load_zero_points(op, &ctx.input(5), B);
            b.zero_point_index = matrix_param_index(op, "b_zero_point", ctx.input(5).shape, B.shape, MatrixSide::B);
        }
        if (y_scale.size() != 1) throw KernelError(op + ": y_scale must be a scalar, got " + shape_string(y_scale.shape));
        OutputQuantization out;
        out.type = ctx.has_input(7) ? ctx.input(7).type
                                    : (declared_output_type_ != TESS_ELEMENT_UNDEFINED ? declared_output_type_ : A.type);
        if (out.type != TESS_ELEMENT_INT8 && out.type != TESS_ELEMENT_UINT8) throw_unsupported_type(op + " y", out.type);
        if (ctx.has_input(7)) {
            if (ctx.input(7).size() != 1) throw KernelError(op + ": y_zero_point must be a scalar");
            out.zero_point = load_all(ctx.input(7))[0];
        }
        out.range = *integer_range(out.type);

        std::vector<float> a_scales, b_scales;
        for (double s : load_all(a_scale)) a_scales.push_back(static_cast<float>(s));
        for (double s : load_all(b_scale)) b_scales.push_back(static_cast<float>(s));
        const float y_scale_value = static_cast<float>(load_all(y_scale)[0]);

        Tensor& Y = ctx.output(0, out.type, plan.output_shape);
        integer_matmul(ctx.pool(), op, plan, a, b, [&]<typename F>(const F* c) {
            dispatch_8bit(out.type, [&]<typename Out>() {
                Out* y = Y.ptr<Out>();
                for_each_output_row(ctx.pool(), plan, [&](int64_t r, int64_t a_row, int64_t b_row) {
                    const float as = a_scales[a_scale_index(a_row, 0)];
                    for (int64_t n = 0; n < plan.N; ++n) {
                        const float product = round_to(precision, as * b_scales[b_scale_index(b_row, n)]);
                        const double multiplier = round_to(precision, product / y_scale_value);
                        y[r * plan.N + n] = static_cast<Out>(requantize(wrap_int32(c[r * plan.N + n]), multiplier, out));
                    }
                });
            });
        });
    }

private:
    int32_t declared_output_type_;
};

// ---- ConvInteger and QLinearConv -------------------------------------------------------------------------------

// The convolution of centered operands: C[n, m, position] = sum over the window of (x - x_zero_point) *
// (w - w_zero_point[m]), with padding contributing zero (a padded x equals its zero point).  im2col + gemm per image
// and group; epilogue(C) gets the exact sums, laid out as Y.
struct IntegerConvolution {
    WindowGeometry geometry;
    int64_t batch = 0, channels = 0, out_channels = 0, group = 1;
    Shape output_shape;
};

class IntegerConvKernel final : public Kernel {
public:
    // quantized: QLinearConv (inputs x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B);
    // otherwise ConvInteger (x, w, x_zero_point, w_zero_point).
    IntegerConvKernel(const NodeInfo& info, bool quantized)
        : op_(info.op_type()),
          quantized_(quantized),
          attrs_(WindowAttributes::parse(info)),
          group_(info.attr_int("group", 1)) {
        if (group_ < 1) throw KernelError(op_ + ": group must be positive, got " + std::to_string(group_));
    }

    void compute(KernelContext& ctx) const override {
        const size_t w_input = quantized_ ? 3 : 1;
        const size_t x_zero_input = 2, w_zero_input = quantized_ ? 5 : 3;
        const Tensor& X = ctx.input(0);
        const Tensor& W = ctx.input(w_input);
        check_8bit(op_, "x", X);
        check_8bit(op_, "w", W);
        const IntegerConvolution conv = plan(X, W);
        const int64_t M = conv.out_channels, C = conv.channels;
        const int64_t channels_per_group = C / conv.group;
        const int64_t depth = channels_per_group * conv.geometry.kernel_size();

        IntegerOperand x;
        x.data = &X;
        x.rows = conv.batch * C;
        x.columns = conv.geometry.input_size();
        IntegerOperand w;
        w.data = &W;
        w.rows = M;
        w.columns = depth;
        if (ctx.has_input(x_zero_input)) {
            const Tensor& zp = ctx.input(x_zero_input);
            if (zp.size() != 1) throw KernelError(op_ + ": x_zero_point must be a scalar, got " + shape_string(zp.shape));
            x.zero_points = load_zero_points(op_, &zp, X);
        }
        if (ctx.has_input(w_zero_input)) {
            const Tensor& zp = ctx.input(w_zero_input);
            w.zero_points = load_zero_points(op_, &zp, W);
            w.zero_point_index = per_channel_index(zp, M, "w_zero_point");
        }

        if (!quantized_) {
            Tensor& Y = ctx.output(0, TESS_ELEMENT_INT32, conv.output_shape);
            int32_t* y = Y.ptr<int32_t>();
            convolve(ctx.pool(), conv, x, w, [&]<typename F>(const F* c) {
                ctx.pool().parallel_for(Y.size(), 16384, [&](int64_t first, int64_t last) {
                    for (int64_t i = first; i < last; ++i) y[i] = wrap_int32(c[i]);
                });
            });
            return;
        }

        const Tensor& x_scale = ctx.input(1);
        const Tensor& w_scale = ctx.input(4);
        const Tensor& y_scale = ctx.input(6);
        for (const Tensor* s : {&x_scale, &w_scale, &y_scale}) {
            if (s->type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op_ + " scale", s->type);
        }
        if (x_scale.size() != 1 || y_scale.size() != 1) throw KernelError(op_ + ": x_scale and y_scale must be scalars");
        const ParamIndex w_scale_index = per_channel_index(w_scale, M, "w_scale");
        OutputQuantization out;
        out.type = ctx.has_input(7) ? ctx.input(7).type : X.type;
        if (out.type != TESS_ELEMENT_INT8 && out.type != TESS_ELEMENT_UINT8) throw_unsupported_type(op_ + " y", out.type);
        if (ctx.has_input(7)) {
            if (ctx.input(7).size() != 1) throw KernelError(op_ + ": y_zero_point must be a scalar");
            out.zero_point = load_all(ctx.input(7))[0];
        }
        out.range = *integer_range(out.type);
        const int32_t* bias = nullptr;
        if (ctx.has_input(8)) {
            const Tensor& B = ctx.input(8);
            if (B.type != TESS_ELEMENT_INT32) throw_unsupported_type(op_ + " B", B.type);
            if (B.shape != Shape{M}) throw KernelError(op_ + ": B " + shape_string(B.shape) + " must be [" + std::to_string(M) + "]");
            bias = B.ptr<int32_t>();
        }
        // multiplier[m] = x_scale * w_scale[m] / y_scale in float, as the reference computes it.
        const float xs = x_scale.ptr<float>()[0], ys = y_scale.ptr<float>()[0];
        std::vector<double> multipliers(static_cast<size_t>(M));
        for (int64_t m = 0; m < M; ++m) multipliers[m] = (xs * w_scale.ptr<float>()[w_scale_index(m, 0)]) / ys;

        Tensor& Y = ctx.output(0, out.type, conv.output_shape);
        const int64_t positions = conv.geometry.output_size();
        convolve(ctx.pool(), conv, x, w, [&]<typename F>(const F* c) {
            dispatch_8bit(out.type, [&]<typename Out>() {
                Out* y = Y.ptr<Out>();
                const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, positions));
                ctx.pool().parallel_for(conv.batch * M, grain, [&](int64_t first, int64_t last) {
                    for (int64_t row = first; row < last; ++row) {
                        const int64_t m = row % M;
                        const int64_t b = bias ? bias[m] : 0;
                        for (int64_t i = row * positions; i < (row + 1) * positions; ++i) {
                            const int32_t sum = wrap_int32(static_cast<int64_t>(c[i]) + b);
                            y[i] = static_cast<Out>(requantize(sum, multipliers[m], out));
                        }
                    }
                });
            });
        });
    }

private:
    IntegerConvolution plan(const Tensor& X, const Tensor& W) const {
        if (X.rank() < 3) throw KernelError(op_ + ": x " + shape_string(X.shape) + " must be [N, C, D1, ...]");
        if (W.rank() != X.rank()) {
            throw KernelError(op_ + ": w " + shape_string(W.shape) + " must have the rank of x " + shape_string(X.shape));
        }
        IntegerConvolution conv;
        conv.batch = X.shape[0];
        conv.channels = X.shape[1];
        conv.out_channels = W.shape[0];
        conv.group = group_;
        if (conv.channels != W.shape[1] * group_ || conv.out_channels % group_ != 0) {
            throw KernelError(op_ + ": x " + shape_string(X.shape) + " and w " + shape_string(W.shape) +
                              " do not match group " + std::to_string(group_));
        }
        const Shape kernel(W.shape.begin() + 2, W.shape.end());
        if (!attrs_.kernel_shape.empty() && attrs_.kernel_shape != kernel) {
            throw KernelError(op_ + ": kernel_shape " + shape_string(attrs_.kernel_shape) + " does not match w " +
                              shape_string(W.shape));
        }
        conv.geometry = resolve_window(op_, attrs_, Shape(X.shape.begin() + 2, X.shape.end()), kernel);
        conv.output_shape = {conv.batch, conv.out_channels};
        conv.output_shape.insert(conv.output_shape.end(), conv.geometry.output.begin(), conv.geometry.output.end());
        return conv;
    }

    ParamIndex per_channel_index(const Tensor& param, int64_t out_channels, const char* name) const {
        ParamIndex index;
        if (param.size() == 1) return index;
        if (param.rank() != 1 || param.shape[0] != out_channels) {
            throw KernelError(op_ + ": " + name + " " + shape_string(param.shape) + " must be a scalar or [" +
                              std::to_string(out_channels) + "]");
        }
        index.row_multiplier = 1;
        return index;
    }

    template <typename Epilogue>
    void convolve(ThreadPool& pool, const IntegerConvolution& conv, const IntegerOperand& x, const IntegerOperand& w,
                  const Epilogue& epilogue) const {
        const WindowGeometry& g = conv.geometry;
        const int64_t channels_per_group = conv.channels / conv.group;
        const int64_t filters_per_group = conv.out_channels / conv.group;
        const int64_t depth = channels_per_group * g.kernel_size();
        const int64_t positions = g.output_size();
        const int32_t max_x = center_operand<float, false>(pool, x, nullptr);
        const int32_t max_w = center_operand<float, false>(pool, w, nullptr);
        with_exact_accumulator(op_, depth, max_x, max_w, [&]<typename F>() {
            std::vector<F> image(static_cast<size_t>(x.rows * x.columns)), filters(static_cast<size_t>(w.rows * w.columns));
            center_operand<F, true>(pool, x, image.data());
            center_operand<F, true>(pool, w, filters.data());
            std::vector<F> sums(static_cast<size_t>(shape_size(conv.output_shape)), F(0));
            const bool pointwise = g.is_pointwise();
            std::vector<F> columns(pointwise ? 0 : static_cast<size_t>(depth * positions));
            if (depth > 0 && positions > 0) {
                for (int64_t n = 0; n < conv.batch; ++n) {
                    for (int64_t grp = 0; grp < conv.group; ++grp) {
                        const F* source = image.data() + (n * conv.channels + grp * channels_per_group) * g.input_size();
                        if (!pointwise) im2col<F>(pool, g, source, channels_per_group, columns.data());
                        gemm<F>(pool, false, false, filters_per_group, positions, depth, F(1),
                                filters.data() + grp * filters_per_group * depth, depth,
                                pointwise ? source : columns.data(), positions, F(0),
                                sums.data() + (n * conv.out_channels + grp * filters_per_group) * positions, positions);
                    }
                }
            }
            epilogue(sums.data());
        });
    }

    std::string op_;
    bool quantized_;
    WindowAttributes attrs_;
    int64_t group_;
};

// ---- registration ----------------------------------------------------------------------------------------------

const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};

// One registration per opset range whose attributes differ; the types each range admits are checked in compute.
struct QuantizeVersion {
    int since, end;
    QuantizeFeatures quantize, dequantize;
};

void add_quantize_linear(KernelRegistry& registry) {
    const QuantizeVersion versions[] = {
        {10, 12, {}, {}},
        {13, 18, {.per_axis = true}, {.per_axis = true}},
        {19, 20, {.per_axis = true, .saturate = true}, {.per_axis = true}},
        {21, 22,
         {.per_axis = true, .saturate = true, .blocked = true, .output_dtype = true},
         {.per_axis = true, .blocked = true}},
        {23, 0,
         {.per_axis = true, .saturate = true, .blocked = true, .output_dtype = true, .precision = true},
         {.per_axis = true, .blocked = true, .output_dtype = true}},
    };
    for (const QuantizeVersion& v : versions) {
        registry.add(KernelDef{.domain = "",
                               .op_type = "QuantizeLinear",
                               .since_version = v.since,
                               .end_version = v.end,
                               .input_types = {},
                               .memory = KernelMemory::Normal,
                               .factory = [features = v.quantize](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                                   return std::make_unique<QuantizeLinearKernel>(info, features);
                               }});
        registry.add(KernelDef{.domain = "",
                               .op_type = "DequantizeLinear",
                               .since_version = v.since,
                               .end_version = v.end,
                               .input_types = {},
                               .memory = KernelMemory::Normal,
                               .factory = [features = v.dequantize](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                                   return std::make_unique<DequantizeLinearKernel>(info, features);
                               }});
    }
}

}  // namespace

void register_quantize_kernels(KernelRegistry& registry) {
    add_quantize_linear(registry);
    registry.add(KernelDef{.domain = "",
                           .op_type = "DynamicQuantizeLinear",
                           .since_version = 11,
                           .end_version = 0,
                           .input_types = {{0, {TESS_ELEMENT_FLOAT32}}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<DynamicQuantizeLinearKernel>()});
    registry.add(KernelDef{.domain = "",
                           .op_type = "MatMulInteger",
                           .since_version = 10,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {1, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<MatMulIntegerKernel>()});
    // Opset 21 adds float16/bfloat16 scales (handled) and float8 operands (not supported: rejected here).
    registry.add(KernelDef{.domain = "",
                           .op_type = "QLinearMatMul",
                           .since_version = 10,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {3, k8bit}, {7, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<QLinearMatMulKernel>()});
    registry.add(KernelDef{.domain = "",
                           .op_type = "ConvInteger",
                           .since_version = 10,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {1, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<IntegerConvKernel>(info, false);
                           }});
    registry.add(KernelDef{.domain = "",
                           .op_type = "QLinearConv",
                           .since_version = 10,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {3, k8bit}, {7, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<IntegerConvKernel>(info, true);
                           }});
}

}  // namespace tessera::cpu
