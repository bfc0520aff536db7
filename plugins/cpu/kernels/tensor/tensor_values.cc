// CPU provider: tensor operators that read the values they move.  Cast and CastLike convert through
// util/element_convert.h; Trilu and OneHot move element bytes through util/data_movement.h; TopK, CumSum and NonZero
// dispatch on value types.

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/broadcast.h"
#include "util/cpu_isa.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/type_list.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {
namespace {

using movement::move_elements;
using movement::MoveBuffers;
using movement::product;
using movement::read_integers;
using movement::with_word;

// ---- Cast / CastLike ---------------------------------------------------------------------------------------------

int32_t type_from_name(std::string name) {
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    static const std::pair<const char*, int32_t> kNames[] = {
        {"FLOAT", TESS_ELEMENT_FLOAT32},   {"UINT8", TESS_ELEMENT_UINT8},    {"INT8", TESS_ELEMENT_INT8},
        {"UINT16", TESS_ELEMENT_UINT16},   {"INT16", TESS_ELEMENT_INT16},    {"INT32", TESS_ELEMENT_INT32},
        {"INT64", TESS_ELEMENT_INT64},     {"STRING", TESS_ELEMENT_STRING},  {"BOOL", TESS_ELEMENT_BOOL},
        {"FLOAT16", TESS_ELEMENT_FLOAT16}, {"DOUBLE", TESS_ELEMENT_FLOAT64}, {"UINT32", TESS_ELEMENT_UINT32},
        {"UINT64", TESS_ELEMENT_UINT64}};
    for (const auto& [text, type] : kNames)
        if (name == text) return type;
    throw KernelError("Cast: unknown type name '" + name + "'");
}

#if TESSERA_CPU_X86
__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* in, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) out[i] = fp::float_to_half(in[i]);
}

__attribute__((target("avx,f16c"))) void half_to_float_f16c(const uint16_t* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    for (; i < n; ++i) out[i] = fp::half_to_float(in[i]);
}
#else  // never called: has_f16c() is false
void float_to_half_f16c(const float*, uint16_t*, int64_t) { x86_kernel_unavailable(__func__); }
void half_to_float_f16c(const uint16_t*, float*, int64_t) { x86_kernel_unavailable(__func__); }
#endif

// F16C is part of the Avx2 level (util/cpu_isa.h).
bool has_f16c() { return cpu_allows(CpuIsa::Avx2); }

void cast_tensor(KernelContext& ctx, const Tensor& input, int32_t to, const convert::CastOptions& options) {
    if (input.type == to) {
        ctx.alias_output(0, 0, input.shape);
        return;
    }
    Tensor& output = ctx.output(0, to, input.shape);
    const int64_t n = input.size();
    const TessHostApi& h = ctx.host();
    if (input.type == TESS_ELEMENT_STRING) {
        for (int64_t i = 0; i < n; ++i) {
            const std::string_view text = values::get_string(h, input.value, size_t(i));
            if (!convert::parse_element(text, to, output.data, i, options))
                throw KernelError("Cast: '" + std::string(text) + "' is not a number");
        }
        return;
    }
    if (to == TESS_ELEMENT_STRING) {
        for (int64_t i = 0; i < n; ++i)
            values::set_string(h, output.value, size_t(i), convert::format_element(input.type, input.data, i));
        return;
    }
    if (fp::packed_bits(to)) std::memset(output.data, 0, output.byte_size());
    const bool f16c = has_f16c();
    // Blocks are multiples of 4 elements so that packed outputs never share a byte between tasks.
    constexpr int64_t kBlock = 4096;
    movement::parallel_range(ctx.pool(), (n + kBlock - 1) / kBlock, kBlock * 4, [&](int64_t first, int64_t last) {
        const int64_t begin = first * kBlock;
        const int64_t end = std::min(n, last * kBlock);
        if (f16c && input.type == TESS_ELEMENT_FLOAT32 && to == TESS_ELEMENT_FLOAT16)
            float_to_half_f16c(input.ptr<float>() + begin, output.ptr<uint16_t>() + begin, end - begin);
        else if (f16c && input.type == TESS_ELEMENT_FLOAT16 && to == TESS_ELEMENT_FLOAT32)
            half_to_float_f16c(input.ptr<uint16_t>() + begin, output.ptr<float>() + begin, end - begin);
        else
            convert::convert_block(input.type, input.data, to, output.data, begin, end, options);
    });
}

convert::CastOptions cast_options(const NodeInfo& info) {
    convert::CastOptions options;
    options.saturate = info.attr_int("saturate", 1) != 0;
    const std::string mode = info.attr_string("round_mode", "up");
    if (mode == "up")
        options.e8m0_rounding = fp::E8M0Rounding::Up;
    else if (mode == "down")
        options.e8m0_rounding = fp::E8M0Rounding::Down;
    else if (mode == "nearest")
        options.e8m0_rounding = fp::E8M0Rounding::Nearest;
    else
        throw KernelError("Cast: unknown round_mode '" + mode + "'");
    return options;
}

bool castable(int32_t type) {
    return type == TESS_ELEMENT_STRING || convert::is_value_type(type) || convert::is_special_format(type);
}

class CastKernel final : public Kernel {
public:
    explicit CastKernel(const NodeInfo& info) : options_(cast_options(info)) {
        const TessAttributeView* to = info.find("to");
        if (to == nullptr) throw KernelError("Cast: attribute 'to' is required");
        to_ = to->type == TESS_ATTR_STRING ? type_from_name(info.attr_string("to", "")) : int32_t(info.attr_int("to"));
        if (!castable(to_)) throw_unsupported_type("Cast", to_);
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        if (!castable(input.type)) throw_unsupported_type("Cast", input.type);
        cast_tensor(ctx, input, to_, options_);
    }

private:
    int32_t to_ = TESS_ELEMENT_UNDEFINED;
    convert::CastOptions options_;
};

class CastLikeKernel final : public Kernel {
public:
    explicit CastLikeKernel(const NodeInfo& info) : options_(cast_options(info)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const int32_t to = ctx.input(1).type;
        if (!castable(input.type)) throw_unsupported_type("CastLike", input.type);
        if (!castable(to)) throw_unsupported_type("CastLike", to);
        cast_tensor(ctx, input, to, options_);
    }

private:
    convert::CastOptions options_;
};

// ---- Trilu -------------------------------------------------------------------------------------------------------

class TriluKernel final : public Kernel {
public:
    explicit TriluKernel(const NodeInfo& info) : upper_(info.attr_int("upper", 1) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        if (input.rank() < 2) throw KernelError("Trilu: input must have rank >= 2");
        int64_t k = 0;
        if (ctx.has_input(1)) {
            const Tensor& k_tensor = ctx.input(1);
            if (k_tensor.size() != 1) throw KernelError("Trilu: k must be a scalar");
            k = read_integers(k_tensor, "Trilu k")[0];
        }
        Tensor& output = ctx.output(0, input.type, input.shape);
        if (output.size() == 0) return;
        const int64_t n = input.shape[input.rank() - 2];
        const int64_t m = input.shape.back();
        const int64_t rows = input.size() / m;
        move_elements(ctx.host(), input, output, [&](const MoveBuffers& b) {
            with_word(b.element_size, [&]<typename W>() {
                const W* in = reinterpret_cast<const W*>(b.inputs[0]);
                W* out = reinterpret_cast<W*>(b.outputs[0]);
                W zero;
                std::memcpy(&zero, b.fill, sizeof(W));
                movement::parallel_range(ctx.pool(), rows, m * int64_t(sizeof(W)), [&](int64_t begin, int64_t end) {
                    for (int64_t row = begin; row < end; ++row) {
                        const int64_t i = row % n;
                        // Upper keeps columns j >= i + k, lower keeps j <= i + k.
                        const int64_t split = std::clamp<int64_t>(upper_ ? i + k : i + k + 1, 0, m);
                        const W* src = in + row * m;
                        W* dst = out + row * m;
                        const int64_t keep_begin = upper_ ? split : 0, keep_end = upper_ ? m : split;
                        std::fill(dst, dst + keep_begin, zero);
                        std::copy(src + keep_begin, src + keep_end, dst + keep_begin);
                        std::fill(dst + keep_end, dst + m, zero);
                    }
                });
            });
        });
    }

private:
    bool upper_;
};

// ---- OneHot ------------------------------------------------------------------------------------------------------

class OneHotKernel final : public Kernel {
public:
    explicit OneHotKernel(const NodeInfo& info) : axis_(info.attr_int("axis", -1)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& indices = ctx.input(0);
        const Tensor& depth_tensor = ctx.input(1);
        const Tensor& values = ctx.input(2);
        if (depth_tensor.size() != 1) throw KernelError("OneHot: depth must be a scalar");
        if (values.size() != 2) throw KernelError("OneHot: values must hold [off_value, on_value]");
        double depth_value = 0;
        convert::load_doubles(depth_tensor.type, depth_tensor.data, 0, 1, &depth_value);
        const int64_t depth = int64_t(depth_value);
        if (depth < 1) throw KernelError("OneHot: depth must be positive");
        const size_t rank = indices.rank() + 1;
        const size_t axis = normalize_axis("OneHot", axis_, rank);
        Shape shape = indices.shape;
        shape.insert(shape.begin() + int64_t(axis), depth);
        Tensor& output = ctx.output(0, values.type, shape);
        if (output.size() == 0) return;
        // Indices of any numeric type; negative ones count from the end, out-of-range ones select nothing.
        std::vector<int64_t> hot(size_t(indices.size()));
        {
            std::vector<double> raw(hot.size());
            convert::load_doubles(indices.type, indices.data, 0, int64_t(raw.size()), raw.data());
            for (size_t i = 0; i < hot.size(); ++i) {
                int64_t index = int64_t(raw[i]);
                if (index < 0) index += depth;
                hot[i] = (index >= 0 && index < depth) ? index : -1;
            }
        }
        const int64_t outer = product(indices.shape, 0, axis);
        const int64_t inner = product(indices.shape, axis, indices.rank());
        move_elements(ctx.host(), values, output, [&](const MoveBuffers& b) {
            with_word(b.element_size, [&]<typename W>() {
                const W* pair = reinterpret_cast<const W*>(b.inputs[0]);
                W* out = reinterpret_cast<W*>(b.outputs[0]);
                std::fill(out, out + output.size(), pair[0]);
                for (int64_t o = 0; o < outer; ++o)
                    for (int64_t i = 0; i < inner; ++i)
                        if (const int64_t d = hot[size_t(o * inner + i)]; d >= 0)
                            out[(o * depth + d) * inner + i] = pair[1];
            });
        });
    }

private:
    int64_t axis_;
};

// ---- NonZero -----------------------------------------------------------------------------------------------------

class NonZeroKernel final : public Kernel {
public:
    explicit NonZeroKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        std::vector<int64_t> positions;
        convert::dispatch_value_type(input.type, [&]<typename T>() {
            const T* data = input.ptr<T>();
            for (int64_t i = 0; i < input.size(); ++i)
                if (convert::convert_value<bool>(data[i])) positions.push_back(i);
        });
        // A scalar reports as a 1-D tensor of one element (numpy's behaviour).
        const Shape shape = input.rank() == 0 ? Shape{1} : input.shape;
        const size_t rank = shape.size();
        const int64_t count = int64_t(positions.size());
        Tensor& output = ctx.output(0, TESS_ELEMENT_INT64, Shape{int64_t(rank), count});
        int64_t* out = output.ptr<int64_t>();
        for (int64_t p = 0; p < count; ++p) {
            int64_t rest = positions[size_t(p)];
            for (size_t d = rank; d-- > 0;) {
                out[int64_t(d) * count + p] = rest % shape[d];
                rest /= shape[d];
            }
        }
    }
};

// ---- TopK --------------------------------------------------------------------------------------------------------

class TopKKernel final : public Kernel {
public:
    explicit TopKKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", -1)), largest_(info.attr_int("largest", 1) != 0) {
        if (info.opset() < 10) k_ = info.attr_int("k");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        int64_t k = k_.value_or(0);
        if (!k_) {
            const Tensor& k_tensor = ctx.input(1);
            if (k_tensor.size() != 1) throw KernelError("TopK: K must hold one value");
            k = read_integers(k_tensor, "TopK K")[0];
        }
        const size_t axis = normalize_axis("TopK", axis_, input.rank());
        const int64_t dim = input.shape[axis];
        if (k < 0 || k > dim)
            throw KernelError("TopK: K " + std::to_string(k) + " is out of range for a dimension of " +
                              std::to_string(dim));
        Shape shape = input.shape;
        shape[axis] = k;
        Tensor& values = ctx.output(0, input.type, shape);
        Tensor& indices = ctx.output(1, TESS_ELEMENT_INT64, shape);
        if (values.size() == 0) return;
        const int64_t outer = product(input.shape, 0, axis);
        const int64_t inner = product(input.shape, axis + 1, input.rank());
        dispatch<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, fp::Half,
                 fp::BFloat16>(input.type, [&]<typename T>() {
            using Key = std::conditional_t<std::is_same_v<T, fp::Half> || std::is_same_v<T, fp::BFloat16>, float, T>;
            const T* in = input.ptr<T>();
            T* out_values = values.ptr<T>();
            int64_t* out_indices = indices.ptr<int64_t>();
            movement::parallel_range(ctx.pool(), outer * inner, dim * 8, [&](int64_t begin, int64_t end) {
                std::vector<std::pair<Key, int64_t>> items(static_cast<size_t>(dim));
                // Ties keep the lower index first.
                const auto before = [this](const std::pair<Key, int64_t>& a, const std::pair<Key, int64_t>& b) {
                    if (a.first != b.first) return largest_ ? a.first > b.first : a.first < b.first;
                    return a.second < b.second;
                };
                for (int64_t slice = begin; slice < end; ++slice) {
                    const int64_t o = slice / inner, i = slice % inner;
                    const T* src = in + o * dim * inner + i;
                    for (int64_t j = 0; j < dim; ++j)
                        items[size_t(j)] = {convert::convert_value<Key>(src[j * inner]), j};
                    std::partial_sort(items.begin(), items.begin() + k, items.end(), before);
                    for (int64_t j = 0; j < k; ++j) {
                        const int64_t at = o * k * inner + j * inner + i;
                        out_values[at] = src[items[size_t(j)].second * inner];
                        out_indices[at] = items[size_t(j)].second;
                    }
                }
            });
        });
    }

private:
    int64_t axis_;
    bool largest_;
    std::optional<int64_t> k_;
};

// ---- CumSum ------------------------------------------------------------------------------------------------------

class CumSumKernel final : public Kernel {
public:
    explicit CumSumKernel(const NodeInfo& info)
        : exclusive_(info.attr_int("exclusive", 0) != 0), reverse_(info.attr_int("reverse", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const Tensor& axis_tensor = ctx.input(1);
        if (axis_tensor.size() != 1) throw KernelError("CumSum: axis must be a scalar");
        const size_t axis = normalize_axis("CumSum", read_integers(axis_tensor, "CumSum axis")[0], input.rank());
        Tensor& output = ctx.output(0, input.type, input.shape);
        if (output.size() == 0) return;
        const int64_t outer = product(input.shape, 0, axis);
        const int64_t dim = input.shape[axis];
        const int64_t inner = product(input.shape, axis + 1, input.rank());
        dispatch<float, double, int32_t, int64_t, uint32_t, uint64_t, fp::Half, fp::BFloat16>(
            input.type, [&]<typename T>() {
                using Sum =
                    std::conditional_t<std::is_same_v<T, fp::Half> || std::is_same_v<T, fp::BFloat16>, float, T>;
                const T* in = input.ptr<T>();
                T* out = output.ptr<T>();
                movement::parallel_range(
                    ctx.pool(), outer, dim * inner * int64_t(sizeof(T)), [&](int64_t begin, int64_t end) {
                        std::vector<Sum> running(static_cast<size_t>(inner));
                        for (int64_t o = begin; o < end; ++o) {
                            std::fill(running.begin(), running.end(), Sum(0));
                            for (int64_t step = 0; step < dim; ++step) {
                                const int64_t a = reverse_ ? dim - 1 - step : step;
                                const T* src = in + (o * dim + a) * inner;
                                T* dst = out + (o * dim + a) * inner;
                                for (int64_t j = 0; j < inner; ++j) {
                                    const Sum x = convert::convert_value<Sum>(src[j]);
                                    // The running sum is rounded to T at every step, as a cumulative sum in T computes
                                    // it.
                                    const T sum = convert::convert_value<T>(Sum(running[size_t(j)] + x));
                                    dst[j] = exclusive_ ? convert::convert_value<T>(running[size_t(j)]) : sum;
                                    running[size_t(j)] = convert::convert_value<Sum>(sum);
                                }
                            }
                        }
                    });
            });
    }

private:
    bool exclusive_;
    bool reverse_;
};

}  // namespace

void register_tensor_value_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> index_types{TESS_ELEMENT_INT32, TESS_ELEMENT_INT64};
    const std::vector<int32_t> sortable{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT8,
                                        TESS_ELEMENT_INT16,   TESS_ELEMENT_INT32,   TESS_ELEMENT_INT64,
                                        TESS_ELEMENT_UINT8,   TESS_ELEMENT_UINT16,  TESS_ELEMENT_UINT32,
                                        TESS_ELEMENT_UINT64,  TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16};
    const std::vector<int32_t> summable{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT32,
                                        TESS_ELEMENT_INT64,   TESS_ELEMENT_UINT32,  TESS_ELEMENT_UINT64,
                                        TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16};
    const auto add = [&](const char* op, int since, int end, KernelFactory factory,
                         std::vector<std::pair<size_t, std::vector<int32_t>>> types = {},
                         KernelMemory memory = KernelMemory::Normal) {
        registry.add({"", op, since, end, std::move(types), memory, std::move(factory)});
    };
    // Trilu and CumSum read each element before writing it, so they can update their input in place.
    constexpr KernelMemory kInPlace = KernelMemory::InPlaceInput0;
    const std::vector<int32_t> castable_types = element_types_where(castable);
    add("Cast", 1, 0, make_factory<CastKernel>(), {{0, castable_types}});
    add("CastLike", 15, 0, make_factory<CastLikeKernel>(), {{0, castable_types}, {1, castable_types}});
    add("Trilu", 14, 0, make_factory<TriluKernel>(), {}, kInPlace);
    // OneHot reads indices and depth as numbers; NonZero dispatches on the value types.
    const std::vector<int32_t> value_types = element_types_where(convert::is_value_type);
    add("OneHot", 9, 0, make_factory<OneHotKernel>(), {{0, value_types}, {1, value_types}});
    add("NonZero", 9, 0, make_factory<NonZeroKernel>(), {{0, value_types}});
    add("TopK", 1, 0, make_factory<TopKKernel>(), {{0, sortable}});
    add("CumSum", 11, 0, make_factory<CumSumKernel>(), {{0, summable}, {1, index_types}}, kInPlace);
}

}  // namespace tessera::cpu
