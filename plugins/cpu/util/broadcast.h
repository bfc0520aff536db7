// CPU provider: numpy-style multidirectional broadcasting, shared by every kernel that combines tensors of
// different shapes (arithmetic, comparison, Where, PRelu, Expand, ...).
//
// Shapes are right-aligned; a dimension of size 1 stretches to the other operands' size.  A BroadcastPlan
// describes how N inputs map onto the output with the dimensions collapsed as far as possible: adjacent
// dimensions merge when every input either has both or stretches both, so [N,C,H,W] op [C,1,1] becomes
// [N, C, H*W] with the second operand stretched over the innermost run, and equal shapes become a single run.
// The output is then walked as contiguous runs of plan.inner_size() elements in which each input is either
// contiguous too (stride 1) or a single repeated element (stride 0).
//
// Typical use (binary op, output allocated by the caller):
//
//     BroadcastPlan plan("Add", {&a.shape, &b.shape});
//     Tensor& out = ctx.output(0, a.type, plan.output_shape());
//     broadcast_binary(plan, a.ptr<float>(), b.ptr<float>(), out.ptr<float>(),
//                      [](float x, float y) { return x + y; }, &ctx.pool());
//
// For any other number of inputs, for_each_broadcast_run<N>() hands out the runs directly.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/kernel.h"
#include "util/vec_math.h"

namespace tessera::cpu {

// The shape every operand broadcasts to.  Throws KernelError naming `op` when two dimensions differ and neither
// is 1.
Shape broadcast_shapes(std::string_view op, std::span<const Shape* const> shapes);
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);

// Opset < 7 arithmetic/logic ops broadcast B onto A only when the "broadcast" attribute is 1, aligning B's
// dimensions with A's starting at `axis` (suffix-aligned when the attribute is absent).  Returns B's shape padded
// with ones to A's rank, so that the ordinary plan handles the rest; throws KernelError when B does not fit.
// With broadcast == 0 the shapes must be equal.
Shape legacy_broadcast_shape(std::string_view op, const Shape& a, const Shape& b, bool broadcast,
                             std::optional<int64_t> axis);

class BroadcastPlan {
public:
    // Multidirectional: the output shape is the broadcast of all inputs.
    BroadcastPlan(std::string_view op, std::initializer_list<const Shape*> inputs);
    BroadcastPlan(std::string_view op, std::span<const Shape* const> inputs);
    // Unidirectional: every input must broadcast to the given output shape (PRelu's slope, Expand).
    BroadcastPlan(std::string_view op, std::span<const Shape* const> inputs, const Shape& output);

    const Shape& output_shape() const { return output_shape_; }
    int64_t output_size() const { return output_size_; }
    size_t input_count() const { return strides_.size(); }

    // Elements per contiguous run of the output (>= 1 unless the output is empty).
    int64_t inner_size() const { return dims_.back(); }
    // True when input i advances with the output inside a run; false when one element repeats for the run.
    bool inner_contiguous(size_t i) const { return strides_[i].back() != 0; }
    // True when input i has exactly the output's shape layout (no stretching anywhere).
    bool is_full(size_t i) const { return full_[i]; }
    // True when input i holds a single element.
    bool is_scalar(size_t i) const { return scalar_[i]; }

    // At most this many collapsed dimensions (a plan for more throws KernelError): far beyond any real model.
    static constexpr size_t kMaxCollapsedRank = 32;

    // Collapsed output dimensions (innermost last) and each input's element strides over them (0 = stretched).
    const std::vector<int64_t>& collapsed_dims() const { return dims_; }
    const std::vector<int64_t>& collapsed_strides(size_t i) const { return strides_[i]; }

private:
    void build(std::string_view op, std::span<const Shape* const> inputs);

    Shape output_shape_;
    int64_t output_size_ = 0;
    std::vector<int64_t> dims_;
    std::vector<std::vector<int64_t>> strides_;
    std::vector<bool> full_;
    std::vector<bool> scalar_;
};

// Work below this many elements is not worth splitting across threads for cheap per-element operations.
inline constexpr int64_t kElementwiseGrain = 32768;

namespace broadcast_detail {

// Walks output elements [begin, end) run by run.  fn(out_offset, in_offsets, count): count consecutive output
// elements starting at out_offset; in_offsets[i] is the element offset of input i at out_offset (for a
// stretched input the same element serves the whole run).
template <size_t N, typename Fn>
void walk_runs(const BroadcastPlan& plan, int64_t begin, int64_t end, Fn& fn) {
    const std::vector<int64_t>& dims = plan.collapsed_dims();
    const size_t rank = dims.size();
    const int64_t inner = dims.back();
    // Decompose the first run index into collapsed outer coordinates once; later runs step like an odometer.
    int64_t run = begin / inner;
    int64_t pos = begin % inner;
    std::array<int64_t, BroadcastPlan::kMaxCollapsedRank> index{};  // no allocation: this runs in parallel regions
    std::array<int64_t, N> base{};
    for (size_t d = rank - 1; d-- > 0;) {
        index[d] = run % dims[d];
        run /= dims[d];
        for (size_t i = 0; i < N; ++i) base[i] += index[d] * plan.collapsed_strides(i)[d];
    }
    std::array<int64_t, N> inner_stride{};
    for (size_t i = 0; i < N; ++i) inner_stride[i] = plan.collapsed_strides(i).back();

    int64_t out = begin;
    while (out < end) {
        const int64_t count = std::min(inner - pos, end - out);
        std::array<int64_t, N> offsets;
        for (size_t i = 0; i < N; ++i) offsets[i] = base[i] + pos * inner_stride[i];
        fn(out, offsets, count);
        out += count;
        pos = 0;
        // Advance to the next run.
        for (size_t d = rank - 1; d-- > 0;) {
            for (size_t i = 0; i < N; ++i) base[i] += plan.collapsed_strides(i)[d];
            if (++index[d] < dims[d]) break;
            for (size_t i = 0; i < N; ++i) base[i] -= dims[d] * plan.collapsed_strides(i)[d];
            index[d] = 0;
        }
    }
}

}  // namespace broadcast_detail

// Calls fn(out_offset, in_offsets, count) for every run of the output, in parallel when `pool` is given and the
// output holds more than `grain` elements (so fn must not throw and must only write its own output range).
// N must equal plan.input_count().
template <size_t N, typename Fn>
void for_each_broadcast_run(const BroadcastPlan& plan, ThreadPool* pool, Fn&& fn,
                            int64_t grain = kElementwiseGrain) {
    const int64_t total = plan.output_size();
    if (total == 0) return;
    if (pool == nullptr || pool->size() <= 1 || total <= grain) {
        broadcast_detail::walk_runs<N>(plan, 0, total, fn);
        return;
    }
    pool->parallel_for(total, grain, [&](int64_t begin, int64_t end) {
        broadcast_detail::walk_runs<N>(plan, begin, end, fn);
    });
}

// out[k] = op(a[.], b[.]) over the broadcast plan of (a, b).  The inner loops are written per stretch pattern
// (vector-vector, scalar-vector, vector-scalar) so that the compiler vectorizes them.  `out` may equal `a` or `b`
// when that input is full (in-place).
template <typename A, typename B, typename Out, typename Op>
void broadcast_binary(const BroadcastPlan& plan, const A* a, const B* b, Out* out, Op op, ThreadPool* pool,
                      int64_t grain = kElementwiseGrain) {
    const bool a_vec = plan.inner_contiguous(0);
    const bool b_vec = plan.inner_contiguous(1);
    auto run = [&](auto a_is_vec, auto b_is_vec) {
        for_each_broadcast_run<2>(
            plan, pool,
            [&](int64_t o, const std::array<int64_t, 2>& in, int64_t count) {
                const A* pa = a + in[0];
                const B* pb = b + in[1];
                Out* po = out + o;
                auto loop = [&] {
                    if constexpr (a_is_vec && b_is_vec) {
                        for (int64_t k = 0; k < count; ++k) po[k] = op(pa[k], pb[k]);
                    } else if constexpr (a_is_vec) {
                        const B vb = *pb;
                        for (int64_t k = 0; k < count; ++k) po[k] = op(pa[k], vb);
                    } else if constexpr (b_is_vec) {
                        const A va = *pa;
                        for (int64_t k = 0; k < count; ++k) po[k] = op(va, pb[k]);
                    } else {
                        const Out v = op(*pa, *pb);
                        for (int64_t k = 0; k < count; ++k) po[k] = v;
                    }
                };
                // Float selects (max, PRelu, ...) only vectorize in the AVX-512 build (see util/vec_math.h),
                // and wider vectors help in-cache data anyway; a short run is not worth the dispatch.
                if constexpr (std::is_floating_point_v<A> || std::is_floating_point_v<Out>) {
                    if (count >= 64) return vec::run_best_isa(loop);
                }
                loop();
            },
            grain);
    };
    if (a_vec && b_vec) run(std::true_type{}, std::true_type{});
    else if (a_vec) run(std::true_type{}, std::false_type{});
    else if (b_vec) run(std::false_type{}, std::true_type{});
    else run(std::false_type{}, std::false_type{});
}

// Elementwise map over a contiguous range, split across the pool: out[k] = op(in[k]).  `out` may equal `in`.
template <typename In, typename Out, typename Op>
void parallel_map(const In* in, Out* out, int64_t count, Op op, ThreadPool* pool, int64_t grain = kElementwiseGrain) {
    auto body = [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) out[k] = op(in[k]);
    };
    if (pool == nullptr || pool->size() <= 1 || count <= grain) {
        body(0, count);
        return;
    }
    pool->parallel_for(count, grain, body);
}

}  // namespace tessera::cpu
