// CPU provider: float16 and bfloat16 tensors computed in float.  Kernels whose real implementation is the float
// one widen 16-bit float inputs into float buffers, run the float code and narrow the result (round to nearest
// even), which is also how the ONNX reference computes these types.
//
//     if (is_16bit_float(x.type)) {
//         const WidenedTensor wide(x);
//         Tensor& y = ctx.output(0, x.type, x.shape);
//         NarrowedOutput result(y);
//         run_float(wide.tensor(), result.tensor());
//         result.finish();
//     }
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/kernel.h"
#include "util/float_formats.h"

namespace tessera::cpu {

inline bool is_16bit_float(int32_t type) { return type == TESS_ELEMENT_FLOAT16 || type == TESS_ELEMENT_BFLOAT16; }

inline void widen_to_float(int32_t type, const void* src, float* dst, int64_t n) {
    const uint16_t* bits = static_cast<const uint16_t*>(src);
    if (type == TESS_ELEMENT_FLOAT16) {
        for (int64_t i = 0; i < n; ++i) dst[i] = fp::half_to_float(bits[i]);
    } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = fp::bfloat16_to_float(bits[i]);
    }
}

inline void narrow_from_float(const float* src, int32_t type, void* dst, int64_t n) {
    uint16_t* bits = static_cast<uint16_t*>(dst);
    if (type == TESS_ELEMENT_FLOAT16) {
        for (int64_t i = 0; i < n; ++i) bits[i] = fp::float_to_half(src[i]);
    } else {
        for (int64_t i = 0; i < n; ++i) bits[i] = fp::float_to_bfloat16(src[i]);
    }
}

// A float copy of a float16/bfloat16 tensor, seen as a FLOAT32 tensor of the same shape.
class WidenedTensor {
public:
    explicit WidenedTensor(const Tensor& t) : data_(static_cast<size_t>(t.size())) {
        widen_to_float(t.type, t.data, data_.data(), t.size());
        view_.type = TESS_ELEMENT_FLOAT32;
        view_.shape = t.shape;
        view_.data = data_.data();
    }
    const Tensor& tensor() const { return view_; }

private:
    std::vector<float> data_;
    Tensor view_;
};

// A FLOAT32 stand-in for a float16/bfloat16 output; finish() writes the rounded values into the real output.
class NarrowedOutput {
public:
    explicit NarrowedOutput(Tensor& out) : out_(out), data_(static_cast<size_t>(out.size())) {
        view_.type = TESS_ELEMENT_FLOAT32;
        view_.shape = out.shape;
        view_.data = data_.data();
    }
    Tensor& tensor() { return view_; }
    void finish() { narrow_from_float(data_.data(), out_.type, out_.data, out_.size()); }

private:
    Tensor& out_;
    std::vector<float> data_;
    Tensor view_;
};

}  // namespace tessera::cpu
