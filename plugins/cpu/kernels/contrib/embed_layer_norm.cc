// CPU provider, com.microsoft EmbedLayerNormalization (and QEmbedLayerNormalization, below): BERT's embedding block
// as onnxruntime's transformer optimizer fuses it.
//
//   inputs   input_ids (B, S) int32, segment_ids? (B, S) int32, word_embedding (V, H), position_embedding (P, H),
//            segment_embedding? (T, H), gamma (H), beta? (H), mask? (B, S) int32, position_ids? (B, S) or (1, S)
//   outputs  output (B, S, H), mask_index? (B) int32, embedding_sum? (B, S, H)
//   attrs    epsilon (1e-12)
//
// output = LayerNorm(word[input_ids] + position[position_ids or s] + segment[segment_ids]) * gamma + beta;
// mask_index[b] counts the ones in mask[b] (zeros without a mask), as onnxruntime's CPU kernel writes it; the
// attention that reads it takes the first mask_index[b] tokens as valid.  An id outside its table is an error.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "runtime/host.h"
#include "util/compute_cast.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

namespace {

// An embedding table whose rows are read as float: float32 in place, float16/bfloat16 converted row by row, 8-bit
// rows dequantized, (q - zero_point) * scale, as they are read (never the whole table).
struct Table {
    const void* data = nullptr;
    int32_t type = TESS_ELEMENT_UNDEFINED;
    int64_t rows = 0, width = 0;
    float scale = 1.0f;
    int32_t zero = 0;
    bool quantized = false;

    const float* row(int64_t i, float* scratch) const {
        if (!quantized && type == TESS_ELEMENT_FLOAT32) return static_cast<const float*>(data) + i * width;
        if (quantized) {
            for (int64_t h = 0; h < width; ++h) {
                const int32_t q = type == TESS_ELEMENT_INT8 ? static_cast<const int8_t*>(data)[i * width + h]
                                                            : static_cast<const uint8_t*>(data)[i * width + h];
                scratch[h] = static_cast<float>(q - zero) * scale;
            }
        } else {
            const auto* source =
                static_cast<const std::byte*>(data) + element_bytes(type, static_cast<size_t>(i * width));
            convert::convert_block(type, source, TESS_ELEMENT_FLOAT32, scratch, 0, width, convert::CastOptions{});
        }
        return scratch;
    }
};

// EmbedLayerNormalization and QEmbedLayerNormalization (its quantize_dynamic form: the tables, gamma and beta as
// uint8 with a scale and zero point each; inputs input_ids, segment_ids?, word, position, segment?, gamma, beta,
// mask?, then the five scales and the five zero points; outputs the normalized embeddings and mask_index).
class EmbedLayerNormalizationKernel final : public Kernel {
public:
    EmbedLayerNormalizationKernel(const NodeInfo& info, bool quantized)
        : quantized_(quantized), epsilon_(info.attr_float("epsilon", 1e-12f)) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = quantized_ ? "QEmbedLayerNormalization" : "EmbedLayerNormalization";
        const Tensor& ids = ctx.input(0);
        if (ids.type != TESS_ELEMENT_INT32 || ids.rank() != 2) throw KernelError(op + ": input_ids must be int32 (B, S)");
        const int64_t B = ids.shape[0], S = ids.shape[1];
        const Tensor& word = ctx.input(2);
        const Tensor& position = ctx.input(3);
        if (word.rank() != 2 || position.rank() != 2 || position.shape[1] != word.shape[1])
            throw KernelError(op + ": word_embedding and position_embedding must be (rows, hidden) of one hidden size");
        const int64_t H = word.shape[1];
        ThreadPool& pool = ctx.pool();
        const Table words = table(ctx, op, 2, 8, 13), positions = table(ctx, op, 3, 9, 14);
        Table segments;
        const int32_t* segment_ids = nullptr;
        if (ctx.has_input(1) && ctx.has_input(4)) {
            const Tensor& seg = ctx.input(1);
            if (seg.type != TESS_ELEMENT_INT32 || seg.shape != ids.shape)
                throw KernelError(op + ": segment_ids must be int32 of input_ids' shape");
            segment_ids = seg.ptr<int32_t>();
            segments = table(ctx, op, 4, 10, 15);
            if (segments.width != H) throw KernelError(op + ": segment_embedding must be (types, " + std::to_string(H) + ")");
        }
        // gamma and beta, as float vectors.
        float* parameters = thread_scratch_buffer<float, 25>(2 * H);
        const Table gamma = table(ctx, op, 5, 11, 16);
        if (ctx.input(5).size() != H) throw KernelError(op + ": gamma must hold " + std::to_string(H) + " values");
        std::copy_n(gamma.row(0, parameters), H, parameters);
        const float* beta = nullptr;
        if (ctx.has_input(6)) {
            if (ctx.input(6).size() != H) throw KernelError(op + ": beta must hold " + std::to_string(H) + " values");
            const Table b = table(ctx, op, 6, 12, 17);
            std::copy_n(b.row(0, parameters + H), H, parameters + H);
            beta = parameters + H;
        }
        const int32_t* position_ids = nullptr;
        bool shared_positions = false;
        if (!quantized_ && ctx.has_input(8)) {
            const Tensor& p = ctx.input(8);
            if (p.type != TESS_ELEMENT_INT32 || p.rank() != 2 || p.shape[1] != S || (p.shape[0] != B && p.shape[0] != 1))
                throw KernelError(op + ": position_ids must be int32 (B, S) or (1, S)");
            position_ids = p.ptr<int32_t>();
            shared_positions = p.shape[0] == 1;
        }
        // Every id is checked before the parallel loop (nothing may throw inside it).
        auto check_ids = [&](const int32_t* values, int64_t count, int64_t rows, const char* what) {
            for (int64_t i = 0; i < count; ++i)
                if (values[i] < 0 || values[i] >= rows)
                    throw KernelError(op + ": " + what + " " + std::to_string(values[i]) + " is outside its table of " +
                                      std::to_string(rows) + " rows");
        };
        check_ids(ids.ptr<int32_t>(), B * S, words.rows, "input id");
        if (segment_ids) check_ids(segment_ids, B * S, segments.rows, "segment id");
        if (position_ids) check_ids(position_ids, (shared_positions ? 1 : B) * S, positions.rows, "position id");
        if (!position_ids && S > positions.rows)
            throw KernelError(op + ": " + std::to_string(S) + " tokens exceed the position table");

        const int32_t out_type = quantized_ ? TESS_ELEMENT_FLOAT32 : word.type;
        ConvertedOutput<float> out(ctx.output(0, out_type, {B, S, H}));
        ConvertedOutput<float> sum_out;
        if (!quantized_ && ctx.output_count() > 2 && ctx.output_wanted(2))
            sum_out = ConvertedOutput<float>(ctx.output(2, out_type, {B, S, H}));
        if (ctx.output_count() > 1 && ctx.output_wanted(1)) {
            int32_t* mask_index = ctx.output(1, TESS_ELEMENT_INT32, {B}).ptr<int32_t>();
            const int32_t* mask = ctx.has_input(7) ? ctx.input(7).ptr<int32_t>() : nullptr;
            if (mask != nullptr && ctx.input(7).shape != ids.shape)
                throw KernelError(op + ": mask must be int32 of input_ids' shape");
            for (int64_t b = 0; b < B; ++b)
                mask_index[b] = mask == nullptr ? 0 : static_cast<int32_t>(std::count(mask + b * S, mask + (b + 1) * S, 1));
        }
        const int32_t* id = ids.ptr<int32_t>();
        const float* g_values = parameters;
        pool.parallel_for(B * S, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, H)), [&](int64_t first, int64_t last) {
            float* row = thread_scratch_buffer<float, 24>(4 * H);  // the sum, then three table rows
            float* rows = row + H;
            for (int64_t t = first; t < last; ++t) {
                const int64_t s = t % S;
                const int64_t pos = position_ids ? position_ids[(shared_positions ? 0 : t / S) * S + s] : s;
                const float* w = words.row(id[t], rows);
                const float* p = positions.row(pos, rows + H);
                const float* g = segment_ids ? segments.row(segment_ids[t], rows + 2 * H) : nullptr;
                double sum = 0;
                for (int64_t h = 0; h < H; ++h) {
                    row[h] = w[h] + p[h] + (g ? g[h] : 0.0f);
                    sum += row[h];
                }
                const double mean = sum / static_cast<double>(H);
                double squares = 0;
                for (int64_t h = 0; h < H; ++h) squares += (row[h] - mean) * (row[h] - mean);
                const float inv_std = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(H) + epsilon_));
                const float m = static_cast<float>(mean);
                float* y = out.data() + t * H;
                for (int64_t h = 0; h < H; ++h) y[h] = (row[h] - m) * inv_std * g_values[h] + (beta ? beta[h] : 0.0f);
                if (sum_out) std::copy_n(row, H, sum_out.data() + t * H);
            }
        });
        out.finish(pool);
        sum_out.finish(pool);
    }

private:
    // Table `input`; for QEmbedLayerNormalization with its scale and zero point inputs.
    Table table(const KernelContext& ctx, const std::string& op, size_t input, size_t scale_input,
                size_t zero_input) const {
        const Tensor& t = ctx.input(input);
        Table table;
        table.data = t.data;
        table.type = t.type;
        table.rows = t.rank() >= 2 ? t.shape[0] : 1;
        table.width = t.rank() >= 2 ? t.shape[1] : t.size();
        if (!quantized_) {
            if (t.type != TESS_ELEMENT_FLOAT32 && t.type != TESS_ELEMENT_FLOAT16 && t.type != TESS_ELEMENT_BFLOAT16)
                throw_unsupported_type(op + " embedding", t.type);
            return table;
        }
        if (t.type != TESS_ELEMENT_UINT8 && t.type != TESS_ELEMENT_INT8) throw_unsupported_type(op + " table", t.type);
        const Tensor& scale = ctx.input(scale_input);
        const Tensor& zero = ctx.input(zero_input);
        if (scale.type != TESS_ELEMENT_FLOAT32 || scale.size() != 1 || zero.size() != 1 || zero.type != t.type)
            throw KernelError(op + ": each table needs a float scale and a zero point of its type, both scalars");
        table.quantized = true;
        table.scale = scale.ptr<float>()[0];
        table.zero = t.type == TESS_ELEMENT_INT8 ? zero.ptr<int8_t>()[0] : zero.ptr<uint8_t>()[0];
        return table;
    }

    bool quantized_;
    float epsilon_;
};

}  // namespace

void register_contrib_embedding_kernels(KernelRegistry& registry) {
    using namespace contrib;
    add(registry, "EmbedLayerNormalization", {{0, {TESS_ELEMENT_INT32}}, {2, kFloat32Or16}},
        factory_with<EmbedLayerNormalizationKernel>(false));
    add(registry, "QEmbedLayerNormalization", {{0, {TESS_ELEMENT_INT32}}, {2, k8bit}},
        factory_with<EmbedLayerNormalizationKernel>(true));
}

}  // namespace tessera::cpu
