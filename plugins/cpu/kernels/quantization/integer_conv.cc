// CPU provider: the integer convolutions ConvInteger and QLinearConv, and the fused forms the optimizer makes of
// QLinearConv (with its QuantizedLookup, with its DequantizeLinear).  They run on util/int8_gemm.h (exact int32 sums
// of the zero-point-corrected operands), or for depthwise windows on exact float sums, and finish in an epilogue
// (int32 output, requantization, a lookup table, dequantization into floats).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "kernels/quantization/blocked_depthwise_to_float.h"
#include "kernels/quantization/integer_matmul.h"
#include "kernels/quantization/quantize_support.h"
#include "kernels/quantization/requantize.h"
#include "util/blocked_conv.h"
#include "util/im2col.h"
#include "util/int8_gemm.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

using namespace quant;

template <typename Fn> void dispatch_8bit(int32_t type, const Fn& fn) { dispatch<int8_t, uint8_t>(type, fn); }

// ---- ConvInteger and QLinearConv -------------------------------------------------------------------------------

// im2col of an 8-bit image [channels, input positions] into col [channels * kernel taps, output positions], taps in
// the padding reading `pad` (the zero point, so that they contribute nothing once it is subtracted).  Rows are
// split across the pool; along the last spatial dimension the taps inside the image are copied as runs.
#if TESSERA_CPU_X86
// out[i] = src[2 i] for i < n, 32 at a time: the low byte of each 16-bit word (vpmovwb), loads masked to the
// bytes read.
[[gnu::target("avx512f,avx512bw,avx512vl")]] void every_second_byte_avx512(const uint8_t* src, uint8_t* out, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) {
        const int64_t count = std::min<int64_t>(32, n - i);
        // Bytes 0, 2, ..., 2 (count - 1): never the one after the last tap, which may lie past the image.
        const __mmask64 read = (__mmask64{1} << (2 * count - 1)) - 1;
        const __m512i words = _mm512_maskz_loadu_epi8(read, src + 2 * i);
        _mm256_mask_storeu_epi8(out + i, count == 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1,
                                _mm512_cvtepi16_epi8(words));
    }
}
#endif

// out[i] = src[i * step] for i < n: the taps of a strided row.
void strided_bytes(const uint8_t* src, int64_t step, uint8_t* out, int64_t n) {
#if TESSERA_CPU_X86
    if (step == 2 && cpu_allows(CpuIsa::Avx512)) {
        every_second_byte_avx512(src, out, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; ++i) out[i] = src[i * step];
}

void im2col_bytes(ThreadPool& pool, const WindowGeometry& g, const uint8_t* image, int64_t channels, uint8_t pad,
                  uint8_t* col) {
    const size_t rank = g.rank(), last_dim = rank - 1;
    const int64_t taps = g.kernel_size(), positions = g.output_size(), width = g.output[last_dim];
    const int64_t lines = width ? positions / width : 0;  // output positions before the last dimension
    pool.parallel_for(
        channels * taps, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, positions)),
        [&](int64_t first, int64_t last) {
            std::vector<int64_t> tap(rank), line(rank);
            for (int64_t r = first; r < last; ++r) {
                const uint8_t* plane = image + (r / taps) * g.input_size();
                for (int64_t t = r % taps, d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
                    tap[d] = t % g.kernel[d];
                    t /= g.kernel[d];
                }
                const int64_t start = tap[last_dim] * g.dilations[last_dim] - g.pads_begin[last_dim];
                const TapRange inside = taps_inside(start, width, g.strides[last_dim], g.input[last_dim]);
                std::fill(line.begin(), line.end(), 0);
                for (int64_t l = 0; l < lines; ++l) {
                    uint8_t* out = col + r * positions + l * width;
                    int64_t offset = 0;
                    bool valid = inside.first < inside.last;
                    for (size_t d = 0; d < last_dim; ++d) {
                        const int64_t coordinate = line[d] * g.strides[d] + tap[d] * g.dilations[d] - g.pads_begin[d];
                        valid = valid && coordinate >= 0 && coordinate < g.input[d];
                        offset = offset * g.input[d] + coordinate;
                    }
                    if (!valid) {
                        std::fill(out, out + width, pad);
                    } else {
                        const uint8_t* src = plane + offset * g.input[last_dim] + start;
                        std::fill(out, out + inside.first, pad);
                        const int64_t step = g.strides[last_dim];
                        if (step == 1) {
                            std::memcpy(out + inside.first, src + inside.first,
                                        static_cast<size_t>(inside.last - inside.first));
                        } else {
                            strided_bytes(src + inside.first * step, step, out + inside.first,
                                          inside.last - inside.first);
                        }
                        std::fill(out + inside.last, out + width, pad);
                    }
                    for (int64_t d = static_cast<int64_t>(last_dim) - 1; d >= 0 && ++line[d] == g.output[d]; --d)
                        line[d] = 0;
                }
            }
        });
}

// out[j] = float(in[j]) - zero for j < n, in a plain loop compiled for the best ISA.
template <typename T> void centered_floats(const T* in, float* out, int64_t n, float zero) {
    vec::run_best_isa([=] {
        const T* __restrict from = in;
        float* __restrict to = out;
        for (int64_t j = 0; j < n; ++j) to[j] = static_cast<float>(from[j]) - zero;
    });
}

// even[j] = row[2 j], odd[j] = row[2 j + 1] for j < pairs: a stride-2 row split into its two phases.
void deinterleave_pairs(const float* row, float* even, float* odd, int64_t pairs) {
    vec::run_best_isa([=] {
        int64_t j = 0;
        for (; j + vec::kLanes <= pairs; j += vec::kLanes) {
            const vec::Vf a = vec::load(row + 2 * j), b = vec::load(row + 2 * j + vec::kLanes);
            vec::store(even + j, __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30));
            vec::store(odd + j, __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31));
        }
        for (; j < pairs; ++j) {
            even[j] = row[2 * j];
            odd[j] = row[2 * j + 1];
        }
    });
}

// sum[i] = sum over taps t of tap[t] * in[t][i] for i < n (n a multiple of kDepthwiseChunk): 64 sums at a time kept
// across the taps (in registers with AVX-512 or AVX2) instead of one pass over memory per tap.
constexpr int64_t kDepthwiseChunk = 4 * vec::kLanes;
void weighted_sums(const float* const* in, const float* tap, int64_t taps, int64_t n, float* sum) {
    vec::run_best_isa([=] {
        for (int64_t i0 = 0; i0 < n; i0 += kDepthwiseChunk) {
            vec::Vf a0{}, a1{}, a2{}, a3{};
            for (int64_t t = 0; t < taps; ++t) {
                const float* from = in[t] + i0;
                const vec::Vf weight = vec::splat(tap[t]);
                a0 += weight * vec::load(from);
                a1 += weight * vec::load(from + vec::kLanes);
                a2 += weight * vec::load(from + 2 * vec::kLanes);
                a3 += weight * vec::load(from + 3 * vec::kLanes);
            }
            vec::store(sum + i0, a0);
            vec::store(sum + i0 + vec::kLanes, a1);
            vec::store(sum + i0 + 2 * vec::kLanes, a2);
            vec::store(sum + i0 + 3 * vec::kLanes, a3);
        }
    });
}

// A DequantizeLinear fused into the QLinearConv before it: y = (float(q) - zero) * scale.
struct Dequantization {
    float scale;
    float zero;
    bool signed_bytes;  // the requantized bytes (after the table, if any) are int8, else uint8
};

// The convolution of 8-bit operands: sums[n, m, position] = sum over the window of (x - x_zero_point) *
// (w - w_zero_point[m]), one int8_gemm per image and group with the filters as A and the image's columns as B.
class IntegerConvKernel final : public Kernel, public BlockedLayoutKernel, public BlockedRowSource {
public:
    // quantized: QLinearConv (inputs x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B);
    // otherwise ConvInteger (x, w, x_zero_point, w_zero_point).  with_table: the fused QLinearConv
    // (TESS_FUSED_OPS_DOMAIN) that the optimizer makes of a QLinearConv and the QuantizedLookup reading it; input 9
    // is the lookup's constant table, [M, 256] or [1, 256] of the output's 8-bit type, which every requantized byte
    // goes through while it is in cache (an empty input 9: no table).  Inputs 10 and 11, when given, are the
    // constant scale (float32) and zero point of a DequantizeLinear of the output, also fused: the output is then
    // float32, (float(q) - zero_point) * scale, written NCHW or in the blocked layout the depthwise convolution that
    // usually reads it takes (quantize_static leaves those float).  One group only.
    IntegerConvKernel(const NodeInfo& info, bool quantized, bool fused = false)
        : op_(info.op_type()),
          quantized_(quantized),
          attrs_(WindowAttributes::parse(info)),
          group_(info.attr_int("group", 1)) {
        if (group_ < 1) throw KernelError(op_ + ": group must be positive, got " + std::to_string(group_));
        if (fused && quantized && info.has_input(9)) table_ = ByteTable::load(info, 9, op_);
        if (fused && quantized && info.has_input(10)) load_dequantization(info);
        if (fused && !quantized) load_float_epilogue(info);
        if (to_float_) pack_blocked_depthwise_filters(info);
        prepack_filters(info);
    }

    bool reads_blocked(size_t) const override { return false; }
    bool writes_blocked() const override { return blocked_capable_; }
    void set_layout(const std::vector<bool>&, bool blocked_output) override {
        y_blocked_ = blocked_capable_ && blocked_output;
    }

    void compute(KernelContext& ctx) const override {
        // A float32 x (ConvIntegerToFloat only) stands for the uint8 x DynamicQuantizeLinear makes of it with the
        // scale and zero point of inputs 4 and 2, which the kernel makes itself (or, depthwise, row by row).
        const Tensor& x_input = ctx.input(0);
        const bool float_x = x_input.type == TESS_ELEMENT_FLOAT32;
        if (float_x && (!to_float_ || !ctx.has_input(2) || ctx.input(2).type != TESS_ELEMENT_UINT8))
            throw KernelError(op_ + ": a float32 x needs the uint8 zero point it is quantized with (input 2)");
        Tensor quantized_x{TESS_ELEMENT_UINT8, x_input.shape, nullptr, nullptr};
        const Run run = prepare(ctx, 0, float_x ? &quantized_x : nullptr);
        if (to_float_) {
            // scale = a_scale * b_scale in float, as the chain's Mul of the two computes it.
            const Tensor& a_scale = ctx.input(4);
            const Tensor& b_scale = ctx.input(5);
            for (const Tensor* t : {&a_scale, &b_scale}) {
                if (t->type != TESS_ELEMENT_FLOAT32 || t->size() != 1)
                    throw KernelError(op_ + ": a_scale and b_scale must be float32 scalars");
            }
            if (!channel_scale_.empty() && static_cast<int64_t>(channel_scale_.size()) != run.M)
                throw KernelError(op_ + ": the channel scale and shift must have " + std::to_string(run.M) + " values");
            FloatOutput floats{epilogue_, nullptr};
            floats.epilogue.scale = a_scale.ptr<float>()[0] * b_scale.ptr<float>()[0];
            Tensor& Y = ctx.output(0, TESS_ELEMENT_FLOAT32, run.output_shape);
            floats.y = Y.ptr<float>();
            // Outputs 1-3, DynamicQuantizeLinear(Y) fused: the range is gathered as Y is written.
            const bool quantize_y = ctx.output_wanted(1) || ctx.output_wanted(2) || ctx.output_wanted(3);
            quant::FloatRange range;
            if (quantize_y) floats.epilogue.range = &range;
            if (Y.size() != 0) {
                const quant::DynamicQuantization x_quantization{a_scale.ptr<float>()[0],
                                                               static_cast<uint8_t>(run.x_zero)};
                if (!blocked_depthwise_.empty() && run.X->rank() == 4 && run.X->shape[1] == run.M &&
                    run.g.rank() == 2) {
                    if (float_x) {
                        blocked_depthwise_quantizing_to_float(ctx.pool(), run.g, blocked_depthwise_.data(), x_input,
                                                              x_quantization, floats.epilogue, floats.y);
                    } else {
                        blocked_depthwise_to_float(ctx.pool(), run.g, blocked_depthwise_.data(), *run.X, run.x_zero,
                                                   floats.epilogue, floats.y);
                    }
                } else {
                    if (float_x) {
                        quantized_x.data = thread_scratch_buffer<uint8_t, 44>(x_input.size());
                        quant::quantize_uint8(ctx.pool(), x_input, x_quantization, quantized_x);
                    }
                    convolve(ctx.pool(), run.g, *run.X, run.x_zero, *run.W, run.w_zero, nullptr, nullptr, &floats);
                }
            }
            if (!quantize_y) return;
            // With a NaN the range DynamicQuantizeLinear finds depends on its own order of visiting Y: its own pass.
            const quant::DynamicQuantization q =
                range.unordered.load() ? quant::dynamic_range_uint8(ctx.pool(), Y)
                                       : quant::dynamic_quantization_of_range(range.low, range.high);
            if (ctx.output_wanted(1)) quant::quantize_uint8(ctx.pool(), Y, q, ctx.output(1, TESS_ELEMENT_UINT8, Y.shape));
            if (ctx.output_wanted(2)) ctx.output(2, TESS_ELEMENT_FLOAT32, {}).ptr<float>()[0] = q.scale;
            if (ctx.output_wanted(3)) ctx.output(3, TESS_ELEMENT_UINT8, {}).ptr<uint8_t>()[0] = q.zero_point;
            return;
        }
        if (!quantized_) {
            Tensor& Y = ctx.output(0, TESS_ELEMENT_INT32, run.output_shape);
            convolve(ctx.pool(), run.g, *run.X, run.x_zero, *run.W, run.w_zero, Y.ptr<int32_t>(), nullptr);
            return;
        }
        const int32_t y_type = dequantize_ ? TESS_ELEMENT_FLOAT32 : table_.empty() ? run.out.type : table_.type;
        Tensor& Y = ctx.output(0, y_type, run.output_shape);
        if (y_blocked_ && (run.output_shape.size() != 4 || run.M % kChannelBlock != 0))
            throw KernelError(op_ + ": a blocked output " + shape_string(run.output_shape) + " must be [N, 16k, H, W]");
        const Requantization requantization = run.requantization(*this, Y.data);
        convolve(ctx.pool(), run.g, *run.X, run.x_zero, *run.W, run.w_zero, nullptr, &requantization);
    }

    // As a producer a depthwise convolution takes over (BlockedRowSource): a pointwise QLinearConvToFloat whose
    // blocked output that convolution alone reads.
    std::optional<WindowGeometry> row_source_geometry() const override {
        if (!dequantize_ || !y_blocked_ || !declared_ || !declared_->is_pointwise() || declared_->rank() != 2 ||
            packed_filters_.size() != 1)
            return std::nullopt;
        return declared_;
    }
    int64_t row_source_filters() const override { return filters_view_.rank() > 0 ? filters_view_.shape[0] : 0; }
    std::unique_ptr<BlockedRowMaker> row_maker(const KernelContext& ctx, size_t first_input) const override {
        return std::make_unique<RowMaker>(*this, prepare(ctx, first_input), ctx.pool());
    }

private:
    WindowGeometry geometry(const Tensor& X, const Tensor& W) const {
        if (X.rank() < 3) throw KernelError(op_ + ": x " + shape_string(X.shape) + " must be [N, C, D1, ...]");
        if (W.rank() != X.rank()) {
            throw KernelError(op_ + ": w " + shape_string(W.shape) + " must have the rank of x " +
                              shape_string(X.shape));
        }
        if (X.shape[1] != W.shape[1] * group_ || W.shape[0] % group_ != 0) {
            throw KernelError(op_ + ": x " + shape_string(X.shape) + " and w " + shape_string(W.shape) +
                              " do not match group " + std::to_string(group_));
        }
        const Shape kernel(W.shape.begin() + 2, W.shape.end());
        if (!attrs_.kernel_shape.empty() && attrs_.kernel_shape != kernel) {
            throw KernelError(op_ + ": kernel_shape " + shape_string(attrs_.kernel_shape) + " does not match w " +
                              shape_string(W.shape));
        }
        return resolve_window(op_, attrs_, Shape(X.shape.begin() + 2, X.shape.end()), kernel);
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

    // How QLinearConv turns the sums into its output: y = requantize(sum + bias[m]) with multipliers[m].
    struct Requantization {
        const int32_t* bias;  // may be null
        const float* multipliers;
        OutputQuantization out;
        void* y;                // [N, M, positions] of out.type (or of the table's type, or float32)
        const uint8_t* tables;  // null, or the lookup tables: [M][256] (per_channel) or [256]
        bool per_channel;
        const struct Dequantization* dequantize;  // null, or how the bytes become float32 outputs
        bool blocked;                             // a float32 y in the blocked layout

        // The table of output channel m (null without tables).
        const uint8_t* table(int64_t m) const { return tables ? tables + (per_channel ? m * 256 : 0) : nullptr; }
        // Maps n requantized bytes of channel m at y through its table, in place.
        void look_up(int64_t m, void* bytes, int64_t n) const {
            if (tables) lookup_bytes(table(m), static_cast<uint8_t*>(bytes), static_cast<uint8_t*>(bytes), n);
        }
    };

    // Requantizes the sums of one image's group of filters into Y as int8_gemm hands them over (filter m of the
    // group is Y's row `first_row + m`; the group's biases and multipliers start at its first filter).
    template <typename Out> class RequantizingSink final : public Int8GemmSink {
    public:
        RequantizingSink(const Requantization& r, int64_t first_filter, int64_t first_row, int64_t positions)
            : r_(r), first_filter_(first_filter), first_row_(first_row), positions_(positions) {}
        void write(int64_t m0, int64_t rows, int64_t n0, int64_t columns, const int32_t* sums,
                   int64_t ld) const override {
            const int64_t filter = first_filter_ + m0;
            const int32_t* bias = r_.bias ? r_.bias + filter : nullptr;
            if (r_.dequantize == nullptr) {
                Out* y = static_cast<Out*>(r_.y) + (first_row_ + m0) * positions_ + n0;
                requantize_rows(sums, ld, rows, columns, bias, r_.multipliers + filter, r_.out, y, positions_,
                                r_.table(filter), r_.per_channel);
                return;
            }
            // The bytes in this thread's staging rows first, then dequantized from there into Y.
            uint8_t* bytes = thread_scratch_buffer<uint8_t, 26>(rows * columns);
            requantize_rows(sums, ld, rows, columns, bias, r_.multipliers + filter, r_.out,
                            reinterpret_cast<Out*>(bytes), columns, r_.table(filter), r_.per_channel);
            const Dequantization& dq = *r_.dequantize;
            if (dq.signed_bytes) dequantize(reinterpret_cast<const int8_t*>(bytes), m0, rows, n0, columns);
            else dequantize(bytes, m0, rows, n0, columns);
        }

    private:
        template <typename Q> void dequantize(const Q* staging, int64_t m0, int64_t rows, int64_t n0,
                                              int64_t columns) const {
            const Dequantization& dq = *r_.dequantize;
            float* y = static_cast<float*>(r_.y);
            const int64_t row = first_row_ + m0;
            if (r_.blocked) {  // whole blocks of 16 channels (int8_gemm_streaming's whole_rows)
                for (int64_t b = 0; b < rows; b += kChannelBlock) {
                    dequantize_to_blocked(staging + b * columns, columns, columns, dq.scale, dq.zero,
                                          y + ((row + b) / kChannelBlock * positions_ + n0) * kChannelBlock);
                }
                return;
            }
            for (int64_t r = 0; r < rows; ++r) {
                dequantize_row(staging + r * columns, columns, dq, y + (row + r) * positions_ + n0);
            }
        }

        const Requantization& r_;
        int64_t first_filter_, first_row_;
        int64_t positions_;
    };

    // One run's operands and parameters, checked (inputs from `first` on: 0 for the kernel's own step, elsewhere
    // when a depthwise convolution took it over).
    struct Run {
        const Tensor* X;
        const Tensor* W;
        WindowGeometry g;
        int64_t M;
        Shape output_shape;
        int32_t x_zero;
        std::vector<int32_t> w_zero;  // per filter
        // QLinearConv only:
        OutputQuantization out;
        const int32_t* bias = nullptr;
        std::vector<float> multipliers;

        Requantization requantization(const IntegerConvKernel& k, void* y) const {
            return Requantization{bias, multipliers.data(), out, y, k.table_.empty() ? nullptr : k.table_.data(),
                                  k.table_.rows != 1, k.dequantize_ ? &*k.dequantize_ : nullptr, k.y_blocked_};
        }
    };

    // x: the tensor standing for input 0 (a float32 one's quantization), or null for input 0 itself.
    Run prepare(const KernelContext& ctx, size_t first, const Tensor* x = nullptr) const {
        const size_t w_input = quantized_ ? 3 : 1, x_zero_input = 2, w_zero_input = quantized_ ? 5 : 3;
        auto has = [&](size_t i) { return ctx.has_input(first + i); };
        auto input = [&](size_t i) -> const Tensor& { return ctx.input(first + i); };
        Run run;
        run.X = x != nullptr ? x : &input(0);
        run.W = packed_filters_.empty() ? &input(w_input) : &filters_view_;
        const Tensor& X = *run.X;
        const Tensor& W = *run.W;
        check_8bit(op_, "x", X);
        check_8bit(op_, "w", W);
        run.g = geometry(X, W);
        const int64_t M = run.M = W.shape[0];
        run.output_shape = Shape{X.shape[0], M};
        run.output_shape.insert(run.output_shape.end(), run.g.output.begin(), run.g.output.end());

        const Tensor* x_zero_point = has(x_zero_input) ? &input(x_zero_input) : nullptr;
        if (x_zero_point && x_zero_point->size() != 1) {
            throw KernelError(op_ + ": x_zero_point must be a scalar, got " + shape_string(x_zero_point->shape));
        }
        run.x_zero = ZeroPoints::load(op_, x_zero_point, X).values[0];
        ZeroPoints w_zero = ZeroPoints::load(op_, has(w_zero_input) ? &input(w_zero_input) : nullptr, W);
        if (has(w_zero_input)) w_zero.index = per_channel_index(input(w_zero_input), M, "w_zero_point");
        run.w_zero = w_zero.rows(0, M);
        if (!quantized_) return run;

        const Tensor& x_scale = input(1);
        const Tensor& w_scale = input(4);
        const Tensor& y_scale = input(6);
        for (const Tensor* s : {&x_scale, &w_scale, &y_scale}) {
            if (s->type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op_ + " scale", s->type);
        }
        if (x_scale.size() != 1 || y_scale.size() != 1)
            throw KernelError(op_ + ": x_scale and y_scale must be scalars");
        const ParamIndex w_scale_index = per_channel_index(w_scale, M, "w_scale");
        OutputQuantization& out = run.out;
        out.type = has(7) ? input(7).type : X.type;
        if (out.type != TESS_ELEMENT_INT8 && out.type != TESS_ELEMENT_UINT8)
            throw_unsupported_type(op_ + " y", out.type);
        if (has(7)) {
            if (input(7).size() != 1) throw KernelError(op_ + ": y_zero_point must be a scalar");
            out.zero_point = load_all(input(7))[0];
        }
        out.range = *integer_range(out.type);
        if (has(8)) {
            const Tensor& B = input(8);
            if (B.type != TESS_ELEMENT_INT32) throw_unsupported_type(op_ + " B", B.type);
            if (B.shape != Shape{M}) {
                throw KernelError(op_ + ": B " + shape_string(B.shape) + " must be [" + std::to_string(M) + "]");
            }
            run.bias = B.ptr<int32_t>();
        }
        // multiplier[m] = x_scale * w_scale[m] / y_scale in float, as the reference computes it.
        const float xs = x_scale.ptr<float>()[0], ys = y_scale.ptr<float>()[0];
        run.multipliers.resize(static_cast<size_t>(M));
        for (int64_t m = 0; m < M; ++m) run.multipliers[m] = (xs * w_scale.ptr<float>()[w_scale_index(m, 0)]) / ys;
        if (!table_.empty() && table_.rows != 1 && table_.rows != M) {
            throw KernelError(op_ + ": the lookup table has " + std::to_string(table_.rows) + " rows for " +
                              std::to_string(M) + " output channels");
        }
        return run;
    }

    // A run's rows for the depthwise convolution that took this one over: the int8 product of the rows' positions
    // (int8_gemm_streaming, inline on the calling worker), requantized, looked up and dequantized into the ring.
    class RowMaker final : public BlockedRowMaker {
    public:
        RowMaker(const IntegerConvKernel& k, Run run, ThreadPool& pool)
            : kernel_(k), run_(std::move(run)), requantization_(run_.requantization(k, nullptr)), pool_(pool) {
            const Tensor& X = *run_.X;
            if (X.rank() != 4 || run_.g.rank() != 2 || !run_.g.is_pointwise() || run_.M % kChannelBlock != 0)
                throw KernelError(kernel_.op_ + ": x " + shape_string(X.shape) + " of the convolution taken over must "
                                                "be [N, C, H, W] for a pointwise one with whole blocks of filters");
        }

        void make_rows(int64_t n, int64_t row_begin, int64_t row_end, const BlockedRing& ring) const override {
            const Tensor& X = *run_.X;
            const int64_t C = X.shape[1], W = X.shape[3], P = X.shape[2] * W;
            const int64_t j0 = row_begin * W, count = (row_end - row_begin) * W;
            const auto* image = static_cast<const uint8_t*>(X.data) + n * C * P + j0;
            dispatch_8bit(run_.out.type, [&]<typename Out>() {
                const RingSink<Out> sink(requantization_, ring, j0, W);
                int8_gemm_streaming(pool_, kernel_.packed_filters_[0], image, X.type == TESS_ELEMENT_INT8, P, count,
                                    run_.w_zero.data(), run_.x_zero, sink, kChannelBlock);
            });
        }

    private:
        const IntegerConvKernel& kernel_;
        Run run_;
        Requantization requantization_;
        ThreadPool& pool_;
    };

    // The sums of positions [j0, j0 + columns) requantized, looked up and dequantized into a ring of image rows.
    template <typename Out> class RingSink final : public Int8GemmSink {
    public:
        RingSink(const Requantization& r, const BlockedRing& ring, int64_t j0, int64_t W)
            : r_(r), ring_(ring), j0_(j0), W_(W) {}
        void write(int64_t m0, int64_t rows, int64_t n0, int64_t columns, const int32_t* sums,
                   int64_t ld) const override {
            uint8_t* bytes = thread_scratch_buffer<uint8_t, 26>(rows * columns);
            requantize_rows(sums, ld, rows, columns, r_.bias ? r_.bias + m0 : nullptr, r_.multipliers + m0, r_.out,
                            reinterpret_cast<Out*>(bytes), columns, r_.table(m0), r_.per_channel);
            if (r_.dequantize->signed_bytes) store(reinterpret_cast<const int8_t*>(bytes), m0, rows, n0, columns);
            else store(bytes, m0, rows, n0, columns);
        }

    private:
        // Blocks of 16 channels (whole: int8_gemm_streaming's whole_rows), one image row's run of positions at a
        // time.
        template <typename Q> void store(const Q* staging, int64_t m0, int64_t rows, int64_t n0,
                                         int64_t columns) const {
            const Dequantization& dq = *r_.dequantize;
            for (int64_t b = 0; b < rows; b += kChannelBlock) {
                for (int64_t c = 0; c < columns;) {
                    const int64_t p = j0_ + n0 + c, row = p / W_, column = p % W_;
                    const int64_t run = std::min(columns - c, W_ - column);
                    dequantize_to_blocked(staging + b * columns + c, columns, run, dq.scale, dq.zero,
                                          ring_.at((m0 + b) / kChannelBlock, row, column));
                    c += run;
                }
            }
        }

        const Requantization& r_;
        BlockedRing ring_;
        int64_t j0_, W_;
    };

    // Where ConvIntegerToFloat's floats go: Y [N, M, positions].
    struct FloatOutput {
        FloatEpilogue epilogue;
        float* y;
    };

    // The sums of one image's group of filters (filter m of the group is channel first_filter + m) as floats.
    class FloatSink final : public Int8GemmSink {
    public:
        FloatSink(const FloatEpilogue& e, int64_t first_filter, float* y, int64_t positions)
            : e_(e), first_filter_(first_filter), y_(y), positions_(positions) {}
        void write(int64_t m0, int64_t rows, int64_t n0, int64_t columns, const int32_t* sums,
                   int64_t ld) const override {
            float_rows(sums, ld, rows, columns, first_filter_ + m0, e_, y_ + m0 * positions_ + n0, positions_);
        }

    private:
        const FloatEpilogue& e_;
        int64_t first_filter_;
        float* y_;
        int64_t positions_;
    };

    // y[j] = (float(q[j]) - zero) * scale for j < n: DequantizeLinear's arithmetic (the difference is exact).
    template <typename Q> static void dequantize_row(const Q* q, int64_t n, const Dequantization& dq, float* y) {
        const float scale = dq.scale, zero = dq.zero;
        vec::run_best_isa([=] {
            for (int64_t j = 0; j < n; ++j) y[j] = (static_cast<float>(q[j]) - zero) * scale;
        });
    }

    // ConvIntegerToFloat: inputs 4 and 5 the scales (read each run), 6 and 7 the constant per-channel scale and
    // shift of a BatchNormalization after the chain (or none), the activation attributes a Clip or Relu after it.
    void load_float_epilogue(const NodeInfo& info) {
        to_float_ = true;
        if (info.has_input(6) != info.has_input(7))
            throw KernelError(op_ + ": the channel scale and shift (inputs 6 and 7) come together");
        if (info.has_input(6)) {
            for (size_t i : {size_t{6}, size_t{7}}) {
                const std::optional<Tensor> t = info.constant_tensor(i);
                if (!t || t->type != TESS_ELEMENT_FLOAT32 || t->rank() != 1)
                    throw KernelError(op_ + ": the channel scale and shift must be constant float32 vectors");
                const auto* values = static_cast<const float*>(t->data);
                (i == 6 ? channel_scale_ : channel_shift_).assign(values, values + t->size());
            }
            if (channel_scale_.size() != channel_shift_.size())
                throw KernelError(op_ + ": the channel scale and shift differ in length");
            epilogue_.channel_scale = channel_scale_.data();
            epilogue_.channel_shift = channel_shift_.data();
        }
        const std::string activation = info.attr_string("activation", "");
        const std::vector<float> params = info.attr_floats("activation_params", {});
        if (activation == "Relu") {
            epilogue_.clamp = true;
            epilogue_.low = 0.0f;
            epilogue_.high = std::numeric_limits<float>::infinity();
        } else if (activation == "Clip") {
            if (params.size() != 2) throw KernelError(op_ + ": Clip takes activation_params [min, max]");
            epilogue_.clamp = true;
            epilogue_.low = params[0];
            epilogue_.high = params[1];
        } else if (!activation.empty()) {
            throw KernelError(op_ + ": unsupported activation " + activation);
        }
    }

    // A depthwise ConvIntegerToFloat of constant filters and zero points over whole blocks of channels runs on the
    // blocked float kernels: the centered filters (w - w_zero, exact in float) packed for blocked_depthwise2d.
    void pack_blocked_depthwise_filters(const NodeInfo& info) {
        const std::optional<Tensor> W = info.constant_tensor(1);
        if (!W || W->rank() != 4 || W->shape[1] != 1 || W->shape[0] != group_ || group_ % kChannelBlock != 0 ||
            !blocked_layout_enabled())
            return;
        const int64_t C = W->shape[0], taps = W->shape[2] * W->shape[3];
        if (taps > kExactFloatTaps) return;
        std::vector<int32_t> zeros(static_cast<size_t>(C), 0);
        if (info.has_input(3)) {
            const std::optional<Tensor> Z = info.constant_tensor(3);
            if (!Z || !is_8bit(Z->type) || (Z->size() != 1 && Z->size() != C)) return;
            const std::vector<double> values = load_all(*Z);
            for (int64_t c = 0; c < C; ++c) zeros[c] = static_cast<int32_t>(values[Z->size() == 1 ? 0 : c]);
        }
        const std::vector<double> w = load_all(*W);
        std::vector<float> centered(static_cast<size_t>(C * taps));
        for (int64_t c = 0; c < C; ++c)
            for (int64_t t = 0; t < taps; ++t)
                centered[c * taps + t] = static_cast<float>(static_cast<int32_t>(w[c * taps + t]) - zeros[c]);
        blocked_depthwise_ = pack_blocked_depthwise(centered.data(), C, taps);
    }

    void load_dequantization(const NodeInfo& info) {
        const std::optional<Tensor> scale = info.constant_tensor(10);
        const std::optional<Tensor> zero = info.has_input(11) ? info.constant_tensor(11) : std::nullopt;
        if (!scale || scale->type != TESS_ELEMENT_FLOAT32 || scale->size() != 1 ||
            (info.has_input(11) && (!zero || !is_8bit(zero->type) || zero->size() != 1)))
            throw KernelError(op_ + ": the fused dequantization (inputs 10, 11) must be a constant float32 scale and "
                                    "8-bit zero point, one each");
        if (group_ != 1) throw KernelError(op_ + ": a fused dequantization takes one group");
        // The bytes dequantized are the table's when there is one, else the requantized output's (y_zero_point).
        const int32_t bytes_type = !table_.empty() ? table_.type : info.has_input(7) ? info.input_type(7) : info.input_type(0);
        if (zero && zero->type != bytes_type)
            throw KernelError(op_ + ": the fused dequantization's zero point is not of the requantized bytes' type");
        dequantize_ = Dequantization{static_cast<const float*>(scale->data)[0],
                                     zero ? static_cast<float>(load_all(*zero)[0]) : 0.0f,
                                     bytes_type == TESS_ELEMENT_INT8};
        // Blocked output: a declared [N, C, H, W] input, constant filters whose count is whole blocks, and the
        // AMX or VNNI products (whose row blocks can be whole blocks of 16 channels: int8_gemm_streaming).
        const std::optional<Tensor> W = info.constant_tensor(quantized_ ? 3 : 1);
        const std::optional<Shape> x_shape = info.input_shape(0);
        blocked_capable_ = int8_gemm_uses_vnni() && blocked_layout_enabled() && x_shape && x_shape->size() == 4 &&
                           W && W->rank() == 4 && W->size() > 0 && W->shape[0] % kChannelBlock == 0;
        if (blocked_capable_ && std::all_of(x_shape->begin(), x_shape->end(), [](int64_t d) { return d > 0; })) {
            declared_ = resolve_window(op_, attrs_, Shape(x_shape->begin() + 2, x_shape->end()),
                                       Shape(W->shape.begin() + 2, W->shape.end()));
        }
    }

    // Constant filters are packed for int8_gemm once, group by group, and the model's copy released; 2-D depthwise
    // filters (one channel per group), which the depthwise kernels read as they are, stay.
    void prepack_filters(const NodeInfo& info) {
        const size_t w_input = quantized_ ? 3 : 1;
        const std::optional<Tensor> W = info.constant_tensor(w_input);
        if (!W || (W->type != TESS_ELEMENT_INT8 && W->type != TESS_ELEMENT_UINT8) || W->rank() < 3) return;
        const int64_t M = W->shape[0], channels_per_group = W->shape[1];
        if (M % group_ != 0 || (channels_per_group == 1 && M == group_ && W->rank() == 4)) return;
        const int64_t filters_per_group = M / group_, depth = M ? W->size() / M : 0;
        const auto* w = static_cast<const uint8_t*>(W->data);
        for (int64_t grp = 0; grp < group_; ++grp) {
            packed_filters_.emplace_back(w + grp * filters_per_group * depth, W->type == TESS_ELEMENT_INT8,
                                         filters_per_group, depth, depth);
        }
        filters_view_ = Tensor{W->type, W->shape, nullptr, nullptr};
        info.release_constant(w_input);
    }

    // The convolution's sums, written laid out as Y [N, M, positions] into `sums`, or requantized into Y.
    // With `floats`, the sums end as floats instead (ConvIntegerToFloat): sums and requantization are null.
    void convolve(ThreadPool& pool, const WindowGeometry& g, const Tensor& X, int32_t x_zero, const Tensor& W,
                  const std::vector<int32_t>& w_zero, int32_t* sums, const Requantization* requantization,
                  const FloatOutput* floats = nullptr) const {
        const int64_t batch = X.shape[0], channels = X.shape[1], M = W.shape[0];
        const int64_t channels_per_group = channels / group_, filters_per_group = M / group_;
        const int64_t depth = channels_per_group * g.kernel_size(), positions = g.output_size();
        if (batch * M * positions == 0) return;
        // (A dequantized output, QLinearConvToFloat, is made by the product's sinks only: one group, even of one
        // channel and one filter.)
        const bool per_channel_window = channels_per_group == 1 && filters_per_group == 1 && g.rank() == 2 &&
                                        !(requantization != nullptr && requantization->dequantize != nullptr);
        if (per_channel_window && g.kernel_size() <= kExactFloatTaps) {
            dispatch_8bit(X.type, [&]<typename TX>() {
                dispatch_8bit(W.type, [&]<typename TW>() {
                    if (floats != nullptr) {
                        depthwise_float<TX, TW, float>(pool, g, X.ptr<TX>(), batch, channels, x_zero, W.ptr<TW>(),
                                                       w_zero, nullptr, floats->y, &floats->epilogue);
                        return;
                    }
                    if (requantization == nullptr) {
                        depthwise_float<TX, TW, int32_t>(pool, g, X.ptr<TX>(), batch, channels, x_zero, W.ptr<TW>(),
                                                         w_zero, nullptr, sums);
                        return;
                    }
                    dispatch_8bit(requantization->out.type, [&]<typename Out>() {
                        depthwise_float<TX, TW, Out>(pool, g, X.ptr<TX>(), batch, channels, x_zero, W.ptr<TW>(),
                                                     w_zero, requantization, static_cast<Out*>(requantization->y));
                    });
                });
            });
            return;
        }
        if (per_channel_window) {
            // The int32 sums in this thread's scratch, kept for the next run (no allocation, no zeroing).
            if (requantization || floats) sums = thread_scratch_buffer<int32_t, 15>(batch * M * positions);
            dispatch_8bit(X.type, [&]<typename TX>() {
                dispatch_8bit(W.type, [&]<typename TW>() {
                    depthwise<TX, TW>(pool, g, X.ptr<TX>(), batch, channels, x_zero, W.ptr<TW>(), w_zero, sums);
                });
            });
            if (requantization) requantize_planes(pool, *requantization, sums, batch * M, M, positions);
            if (floats) {
                pool.parallel_for(batch * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, positions)),
                                  [&](int64_t first, int64_t last) {
                                      for (int64_t row = first; row < last; ++row)
                                          float_rows(sums + row * positions, positions, 1, positions, row % M,
                                                     floats->epilogue, floats->y + row * positions, positions);
                                  });
            }
            return;
        }
        const bool pointwise = g.is_pointwise();
        uint8_t* columns = pointwise ? nullptr : thread_scratch_buffer<uint8_t, 16>(depth * positions);
        const auto* x = static_cast<const uint8_t*>(X.data);
        const bool x_signed = X.type == TESS_ELEMENT_INT8;
        for (int64_t n = 0; n < batch; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                const uint8_t* image = x + (n * channels + grp * channels_per_group) * g.input_size();
                if (!pointwise) {
                    im2col_bytes(pool, g, image, channels_per_group, static_cast<uint8_t>(x_zero), columns);
                }
                const uint8_t* operand = pointwise ? image : columns;  // [depth, positions]
                std::optional<Int8PackedA> packed_here;
                if (packed_filters_.empty()) {
                    packed_here.emplace(static_cast<const uint8_t*>(W.data) + grp * filters_per_group * depth,
                                        W.type == TESS_ELEMENT_INT8, filters_per_group, depth, depth, &pool);
                }
                const Int8PackedA& filters = packed_filters_.empty() ? *packed_here : packed_filters_[grp];
                const int32_t* filter_zeros = w_zero.data() + grp * filters_per_group;
                const int64_t first_row = n * M + grp * filters_per_group;
                if (floats != nullptr) {
                    const FloatSink sink(floats->epilogue, grp * filters_per_group, floats->y + first_row * positions,
                                         positions);
                    int8_gemm_streaming(pool, filters, operand, x_signed, positions, positions, filter_zeros, x_zero,
                                        sink);
                    continue;
                }
                if (requantization == nullptr) {
                    const Int8PackedB packed(operand, x_signed, depth, positions, positions, 1, &pool);
                    const std::vector<int32_t> x_zero_columns(static_cast<size_t>(positions), x_zero);
                    int8_gemm(pool, filters, packed, filter_zeros, x_zero_columns.data(), sums + first_row * positions,
                              positions);
                    continue;
                }
                // Requantized: the image's panels are packed by the tasks that multiply them.
                dispatch_8bit(requantization->out.type, [&]<typename Out>() {
                    const RequantizingSink<Out> sink(*requantization, grp * filters_per_group, first_row, positions);
                    int8_gemm_streaming(pool, filters, operand, x_signed, positions, positions, filter_zeros, x_zero,
                                        sink, requantization->blocked ? kChannelBlock : 1);
                });
            }
        }
    }

    // Requantizes rows [N * M, positions] of sums into Y.
    static void requantize_planes(ThreadPool& pool, const Requantization& r, const int32_t* sums, int64_t rows,
                                int64_t M, int64_t positions) {
        dispatch_8bit(r.out.type, [&]<typename Out>() {
            Out* y = static_cast<Out*>(r.y);
            const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, positions));
            pool.parallel_for(rows, grain, [&](int64_t first, int64_t last) {
                for (int64_t row = first; row < last; ++row) {
                    const int64_t m = row % M;
                    requantize_run(sums + row * positions, r.bias ? r.bias[m] : 0, r.multipliers + m, true,
                                   positions, r.out, y + row * positions);
                    r.look_up(m, y + row * positions, positions);
                }
            });
        });
    }

    // Windows of at most this many taps sum exactly in float: each (x - x_zero) * (w - w_zero) is an integer of
    // magnitude below 2^16, and 256 of them stay below 2^24.
    static constexpr int64_t kExactFloatTaps = 256;

    // Depthwise 2-D (one channel per group) of at most kExactFloatTaps taps, in float, where every partial sum is
    // the exact integer.  Per channel the plane is centered (x - x_zero) and zero-padded once, in rows of WS floats
    // (a multiple of the column stride SW) stored as SW phase planes (phase q holds the padded plane's flat elements
    // SW * j + q at j).  The outputs accumulate in a flat buffer of AS = WS * SH / SW floats per output row: output i
    // reads flat element SW * i + (tap offset), which is element i + offset / SW of phase offset % SW, so each tap is
    // one contiguous loop over the whole plane (vectorized for the best ISA; the columns past OW are computed and
    // dropped).  The sums go on at once per plane: requantized into Y (Out 8-bit, `r` given) or stored as int32
    // (Out int32_t).
    template <typename TX, typename TW, typename Out>
    static void depthwise_float(ThreadPool& pool, const WindowGeometry& g, const TX* x, int64_t batch,
                                int64_t channels, int32_t x_zero, const TW* w, const std::vector<int32_t>& w_zero,
                                const Requantization* r, Out* y, const FloatEpilogue* e = nullptr) {
        const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
        const int64_t KH = g.kernel[0], KW = g.kernel[1], SH = g.strides[0], SW = g.strides[1];
        const int64_t DH = g.dilations[0], DW = g.dilations[1], PH = g.pads_begin[0], PW = g.pads_begin[1];
        const int64_t WS = ((OW - 1) * SW + (KW - 1) * DW + SW) / SW * SW;  // covers every column a window reads
        const int64_t AS = WS * SH / SW, span = OH * AS;
        // Rows: every row a window reads, and enough more that the flat loops' last reads stay inside.
        const int64_t HP = (SW * (span - 1) + (KH - 1) * DH * WS + (KW - 1) * DW) / WS + 1;
        const int64_t phase_size = HP * WS / SW;
        const int64_t chunks = (span + kDepthwiseChunk - 1) / kDepthwiseChunk * kDepthwiseChunk;
        const int64_t taps_count = KH * KW;
        const float x_zero_value = static_cast<float>(x_zero);
        pool.parallel_for(batch * channels, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, OH * OW * KH * KW)),
                          [&](int64_t first, int64_t last) {
            // The plane with a chunk of slack: the last chunk's reads past the span (dropped outputs) stay inside.
            float* plane = thread_scratch_buffer<float, 14>(HP * WS + kDepthwiseChunk + WS + chunks + taps_count);
            float* line_buffer = plane + HP * WS + kDepthwiseChunk;
            float* sum = line_buffer + WS;
            float* taps = sum + chunks;
            int32_t* sums = std::is_same_v<Out, int32_t> ? nullptr : thread_scratch_buffer<int32_t, 14>(OH * OW);
            const float** tap_inputs = thread_scratch_buffer<const float*, 14>(taps_count);
            for (int64_t nc = first; nc < last; ++nc) {
                const int64_t c = nc % channels;
                const TX* src = x + nc * H * W;
                for (int64_t i = 0; i < HP; ++i) {
                    // The padded row: columns [PW, PW + W) hold the image's row, the others zeros.
                    float* __restrict row = SW == 1 ? plane + i * WS : line_buffer;
                    const int64_t ih = i - PH;
                    const bool inside = ih >= 0 && ih < H;
                    const int64_t begin = inside ? std::clamp<int64_t>(PW, 0, WS) : WS;
                    const int64_t end = inside ? std::clamp<int64_t>(PW + W, begin, WS) : WS;
                    std::fill(row, row + begin, 0.0f);
                    if (end > begin)
                        centered_floats(src + ih * W - PW + begin, row + begin, end - begin, x_zero_value);
                    std::fill(row + end, row + WS, 0.0f);
                    if (SW == 1) continue;
                    if (SW == 2) {
                        deinterleave_pairs(row, plane + i * (WS / 2), plane + phase_size + i * (WS / 2), WS / 2);
                        continue;
                    }
                    for (int64_t q = 0; q < SW; ++q) {
                        float* __restrict phase = plane + q * phase_size + i * (WS / SW);
                        for (int64_t j = 0; j < WS / SW; ++j) phase[j] = row[j * SW + q];
                    }
                }
                for (int64_t t = 0; t < taps_count; ++t)
                    taps[t] = static_cast<float>(static_cast<int32_t>(w[c * taps_count + t]) - w_zero[c]);
                for (int64_t kh = 0; kh < KH; ++kh) {
                    for (int64_t kw = 0; kw < KW; ++kw) {
                        const int64_t offset = kh * DH * WS + kw * DW;
                        tap_inputs[kh * KW + kw] = plane + (offset % SW) * phase_size + offset / SW;
                    }
                }
                weighted_sums(tap_inputs, taps, taps_count, chunks, sum);
                Out* out = y + nc * OH * OW;
                int32_t* exact = std::is_same_v<Out, int32_t> ? reinterpret_cast<int32_t*>(out) : sums;
                for (int64_t oh = 0; oh < OH; ++oh)
                    for (int64_t ow = 0; ow < OW; ++ow) exact[oh * OW + ow] = static_cast<int32_t>(sum[oh * AS + ow]);
                if constexpr (std::is_same_v<Out, float>) {
                    float_rows(sums, OH * OW, 1, OH * OW, c, *e, out, OH * OW);
                } else if constexpr (!std::is_same_v<Out, int32_t>) {
                    requantize_run(sums, r->bias ? r->bias[c] : 0, r->multipliers + c, true, OH * OW, r->out, out);
                    r->look_up(c, out, OH * OW);
                }
            }
        });
    }

    // Depthwise 2-D (one channel per group) of any window: per channel and output row, each tap adds (x - x_zero) *
    // (w - w_zero) over the row's positions whose input lies inside the image; taps on the padding add nothing
    // (padding holds the zero point).  A direct loop: a GEMM per channel would have one row and kernel-size depth.
    template <typename TX, typename TW>
    static void depthwise(ThreadPool& pool, const WindowGeometry& g, const TX* x, int64_t batch, int64_t channels,
                          int32_t x_zero, const TW* w, const std::vector<int32_t>& w_zero, int32_t* sums) {
        const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
        const int64_t KH = g.kernel[0], KW = g.kernel[1], SH = g.strides[0], SW = g.strides[1];
        const int64_t DH = g.dilations[0], DW = g.dilations[1], PH = g.pads_begin[0], PW = g.pads_begin[1];
        pool.parallel_for(batch * channels, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, OH * OW * KH * KW)),
                          [&](int64_t first, int64_t last) {
            // The plane's rows widened to int32 and shifted by the zero point, so that the inner loops are plain
            // int32 multiply-adds the compiler vectorizes (8-bit pointers may alias anything).
            int32_t* shifted = thread_scratch_buffer<int32_t, 14>(H * W);
            vec::run_best_isa([&] {
                for (int64_t nc = first; nc < last; ++nc) {
                    const int64_t c = nc % channels;
                    const TX* plane = x + nc * H * W;
                    for (int64_t i = 0; i < H * W; ++i) shifted[i] = static_cast<int32_t>(plane[i]) - x_zero;
                    int32_t* __restrict out = sums + nc * OH * OW;
                    std::fill(out, out + OH * OW, 0);
                    for (int64_t kh = 0; kh < KH; ++kh) {
                        for (int64_t kw = 0; kw < KW; ++kw) {
                            const int32_t wv = static_cast<int32_t>(w[(c * KH + kh) * KW + kw]) - w_zero[c];
                            // Output columns whose input column ow * SW + offset lies in [0, W).
                            const int64_t offset = kw * DW - PW;
                            const int64_t ow_first = offset >= 0 ? 0 : (-offset + SW - 1) / SW;
                            const int64_t ow_end = std::min(OW, W - offset <= 0 ? 0 : (W - offset + SW - 1) / SW);
                            for (int64_t oh = 0; oh < OH; ++oh) {
                                const int64_t ih = oh * SH - PH + kh * DH;
                                if (ih < 0 || ih >= H) continue;
                                const int32_t* __restrict in = shifted + ih * W + offset;
                                int32_t* __restrict row = out + oh * OW;
                                if (SW == 1) {
                                    for (int64_t ow = ow_first; ow < ow_end; ++ow) row[ow] += in[ow] * wv;
                                } else {
                                    for (int64_t ow = ow_first; ow < ow_end; ++ow) row[ow] += in[ow * SW] * wv;
                                }
                            }
                        }
                    }
                }
            });
        });
    }

    std::string op_;
    bool quantized_;
    WindowAttributes attrs_;
    int64_t group_;
    bool to_float_ = false;                     // ConvIntegerToFloat
    FloatEpilogue epilogue_;                    // its scale (set per run), channel affine and clamp
    std::vector<float> channel_scale_, channel_shift_;
    std::vector<float> blocked_depthwise_;      // centered depthwise filters for blocked_depthwise2d (or empty)
    std::optional<Dequantization> dequantize_;  // the fused DequantizeLinear of the output
    std::optional<WindowGeometry> declared_;   // the geometry the model declares, where a blocked output may be
    bool blocked_capable_ = false;             // may write a blocked y (writes_blocked)
    bool y_blocked_ = false;
    ByteTable table_;  // the fused lookup's (empty: none)
    std::vector<Int8PackedA> packed_filters_;  // per group, when the filters are constant (and not depthwise)
    Tensor filters_view_;                      // their type and shape (no data) once the model's copy is released
};

}  // namespace

void register_integer_conv_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};
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
    // QLinearConv -> QuantizedLookup, and QLinearConv [-> QuantizedLookup] -> DequantizeLinear, fused by the
    // optimizer (core/optimizer/fuse_quantized_lookup.cc).
    registry.add(KernelDef{.domain = TESS_FUSED_OPS_DOMAIN,
                           .op_type = "QLinearConv",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {3, k8bit}, {7, k8bit}, {9, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               if (info.input_count() > 10)
                                   throw KernelError("QLinearConv (fused): at most 10 inputs");
                               return std::make_unique<IntegerConvKernel>(info, true, true);
                           }});
    // ConvInteger -> Cast -> Mul(Mul(a_scale, b_scale)) [-> BatchNormalization] [-> Clip/Relu], fused by the
    // optimizer (core/optimizer/fuse_dynamic_quantization.cc): quantize_dynamic's convolutions.
    registry.add(KernelDef{.domain = TESS_FUSED_OPS_DOMAIN,
                           .op_type = "ConvIntegerToFloat",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, {TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8, TESS_ELEMENT_FLOAT32}},
                                           {1, k8bit}, {4, {TESS_ELEMENT_FLOAT32}}, {5, {TESS_ELEMENT_FLOAT32}}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               if (!info.has_input(4) || !info.has_input(5))
                                   throw KernelError("ConvIntegerToFloat: the scales (inputs 4 and 5) are required");
                               if (info.output_count() > 4)
                                   throw KernelError("ConvIntegerToFloat: at most 4 outputs (y and its "
                                                     "DynamicQuantizeLinear's three)");
                               return std::make_unique<IntegerConvKernel>(info, false, true);
                           }});
    registry.add(KernelDef{.domain = TESS_FUSED_OPS_DOMAIN,
                           .op_type = "QLinearConvToFloat",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {3, k8bit}, {7, k8bit}, {9, k8bit},
                                           {10, {TESS_ELEMENT_FLOAT32}}, {11, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               if (!info.has_input(10))
                                   throw KernelError("QLinearConvToFloat: the scale (input 10) is required");
                               return std::make_unique<IntegerConvKernel>(info, true, true);
                           }});
}

}  // namespace tessera::cpu
