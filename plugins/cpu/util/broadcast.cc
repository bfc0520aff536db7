#include "util/broadcast.h"

#include <string>

namespace tessera::cpu {

namespace {

[[noreturn]] void throw_incompatible(std::string_view op, const Shape& a, const Shape& b) {
    throw KernelError(std::string(op) + ": shapes " + shape_string(a) + " and " + shape_string(b) +
                      " cannot be broadcast together");
}

}  // namespace

Shape broadcast_shapes(std::string_view op, std::span<const Shape* const> shapes) {
    size_t rank = 0;
    for (const Shape* s : shapes) rank = std::max(rank, s->size());
    Shape out(rank, 1);
    // Remember which operand fixed each dimension, to name the culprits in the error.
    std::vector<const Shape*> source(rank, nullptr);
    for (const Shape* s : shapes) {
        const size_t offset = rank - s->size();
        for (size_t d = 0; d < s->size(); ++d) {
            const int64_t dim = (*s)[d];
            int64_t& o = out[offset + d];
            if (dim == o) continue;
            if (o == 1) {
                o = dim;
                source[offset + d] = s;
            } else if (dim != 1) {
                throw_incompatible(op, source[offset + d] ? *source[offset + d] : *s, *s);
            }
        }
    }
    return out;
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
    const Shape* shapes[] = {&a, &b};
    return broadcast_shapes(op, shapes);
}

Shape legacy_broadcast_shape(std::string_view op, const Shape& a, const Shape& b, bool broadcast,
                             std::optional<int64_t> axis) {
    if (!broadcast) {
        if (a != b) {
            throw KernelError(std::string(op) + ": shapes " + shape_string(a) + " and " + shape_string(b) +
                              " differ and the broadcast attribute is 0");
        }
        return b;
    }
    const int64_t rank_a = static_cast<int64_t>(a.size());
    const int64_t rank_b = static_cast<int64_t>(b.size());
    int64_t start = axis.value_or(rank_a - rank_b);
    if (start < 0) start += rank_a;
    if (rank_b > rank_a || start < 0 || start + rank_b > rank_a) {
        throw KernelError(std::string(op) + ": cannot broadcast " + shape_string(b) + " onto " + shape_string(a) +
                          " at axis " + std::to_string(axis.value_or(rank_a - rank_b)));
    }
    Shape padded(a.size(), 1);
    for (int64_t d = 0; d < rank_b; ++d) {
        const int64_t dim = b[d];
        if (dim != 1 && dim != a[start + d]) throw_incompatible(op, a, b);
        padded[start + d] = dim;
    }
    return padded;
}

BroadcastPlan::BroadcastPlan(std::string_view op, std::initializer_list<const Shape*> inputs) {
    output_shape_ = broadcast_shapes(op, std::span<const Shape* const>(inputs.begin(), inputs.size()));
    build(op, std::span<const Shape* const>(inputs.begin(), inputs.size()));
}

BroadcastPlan::BroadcastPlan(std::string_view op, std::span<const Shape* const> inputs) {
    output_shape_ = broadcast_shapes(op, inputs);
    build(op, inputs);
}

BroadcastPlan::BroadcastPlan(std::string_view op, std::span<const Shape* const> inputs, const Shape& output) {
    output_shape_ = output;
    for (const Shape* s : inputs) {
        bool ok = s->size() <= output.size();
        for (size_t d = 0; ok && d < s->size(); ++d) {
            const int64_t dim = (*s)[d];
            ok = dim == 1 || dim == output[output.size() - s->size() + d];
        }
        if (!ok) {
            throw KernelError(std::string(op) + ": shape " + shape_string(*s) + " cannot be broadcast to " +
                              shape_string(output));
        }
    }
    build(op, inputs);
}

void BroadcastPlan::build(std::string_view op, std::span<const Shape* const> inputs) {
    const size_t n = inputs.size();
    const size_t rank = output_shape_.size();
    output_size_ = shape_size(output_shape_);

    // Per output dimension (size-1 output dimensions dropped: they never advance anything), whether each input
    // stretches there.  Then merge neighbours whose stretch pattern agrees.
    std::vector<int64_t> dims;
    std::vector<std::vector<bool>> stretched(n);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t out_dim = output_shape_[d];
        if (out_dim == 1) continue;
        std::vector<bool> pattern(n);
        for (size_t i = 0; i < n; ++i) {
            const Shape& s = *inputs[i];
            const size_t offset = rank - s.size();
            pattern[i] = d < offset || s[d - offset] == 1;
        }
        bool merge = !dims.empty();
        for (size_t i = 0; merge && i < n; ++i) merge = stretched[i].back() == pattern[i];
        if (merge) {
            dims.back() *= out_dim;
        } else {
            dims.push_back(out_dim);
            for (size_t i = 0; i < n; ++i) stretched[i].push_back(pattern[i]);
        }
    }
    if (dims.empty()) {  // scalar output, or all dimensions 1
        dims.push_back(1);
        for (size_t i = 0; i < n; ++i) stretched[i].push_back(false);
    }

    if (dims.size() > kMaxCollapsedRank) {
        throw KernelError(std::string(op) + ": too many dimensions to broadcast (" + std::to_string(dims.size()) + ")");
    }
    dims_ = dims;
    strides_.assign(n, std::vector<int64_t>(dims.size(), 0));
    full_.assign(n, false);
    scalar_.assign(n, false);
    for (size_t i = 0; i < n; ++i) {
        int64_t stride = 1;
        bool any_stretch = false;
        for (size_t d = dims.size(); d-- > 0;) {
            if (stretched[i][d] && dims[d] != 1) {
                any_stretch = true;
                continue;
            }
            strides_[i][d] = stride;
            stride *= dims[d];
        }
        // An input with size-1 collapsed dims only (the scalar-output case) counts as contiguous.
        full_[i] = !any_stretch && shape_size(*inputs[i]) == output_size_;
        scalar_[i] = shape_size(*inputs[i]) == 1;
    }
}

}  // namespace tessera::cpu
