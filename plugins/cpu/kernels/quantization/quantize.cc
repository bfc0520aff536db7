// CPU provider: linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (the integer
// products are in quantized_products.cc and integer_conv.cc).
//
// Quantize/Dequantize work on pieces of the flattened tensor: for each piece the scale and zero point of every
// element are gathered first (per-tensor, per-axis or blocked), then the arithmetic runs as plain loops over the
// piece.  Element formats (float16, bfloat16, float8, float6, float4, int4/uint4/int2/uint2, float8e8m0 scales) are
// read and written through util/element_convert.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "kernels/quantization/quantize_support.h"
#include "kernels/quantization/requantize.h"
#include "util/axes.h"
#include "util/blocked_conv.h"
#include "util/element_convert.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

using namespace quant;

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
    bool blocked = false;       // opset 21: the "block_size" attribute
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

// Runs fn(begin, end) over the elements [0, total) in pieces of at most kPiece, across the pool.
template <typename Fn> void for_each_piece(ThreadPool& pool, int64_t total, const Fn& fn) {
    const int64_t pieces = (total + kPiece - 1) / kPiece;
    pool.parallel_for(pieces, std::max<int64_t>(1, 32768 / kPiece), [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) fn(p * kPiece, std::min(total, (p + 1) * kPiece));
    });
}

// ---- quantized element types -----------------------------------------------------------------------------------

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

struct QuantizeParams {
    ParamLayout layout;
    std::vector<float> scales;        // rounded to the precision
    std::vector<double> zero_points;  // one per scale (zeros when absent)
    Precision precision = Precision::Float;
    int32_t output_type = TESS_ELEMENT_UINT8;
    bool saturate = true;
};

// Fast path of quantize(): y = clamp(round_half_even(x / scale) + zero_point) for float x divided in float into an
// 8- or 16-bit integer type, vectorized.  `uniform`: scale[0] and zero_point[0] hold for the whole run.
template <typename Out> void quantize_float_run(const float* x, const float* scale, const float* zero_point,
                                                bool uniform, int64_t n, IntegerRange range, Out* y) {
    const float low = static_cast<float>(range.low), high = static_cast<float>(range.high);
    vec::run_best_isa([=] {
        // Locals, not the closure's copies: a store through an 8-bit pointer may alias anything, and the closure's
        // fields would be reloaded after every store.
        const float* const x_base = x;
        Out* const y_base = y;
        const vec::Vf vlow = vec::splat(low), vhigh = vec::splat(high);
        const vec::Vf uniform_scale = vec::splat(scale[0]), uniform_zero = vec::splat(zero_point[0]);
        // Lanes [k, k + kLanes) at these pointers (the parameters' only when not uniform).
        auto block = [&](const float* x_ptr, const float* s_ptr, const float* z_ptr, Out* out_ptr) {
            const vec::Vf s = uniform ? uniform_scale : vec::load(s_ptr);
            const vec::Vf z = uniform ? uniform_zero : vec::load(z_ptr);
            const auto q = saturate_round<Out>(vec::load(x_ptr) / s, z, vlow, vhigh);
            std::memcpy(out_ptr, &q, sizeof q);
        };
        const int64_t count = n;
        int64_t k = 0;
        for (; k + vec::kLanes <= count; k += vec::kLanes) block(x_base + k, scale + k, zero_point + k, y_base + k);
        if (k < count) {  // the tail through padded copies
            const size_t rest = static_cast<size_t>(count - k);
            float x_tail[vec::kLanes] = {}, s_tail[vec::kLanes], z_tail[vec::kLanes] = {};
            std::fill(s_tail, s_tail + vec::kLanes, 1.0f);
            Out out_tail[vec::kLanes];
            std::memcpy(x_tail, x_base + k, rest * sizeof(float));
            if (!uniform) {
                std::memcpy(s_tail, scale + k, rest * sizeof(float));
                std::memcpy(z_tail, zero_point + k, rest * sizeof(float));
            }
            block(x_tail, s_tail, z_tail, out_tail);
            std::memcpy(y_base + k, out_tail, rest * sizeof(Out));
        }
    });
}

// Fast path of DequantizeLinear: y = (float(x) - zero_point) * scale for 8- or 16-bit integers x into float, where
// the difference is exact in float; `uniform`: scale[0] and zero_point[0] hold for the whole run.
template <typename In> void dequantize_float_run(const In* x, const float* scale, const float* zero_point,
                                                 bool uniform, int64_t n, float* y) {
    // Plain loops the compiler vectorizes for each ISA (GCC's vector extensions widen 8-bit lanes one by one).
    vec::run_best_isa([=] {
        const In* __restrict in = x;
        float* __restrict out = y;
        if (uniform) {
            const float s = scale[0], z = zero_point[0];
            for (int64_t k = 0; k < n; ++k) out[k] = (static_cast<float>(in[k]) - z) * s;
        } else {
            for (int64_t k = 0; k < n; ++k) out[k] = (static_cast<float>(in[k]) - zero_point[k]) * scale[k];
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
// int32).  Float8, float6 and float4 outputs round (x / scale) + zero_point to the format.
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
        // The reference adds the zero point in float: rounding the sum to float first is part of the result.
        for (int64_t k = 0; k < count; ++k) values[k] = double(quotient[k] + static_cast<float>(zero_point[k]));
        convert::CastOptions options;
        options.saturate = params.saturate;
        convert::store_doubles(y.type, y.data, begin, end, values, options);
    });
}

// ---- the blocked layout ----------------------------------------------------------------------------------------

// DequantizeLinear into, and QuantizeLinear out of, the blocked channel layout (util/blocked_conv.h), so that the
// float islands of a QDQ model between them (the depthwise convolutions quantize_static leaves float) run on the
// blocked kernels instead of NCHW ones: per-tensor 8-bit quantization of a declared float [N, 16k, H, W] tensor, a
// block of 16 channels and up to kBlockedChunk positions a task, with the arithmetic of the NCHW paths
// (quantize_float_run, dequantize_float_run), so the results are the same bit for bit.
constexpr int64_t kBlockedChunk = 1024;

// Whether the scale and zero point are declared scalars (or [1]) and the quantized side 8-bit.
bool per_tensor_8bit(const NodeInfo& info, int32_t quantized_type) {
    auto scalar = [&](size_t i) {
        const std::optional<Shape> shape = info.input_shape(i);
        return shape && shape_size(*shape) == 1;
    };
    return (quantized_type == TESS_ELEMENT_UINT8 || quantized_type == TESS_ELEMENT_INT8) && scalar(1) &&
           (!info.has_input(2) || scalar(2));
}

// Tasks of the blocked conversions: (image and channel block, chunk of positions).
template <typename Fn>
void for_each_blocked_chunk(ThreadPool& pool, const Shape& shape, const Fn& fn) {
    const int64_t N = shape[0], blocks = shape[1] / kChannelBlock, positions = shape[2] * shape[3];
    const int64_t chunks = (positions + kBlockedChunk - 1) / kBlockedChunk;
    pool.parallel_for(N * blocks * chunks, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t image_block = t / chunks, p0 = (t % chunks) * kBlockedChunk;
            fn(image_block * kChannelBlock * positions, p0, std::min(kBlockedChunk, positions - p0), positions);
        }
    });
}

// Calls fn.template operator()<T>() for T uint8_t or int8_t (`type`); the blocked paths check the type first.
template <typename Fn> void dispatch_8bit_integer(int32_t type, const Fn& fn) {
    if (type == TESS_ELEMENT_UINT8) fn.template operator()<uint8_t>();
    else fn.template operator()<int8_t>();
}

// Throws unless `x` is what the blocked paths were chosen for (the declared shape and a per-tensor quantization).
void check_blocked(const std::string& op, const Shape& shape, bool per_tensor) {
    if (shape.size() != 4 || shape[1] % kChannelBlock != 0 || !per_tensor)
        throw KernelError(op + ": a blocked tensor " + shape_string(shape) +
                          " must be [N, 16k, H, W] with a per-tensor scale");
}

class QuantizeLinearKernel final : public Kernel, public BlockedLayoutKernel, public ProducerFusingKernel {
public:
    // with_table: the fused QuantizeLinear (TESS_FUSED_OPS_DOMAIN) the optimizer makes of a per-tensor 8-bit
    // QuantizeLinear and the QuantizedLookup reading it: input 3 is the lookup's constant table ([C, 256] per
    // channel on axis 1, or [1, 256]), applied to each chunk of quantized bytes while it is in cache.
    QuantizeLinearKernel(const NodeInfo& info, QuantizeFeatures features, bool with_table = false)
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
        const int32_t quantized =
            info.has_input(2) ? info.input_type(2) : (output_dtype_ ? output_dtype_ : TESS_ELEMENT_UINT8);
        // A float32 scale: without the precision attribute the scale's type sets the precision (opset 23), and the
        // blocked path divides in float.
        blocked_capable_ = !precision_ && block_size_ == 0 && info.input_type(0) == TESS_ELEMENT_FLOAT32 &&
                           info.input_type(1) == TESS_ELEMENT_FLOAT32 && blocked_input_declared(info) &&
                           per_tensor_8bit(info, quantized);
        if (with_table) table_ = ByteTable::load(info, 3, "QuantizeLinear");
    }

    bool reads_blocked(size_t input) const override { return input == 0 && blocked_capable_; }
    bool writes_blocked() const override { return false; }
    void set_layout(const std::vector<bool>& blocked_inputs, bool) override {
        x_blocked_ = blocked_capable_ && !blocked_inputs.empty() && blocked_inputs[0];
    }

    // Reading a blocked x, it takes over the depthwise convolution making x (BlockedBandSource): that
    // convolution's rows are quantized as they are made, and x never goes through memory.
    bool can_absorb(size_t input, const Kernel& producer) const override {
        const auto* source = dynamic_cast<const BlockedBandSource*>(&producer);
        return input == 0 && x_blocked_ && source != nullptr && source->band_source_ready();
    }
    void absorb(size_t, std::unique_ptr<Kernel> producer, size_t first_producer_input) override {
        absorbed_ = std::move(producer);
        absorbed_inputs_ = first_producer_input;
    }

    void compute(KernelContext& ctx) const override {
        if (absorbed_) {
            compute_absorbed(ctx);
            return;
        }
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
            throw KernelError(op + ": output_dtype " + element_type_name(output_dtype_) +
                              " differs from the zero point's element type " + element_type_name(zero_point->type));
        }
        if (!is_quantized_type(params.output_type)) throw_unsupported_type(op + " y", params.output_type);
        if (per_tensor_only_ && scale.size() != 1) {
            throw KernelError(op + ": opsets 10-12 take a scalar scale, got " + shape_string(scale.shape));
        }
        params.layout = resolve_param_layout(op, x.shape, scale.shape, axis_, block_size_);
        check_zero_point_shape(op, scale, zero_point, params.layout);
        // Without the precision attribute the scale's type decides; scales that are no float type (int32,
        // float8e8m0 powers of two) divide in float.
        params.precision =
            precision_ ? *precision_ : (is_float_type(scale.type) ? precision_of(op, scale.type) : Precision::Float);
        for (double s : load_all(scale)) params.scales.push_back(round_to(params.precision, static_cast<float>(s)));
        params.zero_points = zero_point ? load_all(*zero_point) : std::vector<double>(params.scales.size(), 0.0);
        params.saturate = saturate_;

        const int64_t channels = x.rank() >= 2 ? x.shape[1] : 1;
        if (!table_.empty()) {
            if (!is_8bit(params.output_type) || (table_.rows != 1 && (x.rank() < 2 || channels != table_.rows)))
                throw KernelError(op + ": the lookup table [" + std::to_string(table_.rows) +
                                  ", 256] does not fit an output " + element_type_name(params.output_type) + " " +
                                  shape_string(x.shape));
        }
        Tensor& output = ctx.output(0, table_.empty() ? params.output_type : table_.type, x.shape);
        // The quantized bytes are written as the zero point's type (the table, if any, maps them to its own).
        Tensor y = output;
        y.type = params.output_type;
        if (x_blocked_) {
            check_blocked(op, x.shape,
                          params.layout.per_tensor && x.type == TESS_ELEMENT_FLOAT32 &&
                              params.precision == Precision::Float &&
                              (y.type == TESS_ELEMENT_UINT8 || y.type == TESS_ELEMENT_INT8));
            const float scale_value = params.scales[0], zero = static_cast<float>(params.zero_points[0]);
            dispatch_8bit_integer(y.type, [&]<typename Out>() {
                for_each_blocked_chunk(ctx.pool(), x.shape, [&](int64_t at, int64_t p0, int64_t count,
                                                                int64_t positions) {
                    quantize_from_blocked(x.ptr<float>() + at + p0 * kChannelBlock, count, scale_value, zero,
                                          positions, y.ptr<Out>() + at + p0);
                    if (table_.empty()) return;
                    const int64_t first_channel = (at / positions) % channels;
                    for (int64_t c = 0; c < kChannelBlock; ++c) {
                        uint8_t* bytes = static_cast<uint8_t*>(y.data) + at + c * positions + p0;
                        lookup_bytes(table(first_channel + c), bytes, bytes, count);
                    }
                });
            });
            return;
        }
        quantize(ctx.pool(), x, params, y);
        if (table_.empty() || y.size() == 0) return;
        // The NCHW path: one more pass, plane by plane (a table of one row: the whole tensor at once).
        const int64_t planes = table_.rows == 1 ? 1 : x.shape[0] * channels;
        const int64_t plane = y.size() / planes;
        auto* bytes = static_cast<uint8_t*>(y.data);
        ctx.pool().parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane)),
                                [&](int64_t first, int64_t last) {
                                    for (int64_t p = first; p < last; ++p)
                                        lookup_bytes(table(p % channels), bytes + p * plane, bytes + p * plane, plane);
                                });
    }

private:
    // The depthwise convolution's output rows, quantized (and looked up) into y NCHW as they are made.
    template <typename Out> class QuantizingSink final : public BlockedBandSink {
    public:
        QuantizingSink(const QuantizeLinearKernel& k, float scale, float zero, const Shape& shape, Out* y)
            : k_(k), scale_(scale), zero_(zero), C_(shape[1]), OW_(shape[3]), P_(shape[2] * shape[3]), y_(y) {}
        void take(int64_t n, int64_t block, int64_t oh0, int64_t oh1, const float* rows) const override {
            const int64_t count = (oh1 - oh0) * OW_, c0 = block * kChannelBlock;
            Out* y = y_ + (n * C_ + c0) * P_ + oh0 * OW_;
            quantize_from_blocked(rows, count, scale_, zero_, P_, y);
            if (k_.table_.empty()) return;
            for (int64_t c = 0; c < kChannelBlock; ++c) {
                auto* bytes = reinterpret_cast<uint8_t*>(y + c * P_);
                lookup_bytes(k_.table(c0 + c), bytes, bytes, count);
            }
        }

    private:
        const QuantizeLinearKernel& k_;
        float scale_, zero_;
        int64_t C_, OW_, P_;
        Out* y_;
    };

    void compute_absorbed(KernelContext& ctx) const {
        const std::string op = "QuantizeLinear";
        const auto& source = dynamic_cast<const BlockedBandSource&>(*absorbed_);
        const Shape shape = source.band_source_shape(ctx, absorbed_inputs_);
        const Tensor& scale = ctx.input(1);
        const Tensor* zero_point = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (scale.type != TESS_ELEMENT_FLOAT32 || scale.size() != 1 || (zero_point && zero_point->size() != 1))
            throw KernelError(op + ": taking over a convolution needs a float32 scale and zero point, one each");
        const int32_t type = zero_point ? zero_point->type : (output_dtype_ ? output_dtype_ : TESS_ELEMENT_UINT8);
        const int64_t channels = shape[1];
        if (shape.size() != 4 || channels % kChannelBlock != 0 || !is_8bit(type) ||
            (!table_.empty() && table_.rows != 1 && table_.rows != channels))
            throw KernelError(op + ": cannot take over a convolution of output " + shape_string(shape));
        Tensor& y = ctx.output(0, table_.empty() ? type : table_.type, shape);
        if (y.size() == 0) return;
        const float scale_value = scale.ptr<float>()[0];
        const float zero = zero_point ? static_cast<float>(load_all(*zero_point)[0]) : 0.0f;
        dispatch_8bit_integer(type, [&]<typename Out>() {
            const QuantizingSink<Out> sink(*this, scale_value, zero, shape, static_cast<Out*>(y.data));
            source.run_to_sink(ctx, absorbed_inputs_, sink);
        });
    }

    std::unique_ptr<Kernel> absorbed_;  // the depthwise convolution this one took over
    size_t absorbed_inputs_ = 0;        // where its inputs start among this step's
    int64_t axis_;
    bool saturate_;
    int64_t block_size_;
    int32_t output_dtype_;
    std::optional<Precision> precision_;
    bool per_tensor_only_ = false;
    bool blocked_capable_ = false;  // may read a blocked x (reads_blocked)
    bool x_blocked_ = false;
    ByteTable table_;  // the fused lookup's (empty: none)

    const uint8_t* table(int64_t channel) const { return table_.row(channel); }
};

// ---- DequantizeLinear ------------------------------------------------------------------------------------------

// y = (x - zero_point) * scale: the difference is taken in double (exact for every input type) and rounded to
// float, the product is a float product rounded to the output type, as ONNX's reference computes it.
class DequantizeLinearKernel final : public Kernel, public BlockedLayoutKernel {
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
        blocked_capable_ = block_size_ == 0 && declared_output_type_ == TESS_ELEMENT_FLOAT32 &&
                           (output_dtype_ == 0 || output_dtype_ == TESS_ELEMENT_FLOAT32) &&
                           blocked_input_declared(info) && per_tensor_8bit(info, info.input_type(0));
    }

    bool reads_blocked(size_t) const override { return false; }
    bool writes_blocked() const override { return blocked_capable_; }
    void set_layout(const std::vector<bool>&, bool blocked_output) override {
        y_blocked_ = blocked_capable_ && blocked_output;
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
            throw KernelError(op + ": the zero point's element type " + element_type_name(zero_point->type) +
                              " differs from x's " + element_type_name(x.type));
        }
        if (per_tensor_only_ && scale.size() != 1) {
            throw KernelError(op + ": opsets 10-12 take a scalar scale, got " + shape_string(scale.shape));
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
        if (y_blocked_) {
            check_blocked(op, x.shape, layout.per_tensor && output_type == TESS_ELEMENT_FLOAT32 &&
                                           (x.type == TESS_ELEMENT_UINT8 || x.type == TESS_ELEMENT_INT8));
            const float scale_value = scales[0], zero = static_cast<float>(zero_points[0]);
            dispatch_8bit_integer(x.type, [&]<typename X>() {
                for_each_blocked_chunk(ctx.pool(), x.shape, [&](int64_t at, int64_t p0, int64_t count,
                                                                int64_t positions) {
                    dequantize_to_blocked(x.ptr<X>() + at + p0, positions, count, scale_value, zero,
                                          y.ptr<float>() + at + p0 * kChannelBlock);
                });
            });
            return;
        }

        // Fast path: 8/16-bit integers into float, where x - zero_point is exact in float.
        const bool fast = output_type == TESS_ELEMENT_FLOAT32 && x.type != TESS_ELEMENT_INT32 &&
                          dispatch_wide_integer(x.type, []<typename>() {});
        for_each_piece(ctx.pool(), x.size(), [&](int64_t begin, int64_t end) {
            const int64_t count = end - begin;
            if (fast) {
                PieceParams piece;
                if (layout.per_tensor) {
                    piece.scale[0] = scales[0];
                    piece.zero_point[0] = static_cast<float>(zero_points[0]);
                } else {
                    gather_params(layout, scales, zero_points, begin, count, piece);
                }
                dispatch_wide_integer(x.type, [&]<typename X>() {
                    dequantize_float_run(x.ptr<X>() + begin, piece.scale, piece.zero_point, layout.per_tensor, count,
                                         y.ptr<float>() + begin);
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
    bool blocked_capable_ = false;  // may write a blocked y (writes_blocked)
    bool y_blocked_ = false;
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
        // Without readers of y (the convolutions reading it quantize x themselves, ConvIntegerToFloat), only the
        // scale and zero point are made.
        const DynamicQuantization q = ctx.output_wanted(0)
                                          ? dynamic_quantize_uint8(ctx.pool(), x,
                                                                   ctx.output(0, TESS_ELEMENT_UINT8, x.shape))
                                          : dynamic_range_uint8(ctx.pool(), x);
        if (ctx.output_wanted(1)) ctx.output(1, TESS_ELEMENT_FLOAT32, {}).ptr<float>()[0] = q.scale;
        if (ctx.output_wanted(2)) ctx.output(2, TESS_ELEMENT_UINT8, {}).ptr<uint8_t>()[0] = q.zero_point;
    }
};

}  // namespace

namespace quant {

DynamicQuantization dynamic_range_uint8(ThreadPool& pool, const Tensor& x) {
    const float* data = x.ptr<float>();
    const int64_t n = x.size();
    const int64_t chunks = (n + kPiece * 8 - 1) / (kPiece * 8);
    std::vector<float> chunk_min(static_cast<size_t>(chunks), 0.0f), chunk_max(static_cast<size_t>(chunks), 0.0f);
    pool.parallel_for(chunks, 1, [&](int64_t first, int64_t last) {
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
    return dynamic_quantization_of_range(lo, hi);
}

DynamicQuantization dynamic_quantization_of_range(float lo, float hi) {
    const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    const float zero_point = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
    return {scale, static_cast<uint8_t>(zero_point)};
}

void quantize_uint8(ThreadPool& pool, const Tensor& x, DynamicQuantization q, Tensor& y) {
    QuantizeParams params;
    params.scales = {q.scale};
    params.zero_points = {static_cast<double>(q.zero_point)};
    params.output_type = TESS_ELEMENT_UINT8;
    params.layout.inner = x.size();
    quantize(pool, x, params, y);
}

DynamicQuantization dynamic_quantize_uint8(ThreadPool& pool, const Tensor& x, Tensor& y) {
    const DynamicQuantization q = dynamic_range_uint8(pool, x);
    quantize_uint8(pool, x, q, y);
    return q;
}

}  // namespace quant

namespace {

// ---- registration ----------------------------------------------------------------------------------------------

// One registration per opset range whose attributes differ; the types each range admits are checked in compute.
struct QuantizeVersion {
    int since, end;
    QuantizeFeatures quantize, dequantize;
};

void add_quantize_linear(KernelRegistry& registry) {
    // The types compute() accepts, from the predicates it checks them with.
    const auto quantized = element_types_where(is_quantized_type);
    const auto quantize_inputs =
        element_types_where([](int32_t t) { return is_float_type(t) || t == TESS_ELEMENT_INT32; });
    const auto quantize_scales = element_types_where(
        [](int32_t t) { return is_float_type(t) || t == TESS_ELEMENT_INT32 || t == TESS_ELEMENT_FLOAT8E8M0; });
    const auto dequantize_inputs =
        element_types_where([](int32_t t) { return is_quantized_type(t) || t == TESS_ELEMENT_INT32; });
    const auto dequantize_scales =
        element_types_where([](int32_t t) { return is_float_type(t) || t == TESS_ELEMENT_FLOAT8E8M0; });
    const QuantizeVersion versions[] = {
        {10, 12, {}, {}},
        {13, 18, {.per_axis = true}, {.per_axis = true}},
        {19, 20, {.per_axis = true, .saturate = true}, {.per_axis = true}},
        {21,
         22,
         {.per_axis = true, .saturate = true, .blocked = true, .output_dtype = true},
         {.per_axis = true, .blocked = true}},
        {23,
         0,
         {.per_axis = true, .saturate = true, .blocked = true, .output_dtype = true, .precision = true},
         {.per_axis = true, .blocked = true, .output_dtype = true}},
    };
    for (const QuantizeVersion& v : versions) {
        registry.add(KernelDef{.domain = "",
                               .op_type = "QuantizeLinear",
                               .since_version = v.since,
                               .end_version = v.end,
                               .input_types = {{0, quantize_inputs}, {1, quantize_scales}, {2, quantized}},
                               .memory = KernelMemory::Normal,
                               .factory = [features = v.quantize](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                                   return std::make_unique<QuantizeLinearKernel>(info, features);
                               }});
        registry.add(KernelDef{.domain = "",
                               .op_type = "DequantizeLinear",
                               .since_version = v.since,
                               .end_version = v.end,
                               .input_types = {{0, dequantize_inputs}, {1, dequantize_scales}, {2, dequantize_inputs}},
                               .memory = KernelMemory::Normal,
                               .factory = [features = v.dequantize](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                                   return std::make_unique<DequantizeLinearKernel>(info, features);
                               }});
    }
}

}  // namespace

void register_quantize_kernels(KernelRegistry& registry) {
    add_quantize_linear(registry);
    // QuantizeLinear -> QuantizedLookup, fused by the optimizer (core/optimizer/fuse_quantized_lookup.cc) for
    // per-tensor 8-bit quantization of float32 (the features of opset 19: the fusion needs none of the later ones).
    registry.add(KernelDef{.domain = TESS_FUSED_OPS_DOMAIN,
                           .op_type = "QuantizeLinear",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, {TESS_ELEMENT_FLOAT32}},
                                           {1, {TESS_ELEMENT_FLOAT32}},
                                           {2, {TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8}},
                                           {3, {TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8}}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<QuantizeLinearKernel>(
                                   info, QuantizeFeatures{.per_axis = true, .saturate = true}, true);
                           }});
    registry.add(KernelDef{.domain = "",
                           .op_type = "DynamicQuantizeLinear",
                           .since_version = 11,
                           .end_version = 0,
                           .input_types = {{0, {TESS_ELEMENT_FLOAT32}}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<DynamicQuantizeLinearKernel>()});
}

}  // namespace tessera::cpu
