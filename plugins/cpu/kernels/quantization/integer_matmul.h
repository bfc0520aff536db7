// CPU provider: the integer matrix product that MatMulInteger, QLinearMatMul (quantized_products.cc) and the
// com.microsoft quantized products (kernels/contrib/quantized_matmul.cc) share: where each row's or column's scale
// and zero point live, B packed once for util/int8_gemm.h, and the exact int32 sums over a batch of products.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "runtime/kernel.h"
#include "util/element_convert.h"
#include "util/gemm.h"
#include "util/int8_gemm.h"

namespace tessera::cpu::quant {

// Where the scale or zero point of element (row, column) of an operand viewed as [rows, columns] lives:
// (row % row_modulo, or row / row_divisor * row_multiplier) + column * column_step.
struct ParamIndex {
    int64_t row_modulo = 0;
    int64_t row_divisor = 1;
    int64_t row_multiplier = 0;
    int64_t column_step = 0;

    int64_t operator()(int64_t row, int64_t column) const {
        return (row_modulo ? row % row_modulo : row / row_divisor * row_multiplier) + column * column_step;
    }
};

enum class MatrixSide { A, B };  // A: parameters per row, B: per column

// The layout of a MatMul operand's scale or zero point: a scalar (per tensor), or per row of A / per column of B,
// given either as a 1-D vector shared by every matrix of the batch or with the operand's shape and the reduced
// dimension set to 1.
inline ParamIndex matrix_param_index(const std::string& op, const char* name, const Shape& param,
                                     const Shape& operand, MatrixSide side) {
    ParamIndex index;
    if (shape_size(param) == 1) return index;
    const size_t rank = operand.size();
    if (rank >= 2) {
        const int64_t rows = operand[rank - 2], columns = operand[rank - 1];
        Shape full = operand;
        full[side == MatrixSide::A ? rank - 1 : rank - 2] = 1;
        if (side == MatrixSide::A && param == Shape{rows}) {
            index.row_modulo = rows;
            return index;
        }
        if (side == MatrixSide::A && param == full) {
            index.row_multiplier = 1;
            return index;
        }
        if (side == MatrixSide::B && param == Shape{columns}) {
            index.column_step = 1;
            return index;
        }
        if (side == MatrixSide::B && param == full) {
            index.row_divisor = rows;
            index.row_multiplier = columns;
            index.column_step = 1;
            return index;
        }
    }
    throw KernelError(op + ": " + name + " " + shape_string(param) + " must be a scalar or per-" +
                      (side == MatrixSide::A ? "row" : "column") + " values for " + shape_string(operand));
}

inline void check_8bit(const std::string& op, const char* name, const Tensor& t) {
    if (t.type != TESS_ELEMENT_INT8 && t.type != TESS_ELEMENT_UINT8) throw_unsupported_type(op + " " + name, t.type);
}

// The zero points of an int8/uint8 operand and where each element finds its own.
struct ZeroPoints {
    std::vector<int32_t> values{0};
    ParamIndex index;

    // Absent: zero.  The zero point must have the operand's element type.
    static ZeroPoints load(const std::string& op, const Tensor* zero_point, const Tensor& data) {
        ZeroPoints zp;
        if (zero_point == nullptr) return zp;
        if (zero_point->type != data.type) {
            throw KernelError(op + ": a zero point's element type " + element_type_name(zero_point->type) +
                              " differs from its input's " + element_type_name(data.type));
        }
        std::vector<int64_t> wide(static_cast<size_t>(zero_point->size()));
        convert::load_int64s(zero_point->type, zero_point->data, 0, zero_point->size(), wide.data());
        zp.values.assign(wide.begin(), wide.end());
        return zp;
    }
    // Per row of A (count rows from global row `first`), or per column of the B matrix whose first global row is
    // `row` (count columns).
    std::vector<int32_t> rows(int64_t first, int64_t count) const {
        std::vector<int32_t> out(static_cast<size_t>(count));
        for (int64_t r = 0; r < count; ++r) out[r] = values[index(first + r, 0)];
        return out;
    }
    std::vector<int32_t> columns(int64_t row, int64_t count) const {
        std::vector<int32_t> out(static_cast<size_t>(count));
        for (int64_t c = 0; c < count; ++c) out[c] = values[index(row, c)];
        return out;
    }
};

// The B operand of an integer MatMul packed for int8_gemm, one packing per matrix of its batch.  Kernels pack a
// constant B once when they are created.
struct PackedMatMulB {
    Shape shape;
    int32_t type = TESS_ELEMENT_UNDEFINED;
    std::vector<Int8PackedB> matrices;

    static PackedMatMulB pack(const Tensor& B, ThreadPool* pool) {
        PackedMatMulB packed;
        packed.shape = B.shape;
        packed.type = B.type;
        const int64_t K = B.rank() == 1 ? B.shape[0] : B.shape[B.rank() - 2];
        const int64_t N = B.rank() == 1 ? 1 : B.shape[B.rank() - 1];
        const int64_t count = (K * N) != 0 ? B.size() / (K * N) : 0;
        const auto* bytes = static_cast<const uint8_t*>(B.data);
        for (int64_t i = 0; i < count; ++i) {
            packed.matrices.emplace_back(bytes + i * K * N, B.type == TESS_ELEMENT_INT8, K, N, N, 1, pool);
        }
        return packed;
    }
};

inline std::optional<PackedMatMulB> prepack_matmul_b(const NodeInfo& info, size_t index) {
    const std::optional<Tensor> B = info.constant_tensor(index);
    if (!B || (B->type != TESS_ELEMENT_INT8 && B->type != TESS_ELEMENT_UINT8) || B->rank() == 0) return std::nullopt;
    return PackedMatMulB::pack(*B, nullptr);
}

// A constant B packed when the kernel is created, after which the model's copy is released (each weight is held
// once): compute reads B's type and shape from `view` (no data) and the values from `packed`.  A B that is not
// constant is read from the context.
struct PrepackedB {
    std::optional<PackedMatMulB> packed;
    Tensor view;

    PrepackedB(const NodeInfo& info, size_t index) : packed(prepack_matmul_b(info, index)), index_(index) {
        if (!packed) return;
        view = Tensor{packed->type, packed->shape, nullptr, nullptr};
        info.release_constant(index);
    }
    const Tensor& tensor(const KernelContext& ctx) const { return packed ? view : ctx.input(index_); }
    const PackedMatMulB* get() const { return packed ? &*packed : nullptr; }

private:
    size_t index_;
};

// The global row of A and of B where product p of the plan starts (for parameter lookups).
struct ProductRows {
    int64_t a_row, b_row;
};
inline ProductRows product_rows(const MatMulPlan& plan, int64_t p) {
    // A folded batch has no offset tables: A's matrices are contiguous and B is shared.
    const int64_t a_offset = plan.fold_batch_into_rows ? p * plan.M * plan.K : plan.a_offsets[p];
    const int64_t b_offset = plan.fold_batch_into_rows ? 0 : plan.b_offsets[p];
    return {plan.K ? a_offset / plan.K : 0, plan.N ? b_offset / plan.N : 0};
}

// sums (laid out as plan.output_shape) = (A - a_zero) x (B - b_zero), exact, wrapped to 32 bits.
inline void integer_matmul(ThreadPool& pool, const MatMulPlan& plan, const Tensor& A, const ZeroPoints& a_zero,
                           const Tensor& B, const ZeroPoints& b_zero, const PackedMatMulB* prepacked, int32_t* sums) {
    const int64_t M = plan.M, N = plan.N, K = plan.K;
    if (plan.batch * M * N == 0) return;
    std::optional<PackedMatMulB> packed_here;
    if (prepacked == nullptr || prepacked->shape != B.shape || prepacked->type != B.type) {
        packed_here = PackedMatMulB::pack(B, &pool);
        prepacked = &*packed_here;
    }
    if (K == 0) {
        std::fill(sums, sums + plan.batch * M * N, 0);
        return;
    }
    const auto* a_bytes = static_cast<const uint8_t*>(A.data);
    const bool a_signed = A.type == TESS_ELEMENT_INT8;
    // A folded batch is one product of batch * M rows.
    const int64_t products = plan.fold_batch_into_rows ? 1 : plan.batch;
    const int64_t rows = plan.fold_batch_into_rows ? plan.batch * M : M;
    for (int64_t p = 0; p < products; ++p) {
        const ProductRows at = product_rows(plan, p);
        const std::vector<int32_t> za = a_zero.rows(at.a_row, rows);
        const std::vector<int32_t> zb = b_zero.columns(at.b_row, N);
        int8_gemm(pool, rows, a_bytes + at.a_row * K, a_signed, K, prepacked->matrices[at.b_row / K], za.data(),
                  zb.data(), sums + p * M * N, N);
    }
}

}  // namespace tessera::cpu::quant
