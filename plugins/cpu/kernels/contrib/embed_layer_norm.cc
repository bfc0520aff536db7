// CPU provider, com.microsoft EmbedLayerNormalization: BERT's embedding block as onnxruntime's transformer
// optimizer fuses it.
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
#include "util/compute_cast.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

namespace {

class EmbedLayerNormalizationKernel final : public Kernel {
public:
    explicit EmbedLayerNormalizationKernel(const NodeInfo& info) : epsilon_(info.attr_float("epsilon", 1e-12f)) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "EmbedLayerNormalization";
        const Tensor& ids = ctx.input(0);
        if (ids.type != TESS_ELEMENT_INT32 || ids.rank() != 2) throw KernelError(op + ": input_ids must be int32 (B, S)");
        const int64_t B = ids.shape[0], S = ids.shape[1];
        const Tensor& word = ctx.input(2);
        const Tensor& position = ctx.input(3);
        if (word.rank() != 2 || position.rank() != 2 || position.shape[1] != word.shape[1])
            throw KernelError(op + ": word_embedding and position_embedding must be (rows, hidden) of one hidden size");
        const int64_t H = word.shape[1];
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> words(word, pool), positions(position, pool), gamma(ctx.input(5), pool);
        ConvertedInput<float> segments, beta;
        const int32_t* segment_ids = nullptr;
        int64_t segment_rows = 0;
        if (ctx.has_input(1) && ctx.has_input(4)) {
            const Tensor& seg = ctx.input(1);
            if (seg.type != TESS_ELEMENT_INT32 || seg.shape != ids.shape)
                throw KernelError(op + ": segment_ids must be int32 of input_ids' shape");
            segment_ids = seg.ptr<int32_t>();
            segments = ConvertedInput<float>(ctx.input(4), pool);
            segment_rows = ctx.input(4).shape[0];
            if (ctx.input(4).rank() != 2 || ctx.input(4).shape[1] != H)
                throw KernelError(op + ": segment_embedding must be (types, " + std::to_string(H) + ")");
        }
        if (ctx.input(5).size() != H) throw KernelError(op + ": gamma must hold " + std::to_string(H) + " values");
        if (ctx.has_input(6)) {
            if (ctx.input(6).size() != H) throw KernelError(op + ": beta must hold " + std::to_string(H) + " values");
            beta = ConvertedInput<float>(ctx.input(6), pool);
        }
        const int32_t* position_ids = nullptr;
        bool shared_positions = false;
        if (ctx.has_input(8)) {
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
        check_ids(ids.ptr<int32_t>(), B * S, word.shape[0], "input id");
        if (segment_ids) check_ids(segment_ids, B * S, segment_rows, "segment id");
        if (position_ids) check_ids(position_ids, (shared_positions ? 1 : B) * S, position.shape[0], "position id");
        if (!position_ids && S > position.shape[0])
            throw KernelError(op + ": " + std::to_string(S) + " tokens exceed the position table");

        ConvertedOutput<float> out(ctx.output(0, word.type, {B, S, H}));
        ConvertedOutput<float> sum_out;
        if (ctx.output_count() > 2 && ctx.output_wanted(2))
            sum_out = ConvertedOutput<float>(ctx.output(2, word.type, {B, S, H}));
        if (ctx.output_count() > 1 && ctx.output_wanted(1)) {
            int32_t* mask_index = ctx.output(1, TESS_ELEMENT_INT32, {B}).ptr<int32_t>();
            const int32_t* mask = ctx.has_input(7) ? ctx.input(7).ptr<int32_t>() : nullptr;
            if (mask != nullptr && ctx.input(7).shape != ids.shape)
                throw KernelError(op + ": mask must be int32 of input_ids' shape");
            for (int64_t b = 0; b < B; ++b)
                mask_index[b] = mask == nullptr ? 0 : static_cast<int32_t>(std::count(mask + b * S, mask + (b + 1) * S, 1));
        }
        const int32_t* id = ids.ptr<int32_t>();
        pool.parallel_for(B * S, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, H)), [&](int64_t first, int64_t last) {
            float* row = thread_scratch_buffer<float, 24>(H);
            for (int64_t t = first; t < last; ++t) {
                const int64_t s = t % S;
                const int64_t pos = position_ids ? position_ids[(shared_positions ? 0 : t / S) * S + s] : s;
                const float* w = words.data() + id[t] * H;
                const float* p = positions.data() + pos * H;
                const float* g = segment_ids ? segments.data() + segment_ids[t] * H : nullptr;
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
                for (int64_t h = 0; h < H; ++h)
                    y[h] = (row[h] - m) * inv_std * gamma.data()[h] + (beta.data() ? beta.data()[h] : 0.0f);
                if (sum_out) std::copy_n(row, H, sum_out.data() + t * H);
            }
        });
        out.finish(pool);
        sum_out.finish(pool);
    }

private:
    float epsilon_;
};

}  // namespace

void register_contrib_embedding_kernels(KernelRegistry& registry) {
    registry.add(KernelDef{.domain = "com.microsoft",
                           .op_type = "EmbedLayerNormalization",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, {TESS_ELEMENT_INT32}}, {2, {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16}}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<EmbedLayerNormalizationKernel>()});
}

}  // namespace tessera::cpu
