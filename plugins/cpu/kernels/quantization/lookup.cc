// CPU provider: QuantizedLookup (TESS_FUSED_OPS_DOMAIN), which the core's optimizer writes for a
// DequantizeLinear -> per-channel float operators -> QuantizeLinear group (a BatchNormalization between two
// quantized convolutions, an activation): every 8-bit input value maps to one 8-bit output value per channel, so the
// group is a table of 256 entries per channel, computed once when the session is created by the group's own
// kernels.  A run is one pass of byte lookups instead of three passes through float.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "runtime/host.h"
#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

constexpr int64_t kEntries = 256;

// y[i] = table[x[i]] for i < n.
void lookup_plain(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
}

#if TESSERA_CPU_X86
// The same, 64 bytes at a time: the table's two 128-byte halves are two-register byte permutes (vpermi2b, which
// reads the index's low 7 bits), and the index's top bit picks between their results.
[[gnu::target("avx512f,avx512bw,avx512vbmi")]] void lookup_vbmi(const uint8_t* table, const uint8_t* x, uint8_t* y,
                                                                 int64_t n) {
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    for (int64_t i = 0; i < n; i += 64) {
        const __mmask64 mask = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
        const __m512i index = _mm512_maskz_loadu_epi8(mask, x + i);
        const __m512i low = _mm512_permutex2var_epi8(t0, index, t1);
        const __m512i high = _mm512_permutex2var_epi8(t2, index, t3);
        _mm512_mask_storeu_epi8(y + i, mask, _mm512_mask_blend_epi8(_mm512_movepi8_mask(index), low, high));
    }
}
#endif

class QuantizedLookupKernel final : public Kernel {
public:
    explicit QuantizedLookupKernel(const NodeInfo& info) {
        const std::optional<Tensor> table = info.constant_tensor(1);
        if (!table) throw KernelError("QuantizedLookup: the table must be a constant");
        if (table->type != TESS_ELEMENT_UINT8 && table->type != TESS_ELEMENT_INT8)
            throw_unsupported_type("QuantizedLookup table", table->type);
        if (table->rank() != 2 || table->shape[1] != kEntries || table->shape[0] < 1) {
            throw KernelError("QuantizedLookup: the table " + shape_string(table->shape) + " must be [C, 256] or [1, 256]");
        }
        rows_ = table->shape[0];
        type_ = table->type;
        const auto* bytes = static_cast<const uint8_t*>(table->data);
        table_.assign(bytes, bytes + rows_ * kEntries);
        info.release_constant(1);
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        if (X.type != TESS_ELEMENT_UINT8 && X.type != TESS_ELEMENT_INT8)
            throw_unsupported_type("QuantizedLookup x", X.type);
        const int64_t channels = X.rank() >= 2 ? X.shape[1] : 1;
        if (rows_ != 1 && (X.rank() < 2 || channels != rows_)) {
            throw KernelError("QuantizedLookup: x " + shape_string(X.shape) + " does not have the table's " +
                              std::to_string(rows_) + " channels on axis 1");
        }
        Tensor& Y = ctx.output(0, type_, X.shape);
        const int64_t total = X.size();
        if (total == 0) return;
        // Planes of one channel each (the whole tensor is one plane for a shared table).
        const int64_t planes = rows_ == 1 ? 1 : X.shape[0] * channels;
        const int64_t plane = total / planes;
        const auto* x = static_cast<const uint8_t*>(X.data);
        auto* y = static_cast<uint8_t*>(Y.data);
        [[maybe_unused]] const bool vbmi = cpu_features().avx512_vbmi;
        // Runs shorter than 16 bytes ([N, C] tensors: one byte per channel) are not worth loading the table into
        // four registers.
        auto lookup = [&](const uint8_t* table, int64_t first, int64_t count) {
#if TESSERA_CPU_X86
            if (vbmi && count >= 16) {
                lookup_vbmi(table, x + first, y + first, count);
                return;
            }
#endif
            lookup_plain(table, x + first, y + first, count);
        };
        // Work in pieces of at least 16 KiB: a plane of 7 x 7 bytes is not worth a task of its own.
        constexpr int64_t kPiece = 16384;
        if (planes == 1) {
            ctx.pool().parallel_for((total + kPiece - 1) / kPiece, 1, [&](int64_t first, int64_t last) {
                const int64_t begin = first * kPiece, end = std::min(total, last * kPiece);
                lookup(table_.data(), begin, end - begin);
            });
            return;
        }
        ctx.pool().parallel_for(planes, std::max<int64_t>(1, kPiece / std::max<int64_t>(1, plane)),
                                [&](int64_t first, int64_t last) {
                                    for (int64_t p = first; p < last; ++p)
                                        lookup(table_.data() + (p % channels) * kEntries, p * plane, plane);
                                });
    }

private:
    int64_t rows_ = 1;
    int32_t type_ = TESS_ELEMENT_UINT8;
    std::vector<uint8_t> table_;  // [rows][256], indexed by the input byte's bits
};

}  // namespace

void register_quantized_lookup_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};
    registry.add(KernelDef{.domain = TESS_FUSED_OPS_DOMAIN,
                           .op_type = "QuantizedLookup",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {1, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<QuantizedLookupKernel>()});
}

}  // namespace tessera::cpu
