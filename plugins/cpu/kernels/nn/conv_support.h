// CPU provider: what Conv (conv.cc) and ConvTranspose (conv_transpose.cc) share: their attributes, constant weights
// and bias held as copies in the compute type, the checks both make of X, W and B, and per-call scratch buffers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "util/float16_compute.h"
#include "util/gemm.h"
#include "util/thread_scratch.h"
#include "util/window2d.h"

namespace tessera::cpu::conv_support {

// A buffer of one convolution call (phase planes, cropped grid, column matrix), kept on the calling thread for the
// next call: a new allocation of a few hundred kilobytes is a new mapping, whose page faults cost ~8% of a
// ResNet's run.  Slots 1.. keep one call's buffers apart from each other and from the tasks' slot 0.
template <typename T, int kSlot>
inline T* call_buffer(int64_t count) {
    return thread_scratch_buffer<T, kSlot + 1>(count);
}

inline std::string dims_string(const std::vector<int64_t>& v) { return shape_string(v); }

// The element type the products run in: float16 and bfloat16 are computed in float.
inline int32_t compute_type_of(int32_t type) { return is_16bit_float(type) ? TESS_ELEMENT_FLOAT32 : type; }

// A copy of a constant input, widened to float when it is float16/bfloat16 so that compute() never converts it.
inline std::optional<OwnedTensor> computable_constant(const NodeInfo& info, size_t index) {
    std::optional<OwnedTensor> copy = copy_constant_input(info, index);
    if (copy && is_16bit_float(copy->tensor().type)) return OwnedTensor(WidenedTensor(copy->tensor()).tensor());
    return copy;
}

// What Conv and ConvTranspose share: attributes, and weights/bias copied at creation when they are constants.
class ConvKernelBase : public Kernel {
protected:
    explicit ConvKernelBase(const NodeInfo& info)
        : op_(info.op_type()),
          attrs_(WindowAttributes::parse(info)),
          group_(info.attr_int("group", 1)),
          weights_type_(info.input_constant(1) != nullptr ? info.input_type(1) : TESS_ELEMENT_UNDEFINED),
          bias_type_(info.input_constant(2) != nullptr ? info.input_type(2) : TESS_ELEMENT_UNDEFINED),
          weights_(computable_constant(info, 1)),
          bias_(computable_constant(info, 2)),
          has_bias_input_(info.has_input(2)) {
        if (group_ < 1) throw KernelError(op_ + ": group must be positive, got " + std::to_string(group_));
        // The kernel holds its own copies (packed, for float filters): the core may free the model's.
        if (weights_) info.release_constant(1);
        if (bias_) info.release_constant(2);
    }

    const Tensor& weights(const KernelContext& ctx) const { return weights_ ? weights_->tensor() : ctx.input(1); }
    // B of the node whose inputs start at `first` among the step's (a kernel that took over another step finds that
    // step's inputs after its own, so input 2 of a node without B is not B).
    const Tensor* bias(const KernelContext& ctx, size_t first = 0) const {
        if (bias_) return &bias_->tensor();
        return has_bias_input_ && ctx.has_input(first + 2) ? &ctx.input(first + 2) : nullptr;
    }

    // Checks what both ops require of X, W and B; returns W's spatial dimensions (the kernel).
    Shape check_inputs(const Tensor& X, const Tensor& W, const Tensor* B, int64_t bias_size_of_w) const {
        if (X.type != TESS_ELEMENT_FLOAT32 && X.type != TESS_ELEMENT_FLOAT64 && !is_16bit_float(X.type)) {
            throw_unsupported_type(op_, X.type);
        }
        // Constants are held in the compute type: compare the types the model gives them.
        const int32_t w_type = weights_type_ != TESS_ELEMENT_UNDEFINED ? weights_type_ : W.type;
        const int32_t b_type = bias_type_ != TESS_ELEMENT_UNDEFINED ? bias_type_ : B != nullptr ? B->type : X.type;
        if (w_type != X.type || b_type != X.type) {
            throw KernelError(op_ + ": X, W and B must have the same element type");
        }
        if (X.rank() < 3) throw KernelError(op_ + ": X " + shape_string(X.shape) + " must be [N, C, D1, ...]");
        if (W.rank() != X.rank()) {
            throw KernelError(op_ + ": W " + shape_string(W.shape) + " must have the rank of X " +
                              shape_string(X.shape));
        }
        Shape kernel(W.shape.begin() + 2, W.shape.end());
        if (!attrs_.kernel_shape.empty() && attrs_.kernel_shape != kernel) {
            throw KernelError(op_ + ": kernel_shape " + dims_string(attrs_.kernel_shape) + " does not match W " +
                              shape_string(W.shape));
        }
        if (B != nullptr && (B->rank() != 1 || B->shape[0] != bias_size_of_w)) {
            throw KernelError(op_ + ": B " + shape_string(B->shape) + " must be [" + std::to_string(bias_size_of_w) +
                              "]");
        }
        return kernel;
    }

    std::string op_;
    WindowAttributes attrs_;
    int64_t group_;
    int32_t weights_type_;  // the model's element type of constant weights and bias (UNDEFINED when not constant)
    int32_t bias_type_;
    std::optional<OwnedTensor> weights_;  // constant weights and bias, float16/bfloat16 widened to float
    std::optional<OwnedTensor> bias_;
    bool has_bias_input_;  // the node has a B input (constant or not)
};

}  // namespace tessera::cpu::conv_support
