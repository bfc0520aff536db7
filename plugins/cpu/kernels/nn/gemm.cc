// CPU provider: Gemm, MatMul and the optimizer's FusedMatMulBias (MatMul + bias [+ activation], provider.h).  float16 and bfloat16 are computed in float (inputs widened, the float product,
// the result rounded back); float16/bfloat16 constant inputs are widened once, when the kernel is created.
#include <optional>
#include <string>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/compute_cast.h"
#include "util/conv_epilogue.h"
#include "util/float16_compute.h"
#include "util/gemm.h"
#include "util/gemm_activation.h"
#include "util/lane_gemm.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

// The types gemm() computes in; float16 and bfloat16 are computed in float.
using GemmTypes = TypeList<float, double, int32_t, int64_t, uint32_t, uint64_t>;

int32_t compute_type_of(int32_t type) { return is_16bit_float(type) ? TESS_ELEMENT_FLOAT32 : type; }

void check_same_type(std::string_view op, int32_t a_type, int32_t b_type, const char* b_name) {
    if (a_type != b_type) {
        throw KernelError(std::string(op) + ": input " + b_name + " has element type " + element_type_name(b_type) +
                          " but A has " + element_type_name(a_type));
    }
}

// Input `index`, widened to float when the node binds it to a float16/bfloat16 constant (so that compute() does
// not convert it on every run).
class InputWithWidenedConstant {
public:
    InputWithWidenedConstant(const NodeInfo& info, size_t index) : index_(index) {
        const std::optional<Tensor> constant = info.constant_tensor(index);
        if (constant && is_16bit_float(constant->type)) {
            model_type_ = constant->type;
            widened_.emplace(WidenedTensor(*constant).tensor());
        }
    }

    bool present(const KernelContext& ctx) const { return widened_ || ctx.has_input(index_); }
    // The tensor to compute with, and the element type the model gives it.
    const Tensor& tensor(const KernelContext& ctx) const { return widened_ ? widened_->tensor() : ctx.input(index_); }
    int32_t model_type(const KernelContext& ctx) const { return widened_ ? model_type_ : ctx.input(index_).type; }

private:
    size_t index_;
    int32_t model_type_ = TESS_ELEMENT_UNDEFINED;
    std::optional<OwnedTensor> widened_;
};

// Y = alpha * A' * B' + beta * C.  Opsets 1-6 broadcast C only when the "broadcast" attribute says so; from opset 7
// C broadcasts unidirectionally to [M, N]; from opset 11 C is optional.  com.microsoft's FusedGemm is the same
// product (as opset 11 defines it) followed by an activation (util/gemm_activation.h).
class GemmKernel final : public Kernel {
public:
    explicit GemmKernel(const NodeInfo& info)
        : trans_a_(info.attr_int("transA", 0) != 0),
          trans_b_(info.attr_int("transB", 0) != 0),
          alpha_(info.attr_float("alpha", 1.0f)),
          beta_(info.attr_float("beta", 1.0f)),
          broadcast_c_(info.opset() >= 7 || info.domain() == "com.microsoft" || info.attr_int("broadcast", 0) != 0),
          activation_(info.op_type() == "FusedGemm" ? GemmActivation::parse(info) : GemmActivation{}),
          b_(info, 1),
          c_(info, 2) {
        // A constant float B is packed once (as op(B)) and the original given back to the core.
        const std::optional<Tensor> B = info.constant_tensor(1);
        if (B && B->type == TESS_ELEMENT_FLOAT32 && B->rank() == 2 && packed_gemm_supported()) {
            const int64_t K = trans_b_ ? B->shape[1] : B->shape[0], N = trans_b_ ? B->shape[0] : B->shape[1];
            if (!trans_a_ && lane_gemm_supported() && lanes_fill(N)) {
                // alpha * op(B) on the lane kernels (a classifier's [1, K] x [K, 1000] streams B once).
                std::vector<float> scaled;
                const float* b = B->ptr<float>();
                if (alpha_ != 1.0f) {
                    scaled.assign(b, b + B->size());
                    for (float& v : scaled) v *= alpha_;
                    b = scaled.data();
                }
                lane_b_ = trans_b_ ? LanePackedFilters(b, N, K, B->shape[1])
                                   : LanePackedFilters::from_depth_major(b, N, K, B->shape[1]);
            } else {
                packed_b_ = PackedColumns(B->ptr<float>(), trans_b_, K, N, B->shape[1]);
            }
            packed_shape_ = B->shape;
            info.release_constant(1);
        }
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& A = ctx.input(0);
        const Tensor packed_view{TESS_ELEMENT_FLOAT32, packed_shape_, nullptr, nullptr};
        const bool packed = !packed_b_.empty() || !lane_b_.empty();
        const Tensor& B = packed ? packed_view : b_.tensor(ctx);
        const Tensor* C = c_.present(ctx) ? &c_.tensor(ctx) : nullptr;
        check_same_type("Gemm", A.type, packed ? TESS_ELEMENT_FLOAT32 : b_.model_type(ctx), "B");
        if (C != nullptr) check_same_type("Gemm", A.type, c_.model_type(ctx), "C");
        if (A.rank() != 2 || B.rank() != 2) {
            throw KernelError("Gemm: A and B must be 2-D (A " + shape_string(A.shape) + ", B " + shape_string(B.shape) +
                              ")");
        }
        const int64_t M = trans_a_ ? A.shape[1] : A.shape[0];
        const int64_t K = trans_a_ ? A.shape[0] : A.shape[1];
        const int64_t N = trans_b_ ? B.shape[0] : B.shape[1];
        if ((trans_b_ ? B.shape[1] : B.shape[0]) != K) {
            throw KernelError("Gemm: inner dimensions differ (A " + shape_string(A.shape) +
                              " transA=" + std::to_string(trans_a_) + ", B " + shape_string(B.shape) +
                              " transB=" + std::to_string(trans_b_) + ")");
        }
        const bool use_c = C != nullptr && beta_ != 0.0f && C->size() > 0;
        int64_t c_row_stride = 0, c_col_stride = 0;
        if (C != nullptr) c_strides(C->shape, M, N, c_row_stride, c_col_stride);

        Tensor& Y = ctx.output(0, A.type, {M, N});
        ThreadPool& pool = ctx.pool();
        dispatch_list(GemmTypes{}, compute_type_of(A.type), [&]<typename T>() {
            const ConvertedInput<T> a(A, pool), b(B, pool);
            const ConvertedInput<T> c = use_c ? ConvertedInput<T>(*C, pool) : ConvertedInput<T>();
            ConvertedOutput<T> result(Y);
            T* y = result.data();
            auto finish = [&] {
                if (activation_.active() && M * N > 0)
                    pool.parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)),
                                      [&](int64_t r0, int64_t r1) { activation_.apply(y + r0 * N, (r1 - r0) * N); });
                result.finish(pool);
            };
            GemmEpilogue add_c;
            if (use_c) {
                const T* c_data = c.data();
                const T beta = static_cast<T>(beta_);
                add_c = [=](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
                    for (int64_t m = r0; m < r1; ++m) {
                        T* row = y + m * N;
                        const T* crow = c_data + m * c_row_stride;
                        if (c_col_stride == 0) {
                            const T v = beta * crow[0];
                            for (int64_t n = c0; n < c1; ++n) row[n] += v;
                        } else {
                            for (int64_t n = c0; n < c1; ++n) row[n] += beta * crow[n];
                        }
                    }
                };
            }
            if constexpr (std::is_same_v<T, float>) {
                if (!lane_b_.empty()) {
                    lane_matmul(pool, a.data(), M, A.shape[1], lane_b_, y, N);
                    if (add_c) add_c(0, M, 0, N);
                    finish();
                    return;
                }
                if (packed) {
                    gemm_prepacked(pool, trans_a_, M, K, alpha_, a.data(), A.shape[1], packed_b_, 0.0f, y, N);
                    if (add_c) add_c(0, M, 0, N);
                    finish();
                    return;
                }
            }
            gemm<T>(pool, trans_a_, trans_b_, M, N, K, static_cast<T>(alpha_), a.data(), A.shape[1], b.data(),
                    B.shape[1], T(0), y, N, add_c);
            finish();
        });
    }

private:
    // Element strides of C over Y's rows and columns (0 where C broadcasts).
    void c_strides(const Shape& c, int64_t M, int64_t N, int64_t& row_stride, int64_t& col_stride) const {
        auto fail = [&] {
            return KernelError("Gemm: C " + shape_string(c) + " does not broadcast to the output [" +
                               std::to_string(M) + "," + std::to_string(N) + "]");
        };
        if (c.size() > 2) throw fail();
        if (!broadcast_c_ && !(c.size() == 2 && c[0] == M && c[1] == N)) {
            throw KernelError("Gemm: C " + shape_string(c) + " must be [" + std::to_string(M) + "," +
                              std::to_string(N) + "] when the broadcast attribute is 0");
        }
        const int64_t cols = c.empty() ? 1 : c.back();
        const int64_t rows = c.size() == 2 ? c[0] : 1;
        if ((cols != N && cols != 1) || (rows != M && rows != 1)) throw fail();
        col_stride = cols == N && N != 1 ? 1 : 0;
        row_stride = rows == M && M != 1 ? cols : 0;
    }

    bool trans_a_;
    bool trans_b_;
    float alpha_;
    float beta_;
    bool broadcast_c_;
    GemmActivation activation_;  // FusedGemm's; none for Gemm
    InputWithWidenedConstant b_;
    InputWithWidenedConstant c_;
    PackedColumns packed_b_;  // op(B) packed, when B is a constant float matrix
    LanePackedFilters lane_b_;  // or alpha * op(B) for the lane kernels, when transA is 0 and its columns fill them
    Shape packed_shape_;        // B's shape then
};

// ---- The FusedMatMulBias tail ----------------------------------------------------------------------------------

struct IdentityAct {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return x; }
};
struct ReluAct {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::max(x, vec::splat(0.0f)); }
};
struct SigmoidAct {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::sigmoid(x); }
};
struct TanhAct {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::tanh(x); }
};
struct GeluAct {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::gelu(x); }
};
struct GeluTanhAct {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::gelu_tanh(x); }
};
template <typename Act>
struct BiasThen {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf y, vec::Vf b) const { return Act{}(y + b); }
};

template <typename Act>
void map_block(const float* bias, float* y, int64_t ldy, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    vec::run_best_isa([&] {
        for (int64_t r = r0; r < r1; ++r) {
            float* row = y + r * ldy + c0;
            if (bias != nullptr) vec::map2(row, bias + c0, row, c1 - c0, BiasThen<Act>{});
            else vec::map(row, row, c1 - c0, Act{});
        }
    });
}

// y = activation(y + bias) over rows [r0, r1) and columns [c0, c1) of a row-major y (bias NULL when the products
// already started from it), vectorized where vec_math.h has the activation.
void finish_block(const ConvEpilogue& e, const float* bias, float* y, int64_t ldy, int64_t r0, int64_t r1,
                  int64_t c0, int64_t c1) {
    using A = ConvEpilogue::Activation;
    switch (e.activation) {
        case A::None: return map_block<IdentityAct>(bias, y, ldy, r0, r1, c0, c1);
        case A::Relu: return map_block<ReluAct>(bias, y, ldy, r0, r1, c0, c1);
        case A::Sigmoid: return map_block<SigmoidAct>(bias, y, ldy, r0, r1, c0, c1);
        case A::Tanh: return map_block<TanhAct>(bias, y, ldy, r0, r1, c0, c1);
        case A::Gelu: return map_block<GeluAct>(bias, y, ldy, r0, r1, c0, c1);
        case A::GeluTanh: return map_block<GeluTanhAct>(bias, y, ldy, r0, r1, c0, c1);
        default:
            map_block<IdentityAct>(bias, y, ldy, r0, r1, c0, c1);
            for (int64_t r = r0; r < r1; ++r) e.apply(y + r * ldy + c0, static_cast<const float*>(nullptr), c1 - c0);
            return;
    }
}

// MatMul, and FusedMatMulBias (float32): Y = activation(MatMul(A, B) + bias), bias N elements along the last axis.
class MatMulKernel final : public Kernel {
public:
    explicit MatMulKernel(const NodeInfo& info)
        : b_(info, 1), fused_(info.op_type() == "FusedMatMulBias"), epilogue_(ConvEpilogue::parse(info)) {
        // A constant float matrix B (the weights of a linear layer) is packed once for the micro-kernels, and the
        // original is given back to the core.
        const std::optional<Tensor> B = info.constant_tensor(1);
        if (B && B->type == TESS_ELEMENT_FLOAT32 && B->rank() == 2 && lane_gemm_supported() && lanes_fill(B->shape[1])) {
            lane_b_ = LanePackedFilters::from_depth_major(B->ptr<float>(), B->shape[1], B->shape[0], B->shape[1]);
            packed_shape_ = B->shape;
            info.release_constant(1);
            // A constant bias becomes the products' starting value, padded to whole panels.
            const std::optional<Tensor> bias = fused_ ? info.constant_tensor(2) : std::nullopt;
            if (bias && bias->type == TESS_ELEMENT_FLOAT32 && static_cast<int64_t>(bias->size()) == B->shape[1]) {
                lane_bias_.assign(static_cast<size_t>(lane_b_.panels() * lane_b_.panel_width()), 0.0f);
                std::copy(bias->ptr<float>(), bias->ptr<float>() + bias->size(), lane_bias_.begin());
            }
        } else if (B && B->type == TESS_ELEMENT_FLOAT32 && B->rank() == 2 && packed_gemm_supported()) {
            packed_b_ = PackedColumns(B->ptr<float>(), false, B->shape[0], B->shape[1], B->shape[1]);
            packed_shape_ = B->shape;
            info.release_constant(1);
        }
    }

    void compute(KernelContext& ctx) const override {
        if (!packed_b_.empty() || !lane_b_.empty()) {
            compute_prepacked(ctx);
            return;
        }
        if (fused_) {
            compute_fused(ctx);
            return;
        }
        const Tensor& A = ctx.input(0);
        const Tensor& B = b_.tensor(ctx);
        check_same_type("MatMul", A.type, b_.model_type(ctx), "B");
        const MatMulPlan plan = plan_matmul(A.shape, B.shape, "MatMul");
        Tensor& Y = ctx.output(0, A.type, plan.output_shape);
        ThreadPool& pool = ctx.pool();
        dispatch_list(GemmTypes{}, compute_type_of(A.type), [&]<typename T>() {
            const ConvertedInput<T> a(A, pool), b(B, pool);
            ConvertedOutput<T> y(Y);
            run_matmul<T>(pool, plan, a.data(), b.data(), y.data());
            y.finish(pool);
        });
    }

private:
    // FusedMatMulBias's bias checked against the product's N: the elements to add.
    const float* fused_bias(const KernelContext& ctx, int64_t N) const {
        const Tensor& bias = ctx.input(2);
        if (bias.type != TESS_ELEMENT_FLOAT32 || static_cast<int64_t>(bias.size()) != N || bias.rank() == 0 ||
            bias.shape.back() != N)
            throw KernelError("FusedMatMulBias: bias " + shape_string(bias.shape) + " must hold the " +
                              std::to_string(N) + " float elements of the product's last axis");
        return bias.ptr<float>();
    }

    // The bias and activation over the whole output, rows split across the pool.
    void finish_output(ThreadPool& pool, const float* bias, float* y, int64_t rows, int64_t N) const {
        pool.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, N)), [&](int64_t first, int64_t last) {
            finish_block(epilogue_, bias, y, N, first, last, 0, N);
        });
    }

    // FusedMatMulBias with a B that is not a packed constant: MatMul, then the tail.
    void compute_fused(KernelContext& ctx) const {
        const Tensor& A = ctx.input(0);
        const Tensor& B = b_.tensor(ctx);
        if (A.type != TESS_ELEMENT_FLOAT32 || B.type != TESS_ELEMENT_FLOAT32 || B.rank() != 2)
            throw KernelError("FusedMatMulBias: A and B must be float32, B 2-D (A " + shape_string(A.shape) + ", B " +
                              shape_string(B.shape) + ")");
        const MatMulPlan plan = plan_matmul(A.shape, B.shape, "FusedMatMulBias");
        const float* bias = fused_bias(ctx, plan.N);
        Tensor& Y = ctx.output(0, A.type, plan.output_shape);
        if (Y.size() == 0) return;
        run_matmul<float>(ctx.pool(), plan, A.ptr<float>(), B.ptr<float>(), Y.ptr<float>());
        finish_output(ctx.pool(), bias, Y.ptr<float>(), static_cast<int64_t>(Y.size()) / plan.N, plan.N);
    }

    void compute_prepacked(KernelContext& ctx) const {
        const Tensor& A = ctx.input(0);
        check_same_type("MatMul", A.type, TESS_ELEMENT_FLOAT32, "B");
        const MatMulPlan plan = plan_matmul(A.shape, packed_shape_, "MatMul");
        Tensor& Y = ctx.output(0, A.type, plan.output_shape);
        if (Y.size() == 0) return;
        // B is one matrix, so A's rows over every batch form one product.
        const int64_t K = packed_shape_[0], rows = static_cast<int64_t>(A.size()) / std::max<int64_t>(K, 1);
        if (K == 0) {
            std::fill(Y.ptr<float>(), Y.ptr<float>() + Y.size(), 0.0f);
            return;
        }
        const int64_t N = packed_shape_[1];
        const float* bias = fused_ ? fused_bias(ctx, N) : nullptr;
        float* y = Y.ptr<float>();
        if (!lane_b_.empty()) {
            // The bias is the products' starting value (the kernel's padded copy when it is a constant); the
            // activation runs on each task's block while it is in cache.
            const float* start = nullptr;
            if (fused_) {
                if (lane_bias_.empty()) {
                    float* padded = thread_scratch_buffer<float, 6>(lane_b_.panels() * lane_b_.panel_width());
                    std::fill(padded, padded + lane_b_.panels() * lane_b_.panel_width(), 0.0f);
                    std::copy(bias, bias + N, padded);
                    start = padded;
                } else {
                    start = lane_bias_.data();
                }
            }
            const bool activation = fused_ && epilogue_.activation != ConvEpilogue::Activation::None;
            const GemmEpilogue tail = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
                finish_block(epilogue_, nullptr, y, N, r0, r1, c0, c1);
            };
            lane_matmul(ctx.pool(), A.ptr<float>(), rows, K, lane_b_, y, N, start, activation ? &tail : nullptr);
            return;
        }
        gemm_prepacked(ctx.pool(), false, rows, K, 1.0f, A.ptr<float>(), K, packed_b_, 0.0f, y, N);
        if (fused_) finish_output(ctx.pool(), bias, y, rows, N);
    }

    InputWithWidenedConstant b_;
    PackedColumns packed_b_;  // B packed, when it is a constant float matrix
    LanePackedFilters lane_b_;  // or packed for the lane kernels (util/lane_gemm.h), when its columns fill them
    bool fused_;                    // FusedMatMulBias
    ConvEpilogue epilogue_;         // its activation
    std::vector<float> lane_bias_;  // its constant bias, padded to lane_b_'s panels
    Shape packed_shape_;
};

// Why a FusedGemm cannot run, from its attributes and declared ranks.
std::string check_fused_gemm(const NodeInfo& info) {
    GemmActivation::parse(info);  // throws KernelError naming the problem
    const TessNodeView& node = info.view();
    const char* names[] = {"A", "B", "C"};
    for (size_t i = 0; i < 3 && i < node.input_count; ++i) {
        if (node.inputs[i] == nullptr || node.inputs[i]->rank < 0) continue;
        if (i < 2 && node.inputs[i]->rank != 2)
            return std::string(names[i]) + " must be 2-D, it has rank " + std::to_string(node.inputs[i]->rank);
        if (i == 2 && node.inputs[i]->rank > 2)
            return "C must have rank 2 at most, it has rank " + std::to_string(node.inputs[i]->rank);
    }
    return "";
}

}  // namespace

void register_gemm_kernels(KernelRegistry& registry) {
    // Opsets 1-8 define float16, float and double; opset 9 adds 32/64-bit integers, opset 13 bfloat16 (accepted
    // for every opset: it is computed like float16).
    const std::vector<int32_t> legacy_types = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<int32_t> gemm_types = type_ids_with_16bit_floats(GemmTypes{});
    registry.add({"",
                  "Gemm",
                  1,
                  8,
                  {{0, legacy_types}, {1, legacy_types}, {2, legacy_types}},
                  KernelMemory::Normal,
                  make_factory<GemmKernel>()});
    registry.add({"",
                  "Gemm",
                  9,
                  0,
                  {{0, gemm_types}, {1, gemm_types}, {2, gemm_types}},
                  KernelMemory::Normal,
                  make_factory<GemmKernel>()});
    registry.add({"",
                  "MatMul",
                  1,
                  8,
                  {{0, legacy_types}, {1, legacy_types}},
                  KernelMemory::Normal,
                  make_factory<MatMulKernel>()});
    registry.add(
        {"", "MatMul", 9, 0, {{0, gemm_types}, {1, gemm_types}}, KernelMemory::Normal, make_factory<MatMulKernel>()});
    // onnxruntime's com.microsoft FusedGemm: Gemm (opset 11) and an activation, in the types its schema allows.
    const std::vector<int32_t> fused_gemm_types{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_FLOAT64};
    registry.add({"com.microsoft", "FusedGemm", 1, 0, {{0, fused_gemm_types}, {1, fused_gemm_types}, {2, fused_gemm_types}},
                  KernelMemory::Normal, make_factory<GemmKernel>(), check_fused_gemm});
    const std::vector<int32_t> float32{TESS_ELEMENT_FLOAT32};
    registry.add({TESS_FUSED_OPS_DOMAIN,
                  "FusedMatMulBias",
                  1,
                  0,
                  {{0, float32}, {1, float32}, {2, float32}},
                  KernelMemory::Normal,
                  make_factory<MatMulKernel>()});
}

}  // namespace tessera::cpu
