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
// The weight stays in its packed form (a quarter of float's bytes at 8 bits, an eighth at 4).  For a few rows of A
// (generating tokens) each column's blocks are decoded in vector registers and multiplied into the rows directly;
// for more rows each task takes a tile of columns, decodes its blocks into a small float panel in the thread's
// scratch (L1/L2-resident: never a float copy of the whole weight) and multiplies all of A's rows against it on the
// packed float micro-kernel.
// accuracy_level 4 asks for onnxruntime's int8 compute: A quantized to int8 per row and block (scale max|a| / 127),
// integer dot products per block, then scaled and the zero points corrected through the quantized rows' block
// sums, as onnxruntime does (its results differ from the float products by up to ~1e-3 relative, so a model
// quantized with it matches onnxruntime only when computed the same way).  Other levels compute in float.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/thread_scratch.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kTileColumns = 16;

class MatMulNBitsKernel final : public Kernel {
public:
    explicit MatMulNBitsKernel(const NodeInfo& info)
        : K_(info.attr_int("K")),
          N_(info.attr_int("N")),
          bits_(info.attr_int("bits", 4)),
          block_size_(info.attr_int("block_size")),
          int8_compute_(info.attr_int("accuracy_level", 0) == 4) {
        if (bits_ != 2 && bits_ != 4 && bits_ != 8)
            throw KernelError("MatMulNBits: bits must be 2, 4 or 8, got " + std::to_string(bits_));
        if (block_size_ < 16 || (block_size_ & (block_size_ - 1)) != 0)
            throw KernelError("MatMulNBits: block_size must be a power of 2 and at least 16, got " +
                              std::to_string(block_size_));
        if (K_ <= 0 || N_ <= 0) throw KernelError("MatMulNBits: K and N must be positive");
        blocks_ = (K_ + block_size_ - 1) / block_size_;
        blob_bytes_ = block_size_ * bits_ / 8;
        // Packed zero points that are constant (or absent: 2^(bits - 1)) are unpacked once, a byte per block.
        if (!info.has_input(3)) {
            block_zeros_.assign(static_cast<size_t>(N_ * blocks_), static_cast<uint8_t>(1u << (bits_ - 1)));
        } else if (const std::optional<Tensor> z = info.constant_tensor(3);
                   z && z->type == TESS_ELEMENT_UINT8 && z->size() == N_ * ((blocks_ * bits_ + 7) / 8)) {
            const int64_t row_bytes = (blocks_ * bits_ + 7) / 8;
            block_zeros_.resize(static_cast<size_t>(N_ * blocks_));
            for (int64_t n = 0; n < N_; ++n)
                for (int64_t b = 0; b < blocks_; ++b)
                    block_zeros_[n * blocks_ + b] = static_cast<uint8_t>(unpack(z->ptr<uint8_t>() + n * row_bytes, b));
        }
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
        // onnxruntime's int8 path exists for 4 and 8 bits with packed (or no) zero points.
        if (int8_compute_ && g_idx == nullptr && (bits_ == 4 || bits_ == 8) && zero.values.empty() &&
            A.type == TESS_ELEMENT_FLOAT32) {
            int8_product(pool, M, a_data, packed, scales.data(), zero, bias_data, out);
            y.finish(pool);
            return;
        }
        if (M <= kGemvRows && g_idx == nullptr && gemv_supported()) {
            gemv(pool, M, a_data, packed, scales.data(), zero, bias_data, out);
            y.finish(pool);
            return;
        }
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

    // A few rows of A (token generation: one): each column's blocks are decoded in vector registers and multiplied
    // into the rows as they are read, never stored.  The 4-bit values of a byte pair with A's even and odd
    // elements, so A is split into those two halves once (zero-padded to whole blocks).  Each block's products sum
    // (q - zero) * a, then scale once.
    static constexpr int64_t kGemvRows = 4;

    bool gemv_supported() const {
        // Whole 16-byte groups per block: 4 bits from blocks of 32, 8 bits from blocks of 16.
        return (bits_ == 4 || bits_ == 8) && blob_bytes_ % 16 == 0;
    }

    void gemv(ThreadPool& pool, int64_t M, const float* a, const uint8_t* packed, const float* scales,
              const ZeroPoints& zero, const float* bias, float* out) const {
        const int64_t padded = blocks_ * block_size_;
        // bits 4: [M][2][padded / 2] (even elements, then odd);  bits 8: [M][padded].
        float* split = thread_scratch_buffer<float, 22>(M * padded);
        std::fill(split, split + M * padded, 0.0f);
        for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < K_; ++k)
                split[m * padded + (bits_ == 4 ? (k % 2) * (padded / 2) + k / 2 : k)] = a[m * K_ + k];
        constexpr int64_t kColumnsPerTask = 16;
        const int64_t blocks = blocks_, blob = blob_bytes_, block = block_size_, N = N_;
        const bool float_zero = !zero.values.empty();
        pool.parallel_for((N + kColumnsPerTask - 1) / kColumnsPerTask, 1, [&](int64_t first, int64_t last) {
            const int64_t n_end = std::min(N, last * kColumnsPerTask);
            float* zeros = thread_scratch_buffer<float, 23>(blocks);
            const bool unpacked = !block_zeros_.empty() && !float_zero;
            vec::run_best_isa([&] {
                int64_t n = first * kColumnsPerTask;
                // One row of A, 4-bit blocks of 32 (a token of a 4-bit LLM): two columns a pass share A's loads.
                if (M == 1 && bits_ == 4 && blob == 16 && !float_zero && unpacked) {
                    for (; n + 1 < n_end; n += 2) {
                        float pair[2];
                        gemv_two_columns(packed + n * blocks * blob, scales + n * blocks,
                                         block_zeros_.data() + n * blocks, blocks, split, padded, pair);
                        out[n] = bias != nullptr ? pair[0] + bias[n] : pair[0];
                        out[n + 1] = bias != nullptr ? pair[1] + bias[n + 1] : pair[1];
                    }
                }
                for (; n < n_end; ++n) {
                    if (unpacked) {
                        const uint8_t* z = block_zeros_.data() + n * blocks;
                        for (int64_t b = 0; b < blocks; ++b) zeros[b] = z[b];
                    } else {
                        for (int64_t b = 0; b < blocks; ++b) zeros[b] = zero_point(zero, n, b);
                    }
                    float sums[kGemvRows];
                    const uint8_t* column = packed + n * blocks * blob;
                    const float* column_scales = scales + n * blocks;
                    const Column c{column, column_scales, zeros, float_zero, blocks, blob, block, split, padded};
                    switch (M * 16 + bits_) {
                        case 16 + 4: gemv_column<4, 1>(c, sums); break;
                        case 32 + 4: gemv_column<4, 2>(c, sums); break;
                        case 48 + 4: gemv_column<4, 3>(c, sums); break;
                        case 64 + 4: gemv_column<4, 4>(c, sums); break;
                        case 16 + 8: gemv_column<8, 1>(c, sums); break;
                        case 32 + 8: gemv_column<8, 2>(c, sums); break;
                        case 48 + 8: gemv_column<8, 3>(c, sums); break;
                        default: gemv_column<8, 4>(c, sums); break;
                    }
                    for (int64_t m = 0; m < M; ++m) out[m * N + n] = bias != nullptr ? sums[m] + bias[n] : sums[m];
                }
            });
        });
    }

    // accuracy_level 4 (see the file comment): per row m and block b, sa = max|a| / 127, qa = round(a * 127 / max|a|)
    // (half to even, saturated), then y[m, n] = sum_b sa * sb * (qa . qb) - (sa * sum(qa)) * (zero_b * sb).
    void int8_product(ThreadPool& pool, int64_t M, const float* a, const uint8_t* packed, const float* scales,
                      const ZeroPoints& zero, const float* bias, float* out) const {
        const int64_t padded = blocks_ * block_size_;
        int8_t* qa = reinterpret_cast<int8_t*>(thread_scratch_buffer<uint8_t, 25>(M * padded));
        float* row_info = thread_scratch_buffer<float, 26>(2 * M * blocks_);  // [M][blocks] scales, then block sums
        float* sa = row_info;
        float* block_sums = row_info + M * blocks_;
        pool.parallel_for(M, 1, [&](int64_t first, int64_t last) {
            for (int64_t m = first; m < last; ++m)
                for (int64_t b = 0; b < blocks_; ++b) {
                    const int64_t k0 = b * block_size_, count = std::min(block_size_, K_ - k0);
                    const float* x = a + m * K_ + k0;
                    float max_abs = 0;
                    for (int64_t i = 0; i < count; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
                    const float scale = max_abs / 127.0f, inverse = max_abs != 0 ? 127.0f / max_abs : 0.0f;
                    int8_t* q = qa + m * padded + k0;
                    int32_t sum = 0;
                    for (int64_t i = 0; i < block_size_; ++i) {
                        const float v = i < count ? std::nearbyint(x[i] * inverse) : 0.0f;
                        q[i] = static_cast<int8_t>(std::clamp(v, -128.0f, 127.0f));
                        sum += q[i];
                    }
                    sa[m * blocks_ + b] = scale;
                    block_sums[m * blocks_ + b] = scale * static_cast<float>(sum);
                }
        });
        pool.parallel_for(N_, std::max<int64_t>(1, 64 / std::max<int64_t>(1, M)), [&](int64_t first, int64_t last) {
            for (int64_t n = first; n < last; ++n) {
                const uint8_t* column = packed + n * blocks_ * blob_bytes_;
                for (int64_t m = 0; m < M; ++m) {
                    float acc = 0, correction = 0;
                    for (int64_t b = 0; b < blocks_; ++b) {
                        const uint8_t* blob = column + b * blob_bytes_;
                        const int8_t* q = qa + m * padded + b * block_size_;
                        int32_t dot = 0;
                        if (bits_ == 4) {
                            for (int64_t i = 0; i < blob_bytes_; ++i)
                                dot += q[2 * i] * (blob[i] & 15) + q[2 * i + 1] * (blob[i] >> 4);
                        } else {
                            for (int64_t i = 0; i < blob_bytes_; ++i) dot += q[i] * blob[i];
                        }
                        const float sb = scales[n * blocks_ + b];
                        acc += static_cast<float>(dot) * (sa[m * blocks_ + b] * sb);
                        correction += block_sums[m * blocks_ + b] * (zero_point(zero, n, b) * sb);
                    }
                    const float value = acc - correction;
                    out[m * N_ + n] = bias != nullptr ? value + bias[n] : value;
                }
            }
        });
    }

    struct Column {
        const uint8_t* data;
        const float* scales;
        const float* zeros;  // per block
        bool float_zero;
        int64_t blocks, blob, block;
        const float* split;
        int64_t padded;
    };

    // One column of W against Rows rows of A (split as gemv describes): sums[m] = sum_k W[n, k] * A[m, k].
    template <int Bits, int Rows>
    [[gnu::always_inline]] static inline void gemv_column(const Column& c, float* sums) {
        // One 16-byte group a block (4 bits in blocks of 32, 8 bits in blocks of 16, the common layouts): the
        // group loop disappears.
        if (c.blob == 16)
            gemv_column_groups<Bits, Rows, 1>(c, sums);
        else
            gemv_column_groups<Bits, Rows, 0>(c, sums);
    }

    // Columns n and n + 1 (adjacent in B, blocks of 32 4-bit values, packed zero points) against one row of A.
    [[gnu::always_inline]] static inline void gemv_two_columns(const uint8_t* data, const float* scales,
                                                               const uint8_t* zeros, int64_t blocks, const float* split,
                                                               int64_t padded, float* sums) {
        using V16u8 = uint8_t __attribute__((vector_size(16)));
        using V16i = int32_t __attribute__((vector_size(64)));
        using V16f = float __attribute__((vector_size(64)));
        V16f total0{}, total1{};
        const uint8_t* second = data + blocks * 16;
        for (int64_t b = 0; b < blocks; ++b) {
            __builtin_prefetch(data + b * 16 + 1024);
            __builtin_prefetch(second + b * 16 + 1024);
            V16u8 bytes0, bytes1;
            std::memcpy(&bytes0, data + b * 16, 16);
            std::memcpy(&bytes1, second + b * 16, 16);
            V16f ae, ao;
            std::memcpy(&ae, split + b * 16, sizeof ae);
            std::memcpy(&ao, split + padded / 2 + b * 16, sizeof ao);
            const V16i z0 = V16i{} + static_cast<int32_t>(zeros[b]);
            const V16i z1 = V16i{} + static_cast<int32_t>(zeros[blocks + b]);
            const V16f acc0 = __builtin_convertvector(__builtin_convertvector(bytes0 & 15, V16i) - z0, V16f) * ae +
                              __builtin_convertvector(__builtin_convertvector(bytes0 >> 4, V16i) - z0, V16f) * ao;
            const V16f acc1 = __builtin_convertvector(__builtin_convertvector(bytes1 & 15, V16i) - z1, V16f) * ae +
                              __builtin_convertvector(__builtin_convertvector(bytes1 >> 4, V16i) - z1, V16f) * ao;
            total0 += acc0 * scales[b];
            total1 += acc1 * scales[blocks + b];
        }
        float s0 = 0, s1 = 0;
        for (int lane = 0; lane < 16; ++lane) {
            s0 += total0[lane];
            s1 += total1[lane];
        }
        sums[0] = s0;
        sums[1] = s1;
    }

    template <int Bits, int Rows, int FixedGroups>
    [[gnu::always_inline]] static inline void gemv_column_groups(const Column& c, float* sums) {
        const int64_t blob = FixedGroups > 0 ? 16 * FixedGroups : c.blob;
        using V16u8 = uint8_t __attribute__((vector_size(16)));
        using V16i = int32_t __attribute__((vector_size(64)));
        using V16f = float __attribute__((vector_size(64)));
        V16f total[Rows] = {};
        for (int64_t b = 0; b < c.blocks; ++b) {
            __builtin_prefetch(c.data + b * blob + 1024);  // the weight streams from memory once per token
            const float zf = c.zeros[b];
            const V16i zi = V16i{} + static_cast<int32_t>(zf);
            V16f acc[Rows] = {};
            for (int64_t g = 0; g < blob; g += 16) {
                V16u8 bytes;
                std::memcpy(&bytes, c.data + b * blob + g, 16);
                if constexpr (Bits == 4) {
                    const V16i lo = __builtin_convertvector(bytes & 15, V16i);
                    const V16i hi = __builtin_convertvector(bytes >> 4, V16i);
                    const V16f wl = c.float_zero ? __builtin_convertvector(lo, V16f) - zf
                                                 : __builtin_convertvector(lo - zi, V16f);
                    const V16f wh = c.float_zero ? __builtin_convertvector(hi, V16f) - zf
                                                 : __builtin_convertvector(hi - zi, V16f);
                    const int64_t at = b * c.block / 2 + g;  // this group's first pair
                    for (int m = 0; m < Rows; ++m) {
                        V16f ae, ao;
                        std::memcpy(&ae, c.split + m * c.padded + at, sizeof ae);
                        std::memcpy(&ao, c.split + m * c.padded + c.padded / 2 + at, sizeof ao);
                        acc[m] += wl * ae + wh * ao;
                    }
                } else {
                    const V16i q = __builtin_convertvector(bytes, V16i);
                    const V16f w = c.float_zero ? __builtin_convertvector(q, V16f) - zf
                                                : __builtin_convertvector(q - zi, V16f);
                    for (int m = 0; m < Rows; ++m) {
                        V16f av;
                        std::memcpy(&av, c.split + m * c.padded + b * c.block + g, sizeof av);
                        acc[m] += w * av;
                    }
                }
            }
            for (int m = 0; m < Rows; ++m) total[m] += acc[m] * c.scales[b];
        }
        for (int m = 0; m < Rows; ++m) {
            float sum = 0;
            for (int lane = 0; lane < 16; ++lane) sum += total[m][lane];
            sums[m] = sum;
        }
    }

    int64_t K_, N_, bits_, block_size_;
    bool int8_compute_;
    int64_t blocks_ = 0, blob_bytes_ = 0;
    std::vector<uint8_t> block_zeros_;  // [N * blocks] when the zero points are constant and packed (or absent)
};

}  // namespace

void register_contrib_matmul_nbits_kernels(KernelRegistry& registry) {
    contrib::add(registry, "MatMulNBits", {{0, contrib::kFloat32Or16}, {1, {TESS_ELEMENT_UINT8}}},
                 make_factory<MatMulNBitsKernel>());
}

}  // namespace tessera::cpu
