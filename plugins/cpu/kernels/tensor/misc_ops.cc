// CPU provider: operators without a larger family: BitCast, Unique, Compress, ReverseSequence, TensorScatter,
// DeformConv, TfIdfVectorizer, and the random generators (RandomUniform/Normal[Like], Bernoulli, Multinomial).
//
// The data-movement kernels (Compress, ReverseSequence, TensorScatter, Unique's gather) work on element bytes through
// util/data_movement.h, so they serve every element type, strings included.
//
// Random generators: with a `seed` attribute every run of the node produces the same values (a fresh engine seeded
// with it per run, which also keeps compute() free of shared state); without one each run draws a new seed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/compute_cast.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/float_formats.h"
#include "util/gemm.h"
#include "util/select_slices.h"
#include "util/type_list.h"
#include "util/values.h"

namespace tessera::cpu {
namespace {

using movement::MoveBuffers;
using movement::product;
using movement::read_integers;

// ---- BitCast -----------------------------------------------------------------------------------------------------

int bit_width(int32_t type) {
    if (const int bits = fp::packed_bits(type)) return bits;
    return int(element_bytes(type, 1) * 8);
}

// Reinterprets the bytes of a tensor as another type of the same bit width (the spec allows no other).
class BitCastKernel final : public Kernel {
public:
    explicit BitCastKernel(const NodeInfo& info) : to_(int32_t(info.attr_int("to"))) {
        if (to_ == TESS_ELEMENT_STRING || to_ == TESS_ELEMENT_UNDEFINED || element_bytes(to_, 1) == 0)
            throw KernelError("BitCast: 'to' must be a non-string element type, got " + std::to_string(to_));
        if (const int32_t from = info.input_type(0); from != TESS_ELEMENT_UNDEFINED) check_widths(from);
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        check_widths(x.type);
        Tensor& y = ctx.output(0, to_, x.shape);
        if (const size_t bytes = x.byte_size()) movement::parallel_memcpy(ctx.pool(), y.data, x.data, bytes);
    }

private:
    void check_widths(int32_t from) const {
        if (from == TESS_ELEMENT_STRING) throw KernelError("BitCast: string tensors cannot be reinterpreted");
        if (bit_width(from) != bit_width(to_))
            throw KernelError(std::string("BitCast: ") + element_type_name(from) + " (" +
                              std::to_string(bit_width(from)) + " bits) and " + element_type_name(to_) + " (" +
                              std::to_string(bit_width(to_)) + " bits) differ in width");
    }

    int32_t to_;
};

// ---- Unique ------------------------------------------------------------------------------------------------------

// Orders values the way numpy's unique does: NaN after every number and equal to every NaN, -0 equal to 0.
template <typename T>
bool value_less(const T& a, const T& b) {
    if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return false;
        if (std::isnan(b)) return true;
    }
    return a < b;
}

class UniqueKernel final : public Kernel {
public:
    explicit UniqueKernel(const NodeInfo& info) : sorted_(info.attr_int("sorted", 1) != 0) {
        if (info.has_attr("axis")) axis_ = info.attr_int("axis");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        // x is seen as [outer, n, inner]; the n slices (elements without an axis) are the candidates.
        int64_t outer = 1, n = x.size(), inner = 1;
        size_t axis = 0;
        if (axis_) {
            axis = normalize_axis("Unique", *axis_, x.rank());
            outer = product(x.shape, 0, axis);
            n = x.shape[axis];
            inner = product(x.shape, axis + 1, x.rank());
        }
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), int64_t(0));
        // Slices compare lexicographically, element by element in (outer, inner) order (numpy's unique with axis).
        std::vector<int64_t> group_of_position;  // for each position of `order`: the group it belongs to
        const auto sort_and_group = [&](auto&& less_slices) {
            std::stable_sort(order.begin(), order.end(), less_slices);
            group_of_position.resize(order.size());
            int64_t group = -1;
            for (size_t k = 0; k < order.size(); ++k) {
                if (k == 0 || less_slices(order[k - 1], order[k])) ++group;
                group_of_position[k] = group;
            }
        };
        const auto by_values = [&]<typename T>(const T* data, int64_t width) {
            sort_and_group([&](int64_t a, int64_t b) {
                for (int64_t o = 0; o < outer; ++o) {
                    const T* pa = data + (o * n + a) * width;
                    const T* pb = data + (o * n + b) * width;
                    for (int64_t i = 0; i < width; ++i) {
                        if (value_less(pa[i], pb[i])) return true;
                        if (value_less(pb[i], pa[i])) return false;
                    }
                }
                return false;
            });
        };
        switch (x.type) {
            case TESS_ELEMENT_STRING: {
                std::vector<std::string_view> strings(static_cast<size_t>(x.size()));
                for (size_t i = 0; i < strings.size(); ++i) strings[i] = values::get_string(ctx.host(), x.value, i);
                by_values(strings.data(), inner);
                break;
            }
            case TESS_ELEMENT_FLOAT16:
            case TESS_ELEMENT_BFLOAT16: {
                const ConvertedInput<float> wide(x, ctx.pool());
                by_values(wide.data(), inner);
                break;
            }
            // A complex number orders by its real part, then its imaginary part: as two floats in a row.
            case TESS_ELEMENT_COMPLEX64:
                by_values(static_cast<const float*>(x.data), inner * 2);
                break;
            case TESS_ELEMENT_COMPLEX128:
                by_values(static_cast<const double*>(x.data), inner * 2);
                break;
            default:
                dispatch<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bool>(
                    x.type, [&]<typename T>() { by_values(x.ptr<T>(), inner); });
        }

        // Groups in output order: ascending values, or first occurrence when unsorted.  The stable sort puts each
        // group's first occurrence first.
        const int64_t groups = order.empty() ? 0 : group_of_position.back() + 1;
        std::vector<int64_t> first(static_cast<size_t>(groups)), counts(static_cast<size_t>(groups), 0);
        for (size_t k = order.size(); k-- > 0;) {
            first[size_t(group_of_position[k])] = order[k];
            ++counts[size_t(group_of_position[k])];
        }
        std::vector<int64_t> rank(static_cast<size_t>(groups));  // output position of each group
        std::iota(rank.begin(), rank.end(), int64_t(0));
        if (!sorted_) {
            std::vector<int64_t> by_first(rank);
            std::sort(by_first.begin(), by_first.end(),
                      [&](int64_t a, int64_t b) { return first[size_t(a)] < first[size_t(b)]; });
            for (int64_t position = 0; position < groups; ++position)
                rank[size_t(by_first[size_t(position)])] = position;
        }
        std::vector<int64_t> indices(static_cast<size_t>(groups)), out_counts(static_cast<size_t>(groups));
        for (int64_t g = 0; g < groups; ++g) {
            indices[size_t(rank[size_t(g)])] = first[size_t(g)];
            out_counts[size_t(rank[size_t(g)])] = counts[size_t(g)];
        }

        Shape y_shape{groups};
        if (axis_) {
            y_shape = x.shape;
            y_shape[axis] = groups;
        }
        Tensor& y = ctx.output(0, x.type, y_shape);
        select_slices(ctx.host(), ctx.pool(), x, y, outer, n, inner, indices);
        if (ctx.output_count() > 1 && ctx.output_wanted(1)) write_int64s(ctx, 1, indices);
        if (ctx.output_count() > 2 && ctx.output_wanted(2)) {
            std::vector<int64_t> inverse(static_cast<size_t>(n));
            for (size_t k = 0; k < order.size(); ++k) inverse[size_t(order[k])] = rank[size_t(group_of_position[k])];
            write_int64s(ctx, 2, inverse);
        }
        if (ctx.output_count() > 3 && ctx.output_wanted(3)) write_int64s(ctx, 3, out_counts);
    }

private:
    static void write_int64s(KernelContext& ctx, size_t output, const std::vector<int64_t>& values) {
        Tensor& t = ctx.output(output, TESS_ELEMENT_INT64, {int64_t(values.size())});
        std::copy(values.begin(), values.end(), t.ptr<int64_t>());
    }

    std::optional<int64_t> axis_;
    bool sorted_;
};

// ---- Compress ----------------------------------------------------------------------------------------------------

class CompressKernel final : public Kernel {
public:
    explicit CompressKernel(const NodeInfo& info) {
        if (info.has_attr("axis")) axis_ = info.attr_int("axis");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& condition = ctx.input(1);
        if (condition.type != TESS_ELEMENT_BOOL || condition.rank() != 1)
            throw KernelError("Compress: condition must be a 1-D bool tensor, got " + shape_string(condition.shape));
        int64_t outer = 1, dim = x.size(), inner = 1;
        size_t axis = 0;
        if (axis_) {
            axis = normalize_axis("Compress", *axis_, x.rank());
            outer = product(x.shape, 0, axis);
            dim = x.shape[axis];
            inner = product(x.shape, axis + 1, x.rank());
        }
        // A shorter condition leaves the remaining slices out, as numpy does; a longer one may only add false.
        std::vector<int64_t> selected;
        const bool* keep = condition.ptr<bool>();
        for (int64_t i = 0; i < condition.size(); ++i) {
            if (!keep[i]) continue;
            if (i >= dim)
                throw KernelError("Compress: condition selects index " + std::to_string(i) +
                                  " beyond the dimension of size " + std::to_string(dim));
            selected.push_back(i);
        }
        Shape shape{int64_t(selected.size())};
        if (axis_) {
            shape = x.shape;
            shape[axis] = int64_t(selected.size());
        }
        Tensor& y = ctx.output(0, x.type, shape);
        select_slices(ctx.host(), ctx.pool(), x, y, outer, dim, inner, selected);
    }

private:
    std::optional<int64_t> axis_;
};

// ---- ReverseSequence ---------------------------------------------------------------------------------------------

class ReverseSequenceKernel final : public Kernel {
public:
    explicit ReverseSequenceKernel(const NodeInfo& info)
        : batch_axis_(info.attr_int("batch_axis", 1)), time_axis_(info.attr_int("time_axis", 0)) {
        if (!((batch_axis_ == 0 && time_axis_ == 1) || (batch_axis_ == 1 && time_axis_ == 0)))
            throw KernelError("ReverseSequence: batch_axis and time_axis must be 0 and 1 in some order");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() < 2) throw KernelError("ReverseSequence: input must have rank >= 2, got " + shape_string(x.shape));
        const int64_t batch = x.shape[size_t(batch_axis_)], steps = x.shape[size_t(time_axis_)];
        const std::vector<int64_t> lengths = read_integers(ctx.input(1), "ReverseSequence sequence_lens");
        if (int64_t(lengths.size()) != batch)
            throw KernelError("ReverseSequence: sequence_lens has " + std::to_string(lengths.size()) +
                              " entries for a batch of " + std::to_string(batch));
        for (int64_t length : lengths)
            if (length < 0 || length > steps)
                throw KernelError("ReverseSequence: sequence length " + std::to_string(length) + " is outside [0, " +
                                  std::to_string(steps) + "]");
        Tensor& y = ctx.output(0, x.type, x.shape);
        const int64_t inner = product(x.shape, 2, x.rank());
        const int64_t rows = x.shape[0] * x.shape[1];
        if (rows == 0 || inner == 0) return;
        movement::move_elements(ctx.host(), x, y, [&](const MoveBuffers& b) {
            const size_t row_bytes = size_t(inner) * b.element_size;
            movement::parallel_range(ctx.pool(), rows, int64_t(row_bytes), [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                    const int64_t d0 = r / x.shape[1], d1 = r % x.shape[1];
                    const int64_t sequence = batch_axis_ == 0 ? d0 : d1;
                    int64_t step = time_axis_ == 0 ? d0 : d1;
                    const int64_t length = lengths[size_t(sequence)];
                    if (step < length) step = length - 1 - step;
                    const int64_t source = time_axis_ == 0 ? step * x.shape[1] + d1 : d0 * x.shape[1] + step;
                    std::memcpy(b.outputs[0] + size_t(r) * row_bytes, b.inputs[0] + size_t(source) * row_bytes,
                                row_bytes);
                }
            });
        });
    }

private:
    int64_t batch_axis_;
    int64_t time_axis_;
};

// ---- TensorScatter -----------------------------------------------------------------------------------------------

// present = past with `update` written along `axis` at each batch entry's write index (KV-cache update).
class TensorScatterKernel final : public Kernel {
public:
    explicit TensorScatterKernel(const NodeInfo& info) : axis_(info.attr_int("axis", -2)) {
        const std::string mode = info.attr_string("mode", "linear");
        if (mode != "linear" && mode != "circular")
            throw KernelError("TensorScatter: mode must be 'linear' or 'circular', got '" + mode + "'");
        circular_ = mode == "circular";
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& past = ctx.input(0);
        const Tensor& update = ctx.input(1);
        const size_t axis = normalize_axis("TensorScatter", axis_, past.rank());
        if (axis == 0) throw KernelError("TensorScatter: axis cannot be the batch axis 0");
        if (update.type != past.type || update.rank() != past.rank())
            throw KernelError("TensorScatter: update must have the cache's type and rank");
        for (size_t d = 0; d < past.rank(); ++d)
            if (d == axis ? update.shape[d] > past.shape[d] : update.shape[d] != past.shape[d])
                throw KernelError("TensorScatter: update shape " + shape_string(update.shape) +
                                  " does not fit the cache shape " + shape_string(past.shape));
        const int64_t batch = past.shape[0];
        const int64_t capacity = past.shape[axis], length = update.shape[axis];
        std::vector<int64_t> write_at(static_cast<size_t>(batch), 0);
        if (ctx.has_input(2)) {
            write_at = read_integers(ctx.input(2), "TensorScatter write_indices");
            if (int64_t(write_at.size()) != batch)
                throw KernelError("TensorScatter: write_indices must have one entry per batch entry");
        }
        for (int64_t& index : write_at) {
            if (circular_) {
                if (capacity > 0) index = ((index % capacity) + capacity) % capacity;
            } else if (index < 0 || index + length > capacity) {
                throw KernelError("TensorScatter: writing " + std::to_string(length) + " entries at index " +
                                  std::to_string(index) + " overruns the cache length " + std::to_string(capacity));
            }
        }

        Tensor& present = ctx.output(0, past.type, past.shape);
        const int64_t prefixes = product(past.shape, 0, axis);  // each batch entry owns prefixes / batch of them
        const int64_t per_batch = batch ? prefixes / batch : 0;
        const int64_t inner = product(past.shape, axis + 1, past.rank());
        const Tensor* inputs[] = {&past, &update};
        Tensor* outputs[] = {&present};
        movement::move_elements(ctx.host(), std::span<const Tensor* const>(inputs), std::span<Tensor* const>(outputs),
                                [&](const MoveBuffers& b) {
                                    const size_t row_bytes = size_t(inner) * b.element_size;
                                    if (b.outputs[0] != b.inputs[0] && past.size() > 0)
                                        movement::parallel_memcpy(ctx.pool(), b.outputs[0], b.inputs[0],
                                                                  size_t(past.size()) * b.element_size);
                                    movement::parallel_range(
                                        ctx.pool(), prefixes * length, int64_t(row_bytes),
                                        [&](int64_t begin, int64_t end) {
                                            for (int64_t r = begin; r < end; ++r) {
                                                const int64_t p = r / length, s = r % length;
                                                int64_t at = write_at[size_t(p / per_batch)] + s;
                                                if (at >= capacity) at -= capacity;  // circular mode only
                                                std::memcpy(b.outputs[0] + size_t(p * capacity + at) * row_bytes,
                                                            b.inputs[1] + size_t(r) * row_bytes, row_bytes);
                                            }
                                        });
                                });
    }

private:
    int64_t axis_;
    bool circular_ = false;
};

// ---- DeformConv --------------------------------------------------------------------------------------------------

// 2-D deformable convolution: each kernel tap samples the input bilinearly at its regular position plus a learned
// offset (zero outside the image), optionally scaled by a mask.  The samples form a column matrix per (image, group)
// that one GEMM with the filters turns into the output, as im2col does for Conv.
class DeformConvKernel final : public Kernel {
public:
    explicit DeformConvKernel(const NodeInfo& info)
        : dilations_(info.attr_ints("dilations")),
          kernel_shape_(info.attr_ints("kernel_shape")),
          pads_(info.attr_ints("pads")),
          strides_(info.attr_ints("strides")),
          group_(info.attr_int("group", 1)),
          offset_group_(info.attr_int("offset_group", 1)) {
        if (group_ < 1 || offset_group_ < 1) throw KernelError("DeformConv: group and offset_group must be positive");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() != 4)
            throw KernelError("DeformConv: only 2-D inputs [N, C, H, W] are supported, got " + shape_string(x.shape));
        if (x.type == TESS_ELEMENT_FLOAT64)
            run<double>(ctx);
        else
            run<float>(ctx);
    }

private:
    struct Geometry {
        int64_t N, C, H, W, M, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left;
    };

    template <typename T>
    void run(KernelContext& ctx) const {
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(1);
        const Tensor& offset = ctx.input(2);
        const bool has_bias = ctx.has_input(3), has_mask = ctx.has_input(4);
        const Geometry g = geometry(x, w, offset);
        const auto expect = [](const Tensor& t, const Shape& shape, const char* what) {
            if (t.shape != shape)
                throw KernelError(std::string("DeformConv: ") + what + " must have shape " + shape_string(shape) +
                                  ", got " + shape_string(t.shape));
        };
        const int64_t taps = g.kh * g.kw;
        expect(offset, {g.N, offset_group_ * taps * 2, g.oh, g.ow}, "offset");
        if (has_bias) expect(ctx.input(3), {g.M}, "B");
        if (has_mask) expect(ctx.input(4), {g.N, offset_group_ * taps, g.oh, g.ow}, "mask");

        ThreadPool& pool = ctx.pool();
        const ConvertedInput<T> X(x, pool), Wt(w, pool), offsets(offset, pool);
        const ConvertedInput<T> bias = has_bias ? ConvertedInput<T>(ctx.input(3), pool) : ConvertedInput<T>();
        const ConvertedInput<T> mask = has_mask ? ConvertedInput<T>(ctx.input(4), pool) : ConvertedInput<T>();
        ConvertedOutput<T> Y(ctx.output(0, x.type, {g.N, g.M, g.oh, g.ow}));
        const int64_t spatial = g.oh * g.ow;
        if (g.N * g.M * spatial == 0) {
            Y.finish(pool);
            return;
        }

        const int64_t channels = g.C / group_, filters = g.M / group_;
        const int64_t depth = channels * taps;  // rows of the column matrix
        const int64_t channels_per_offset_group = g.C / offset_group_;
        check_gemm_dimensions(filters, spatial, depth);
        std::vector<T> columns(static_cast<size_t>(depth * spatial));
        for (int64_t n = 0; n < g.N; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                pool.parallel_for(
                    depth, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, spatial)), [&](int64_t begin, int64_t end) {
                        for (int64_t row = begin; row < end; ++row) {
                            const int64_t channel = grp * channels + row / taps, tap = row % taps;
                            const int64_t og = channel / channels_per_offset_group;
                            const T* image = X.data() + (n * g.C + channel) * g.H * g.W;
                            const T* dy = offsets.data() + ((n * offset_group_ + og) * taps + tap) * 2 * spatial;
                            const T* dx = dy + spatial;
                            const T* scale =
                                has_mask ? mask.data() + ((n * offset_group_ + og) * taps + tap) * spatial : nullptr;
                            const int64_t ki = tap / g.kw, kj = tap % g.kw;
                            T* out = columns.data() + row * spatial;
                            for (int64_t oy = 0; oy < g.oh; ++oy)
                                for (int64_t ox = 0; ox < g.ow; ++ox) {
                                    const int64_t p = oy * g.ow + ox;
                                    const T h = T(oy * g.sh - g.pad_top + ki * g.dh) + dy[p];
                                    const T wpos = T(ox * g.sw - g.pad_left + kj * g.dw) + dx[p];
                                    const T v = bilinear(image, g.H, g.W, h, wpos);
                                    out[p] = scale ? v * scale[p] : v;
                                }
                        }
                    });
                T* y = Y.data() + (n * g.M + grp * filters) * spatial;
                if (depth == 0)
                    std::fill(y, y + filters * spatial, T(0));
                else
                    gemm<T>(pool, false, false, filters, spatial, depth, T(1), Wt.data() + grp * filters * depth, depth,
                            columns.data(), spatial, T(0), y, spatial);
                if (has_bias)
                    for (int64_t m = 0; m < filters; ++m) {
                        const T b = bias.data()[grp * filters + m];
                        for (int64_t p = 0; p < spatial; ++p) y[m * spatial + p] += b;
                    }
            }
        }
        Y.finish(pool);
    }

    // Bilinear interpolation at (h, w) in pixel coordinates; pixels outside the image count as zero.
    template <typename T>
    static T bilinear(const T* image, int64_t H, int64_t W, T h, T w) {
        if (!(h > T(-1) && h < T(H) && w > T(-1) && w < T(W))) return T(0);  // NaN lands here too
        const T hf = std::floor(h), wf = std::floor(w);
        const int64_t y0 = int64_t(hf), x0 = int64_t(wf);
        const T ly = h - hf, lx = w - wf;
        const auto at = [&](int64_t y, int64_t x) {
            return y >= 0 && y < H && x >= 0 && x < W ? image[y * W + x] : T(0);
        };
        return (T(1) - ly) * ((T(1) - lx) * at(y0, x0) + lx * at(y0, x0 + 1)) +
               ly * ((T(1) - lx) * at(y0 + 1, x0) + lx * at(y0 + 1, x0 + 1));
    }

    Geometry geometry(const Tensor& x, const Tensor& w, const Tensor& offset) const {
        Geometry g{};
        g.N = x.shape[0], g.C = x.shape[1], g.H = x.shape[2], g.W = x.shape[3];
        if (w.rank() != 4)
            throw KernelError("DeformConv: W must be [M, C/group, kH, kW], got " + shape_string(w.shape));
        g.M = w.shape[0];
        if (w.shape[1] * group_ != g.C || g.M % group_ != 0)
            throw KernelError("DeformConv: W " + shape_string(w.shape) + " does not match " + std::to_string(g.C) +
                              " input channels in " + std::to_string(group_) + " groups");
        if (g.C % offset_group_ != 0) throw KernelError("DeformConv: input channels are not divisible by offset_group");
        const auto pick = [](const std::vector<int64_t>& values, size_t i, int64_t fallback) {
            return values.empty() ? fallback : values.at(i);
        };
        if ((!kernel_shape_.empty() && kernel_shape_.size() != 2) || (!strides_.empty() && strides_.size() != 2) ||
            (!dilations_.empty() && dilations_.size() != 2) || (!pads_.empty() && pads_.size() != 4))
            throw KernelError("DeformConv: kernel_shape, strides, dilations and pads must describe 2 spatial axes");
        g.kh = pick(kernel_shape_, 0, w.shape[2]), g.kw = pick(kernel_shape_, 1, w.shape[3]);
        if (g.kh != w.shape[2] || g.kw != w.shape[3]) throw KernelError("DeformConv: kernel_shape does not match W");
        g.sh = pick(strides_, 0, 1), g.sw = pick(strides_, 1, 1);
        g.dh = pick(dilations_, 0, 1), g.dw = pick(dilations_, 1, 1);
        if (g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1)
            throw KernelError("DeformConv: strides and dilations must be positive");
        g.pad_top = pick(pads_, 0, 0), g.pad_left = pick(pads_, 1, 0);
        const int64_t pad_bottom = pick(pads_, 2, 0), pad_right = pick(pads_, 3, 0);
        g.oh = (g.H + g.pad_top + pad_bottom - ((g.kh - 1) * g.dh + 1)) / g.sh + 1;
        g.ow = (g.W + g.pad_left + pad_right - ((g.kw - 1) * g.dw + 1)) / g.sw + 1;
        if (g.oh < 0 || g.ow < 0) throw KernelError("DeformConv: the kernel does not fit the padded input");
        if (offset.rank() != 4) throw KernelError("DeformConv: offset must be 4-D, got " + shape_string(offset.shape));
        return g;
    }

    std::vector<int64_t> dilations_, kernel_shape_, pads_, strides_;
    int64_t group_, offset_group_;
};

// ---- TfIdfVectorizer ---------------------------------------------------------------------------------------------

// The n-grams of the pool in a trie: a path of tokens from the root spells an n-gram, and a node's id (1-based,
// 0 = no n-gram ends here) numbers it in pool order.  Built once per kernel; read-only afterwards.
template <typename Token>
class NgramTrie {
public:
    NgramTrie() : nodes_(1) {}

    int32_t child(int32_t node, const Token& token) const {
        const auto& children = nodes_[size_t(node)].children;
        const auto found = children.find(token);
        return found == children.end() ? -1 : found->second;
    }
    bool has_children(int32_t node) const { return !nodes_[size_t(node)].children.empty(); }
    int64_t id(int32_t node) const { return nodes_[size_t(node)].id; }

    // Adds one n-gram of tokens[0, size).
    void insert(const Token* tokens, int64_t size, int64_t id) {
        int32_t node = 0;
        for (int64_t k = 0; k < size; ++k) {
            int32_t next = child(node, tokens[k]);
            if (next < 0) {
                next = int32_t(nodes_.size());
                nodes_[size_t(node)].children.emplace(tokens[k], next);
                nodes_.emplace_back();
            }
            node = next;
        }
        nodes_[size_t(node)].id = id;
    }

private:
    struct Node {
        int64_t id = 0;
        std::unordered_map<Token, int32_t> children;
    };
    std::vector<Node> nodes_;
};

class TfIdfVectorizerKernel final : public Kernel {
public:
    explicit TfIdfVectorizerKernel(const NodeInfo& info)
        : min_gram_(info.attr_int("min_gram_length")),
          max_gram_(info.attr_int("max_gram_length")),
          max_skip_(info.attr_int("max_skip_count")),
          ngram_indexes_(info.attr_ints("ngram_indexes")),
          weights_(info.attr_floats("weights")) {
        const std::string mode = info.attr_string("mode", "");
        if (mode == "TF")
            mode_ = Mode::TF;
        else if (mode == "IDF")
            mode_ = Mode::IDF;
        else if (mode == "TFIDF")
            mode_ = Mode::TFIDF;
        else
            throw KernelError("TfIdfVectorizer: mode must be TF, IDF or TFIDF, got '" + mode + "'");
        if (min_gram_ < 1 || max_gram_ < min_gram_ || max_skip_ < 0)
            throw KernelError("TfIdfVectorizer: need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
        if (ngram_indexes_.empty()) throw KernelError("TfIdfVectorizer: ngram_indexes is empty");
        for (int64_t index : ngram_indexes_)
            if (index < 0) throw KernelError("TfIdfVectorizer: ngram_indexes must not be negative");
        output_size_ = *std::max_element(ngram_indexes_.begin(), ngram_indexes_.end()) + 1;
        if (!weights_.empty() && int64_t(weights_.size()) < output_size_)
            throw KernelError("TfIdfVectorizer: weights has fewer entries than the output has columns");

        const std::vector<int64_t> pool_ints = info.attr_ints("pool_int64s");
        const std::vector<std::string> pool_strings = info.attr_strings("pool_strings");
        strings_ = !pool_strings.empty();
        if (strings_)
            build(pool_strings, info.attr_ints("ngram_counts"), string_trie_);
        else
            build(pool_ints, info.attr_ints("ngram_counts"), int_trie_);
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() > 2)
            throw KernelError("TfIdfVectorizer: input must be [C] or [B, C], got " + shape_string(x.shape));
        const int64_t rows = x.rank() == 2 ? x.shape[0] : 1;
        const int64_t columns = x.rank() == 0 ? 1 : x.shape.back();
        Tensor& y =
            ctx.output(0, TESS_ELEMENT_FLOAT32, x.rank() == 2 ? Shape{rows, output_size_} : Shape{output_size_});
        float* out = y.ptr<float>();
        std::vector<int64_t> frequencies(static_cast<size_t>(rows * output_size_), 0);
        if (x.type == TESS_ELEMENT_STRING) {
            if (!strings_) throw KernelError("TfIdfVectorizer: string input needs pool_strings");
            std::vector<std::string> tokens(static_cast<size_t>(x.size()));
            for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = values::get_string(ctx.host(), x.value, i);
            count_rows(string_trie_, tokens.data(), rows, columns, frequencies.data(), ctx.pool());
        } else {
            if (strings_) throw KernelError("TfIdfVectorizer: integer input needs pool_int64s");
            const std::vector<int64_t> tokens = read_integers(x, "TfIdfVectorizer input");
            count_rows(int_trie_, tokens.data(), rows, columns, frequencies.data(), ctx.pool());
        }
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < output_size_; ++c) {
                const int64_t f = frequencies[size_t(r * output_size_ + c)];
                // Weights are indexed by output column, as ONNX Runtime and the ONNX reference do.
                const float weight = weights_.empty() ? 1.0f : weights_[size_t(c)];
                float value = 0;
                switch (mode_) {
                    case Mode::TF:
                        value = float(f);
                        break;
                    case Mode::IDF:
                        value = f > 0 ? weight : 0.0f;
                        break;
                    case Mode::TFIDF:
                        value = weight * float(f);
                        break;
                }
                out[r * output_size_ + c] = value;
            }
    }

private:
    enum class Mode { TF, IDF, TFIDF };

    // ngram_counts[i] is where the (i+1)-grams start in the pool; only lengths in [min, max] go into the trie, but
    // every n-gram takes an id so that ids match ngram_indexes.
    template <typename Token>
    void build(const std::vector<Token>& pool, const std::vector<int64_t>& starts, NgramTrie<Token>& trie) {
        const int64_t total = int64_t(pool.size());
        int64_t id = 1;
        for (size_t i = 0; i < starts.size(); ++i) {
            const int64_t size = int64_t(i) + 1;
            const int64_t begin = starts[i], end = i + 1 < starts.size() ? starts[i + 1] : total;
            if (begin < 0 || end > total || begin > end)
                throw KernelError("TfIdfVectorizer: ngram_counts does not partition the pool");
            const int64_t count = (end - begin) / size;
            if (id - 1 + count > int64_t(ngram_indexes_.size()))
                throw KernelError("TfIdfVectorizer: the pool has more n-grams than ngram_indexes has entries");
            if (size >= min_gram_ && size <= max_gram_)
                for (int64_t k = 0; k < count; ++k) trie.insert(pool.data() + begin + k * size, size, id + k);
            id += count;
        }
    }

    // Counts, for each row, every n-gram of length [min, max] whose tokens are `skip` apart, for skip in
    // [1, max_skip + 1]; unigrams are counted once whatever the skip.
    template <typename Token>
    void count_rows(const NgramTrie<Token>& trie, const Token* tokens, int64_t rows, int64_t columns,
                    int64_t* frequencies, ThreadPool& pool) const {
        const auto count_row = [&](int64_t r) {
            const Token* row = tokens + r * columns;
            int64_t* counts = frequencies + r * output_size_;
            int64_t smallest = min_gram_;
            for (int64_t skip = 1; skip <= max_skip_ + 1; ++skip) {
                for (int64_t start = 0; start < columns; ++start) {
                    if (start + skip * (smallest - 1) >= columns) break;
                    int32_t node = 0;
                    for (int64_t size = 1, item = start; size <= max_gram_ && item < columns && trie.has_children(node);
                         ++size, item += skip) {
                        node = trie.child(node, row[item]);
                        if (node < 0) break;
                        if (size >= smallest && trie.id(node) != 0) ++counts[ngram_indexes_[size_t(trie.id(node) - 1)]];
                    }
                }
                if (smallest == 1) {
                    ++smallest;
                    if (smallest > max_gram_) break;
                }
            }
        };
        movement::parallel_range(pool, rows, columns * 64, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) count_row(r);
        });
    }

    int64_t min_gram_, max_gram_, max_skip_;
    std::vector<int64_t> ngram_indexes_;
    std::vector<float> weights_;
    Mode mode_ = Mode::TF;
    int64_t output_size_ = 0;
    bool strings_ = false;
    NgramTrie<int64_t> int_trie_;
    NgramTrie<std::string> string_trie_;
};

// ---- Random generators -------------------------------------------------------------------------------------------

// The engine for one run: seeded by the node's `seed` when it has one, freshly otherwise.
class RandomSource {
public:
    explicit RandomSource(const NodeInfo& info) {
        if (info.has_attr("seed")) {
            const double seed = info.attr_float("seed", 0.0f);
            seed_ = std::isfinite(seed) ? uint32_t(int64_t(seed)) : 0u;
        }
    }

    std::mt19937 engine() const {
        if (seed_) return std::mt19937(*seed_);
        static std::atomic<uint64_t> runs{0};
        const uint64_t run = runs.fetch_add(1, std::memory_order_relaxed);
        const uint64_t now = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
        std::seed_seq sequence{uint32_t(std::random_device{}()), uint32_t(run), uint32_t(run >> 32), uint32_t(now),
                               uint32_t(now >> 32)};
        return std::mt19937(sequence);
    }

private:
    std::optional<uint32_t> seed_;
};

// Writes generated doubles into a tensor of any numeric type.
void store_values(Tensor& out, const std::vector<double>& values) {
    convert::store_doubles(out.type, out.data, 0, int64_t(values.size()), values.data(), convert::CastOptions{});
}

bool is_float_type(int32_t type) {
    return type == TESS_ELEMENT_FLOAT32 || type == TESS_ELEMENT_FLOAT64 || type == TESS_ELEMENT_FLOAT16 ||
           type == TESS_ELEMENT_BFLOAT16;
}

// RandomUniform, RandomNormal and their *Like forms: the shape comes from the `shape` attribute or the input, the
// type from `dtype` (default float, or the input's type for the Like forms).
class RandomDistributionKernel final : public Kernel {
public:
    RandomDistributionKernel(const NodeInfo& info, bool normal, bool like)
        : source_(info), normal_(normal), like_(like) {
        if (normal) {
            a_ = info.attr_float("mean", 0.0f);
            b_ = info.attr_float("scale", 1.0f);
        } else {
            a_ = info.attr_float("low", 0.0f);
            b_ = info.attr_float("high", 1.0f);
        }
        if (info.has_attr("dtype"))
            dtype_ = int32_t(info.attr_int("dtype"));
        else if (!like)
            dtype_ = TESS_ELEMENT_FLOAT32;
        if (dtype_ && !is_float_type(*dtype_))
            throw KernelError(std::string(info.op_type()) + ": dtype must be a floating-point type");
        if (!like) {
            shape_ = info.attr_ints("shape");
            for (int64_t d : shape_)
                if (d < 0) throw KernelError(std::string(info.op_type()) + ": shape must not be negative");
        }
    }

    void compute(KernelContext& ctx) const override {
        const Shape shape = like_ ? ctx.input(0).shape : shape_;
        const int32_t type = dtype_ ? *dtype_ : ctx.input(0).type;
        if (!is_float_type(type)) throw KernelError("random generator: output must have a floating-point type");
        Tensor& out = ctx.output(0, type, shape);
        std::vector<double> values(static_cast<size_t>(out.size()));
        std::mt19937 engine = source_.engine();
        if (normal_) {
            std::normal_distribution<double> distribution(a_, b_);
            for (double& v : values) v = distribution(engine);
        } else {
            std::uniform_real_distribution<double> distribution(a_, b_);
            for (double& v : values) v = distribution(engine);
        }
        store_values(out, values);
    }

private:
    RandomSource source_;
    bool normal_, like_;
    double a_ = 0, b_ = 1;
    std::optional<int32_t> dtype_;
    Shape shape_;
};

// y = 1 with probability x, else 0.
class BernoulliKernel final : public Kernel {
public:
    explicit BernoulliKernel(const NodeInfo& info) : source_(info) {
        if (info.has_attr("dtype")) dtype_ = int32_t(info.attr_int("dtype"));
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const ConvertedInput<double> p(x, ctx.pool());
        Tensor& y = ctx.output(0, dtype_ ? *dtype_ : x.type, x.shape);
        std::vector<double> values(static_cast<size_t>(x.size()));
        std::mt19937 engine = source_.engine();
        std::uniform_real_distribution<double> uniform(0.0, 1.0);
        for (size_t i = 0; i < values.size(); ++i) values[i] = uniform(engine) < p.data()[i] ? 1.0 : 0.0;
        store_values(y, values);
    }

private:
    RandomSource source_;
    std::optional<int32_t> dtype_;
};

// Draws sample_size class indices per batch row from the distribution whose unnormalized log-probabilities the
// row holds.
class MultinomialKernel final : public Kernel {
public:
    explicit MultinomialKernel(const NodeInfo& info)
        : source_(info),
          samples_(info.attr_int("sample_size", 1)),
          dtype_(int32_t(info.attr_int("dtype", TESS_ELEMENT_INT32))) {
        if (dtype_ != TESS_ELEMENT_INT32 && dtype_ != TESS_ELEMENT_INT64)
            throw KernelError("Multinomial: dtype must be int32 or int64");
        if (samples_ < 0) throw KernelError("Multinomial: sample_size must not be negative");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() != 2)
            throw KernelError("Multinomial: input must be [batch, classes], got " + shape_string(x.shape));
        const int64_t batch = x.shape[0], classes = x.shape[1];
        if (classes == 0 && batch > 0 && samples_ > 0) throw KernelError("Multinomial: no classes to draw from");
        const ConvertedInput<double> logits(x, ctx.pool());
        Tensor& y = ctx.output(0, dtype_, {batch, samples_});
        std::vector<double> values(static_cast<size_t>(batch * samples_));
        std::vector<double> cumulative(static_cast<size_t>(classes));
        std::mt19937 engine = source_.engine();
        for (int64_t b = 0; b < batch; ++b) {
            const double* row = logits.data() + b * classes;
            const double top = *std::max_element(row, row + classes);
            double total = 0;
            for (int64_t c = 0; c < classes; ++c) cumulative[size_t(c)] = total += std::exp(row[c] - top);
            std::uniform_real_distribution<double> uniform(0.0, total);
            for (int64_t s = 0; s < samples_; ++s) {
                const auto at = std::upper_bound(cumulative.begin(), cumulative.end(), uniform(engine));
                values[size_t(b * samples_ + s)] = double(std::min<int64_t>(at - cumulative.begin(), classes - 1));
            }
        }
        store_values(y, values);
    }

private:
    RandomSource source_;
    int64_t samples_;
    int32_t dtype_;
};

}  // namespace

void register_misc_kernels(KernelRegistry& registry) {
    const auto add = [&](const char* op, int since, KernelFactory factory,
                         std::vector<std::pair<size_t, std::vector<int32_t>>> types = {},
                         KernelMemory memory = KernelMemory::Normal) {
        registry.add({"", op, since, 0, std::move(types), memory, std::move(factory)});
    };
    const std::vector<int32_t> floats{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_FLOAT16,
                                      TESS_ELEMENT_BFLOAT16};
    add("BitCast", 26, make_factory<BitCastKernel>());
    std::vector<int32_t> unique_types = type_ids(NumericBoolTypes{});
    unique_types.insert(unique_types.end(), {TESS_ELEMENT_STRING, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16,
                                             TESS_ELEMENT_COMPLEX64, TESS_ELEMENT_COMPLEX128});
    add("Unique", 11, make_factory<UniqueKernel>(), {{0, unique_types}});
    // Opset 11 only allows a negative axis.
    add("Compress", 9, make_factory<CompressKernel>(), {{1, {TESS_ELEMENT_BOOL}}});
    add("ReverseSequence", 10, make_factory<ReverseSequenceKernel>(), {{1, {TESS_ELEMENT_INT64, TESS_ELEMENT_INT32}}});
    // The cache is copied before the update is written, so the output may take over the past cache's buffer.
    add("TensorScatter", 24, make_factory<TensorScatterKernel>(), {{2, {TESS_ELEMENT_INT64}}},
        KernelMemory::InPlaceInput0);
    // Opset 22 only adds bfloat16.
    add("DeformConv", 19, make_factory<DeformConvKernel>(), {{0, floats}});
    add("TfIdfVectorizer", 9, make_factory<TfIdfVectorizerKernel>(),
        {{0, {TESS_ELEMENT_STRING, TESS_ELEMENT_INT32, TESS_ELEMENT_INT64}}});

    const auto distribution = [](bool normal, bool like) -> KernelFactory {
        return [normal, like](const NodeInfo& info) -> std::unique_ptr<Kernel> {
            return std::make_unique<RandomDistributionKernel>(info, normal, like);
        };
    };
    add("RandomUniform", 1, distribution(false, false));
    add("RandomNormal", 1, distribution(true, false));
    add("RandomUniformLike", 1, distribution(false, true));
    add("RandomNormalLike", 1, distribution(true, true));
    add("Bernoulli", 15, make_factory<BernoulliKernel>(), {{0, floats}});
    add("Multinomial", 7, make_factory<MultinomialKernel>(), {{0, floats}});
}

}  // namespace tessera::cpu
