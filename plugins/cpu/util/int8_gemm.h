// CPU provider: exact 8-bit integer matrix products for the quantized operators (MatMulInteger, QLinearMatMul,
// ConvInteger, QLinearConv): int32 sums of (a - a_zero) * (b - b_zero) over uint8/int8 operands, wrapped to 32 bits
// as ONNX allows ("accumulation may overflow if and only if in 32 bits").
//
// On CPUs with AMX the products run on tdpbusd tiles, with AVX-512 VNNI on vpdpbusd (four uint8 x int8 products
// summed into an int32 lane), elsewhere on a floating-point gemm whose every partial sum is provably an exactly
// representable integer (see int8_gemm.cc).  TESSERA_CPU_MAX_ISA in the environment caps the choice (for testing):
// avx512 (no AMX), avx2 or none (the fallback).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/thread_pool.h"

namespace tessera::cpu {

// Whether int8_gemm runs on AMX or AVX-512 VNNI on this CPU (else on the floating-point fallback).
bool int8_gemm_uses_vnni();
// Whether it runs on AMX tiles (32 rows of A at a time).
bool int8_gemm_uses_amx();

// A K x N operand of int8 or uint8 elements, packed once for int8_gemm: element (k, n) is
// data[k * row_stride + n * column_stride] (a transposed matrix packs by swapping the strides).  With a pool, the
// packing is split across it.
class Int8PackedB {
public:
    Int8PackedB() = default;
    Int8PackedB(const void* data, bool is_signed, int64_t K, int64_t N, int64_t row_stride, int64_t column_stride,
                ThreadPool* pool = nullptr);

    int64_t depth() const { return K_; }
    int64_t columns() const { return N_; }
    bool is_signed() const { return signed_; }

    // Layout (details for int8_gemm): B stored as int8 (uint8 values shifted by -128).  For AMX/VNNI, panels of
    // kPanelColumns columns, each [groups()][kPanelColumns][4]; otherwise row-major [K][N].
    static constexpr int64_t kPanelColumns = 32;
    int64_t groups() const { return groups_; }  // of 4 rows (k), zero-padded
    const int8_t* panel(int64_t p) const { return data_.data() + p * groups() * 4 * kPanelColumns; }
    const int8_t* rows() const { return data_.data(); }
    const int32_t* column_sums() const { return column_sums_.data(); }

private:
    int64_t K_ = 0, N_ = 0;
    bool signed_ = true;
    int64_t groups_ = 0;
    std::vector<int8_t> data_;
    std::vector<int32_t> column_sums_;  // VNNI layout only: sums over k of the stored values
};

// An M x K operand of int8 or uint8 elements prepared once for int8_gemm: a constant operand (a convolution's
// filters) packs when its kernel is created instead of on every product.  With a pool, the packing is split
// across it.
class Int8PackedA {
public:
    Int8PackedA() = default;
    Int8PackedA(const void* data, bool is_signed, int64_t M, int64_t K, int64_t lda, ThreadPool* pool = nullptr);

    int64_t rows() const { return M_; }
    int64_t depth() const { return K_; }
    bool is_signed() const { return signed_; }

    // Layout (details for int8_gemm): AMX/VNNI: the uint8 form A' (int8 values shifted by +128) with rows padded
    // to whole groups of 4 (AMX: to 64-byte steps of K and 32-row blocks, in tile order), and its row sums;
    // otherwise the bytes as given with row stride K.
    const uint8_t* data() const { return data_.data(); }
    const uint32_t* row_sums() const { return row_sums_.data(); }

private:
    int64_t M_ = 0, K_ = 0;
    bool signed_ = false;
    std::vector<uint8_t> data_;
    std::vector<uint32_t> row_sums_;
};

// Where int8_gemm delivers the sums instead of a C matrix: an epilogue (a requantization, say) that consumes
// them while they are in cache.
class Int8GemmSink {
public:
    virtual ~Int8GemmSink() = default;
    // sums[r * ld + j] = C[m0 + r, n0 + j] for r < rows, j < columns.  Called from the pool's workers, once for
    // every block of a tiling of C; calls may run concurrently and must not throw.
    virtual void write(int64_t m0, int64_t rows, int64_t n0, int64_t columns, const int32_t* sums,
                       int64_t ld) const = 0;
};

// C = (A - a_zero) x (B - b_zero) as below, for A packed once, delivered to `sink`.
void int8_gemm(ThreadPool& pool, const Int8PackedA& A, const Int8PackedB& B, const int32_t* a_zero,
               const int32_t* b_zero, const Int8GemmSink& sink);

// The same for B (K x N bytes, row stride ldb, uint8 or int8 per b_signed, zero point b_zero for every column)
// read as it is: each task packs the panel of B it multiplies, in the region of the products, instead of a pass
// and a region of its own over all of B first (a convolution's image, which changes every run).
// whole_rows (16 or 32): on AMX and VNNI, every row block the sink gets starts at a multiple of it and holds a
// multiple of it (the last one excepted), so that blocks of 16 channels arrive whole (a blocked output); 1: any.
void int8_gemm_streaming(ThreadPool& pool, const Int8PackedA& A, const void* B, bool b_signed, int64_t ldb,
                         int64_t N, const int32_t* a_zero, int32_t b_zero, const Int8GemmSink& sink,
                         int64_t whole_rows = 1);

// The same into C (row stride ldc).
void int8_gemm(ThreadPool& pool, const Int8PackedA& A, const Int8PackedB& B, const int32_t* a_zero,
               const int32_t* b_zero, int32_t* C, int64_t ldc);

// C[m, n] = sum_k (A[m, k] - a_zero[m]) * (B[k, n] - b_zero[n]), wrapped to 32 bits, for m < M and
// n < B.columns().  A is M x B.depth() uint8 (a_signed false) or int8 elements with row stride lda; a_zero holds M
// values and b_zero B.columns() values (null: zero).  Splits the work across the pool; call it from outside any
// parallel region.  Throws KernelError only for a depth too large for exact accumulation (beyond 10^11).
void int8_gemm(ThreadPool& pool, int64_t M, const void* A, bool a_signed, int64_t lda, const Int8PackedB& B,
               const int32_t* a_zero, const int32_t* b_zero, int32_t* C, int64_t ldc);

}  // namespace tessera::cpu
