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
#include "kernels/quantization/requantize.h"

namespace tessera::cpu {

namespace {

class QuantizedLookupKernel final : public Kernel {
public:
    explicit QuantizedLookupKernel(const NodeInfo& info) : table_(quant::ByteTable::load(info, 1, "QuantizedLookup")) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        if (X.type != TESS_ELEMENT_UINT8 && X.type != TESS_ELEMENT_INT8)
            throw_unsupported_type("QuantizedLookup x", X.type);
        const int64_t channels = X.rank() >= 2 ? X.shape[1] : 1;
        if (table_.rows != 1 && (X.rank() < 2 || channels != table_.rows)) {
            throw KernelError("QuantizedLookup: x " + shape_string(X.shape) + " does not have the table's " +
                              std::to_string(table_.rows) + " channels on axis 1");
        }
        Tensor& Y = ctx.output(0, table_.type, X.shape);
        const int64_t total = X.size();
        if (total == 0) return;
        // Planes of one channel each (the whole tensor is one plane for a shared table).
        const int64_t planes = table_.rows == 1 ? 1 : X.shape[0] * channels;
        const int64_t plane = total / planes;
        const auto* x = static_cast<const uint8_t*>(X.data);
        auto* y = static_cast<uint8_t*>(Y.data);
        auto lookup = [&](const uint8_t* table, int64_t first, int64_t count) {
            quant::lookup_bytes(table, x + first, y + first, count);
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
                                        lookup(table_.row(p % channels), p * plane, plane);
                                });
    }

private:
    quant::ByteTable table_;
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
