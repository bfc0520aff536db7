// CPU provider: tensors seen in a kernel's compute type.  Kernels that compute every input type in one precision
// (float for float/float16/bfloat16, double for double) read inputs through ConvertedInput<C> and write outputs
// through ConvertedOutput<C>: when a tensor already holds C they are the tensor's own memory, otherwise a converted
// copy (rounding to nearest even on the way out).  This generalizes util/float16_compute.h to mixed input types.
//
//     const ConvertedInput<float> x(ctx.input(0), ctx.pool());
//     ConvertedOutput<float> y(ctx.output(0, x_type, shape));
//     compute(x.data(), y.data());
//     y.finish(ctx.pool());
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/thread_pool.h"
#include "util/element_convert.h"

namespace tessera::cpu {

// Calls fn.template operator()<C>() with the compute type: double when `use_double`, else float.
template <typename Fn> void with_float_or_double(bool use_double, Fn&& fn) {
    if (use_double)
        fn.template operator()<double>();
    else
        fn.template operator()<float>();
}

// Rounds a float the way storing it into a tensor of `type` would; for kernels that reproduce the roundings of a
// definition that computes in a 16-bit type.
inline float round_to_type(int32_t type, float v) {
    if (type == TESS_ELEMENT_FLOAT16) return fp::half_to_float(fp::float_to_half(v));
    if (type == TESS_ELEMENT_BFLOAT16) return fp::bfloat16_to_float(fp::float_to_bfloat16(v));
    return v;
}

// Converts `count` elements between two value types, in parallel blocks for large tensors.
inline void convert_elements(ThreadPool& pool, int32_t src_type, const void* src, int32_t dst_type, void* dst,
                             int64_t count) {
    constexpr int64_t kBlock = 1 << 16;  // a multiple of 4, as convert_block requires
    if (count <= kBlock || pool.size() <= 1) {
        convert::convert_block(src_type, src, dst_type, dst, 0, count, convert::CastOptions{});
        return;
    }
    pool.parallel_for((count + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
        convert::convert_block(src_type, src, dst_type, dst, begin * kBlock, std::min(count, end * kBlock),
                               convert::CastOptions{});
    });
}

template <typename C> class ConvertedInput {
public:
    ConvertedInput() = default;  // an absent optional input: data() is null
    ConvertedInput(const Tensor& t, ThreadPool& pool) : shape_(t.shape) {
        if (t.type == element_type_of<C>()) {
            data_ = t.ptr<C>();
            return;
        }
        if (!convert::is_value_type(t.type)) throw_unsupported_type("conversion to the compute type", t.type);
        copy_.resize(static_cast<size_t>(t.size()));
        convert_elements(pool, t.type, t.data, element_type_of<C>(), copy_.data(), t.size());
        data_ = copy_.data();
    }
    ConvertedInput(ConvertedInput&&) noexcept = default;
    ConvertedInput& operator=(ConvertedInput&&) noexcept = default;

    const C* data() const { return data_; }
    const Shape& shape() const { return shape_; }

private:
    const C* data_ = nullptr;
    Shape shape_;
    std::vector<C> copy_;
};

template <typename C> class ConvertedOutput {
public:
    ConvertedOutput() = default;  // an output nobody wants: data() is null, finish() does nothing
    explicit ConvertedOutput(Tensor& out) : out_(&out) {
        if (out.type == element_type_of<C>()) {
            data_ = out.ptr<C>();
        } else {
            if (!convert::is_value_type(out.type)) throw_unsupported_type("conversion from the compute type", out.type);
            buffer_.resize(static_cast<size_t>(out.size()));
            data_ = buffer_.data();
        }
    }
    ConvertedOutput(ConvertedOutput&&) noexcept = default;
    ConvertedOutput& operator=(ConvertedOutput&&) noexcept = default;

    C* data() const { return data_; }
    explicit operator bool() const { return data_ != nullptr || (out_ != nullptr && out_->size() == 0); }

    // Writes the computed values into the real output when it has another type.
    void finish(ThreadPool& pool) {
        if (out_ != nullptr && !buffer_.empty())
            convert_elements(pool, element_type_of<C>(), buffer_.data(), out_->type, out_->data, out_->size());
    }

private:
    Tensor* out_ = nullptr;
    C* data_ = nullptr;
    std::vector<C> buffer_;
};

}  // namespace tessera::cpu
