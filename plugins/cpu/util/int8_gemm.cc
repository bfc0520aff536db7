// CPU provider: exact 8-bit integer matrix products (see int8_gemm.h).
//
// VNNI path: with A = A' - sa (A' the uint8 form of A: A itself, or A + 128 for int8) and B = B' + sb (B' the int8 form of B:
// B itself, or B - 128 for uint8), (A - a_zero) x (B - b_zero) = P - ZB * rowsum(A') - ZA * colsum(B') + K ZA ZB,
// where P = A' x B' (vpdpbusd), ZA[m] = sa + a_zero[m] and ZB[n] = b_zero[n] - sb.  Every step is 32-bit modular
// arithmetic (vpdpbusd does not saturate), so the result is the exact sum modulo 2^32.
//
// Fallback: a floating-point gemm of the centered operands.  Each product is an integer of magnitude at most
// max|a - a_zero| * max|b - b_zero|, and every partial sum a gemm forms (in whatever order, blocking or FMA use)
// is a sum of at most K such products, so when K times that bound is at most 2^24 (float) or 2^53 (double), every
// intermediate value is an integer the type represents exactly and the result is the exact sum.
#include "util/int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernel.h"
#include "util/gemm.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kPanel = Int8PackedB::kPanelColumns;
constexpr int64_t kTileRows = 6;  // rows per micro-tile: 12 accumulators of 16 lanes

bool detect_vnni() {
    if (const char* cap = std::getenv("TESSERA_CPU_MAX_ISA")) {
        const std::string value(cap);
        if (value == "avx2" || value == "none") return false;
    }
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}

// The products of `Rows` rows of A' (row stride lda, whole groups of 4 bytes) with one panel of B', written to
// out[Rows][kPanel].
template <int Rows>
[[gnu::target("avx512f,avx512vnni")]] void vnni_tile(const uint8_t* A, int64_t lda, const int8_t* panel, int64_t groups,
                                                   int32_t* out) {
    __m512i acc[Rows][2];
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    for (int64_t g = 0; g < groups; ++g) {
        const __m512i b0 = _mm512_loadu_si512(panel + g * 4 * kPanel);
        const __m512i b1 = _mm512_loadu_si512(panel + g * 4 * kPanel + 64);
#pragma GCC unroll 8
        for (int r = 0; r < Rows; ++r) {
            int32_t quad;
            std::memcpy(&quad, A + r * lda + g * 4, sizeof quad);
            const __m512i a = _mm512_set1_epi32(quad);
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, b1);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
        _mm512_storeu_si512(out + r * kPanel, acc[r][0]);
        _mm512_storeu_si512(out + r * kPanel + 16, acc[r][1]);
    }
}

using TileFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int32_t*);
constexpr TileFn kTiles[kTileRows + 1] = {nullptr,        vnni_tile<1>, vnni_tile<2>, vnni_tile<3>,
                                          vnni_tile<4>, vnni_tile<5>, vnni_tile<6>};

// Sums wrap to 32 bits (the exact integer is representable in int64).
template <typename F> inline int32_t wrap_int32(F exact_integer) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(exact_integer)));
}

// Largest |value - zero_point(row, column)| over a rows x columns byte matrix (split across the pool).
template <typename Value, typename ZeroPoint>
int32_t largest_centered(ThreadPool& pool, int64_t rows, int64_t columns, const Value& value, const ZeroPoint& zero) {
    std::atomic<int32_t> largest{0};
    pool.parallel_for(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, columns)), [&](int64_t first, int64_t last) {
        int32_t local = 0;
        for (int64_t r = first; r < last; ++r) {
            for (int64_t c = 0; c < columns; ++c) {
                const int32_t v = value(r, c) - zero(r, c);
                local = std::max(local, v < 0 ? -v : v);
            }
        }
        int32_t seen = largest.load();
        while (local > seen && !largest.compare_exchange_weak(seen, local)) {
        }
    });
    return largest.load();
}

template <typename F>
void float_gemm(ThreadPool& pool, int64_t M, const void* A, bool a_signed, int64_t lda, const Int8PackedB& B,
                const int32_t* a_zero, const int32_t* b_zero, int32_t* C, int64_t ldc) {
    const int64_t K = B.depth(), N = B.columns();
    const auto* a_bytes = static_cast<const uint8_t*>(A);
    const int32_t b_shift = B.is_signed() ? 0 : 128;
    std::vector<F> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N)), c(static_cast<size_t>(M * N));
    pool.parallel_for(M, std::max<int64_t>(1, 65536 / K), [&](int64_t first, int64_t last) {
        for (int64_t m = first; m < last; ++m) {
            const int32_t zero = a_zero ? a_zero[m] : 0;
            for (int64_t k = 0; k < K; ++k) {
                const int32_t v = a_signed ? int32_t(int8_t(a_bytes[m * lda + k])) : int32_t(a_bytes[m * lda + k]);
                a[m * K + k] = F(v - zero);
            }
        }
    });
    pool.parallel_for(K, std::max<int64_t>(1, 65536 / N), [&](int64_t first, int64_t last) {
        for (int64_t k = first; k < last; ++k) {
            for (int64_t n = 0; n < N; ++n) b[k * N + n] = F(B.rows()[k * N + n] + b_shift - (b_zero ? b_zero[n] : 0));
        }
    });
    gemm<F>(pool, false, false, M, N, K, F(1), a.data(), K, b.data(), N, F(0), c.data(), N);
    pool.parallel_for(M, std::max<int64_t>(1, 65536 / N), [&](int64_t first, int64_t last) {
        for (int64_t m = first; m < last; ++m) {
            for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = wrap_int32(c[m * N + n]);
        }
    });
}

void fallback_gemm(ThreadPool& pool, int64_t M, const void* A, bool a_signed, int64_t lda, const Int8PackedB& B,
                   const int32_t* a_zero, const int32_t* b_zero, int32_t* C, int64_t ldc) {
    const int64_t K = B.depth(), N = B.columns();
    const auto* a_bytes = static_cast<const uint8_t*>(A);
    const int32_t b_shift = B.is_signed() ? 0 : 128;
    const int32_t max_a = largest_centered(
        pool, M, K,
        [&](int64_t m, int64_t k) {
            return a_signed ? int32_t(int8_t(a_bytes[m * lda + k])) : int32_t(a_bytes[m * lda + k]);
        },
        [&](int64_t m, int64_t) { return a_zero ? a_zero[m] : 0; });
    const int32_t max_b = largest_centered(
        pool, K, N, [&](int64_t k, int64_t n) { return int32_t(B.rows()[k * N + n]) + b_shift; },
        [&](int64_t, int64_t n) { return b_zero ? b_zero[n] : 0; });
    const double bound = double(K) * double(max_a) * double(max_b);
    if (bound <= 16777216.0) {
        float_gemm<float>(pool, M, A, a_signed, lda, B, a_zero, b_zero, C, ldc);
    } else if (bound <= 9007199254740992.0) {
        float_gemm<double>(pool, M, A, a_signed, lda, B, a_zero, b_zero, C, ldc);
    } else {
        throw KernelError("int8 matrix product: depth " + std::to_string(K) + " is too large for exact accumulation");
    }
}

}  // namespace

bool int8_gemm_uses_vnni() {
    static const bool supported = detect_vnni();
    return supported;
}

Int8PackedB::Int8PackedB(const void* data, bool is_signed, int64_t K, int64_t N, int64_t row_stride,
                         int64_t column_stride, ThreadPool* pool)
    : K_(K), N_(N), signed_(is_signed) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    const uint8_t flip = is_signed ? 0 : 0x80;  // uint8 b - 128 is b ^ 0x80 read as int8
    if (!int8_gemm_uses_vnni()) {
        data_.resize(static_cast<size_t>(K * N));
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t n = 0; n < N; ++n)
                data_[k * N + n] = static_cast<int8_t>(bytes[k * row_stride + n * column_stride] ^ flip);
        }
        return;
    }
    const int64_t panels = (N + kPanel - 1) / kPanel;
    const int64_t panel_bytes = groups() * 4 * kPanel;
    data_.resize(static_cast<size_t>(panels * panel_bytes));
    column_sums_.resize(static_cast<size_t>(N));
    auto pack_panels = [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) {
            int8_t* panel = data_.data() + p * panel_bytes;
            const int64_t n0 = p * kPanel, columns = std::min(kPanel, N - n0);
            uint32_t sums[kPanel] = {};
            for (int64_t k = 0; k < K; ++k) {
                const uint8_t* src = bytes + k * row_stride + n0 * column_stride;
                for (int64_t c = 0; c < columns; ++c)
                    sums[c] += static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(src[c * column_stride] ^ flip)));
            }
            for (int64_t c = 0; c < columns; ++c) column_sums_[n0 + c] = static_cast<int32_t>(sums[c]);
            if (column_stride == 1 && columns == kPanel) {
                // Whole panels of a row-major B: 4 rows x 16 columns at a time, interleaved into [column][4 rows].
                const __m128i flip_bytes = _mm_set1_epi8(static_cast<char>(flip));
                for (int64_t g = 0; g < groups(); ++g) {
                    for (int64_t half = 0; half < 2; ++half) {
                        __m128i r[4];
                        for (int64_t j = 0; j < 4; ++j) {
                            const int64_t k = g * 4 + j;
                            r[j] = k < K ? _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
                                                             bytes + k * row_stride + n0 + half * 16)),
                                                         flip_bytes)
                                         : _mm_setzero_si128();
                        }
                        const __m128i t0 = _mm_unpacklo_epi8(r[0], r[1]), t1 = _mm_unpackhi_epi8(r[0], r[1]);
                        const __m128i t2 = _mm_unpacklo_epi8(r[2], r[3]), t3 = _mm_unpackhi_epi8(r[2], r[3]);
                        auto* dst = reinterpret_cast<__m128i*>(panel + g * 4 * kPanel + half * 64);
                        _mm_storeu_si128(dst + 0, _mm_unpacklo_epi16(t0, t2));
                        _mm_storeu_si128(dst + 1, _mm_unpackhi_epi16(t0, t2));
                        _mm_storeu_si128(dst + 2, _mm_unpacklo_epi16(t1, t3));
                        _mm_storeu_si128(dst + 3, _mm_unpackhi_epi16(t1, t3));
                    }
                }
                continue;
            }
            std::fill(panel, panel + panel_bytes, int8_t{0});
            for (int64_t k = 0; k < K; ++k) {
                const uint8_t* src = bytes + k * row_stride + n0 * column_stride;
                int8_t* dst = panel + (k / 4) * 4 * kPanel + k % 4;
                for (int64_t c = 0; c < columns; ++c) dst[c * 4] = static_cast<int8_t>(src[c * column_stride] ^ flip);
            }
        }
    };
    if (pool != nullptr) {
        pool->parallel_for(panels, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, K * kPanel)), pack_panels);
    } else {
        pack_panels(0, panels);
    }
}

void int8_gemm(ThreadPool& pool, int64_t M, const void* A, bool a_signed, int64_t lda, const Int8PackedB& B,
               const int32_t* a_zero, const int32_t* b_zero, int32_t* C, int64_t ldc) {
    const int64_t K = B.depth(), N = B.columns(), groups = B.groups(), stride = groups * 4;
    if (M <= 0 || N <= 0) return;
    if (K == 0) {
        for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0);
        return;
    }
    if (!int8_gemm_uses_vnni()) {
        fallback_gemm(pool, M, A, a_signed, lda, B, a_zero, b_zero, C, ldc);
        return;
    }

    // A' with rows padded to whole groups (the padding meets zeros in B), and its row sums.
    std::vector<uint8_t> a_shifted(static_cast<size_t>(M * stride));
    std::vector<uint32_t> row_sums(static_cast<size_t>(M));
    const auto* a_bytes = static_cast<const uint8_t*>(A);
    const uint8_t flip = a_signed ? 0x80 : 0;  // int8 a + 128 is a ^ 0x80 read as uint8
    pool.parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K)), [&](int64_t first, int64_t last) {
        for (int64_t m = first; m < last; ++m) {
            const uint8_t* src = a_bytes + m * lda;
            uint8_t* dst = a_shifted.data() + m * stride;
            uint32_t sum = 0;
            for (int64_t k = 0; k < K; ++k) {
                dst[k] = static_cast<uint8_t>(src[k] ^ flip);
                sum += dst[k];
            }
            std::fill(dst + K, dst + stride, uint8_t{0});
            row_sums[m] = sum;
        }
    });

    const uint32_t a_shift = a_signed ? 128u : 0u, b_shift = B.is_signed() ? 0u : 128u;
    std::vector<uint32_t> zb(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) zb[n] = (b_zero ? static_cast<uint32_t>(b_zero[n]) : 0u) - b_shift;
    const auto* column_sums = reinterpret_cast<const uint32_t*>(B.column_sums());
    const uint32_t depth = static_cast<uint32_t>(K);

    const int64_t row_blocks = (M + kTileRows - 1) / kTileRows;
    const int64_t panels = (N + kPanel - 1) / kPanel;
    const int64_t tile_work = kTileRows * kPanel * std::max<int64_t>(K, 1);
    // Tasks run panel by panel so that a worker reuses its panel of B across row blocks.
    pool.parallel_for(panels * row_blocks, std::max<int64_t>(1, (int64_t{1} << 21) / tile_work),
                      [&](int64_t first, int64_t last) {
                          alignas(64) int32_t tile[kTileRows * kPanel];
                          for (int64_t t = first; t < last; ++t) {
                              const int64_t p = t / row_blocks, m0 = (t % row_blocks) * kTileRows;
                              const int64_t rows = std::min(kTileRows, M - m0);
                              const int64_t n0 = p * kPanel, columns = std::min(kPanel, N - n0);
                              kTiles[rows](a_shifted.data() + m0 * stride, stride, B.panel(p), groups, tile);
                              for (int64_t r = 0; r < rows; ++r) {
                                  const int64_t m = m0 + r;
                                  const uint32_t za = a_shift + (a_zero ? static_cast<uint32_t>(a_zero[m]) : 0u);
                                  const uint32_t row_term = depth * za - row_sums[m];
                                  const auto* products = reinterpret_cast<const uint32_t*>(tile + r * kPanel);
                                  int32_t* c = C + m * ldc + n0;
                                  for (int64_t j = 0; j < columns; ++j) {
                                      const uint32_t value =
                                          products[j] + zb[n0 + j] * row_term - za * column_sums[n0 + j];
                                      c[j] = static_cast<int32_t>(value);
                                  }
                              }
                          }
                      });
}

}  // namespace tessera::cpu
