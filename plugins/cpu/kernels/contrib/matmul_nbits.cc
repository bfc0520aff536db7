// CPU provider, com.microsoft MatMulNBits: Y = A x W^T (+ bias), with W [N, K] stored as 2-, 4- or 8-bit integers in
// blocks of `block_size` along K, each block with its own scale and zero point (onnxruntime's MatMulNBitsQuantizer
// and the LLM exporters write it for weight-only quantization).
//
// Layout (onnxruntime's contrib operator specification):
//   B            uint8 [N, blocks, block_size * bits / 8]: column n's K values, block by block, the first value
//                of a byte in its low bits;  blocks = ceil(K / block_size).
//   scales       A's type, [N * blocks] (or [N, blocks]).
//   zero_points  optional: uint8 packed like B's values, [N, ceil(blocks * bits / 8)], or A's type [N * blocks];
//                absent: 2^(bits - 1).
//   g_idx        optional int32 [K]: the block of each k (act-order GPTQ); absent: k / block_size.
//   bias         optional, A's type, [N].
//   W[n, k] = (q - zero_point) * scale, in float.
//
// The weight stays in its packed form (a quarter of float's bytes at 8 bits, an eighth at 4).  Each task takes a
// tile of columns, decodes its blocks into a small float panel in the thread's scratch (L1/L2-resident: never a
// float copy of the whole weight) and multiplies all of A's rows against it on the packed float micro-kernel.
// accuracy_level (onnxruntime's choice of an int8 compute path) is accepted; the products are float.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kTileColumns = 16;

class MatMulNBitsKernel final : public Kernel {
public:
    explicit MatMulNBitsKernel(const NodeInfo& info)
        : K_(info.attr_int("K")),
          N_(info.attr_int("N")),
          bits_(info.attr_int("bits", 4)),
          block_size_(info.attr_int("block_size")) {
        if (bits_ != 2 && bits_ != 4 && bits_ != 8)
            throw KernelError("MatMulNBits: bits must be 2, 4 or 8, got " + std::to_string(bits_));
        if (block_size_ < 16 || (block_size_ & (block_size_ - 1)) != 0)
            throw KernelError("MatMulNBits: block_size must be a power of 2 and at least 16, got " +
                              std::to_string(block_size_));
        if (K_ <= 0 || N_ <= 0) throw KernelError("MatMulNBits: K and N must be positive");
        blocks_ = (K_ + block_size_ - 1) / block_size_;
        blob_bytes_ = block_size_ * bits_ / 8;
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "MatMulNBits";
        const Tensor& A = ctx.input(0);
        const Tensor& B = ctx.input(1);
        const Tensor& scales_in = ctx.input(2);
        if (A.type != TESS_ELEMENT_FLOAT32 && A.type != TESS_ELEMENT_FLOAT16) throw_unsupported_type(op + " A", A.type);
        if (A.rank() < 1 || A.shape.back() != K_)
            throw KernelError(op + ": A " + shape_string(A.shape) + " must end in K = " + std::to_string(K_));
        if (B.type != TESS_ELEMENT_UINT8 || B.size() != N_ * blocks_ * blob_bytes_)
            throw KernelError(op + ": B " + shape_string(B.shape) + " must be uint8 [" + std::to_string(N_) + ", " +
                              std::to_string(blocks_) + ", " + std::to_string(blob_bytes_) + "]");
        if (scales_in.size() != N_ * blocks_)
            throw KernelError(op + ": scales " + shape_string(scales_in.shape) + " must hold N * blocks = " +
                              std::to_string(N_ * blocks_) + " values");
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> a(A, pool), scales(scales_in, pool);
        ZeroPoints zero;
        if (ctx.has_input(3)) zero = zero_points(op, ctx.input(3), pool);
        const int32_t* g_idx = nullptr;
        if (ctx.has_input(4)) {
            const Tensor& g = ctx.input(4);
            if (g.type != TESS_ELEMENT_INT32 || g.size() != K_)
                throw KernelError(op + ": g_idx must be int32 [" + std::to_string(K_) + "]");
            g_idx = g.ptr<int32_t>();
            for (int64_t k = 0; k < K_; ++k)
                if (g_idx[k] < 0 || g_idx[k] >= blocks_) throw KernelError(op + ": g_idx names a block out of range");
        }
        ConvertedInput<float> bias;
        if (ctx.has_input(5)) {
            if (ctx.input(5).size() != N_) throw KernelError(op + ": bias must have N = " + std::to_string(N_) + " values");
            bias = ConvertedInput<float>(ctx.input(5), pool);
        }

        Shape out_shape = A.shape;
        out_shape.back() = N_;
        ConvertedOutput<float> y(ctx.output(0, A.type, out_shape));
        const int64_t M = K_ == 0 ? 0 : A.size() / K_;
        if (M == 0) {
            y.finish(pool);
            return;
        }
        const auto* packed = B.ptr<uint8_t>();
        const float* a_data = a.data();
        const float* bias_data = bias.data();
        float* out = y.data();
        const int64_t tiles = (N_ + kTileColumns - 1) / kTileColumns;
        const bool use_packed = packed_gemm_supported();
        if (!use_packed) check_gemm_dimensions(M, kTileColumns, K_);
        pool.parallel_for(tiles, 1, [&](int64_t first, int64_t last) {
            float* panel = thread_scratch_buffer<float, 21>(kTileColumns * K_);
            for (int64_t t = first; t < last; ++t) {
                const int64_t n0 = t * kTileColumns, width = std::min(kTileColumns, N_ - n0);
                for (int64_t j = 0; j < width; ++j)
                    decode_column(packed, scales.data(), zero, g_idx, n0 + j, panel + j * K_);
                // C[:, n0:n0+width] = A [M, K] x panel^T  (panel is [width, K]).
                if (use_packed)
                    packed_sgemm(false, true, M, width, K_, 1.0f, a_data, K_, panel, K_, 0.0f, out + n0, N_);
                else
                    gemm_serial<float>(false, true, M, width, K_, 1.0f, a_data, K_, panel, K_, 0.0f, out + n0, N_);
                if (bias_data != nullptr)
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t j = 0; j < width; ++j) out[m * N_ + n0 + j] += bias_data[n0 + j];
            }
        });
        y.finish(pool);
    }

private:
    // The zero points: packed like B's values (uint8), or float values; none: 2^(bits - 1).
    struct ZeroPoints {
        const uint8_t* packed = nullptr;
        int64_t row_bytes = 0;
        std::vector<float> values;  // float zero points, [N * blocks]
        bool present() const { return packed != nullptr || !values.empty(); }
    };

    ZeroPoints zero_points(const std::string& op, const Tensor& z, ThreadPool& pool) const {
        ZeroPoints zp;
        if (z.type == TESS_ELEMENT_UINT8) {
            zp.row_bytes = (blocks_ * bits_ + 7) / 8;
            if (z.size() != N_ * zp.row_bytes)
                throw KernelError(op + ": uint8 zero_points " + shape_string(z.shape) + " must hold N * " +
                                  std::to_string(zp.row_bytes) + " bytes");
            zp.packed = z.ptr<uint8_t>();
            return zp;
        }
        if (z.size() != N_ * blocks_)
            throw KernelError(op + ": zero_points " + shape_string(z.shape) + " must hold N * blocks values");
        const ConvertedInput<float> values(z, pool);
        zp.values.assign(values.data(), values.data() + z.size());
        return zp;
    }

    // The value of index i in a run of `bits`-bit values packed little-end first.
    uint32_t unpack(const uint8_t* bytes, int64_t i) const {
        const int64_t per_byte = 8 / bits_;
        return (bytes[i / per_byte] >> ((i % per_byte) * bits_)) & ((1u << bits_) - 1);
    }

    float zero_point(const ZeroPoints& zp, int64_t n, int64_t block) const {
        if (zp.packed != nullptr) return static_cast<float>(unpack(zp.packed + n * zp.row_bytes, block));
        if (!zp.values.empty()) return zp.values[n * blocks_ + block];
        return static_cast<float>(1u << (bits_ - 1));
    }

    // Column n of W, K floats.
    void decode_column(const uint8_t* packed, const float* scales, const ZeroPoints& zp, const int32_t* g_idx,
                       int64_t n, float* w) const {
        const uint8_t* column = packed + n * blocks_ * blob_bytes_;
        if (g_idx != nullptr) {
            for (int64_t k = 0; k < K_; ++k) {
                const int64_t b = g_idx[k];
                const uint32_t q = unpack(column, k);
                w[k] = (static_cast<float>(q) - zero_point(zp, n, b)) * scales[n * blocks_ + b];
            }
            return;
        }
        for (int64_t b = 0; b < blocks_; ++b) {
            const float scale = scales[n * blocks_ + b], zero = zero_point(zp, n, b);
            const uint8_t* blob = column + b * blob_bytes_;
            const int64_t k0 = b * block_size_, count = std::min(block_size_, K_ - k0);
            float* wb = w + k0;
            if (bits_ == 4) {
                // Two values a byte: a loop the compiler vectorizes.
                for (int64_t i = 0; i + 1 < count; i += 2) {
                    const uint8_t byte = blob[i / 2];
                    wb[i] = (static_cast<float>(byte & 15) - zero) * scale;
                    wb[i + 1] = (static_cast<float>(byte >> 4) - zero) * scale;
                }
                if (count % 2 != 0) wb[count - 1] = (static_cast<float>(blob[count / 2] & 15) - zero) * scale;
            } else if (bits_ == 8) {
                for (int64_t i = 0; i < count; ++i) wb[i] = (static_cast<float>(blob[i]) - zero) * scale;
            } else {
                for (int64_t i = 0; i < count; ++i) wb[i] = (static_cast<float>(unpack(blob, i)) - zero) * scale;
            }
        }
    }

    int64_t K_, N_, bits_, block_size_;
    int64_t blocks_ = 0, blob_bytes_ = 0;
};

}  // namespace

void register_contrib_matmul_nbits_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> a_types{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16};
    registry.add(KernelDef{.domain = "com.microsoft",
                           .op_type = "MatMulNBits",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, a_types}, {1, {TESS_ELEMENT_UINT8}}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<MatMulNBitsKernel>()});
}

}  // namespace tessera::cpu
