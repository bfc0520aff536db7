// CPU provider, com.microsoft GatherBlockQuantized: rows of a block-quantized table (LLM exporters' 4- or 8-bit
// token embeddings), gathered and dequantized.
//
//   inputs   data (rows, ..., columns): uint8 holding `bits`-bit values (4 bits: two a byte, the first in the low
//            bits, so the last dimension holds columns / 2 bytes), or int4/uint4; indices (int32/int64, any shape);
//            scales (rows, ..., ceil(columns / block_size)), the output's type; zero_points? packed like data
//   output   indices.shape + data.shape[1:] (columns unpacked): (q - zero_point) * scale
//   attrs    gather_axis (0), quantize_axis (last), block_size (128), bits (4)
//
// The zero point defaults to 2^(bits - 1) for uint8 and uint4 data and to 0 for int4.  Gathering runs along the
// first axis with the blocks along the last, the layout the exporters write; other axes are declined.
#include <algorithm>
#include <string>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "util/compute_cast.h"

namespace tessera::cpu {

namespace {

class GatherBlockQuantizedKernel final : public Kernel {
public:
    explicit GatherBlockQuantizedKernel(const NodeInfo& info)
        : gather_axis_(info.attr_int("gather_axis", 0)),
          quantize_axis_(info.attr_int("quantize_axis", 1)),
          block_size_(info.attr_int("block_size", 128)),
          bits_(info.attr_int("bits", 4)) {
        if (gather_axis_ != 0) throw KernelError("GatherBlockQuantized: only gather_axis 0 is supported");
        if (bits_ != 4 && bits_ != 8) throw KernelError("GatherBlockQuantized: bits must be 4 or 8");
        if (block_size_ < 16 || (block_size_ & (block_size_ - 1)) != 0)
            throw KernelError("GatherBlockQuantized: block_size must be a power of 2 and at least 16");
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "GatherBlockQuantized";
        const Tensor& data = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const Tensor& scales_in = ctx.input(2);
        const size_t rank = data.rank();
        if (rank < 2) throw KernelError(op + ": data must have at least 2 dimensions");
        const int64_t q_axis = quantize_axis_ < 0 ? quantize_axis_ + static_cast<int64_t>(rank) : quantize_axis_;
        if (q_axis != static_cast<int64_t>(rank) - 1)
            throw KernelError(op + ": only the last axis may be quantize_axis");
        const bool native4 = data.type == TESS_ELEMENT_INT4 || data.type == TESS_ELEMENT_UINT4;
        if (data.type != TESS_ELEMENT_UINT8 && !native4) throw_unsupported_type(op + " data", data.type);
        const int64_t bits = native4 ? 4 : bits_;
        // Values per stored row: uint8 with 4 bits packs two a byte; int4/uint4 tensors count values already.
        const int64_t columns = data.type == TESS_ELEMENT_UINT8 && bits == 4 ? data.shape.back() * 2 : data.shape.back();
        const int64_t rows = data.shape[0];
        const int64_t row_values = data.size() / std::max<int64_t>(1, rows) / data.shape.back() * columns;
        const int64_t blocks = (columns + block_size_ - 1) / block_size_;
        if (scales_in.size() != data.size() / data.shape.back() * blocks)
            throw KernelError(op + ": scales " + shape_string(scales_in.shape) + " must hold a scale per block of " +
                              std::to_string(block_size_) + " values");
        const int32_t default_zero = data.type == TESS_ELEMENT_INT4 ? 0 : (1 << (bits - 1));
        const uint8_t* zero = ctx.has_input(3) ? static_cast<const uint8_t*>(ctx.input(3).data) : nullptr;
        const bool signed4 = data.type == TESS_ELEMENT_INT4;

        if (indices.type != TESS_ELEMENT_INT64 && indices.type != TESS_ELEMENT_INT32)
            throw_unsupported_type(op + " indices", indices.type);
        std::vector<int64_t> rows_of(static_cast<size_t>(indices.size()));
        convert::load_int64s(indices.type, indices.data, 0, indices.size(), rows_of.data());
        for (int64_t i = 0; i < indices.size(); ++i) {
            int64_t r = rows_of[i];
            if (r < 0) r += rows;
            if (r < 0 || r >= rows) throw KernelError(op + ": index " + std::to_string(r) + " is out of range");
            rows_of[i] = r;
        }
        Shape out_shape = indices.shape;
        out_shape.insert(out_shape.end(), data.shape.begin() + 1, data.shape.end());
        out_shape.back() = columns;
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> scales(scales_in, pool);
        ConvertedOutput<float> y(ctx.output(0, scales_in.type, out_shape));
        const auto* bytes = static_cast<const uint8_t*>(data.data);
        // The quantized value at flat value index v (values counted unpacked).
        auto value_at = [&](const uint8_t* base, int64_t v) -> int32_t {
            if (bits == 8) return base[v];
            const uint8_t nibble = (base[v / 2] >> ((v % 2) * 4)) & 15;
            return signed4 ? (nibble ^ 8) - 8 : nibble;
        };
        const int64_t lines_per_row = row_values / columns;  // the dimensions between the first and the last
        // Zero points: int4/uint4 tensors pack all values flat; uint8 4-bit zero points pack each line's blocks into
        // whole bytes (ceil(blocks / 2) a line).
        const int64_t zero_row_bytes = (blocks * bits + 7) / 8;
        auto zero_at = [&](int64_t line, int64_t block, int64_t flat) -> int32_t {
            if (native4 || bits == 8) return value_at(zero, flat);
            return (zero[line * zero_row_bytes + block / 2] >> ((block % 2) * 4)) & 15;
        };
        pool.parallel_for(indices.size(), 1, [&](int64_t first, int64_t last) {
            for (int64_t i = first; i < last; ++i) {
                const int64_t r = rows_of[i];
                for (int64_t line = 0; line < lines_per_row; ++line) {
                    const int64_t l = r * lines_per_row + line;  // global line of the table
                    float* out = y.data() + (i * lines_per_row + line) * columns;
                    for (int64_t c = 0; c < columns; ++c) {
                        const int64_t b = l * blocks + c / block_size_;
                        const int32_t z = zero == nullptr ? default_zero : zero_at(l, c / block_size_, b);
                        out[c] = static_cast<float>(value_at(bytes, l * columns + c) - z) * scales.data()[b];
                    }
                }
            }
        });
        y.finish(pool);
    }

private:
    int64_t gather_axis_, quantize_axis_, block_size_, bits_;
};

}  // namespace

void register_contrib_gather_block_quantized_kernels(KernelRegistry& registry) {
    contrib::add(registry, "GatherBlockQuantized", {{0, {TESS_ELEMENT_UINT8, TESS_ELEMENT_INT4, TESS_ELEMENT_UINT4}}},
                 make_factory<GatherBlockQuantizedKernel>());
}

}  // namespace tessera::cpu
