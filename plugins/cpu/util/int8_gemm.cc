// CPU provider: exact 8-bit integer matrix products (see int8_gemm.h).
//
// VNNI path: with A = A' - sa (A' the uint8 form of A: A itself, or A + 128 for int8) and B = B' + sb (B' the int8 form
// of B: B itself, or B - 128 for uint8), (A - a_zero) x (B - b_zero) = P - ZB * rowsum(A') - ZA * colsum(B') + K ZA ZB,
// where P = A' x B' (vpdpbusd), ZA[m] = sa + a_zero[m] and ZB[n] = b_zero[n] - sb.  Every step is 32-bit modular
// arithmetic (vpdpbusd does not saturate), so the result is the exact sum modulo 2^32.  CPUs with AMX compute P
// with tdpbusd on 16 x 64-byte tiles instead (same layout of B: a panel half is a B tile with a 128-byte row
// stride), with K padded to whole tiles.
//
// Fallback: a floating-point gemm of the centered operands.  Each product is an integer of magnitude at most
// max|a - a_zero| * max|b - b_zero|, and every partial sum a gemm forms (in whatever order, blocking or FMA use)
// is a sum of at most K such products, so when K times that bound is at most 2^24 (float) or 2^53 (double), every
// intermediate value is an integer the type represents exactly and the result is the exact sum.
#include "util/cpu_isa.h"
#include "util/int8_gemm.h"

#if TESSERA_CPU_X86
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/kernel.h"
#include "util/gemm.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kPanel = Int8PackedB::kPanelColumns;
constexpr int64_t kVnniTileRows = 6;  // rows per VNNI micro-tile: 12 accumulators of 16 lanes
constexpr int64_t kAmxTileRows = 32;  // rows per AMX micro-tile: 2 x 2 tiles of 16 x 16 sums

enum class Isa { Fallback, Vnni, Amx };

#if TESSERA_CPU_X86  // CPUID, the AMX permission and the VNNI / AMX kernels
// AMX needs the kernel's permission to use the tile state (Linux arch_prctl ARCH_REQ_XCOMP_PERM).
bool enable_amx() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
    if (!tile || !int8) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

Isa detect_isa() {
    const CpuFeatures& f = cpu_features();
    if (!f.avx512_vnni) return Isa::Fallback;
    if (f.amx_allowed && enable_amx()) return Isa::Amx;
    return Isa::Vnni;
}

Isa isa() {
    static const Isa detected = detect_isa();
    return detected;
}

// Tile configuration: tiles 0-3 hold 16 x 16 int32 sums, 4-5 16 rows of 64 bytes of A', 6-7 16 groups of B'.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
};

[[gnu::target("amx-tile")]] void amx_begin() {
    TileConfig config;
    for (int t = 0; t < 8; ++t) {
        config.bytes_per_row[t] = 64;
        config.rows[t] = 16;
    }
    // GCC does not see ldtilecfg read the configuration and would drop the stores above.
    asm volatile("" : : "r"(&config) : "memory");
    _tile_loadconfig(&config);
}

[[gnu::target("amx-tile")]] void amx_end() { _tile_release(); }

// The products of 32 rows of A' with one panel of B', written to out[32][kPanel].  A' is in tile order: per step of
// 64 bytes of K, the two 16 x 64-byte tiles one after the other.
[[gnu::target("amx-tile,amx-int8")]] void amx_tile(const uint8_t* A, const int8_t* panel, int64_t steps, int32_t* out,
                                                    int64_t ldo = kPanel) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t s = 0; s < steps; ++s) {
        _tile_loadd(4, A + s * 2048, 64);
        _tile_loadd(5, A + s * 2048 + 1024, 64);
        _tile_loadd(6, panel + s * 16 * 4 * kPanel, 4 * kPanel);
        _tile_loadd(7, panel + s * 16 * 4 * kPanel + 64, 4 * kPanel);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    const int64_t row_bytes = ldo * static_cast<int64_t>(sizeof(int32_t));
    _tile_stored(0, out, row_bytes);
    _tile_stored(1, out + 16, row_bytes);
    _tile_stored(2, out + 16 * ldo, row_bytes);
    _tile_stored(3, out + 16 * ldo + 16, row_bytes);
}

// The products of `Rows` rows of A' (row stride lda, whole groups of 4 bytes) with one panel of B', written to
// out[Rows][ldo].
template <int Rows> [[gnu::target("avx512f,avx512vnni")]] void vnni_tile(const uint8_t* A, int64_t lda,
                                                                         const int8_t* panel, int64_t groups,
                                                                         int32_t* out, int64_t ldo) {
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
        _mm512_storeu_si512(out + r * ldo, acc[r][0]);
        _mm512_storeu_si512(out + r * ldo + 16, acc[r][1]);
    }
}

// Column sums of one packed panel: vpdpbusd with all-ones bytes adds up each column's four values per group.
[[gnu::target("avx512f,avx512vnni")]] void vnni_column_sums(const int8_t* panel, int64_t groups, int32_t* sums) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i low = _mm512_setzero_si512(), high = _mm512_setzero_si512();
    for (int64_t g = 0; g < groups; ++g) {
        low = _mm512_dpbusd_epi32(low, ones, _mm512_loadu_si512(panel + g * 4 * kPanel));
        high = _mm512_dpbusd_epi32(high, ones, _mm512_loadu_si512(panel + g * 4 * kPanel + 64));
    }
    _mm512_storeu_si512(sums, low);
    _mm512_storeu_si512(sums + 16, high);
}

// One panel of B' (see Int8PackedB): `columns` (at most kPanel) columns of K rows, element (k, c) at
// bytes[k * row_stride + c * column_stride], XORed with `flip`, into panel [groups][kPanel][4] (rows past K and
// columns past `columns` zero); sums[c] = the sum of column c's stored values.  Only the AMX and VNNI paths call it.
[[gnu::target("avx512f,avx512bw,avx512vl")]] void pack_panel(const uint8_t* bytes, int64_t K, int64_t columns,
                                                               int64_t row_stride, int64_t column_stride,
                                                               uint8_t flip, int64_t groups, int8_t* panel,
                                                               int32_t* sums) {
    const int64_t panel_bytes = groups * 4 * kPanel;
    if (column_stride == 1) {
        // A row-major B: 4 rows x 16 columns at a time, interleaved into [column][4 rows]; the columns past
        // `columns` of a last, partial panel read as zeros (masked loads).
        const __m128i flip_bytes = _mm_set1_epi8(static_cast<char>(flip));
        const __mmask16 masks[2] = {
            static_cast<__mmask16>(columns >= 16 ? 0xFFFF : (1u << columns) - 1),
            static_cast<__mmask16>(columns >= 32 ? 0xFFFF : columns <= 16 ? 0 : (1u << (columns - 16)) - 1)};
        for (int64_t g = 0; g < groups; ++g) {
            for (int64_t half = 0; half < 2; ++half) {
                __m128i r[4];
                for (int64_t j = 0; j < 4; ++j) {
                    const int64_t k = g * 4 + j;
                    r[j] = k < K ? _mm_xor_si128(_mm_maskz_loadu_epi8(masks[half], bytes + k * row_stride + half * 16),
                                                 _mm_maskz_mov_epi8(masks[half], flip_bytes))
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
    } else {
        std::fill(panel, panel + panel_bytes, int8_t{0});
        for (int64_t k = 0; k < K; ++k) {
            const uint8_t* src = bytes + k * row_stride;
            int8_t* dst = panel + (k / 4) * 4 * kPanel + k % 4;
            for (int64_t c = 0; c < columns; ++c) dst[c * 4] = static_cast<int8_t>(src[c * column_stride] ^ flip);
        }
    }
    vnni_column_sums(panel, groups, sums);
}

using TileFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t);
constexpr TileFn kVnniTiles[kVnniTileRows + 1] = {nullptr,      vnni_tile<1>, vnni_tile<2>, vnni_tile<3>,
                                                  vnni_tile<4>, vnni_tile<5>, vnni_tile<6>};

// One row of A': the K bytes of src XORed with `flip`, in chunks of 64 bytes stored `chunk_stride` bytes apart
// (bytes past K stay as they are: zero); returns the sum of the stored bytes.  Only the AMX and VNNI paths call it.
[[gnu::target("avx512f,avx512bw")]] uint32_t pack_row(const uint8_t* src, int64_t K, uint8_t flip, uint8_t* dst,
                                                        int64_t chunk_stride) {
    const __m512i flip_bytes = _mm512_set1_epi8(static_cast<char>(flip));
    __m512i sums = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += 64) {
        const __mmask64 mask = K - k >= 64 ? ~__mmask64{0} : (__mmask64{1} << (K - k)) - 1;
        const __m512i v = _mm512_maskz_mov_epi8(mask, _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, src + k), flip_bytes));
        _mm512_mask_storeu_epi8(dst + (k / 64) * chunk_stride, mask, v);
        sums = _mm512_add_epi64(sums, _mm512_sad_epu8(v, _mm512_setzero_si512()));
    }
    return static_cast<uint32_t>(_mm512_reduce_add_epi64(sums));
}

// c[j] = products[j] + zb[j] * row_term - za * column_sums[j] (mod 2^32): the zero-point corrections of one tile
// row.  Only the AMX and VNNI paths call it, so AVX-512 is there (the baseline ISA has no 32-bit multiply).
[[gnu::target("avx512f")]] void correct_tile_row(const uint32_t* products, const uint32_t* zb, uint32_t row_term,
                                                 uint32_t za, const uint32_t* column_sums, int32_t* c,
                                                 int64_t columns) {
    for (int64_t j = 0; j < columns; ++j)
        c[j] = static_cast<int32_t>(products[j] + zb[j] * row_term - za * column_sums[j]);
}

// The same for a whole tile (rows x columns, row stride ld, corrected in place) when ZA and ZB are uniform, the
// common case (per-tensor activation zero point, per-tensor or symmetric weights): the correction is then
// row_terms[r] - column_terms[j], precomputed once per product, two additions per element instead of a call and two
// multiplications per tile row.
[[gnu::target("avx512f")]] void correct_tile_uniform(uint32_t* tile, int64_t ld, int64_t rows, int64_t columns,
                                                     const uint32_t* row_terms, const uint32_t* column_terms) {
    for (int64_t j = 0; j < columns; j += 16) {
        const __mmask16 mask = columns - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (columns - j)) - 1);
        const __m512i column = _mm512_maskz_loadu_epi32(mask, column_terms + j);
        for (int64_t r = 0; r < rows; ++r) {
            uint32_t* t = tile + r * ld + j;
            const __m512i row = _mm512_set1_epi32(static_cast<int32_t>(row_terms[r]));
            _mm512_storeu_si512(t, _mm512_sub_epi32(_mm512_add_epi32(_mm512_loadu_si512(t), row), column));
        }
    }
}
#else
Isa isa() { return Isa::Fallback; }  // no VNNI or AMX: every product takes the fallback
#endif  // TESSERA_CPU_X86

// Sums wrap to 32 bits (the exact integer is representable in int64).
template <typename F> inline int32_t wrap_int32(F exact_integer) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(exact_integer)));
}

// Largest |value - zero_point(row, column)| over a rows x columns byte matrix (split across the pool).
template <typename Value, typename ZeroPoint>
int32_t largest_centered(ThreadPool& pool, int64_t rows, int64_t columns, const Value& value, const ZeroPoint& zero) {
    std::atomic<int32_t> largest{0};
    pool.parallel_for(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, columns)),
                      [&](int64_t first, int64_t last) {
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

template <typename F> void float_gemm(ThreadPool& pool, int64_t M, const void* A, bool a_signed, int64_t lda,
                                      const Int8PackedB& B, const int32_t* a_zero, const int32_t* b_zero, int32_t* C,
                                      int64_t ldc) {
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

bool int8_gemm_uses_vnni() { return isa() != Isa::Fallback; }
bool int8_gemm_uses_amx() { return isa() == Isa::Amx; }

namespace {

// Groups of 4 bytes of K in a packed operand: AMX steps through K 64 bytes (16 groups) at a time.
int64_t packed_groups(int64_t K) {
    const int64_t groups = (K + 3) / 4;
    return isa() == Isa::Amx ? (groups + 15) / 16 * 16 : groups;
}

}  // namespace

Int8PackedB::Int8PackedB(const void* data, bool is_signed, int64_t K, int64_t N, int64_t row_stride,
                         int64_t column_stride, ThreadPool* pool)
    : K_(K), N_(N), signed_(is_signed), groups_(packed_groups(K)) {
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
#if TESSERA_CPU_X86  // the VNNI layout
    const int64_t panels = (N + kPanel - 1) / kPanel;
    const int64_t panel_bytes = groups() * 4 * kPanel;
    data_.resize(static_cast<size_t>(panels * panel_bytes));
    column_sums_.resize(static_cast<size_t>(N));
    auto pack_panels = [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) {
            const int64_t n0 = p * kPanel, columns = std::min(kPanel, N - n0);
            int32_t sums[kPanel];
            pack_panel(bytes + n0 * column_stride, K, columns, row_stride, column_stride, flip, groups(),
                       data_.data() + p * panel_bytes, sums);
            std::copy(sums, sums + columns, column_sums_.begin() + n0);
        }
    };
    if (pool != nullptr) {
        pool->parallel_for(panels, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, K * kPanel)), pack_panels);
    } else {
        pack_panels(0, panels);
    }
#else
    static_cast<void>(pool);  // only the VNNI packing splits across the pool
#endif
}

namespace {

// The product of a packed A and B: into C (row stride ldc), or into `sink` when it is given.
void packed_gemm(ThreadPool& pool, const Int8PackedA& A, const Int8PackedB& B, const int32_t* a_zero,
                 const int32_t* b_zero, int32_t* C, int64_t ldc, const Int8GemmSink* sink) {
    const int64_t M = A.rows(), K = B.depth(), N = B.columns();
    if (A.depth() != K) throw KernelError("int8 matrix product: the packed operands' depths differ");
    if (M <= 0 || N <= 0) return;
    if (K == 0 || !int8_gemm_uses_vnni()) {
        // The sums of the whole product first (the fallback computes them at once), then handed on row by row.
        std::vector<int32_t> own;
        if (sink != nullptr) {
            own.resize(static_cast<size_t>(M * N));
            C = own.data();
            ldc = N;
        }
        if (K == 0) {
            for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0);
        } else {
            fallback_gemm(pool, M, A.data(), A.is_signed(), K, B, a_zero, b_zero, C, ldc);
        }
        if (sink != nullptr) {
            pool.parallel_for(M, std::max<int64_t>(1, 16384 / N), [&](int64_t first, int64_t last) {
                sink->write(first, last - first, 0, N, C + first * ldc, ldc);
            });
        }
        return;
    }
#if TESSERA_CPU_X86  // the VNNI and AMX paths
    const bool amx = isa() == Isa::Amx;
    const int64_t groups = B.groups(), stride = groups * 4;
    const int64_t tile_rows = amx ? kAmxTileRows : kVnniTileRows;
    const int64_t row_blocks = (M + tile_rows - 1) / tile_rows;
    const uint8_t* a_shifted = A.data();
    const uint32_t* row_sums = A.row_sums();

    const uint32_t a_shift = A.is_signed() ? 128u : 0u, b_shift = B.is_signed() ? 0u : 128u;
    std::vector<uint32_t> zb(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) zb[n] = (b_zero ? static_cast<uint32_t>(b_zero[n]) : 0u) - b_shift;
    const auto* column_sums = reinterpret_cast<const uint32_t*>(B.column_sums());
    const uint32_t depth = static_cast<uint32_t>(K);

    // With uniform zero points and a sink (which takes whole tiles), the corrections split into a term per row
    // and one per column (see correct_tile_uniform).
    const bool uniform_zb = std::all_of(zb.begin(), zb.end(), [&](uint32_t z) { return z == zb[0]; });
    const bool uniform_za = a_zero == nullptr || std::all_of(a_zero, a_zero + M, [&](int32_t z) { return z == a_zero[0]; });
    const bool split_terms = sink != nullptr && uniform_zb && uniform_za;
    std::vector<uint32_t> row_terms, column_terms;
    if (split_terms) {
        const uint32_t za = a_shift + (a_zero ? static_cast<uint32_t>(a_zero[0]) : 0u);
        row_terms.resize(static_cast<size_t>(M));
        for (int64_t m = 0; m < M; ++m) row_terms[m] = zb[0] * (depth * za - row_sums[m]);
        column_terms.resize(static_cast<size_t>(N));
        for (int64_t n = 0; n < N; ++n) column_terms[n] = za * column_sums[n];
    }

    const int64_t panels = (N + kPanel - 1) / kPanel;
    const int64_t tile_work = tile_rows * kPanel * K;
    // Tasks run panel by panel so that a worker reuses its panel of B across row blocks.
    pool.parallel_for(
        panels * row_blocks, std::max<int64_t>(1, (int64_t{1} << 21) / tile_work), [&](int64_t first, int64_t last) {
            alignas(64) int32_t tile[kAmxTileRows * kPanel];
            if (amx) amx_begin();
            for (int64_t t = first; t < last; ++t) {
                const int64_t p = t / row_blocks, m0 = (t % row_blocks) * tile_rows;
                const int64_t rows = std::min(tile_rows, M - m0);
                const int64_t n0 = p * kPanel, columns = std::min(kPanel, N - n0);
                if (amx) amx_tile(a_shifted + m0 * stride, B.panel(p), groups / 16, tile);
                else kVnniTiles[rows](a_shifted + m0 * stride, stride, B.panel(p), groups, tile, kPanel);
                if (split_terms) {
                    correct_tile_uniform(reinterpret_cast<uint32_t*>(tile), kPanel, rows, columns,
                                         row_terms.data() + m0, column_terms.data() + n0);
                    sink->write(m0, rows, n0, columns, tile, kPanel);
                    continue;
                }
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t m = m0 + r;
                    const uint32_t za = a_shift + (a_zero ? static_cast<uint32_t>(a_zero[m]) : 0u);
                    const uint32_t row_term = depth * za - row_sums[m];
                    // With a sink the tile is corrected in place and handed over whole.
                    int32_t* out = sink != nullptr ? tile + r * kPanel : C + m * ldc + n0;
                    correct_tile_row(reinterpret_cast<const uint32_t*>(tile + r * kPanel), zb.data() + n0, row_term,
                                     za, column_sums + n0, out, columns);
                }
                if (sink != nullptr) sink->write(m0, rows, n0, columns, tile, kPanel);
            }
            if (amx) amx_end();
        });
#else
    static_cast<void>(a_zero), static_cast<void>(b_zero), static_cast<void>(C), static_cast<void>(ldc);
#endif
}

}  // namespace

Int8PackedA::Int8PackedA(const void* data, bool is_signed, int64_t M, int64_t K, int64_t lda, ThreadPool* pool)
    : M_(M), K_(K), signed_(is_signed) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    if (!int8_gemm_uses_vnni()) {  // the fallback reads the operand as it is
        data_.resize(static_cast<size_t>(M * K));
        for (int64_t m = 0; m < M; ++m) std::copy(bytes + m * lda, bytes + m * lda + K, data_.begin() + m * K);
        return;
    }
#if TESSERA_CPU_X86  // the VNNI and AMX layouts
    const bool amx = isa() == Isa::Amx;
    const int64_t stride = packed_groups(K) * 4;
    const int64_t padded_rows = amx ? (M + kAmxTileRows - 1) / kAmxTileRows * kAmxTileRows : M;
    // Rows padded to whole groups (the padding meets zeros in B) and, for AMX, to whole row blocks (rows of zeros
    // whose sums are dropped).
    data_.assign(static_cast<size_t>(padded_rows * stride), 0);
    row_sums_.resize(static_cast<size_t>(M));
    const uint8_t flip = is_signed ? 0x80 : 0;  // int8 a + 128 is a ^ 0x80 read as uint8
    auto pack_rows = [&](int64_t first, int64_t last) {
        for (int64_t m = first; m < last; ++m) {
            // AMX tile order: [row block of 32][step of 64 bytes of K][2 tiles][16 rows][64 bytes]; VNNI: rows.
            uint8_t* dst = amx ? data_.data() + (m / 32) * 32 * stride + (m % 32) * 64 : data_.data() + m * stride;
            row_sums_[m] = pack_row(bytes + m * lda, K, flip, dst, amx ? 2048 : 64);
        }
    };
    if (pool != nullptr) pool->parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K)), pack_rows);
    else pack_rows(0, M);
#else
    static_cast<void>(pool);  // never reached: only the fallback exists elsewhere
#endif
}

void int8_gemm_streaming(ThreadPool& pool, const Int8PackedA& A, const void* B, bool b_signed, int64_t ldb,
                         int64_t N, const int32_t* a_zero, int32_t b_zero, const Int8GemmSink& sink,
                         int64_t whole_rows) {
    const int64_t M = A.rows(), K = A.depth();
    if (M <= 0 || N <= 0) return;
    if (K == 0 || !int8_gemm_uses_vnni()) {  // the fallback packs B whole
        const Int8PackedB packed(B, b_signed, K, N, ldb, 1, &pool);
        const std::vector<int32_t> zeros(static_cast<size_t>(N), b_zero);
        int8_gemm(pool, A, packed, a_zero, zeros.data(), sink);
        return;
    }
#if TESSERA_CPU_X86  // the VNNI and AMX paths
    const bool amx = isa() == Isa::Amx;
    const int64_t groups = packed_groups(K), stride = groups * 4;
    // Row blocks: one AMX tile of 32 rows; on VNNI, tiles of 6 rows, or 16 or 32 rows of them (whole_rows).
    const int64_t tile_rows = amx || whole_rows > 16 ? kAmxTileRows : whole_rows > 1 ? 16 : kVnniTileRows;
    const int64_t row_blocks = (M + tile_rows - 1) / tile_rows;
    const auto* bytes = static_cast<const uint8_t*>(B);
    const uint8_t flip = b_signed ? 0 : 0x80;
    const uint32_t a_shift = A.is_signed() ? 128u : 0u;
    const uint32_t zb = static_cast<uint32_t>(b_zero) - (b_signed ? 0u : 128u);
    const uint32_t depth = static_cast<uint32_t>(K);
    const uint32_t* row_sums = A.row_sums();
    const bool uniform_za = a_zero == nullptr || std::all_of(a_zero, a_zero + M, [&](int32_t z) { return z == a_zero[0]; });
    const uint32_t za_uniform = a_shift + (a_zero ? static_cast<uint32_t>(a_zero[0]) : 0u);
    // The row terms of the corrections (correct_tile_uniform), in the caller's scratch: the tasks only read them.
    uint32_t* row_terms = thread_scratch_buffer<uint32_t, 4>(M);
    for (int64_t m = 0; m < M; ++m) {
        const uint32_t za = a_shift + (a_zero ? static_cast<uint32_t>(a_zero[m]) : 0u);
        row_terms[m] = depth * za - row_sums[m];
        if (uniform_za) row_terms[m] *= zb;
    }
    // Tasks take 4 panels (128 columns) at a time: the sink then gets rows of 128 sums, so that its per-row set-up
    // (a requantization's lookup table: 256 bytes for each row) is spread over 4 tiles instead of one.
    constexpr int64_t kWidth = 4;
    const int64_t panels = (N + kPanel - 1) / kPanel, spans = (panels + kWidth - 1) / kWidth;
    // The pool gives each thread one contiguous run of tasks.  With spans enough for every thread, tasks are spans
    // (each packed once); with few (a 7 x 7 or 14 x 14 image), spans of unequal width would leave a thread
    // idle, so the row blocks are split among the threads instead, each thread packing the spans for its rows.
    const int64_t threads = pool.size();
    const bool by_rows = spans < 4 * threads && row_blocks > 1;
    const int64_t splits = by_rows ? std::min<int64_t>(threads, row_blocks) : 1;
    const int64_t blocks_per_split = (row_blocks + splits - 1) / splits;
    const int64_t panel_bytes = groups * 4 * kPanel;
    pool.parallel_for(spans * splits, 1, [&](int64_t first, int64_t last) {
        int8_t* span_panels = thread_scratch_buffer<int8_t, 3>(kWidth * panel_bytes);
        alignas(64) int32_t tile[kAmxTileRows * kWidth * kPanel];
        constexpr int64_t ld = kWidth * kPanel;
        int32_t column_sums[kWidth * kPanel];
        uint32_t column_terms[kWidth * kPanel], zb_columns[kWidth * kPanel];
        std::fill(zb_columns, zb_columns + kWidth * kPanel, zb);
        int64_t packed = -1;
        if (amx) amx_begin();
        for (int64_t t = first; t < last; ++t) {
            const int64_t span = by_rows ? t % spans : t / splits, split = by_rows ? t / spans : t % splits;
            const int64_t first_panel = span * kWidth, span_panel_count = std::min(kWidth, panels - first_panel);
            const int64_t n0 = first_panel * kPanel, columns = std::min(kWidth * kPanel, N - n0);
            if (span != packed) {
                for (int64_t q = 0; q < span_panel_count; ++q) {
                    const int64_t c0 = q * kPanel;
                    pack_panel(bytes + n0 + c0, K, std::min(kPanel, columns - c0), ldb, 1, flip, groups,
                               span_panels + q * panel_bytes, column_sums + c0);
                }
                for (int64_t j = 0; j < columns; ++j) column_terms[j] = za_uniform * static_cast<uint32_t>(column_sums[j]);
                packed = span;
            }
            const int64_t first_block = split * blocks_per_split;
            const int64_t end_block = std::min(row_blocks, first_block + blocks_per_split);
            for (int64_t block = first_block; block < end_block; ++block) {
                const int64_t m0 = block * tile_rows, rows = std::min(tile_rows, M - m0);
                const uint8_t* a_rows = A.data() + m0 * stride;
                for (int64_t q = 0; q < span_panel_count; ++q) {
                    const int8_t* panel = span_panels + q * panel_bytes;
                    if (amx) {
                        amx_tile(a_rows, panel, groups / 16, tile + q * kPanel, ld);
                        continue;
                    }
                    for (int64_t r0 = 0; r0 < rows; r0 += kVnniTileRows) {
                        kVnniTiles[std::min(kVnniTileRows, rows - r0)](a_rows + r0 * stride, stride, panel, groups,
                                                                      tile + r0 * ld + q * kPanel, ld);
                    }
                }
                if (uniform_za) {
                    correct_tile_uniform(reinterpret_cast<uint32_t*>(tile), ld, rows, columns, row_terms + m0,
                                         column_terms);
                } else {
                    for (int64_t r = 0; r < rows; ++r) {
                        const int64_t m = m0 + r;
                        const uint32_t za = a_shift + static_cast<uint32_t>(a_zero[m]);
                        correct_tile_row(reinterpret_cast<const uint32_t*>(tile + r * ld), zb_columns, row_terms[m],
                                         za, reinterpret_cast<const uint32_t*>(column_sums), tile + r * ld, columns);
                    }
                }
                sink.write(m0, rows, n0, columns, tile, ld);
            }
        }
        if (amx) amx_end();
    });
#else
    static_cast<void>(b_signed), static_cast<void>(ldb), static_cast<void>(a_zero), static_cast<void>(b_zero);
    static_cast<void>(whole_rows);
#endif
}

void int8_gemm(ThreadPool& pool, const Int8PackedA& A, const Int8PackedB& B, const int32_t* a_zero,
               const int32_t* b_zero, const Int8GemmSink& sink) {
    packed_gemm(pool, A, B, a_zero, b_zero, nullptr, 0, &sink);
}

void int8_gemm(ThreadPool& pool, const Int8PackedA& A, const Int8PackedB& B, const int32_t* a_zero,
               const int32_t* b_zero, int32_t* C, int64_t ldc) {
    packed_gemm(pool, A, B, a_zero, b_zero, C, ldc, nullptr);
}

void int8_gemm(ThreadPool& pool, int64_t M, const void* A, bool a_signed, int64_t lda, const Int8PackedB& B,
               const int32_t* a_zero, const int32_t* b_zero, int32_t* C, int64_t ldc) {
    if (M <= 0 || B.columns() <= 0) return;
    if (!int8_gemm_uses_vnni()) {  // the fallback reads A in place
        if (B.depth() == 0) {
            for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + B.columns(), 0);
            return;
        }
        fallback_gemm(pool, M, A, a_signed, lda, B, a_zero, b_zero, C, ldc);
        return;
    }
    packed_gemm(pool, Int8PackedA(A, a_signed, M, B.depth(), lda, &pool), B, a_zero, b_zero, C, ldc, nullptr);
}

}  // namespace tessera::cpu
