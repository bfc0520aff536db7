// CPU provider: Einsum, Det, CumProd, LpNormalization, Swish and SwiGLU.
//
// Einsum reduces any equation to three steps: each operand becomes a strided view with one dimension per distinct
// label (repeated labels take a diagonal, size-1 dimensions broadcast), operands are contracted left to right as
// batched GEMMs after transposing them to [batch, kept, contracted] / [batch, contracted, kept], and the last
// result is permuted (and summed) into the output labels.  Labels that only one operand carries and nobody needs
// later are summed away while that operand is rearranged.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/compute_cast.h"
#include "util/cumulative.h"
#include "util/data_movement.h"
#include "util/float16_compute.h"
#include "util/gemm.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"
#include "util/wrapping.h"

namespace tessera::cpu {
namespace {

using movement::contiguous_strides;
using movement::product;

// ---- Einsum ------------------------------------------------------------------------------------------------------

// Letters are labelled by their character code.  The dimensions an ellipsis stands for get kEllipsisLabel + k, with
// k counted from the left of the widest ellipsis: operands with fewer such dimensions align to the right, as numpy
// broadcasting does.
constexpr int kEllipsisLabel = 128;
constexpr int kEllipsisMarker = -1;  // where "..." stands in a parsed term

struct EinsumEquation {
    std::vector<std::vector<int>> inputs;    // per operand: letters and at most one kEllipsisMarker
    std::optional<std::vector<int>> output;  // nullopt: implicit output
};

EinsumEquation parse_einsum(const std::string& equation) {
    std::string text;
    for (char c : equation)
        if (!std::isspace(static_cast<unsigned char>(c))) text += c;
    const auto bad = [&](const std::string& why) { return KernelError("Einsum: " + why + " in '" + equation + "'"); };
    const auto parse_term = [&](std::string_view term) {
        std::vector<int> labels;
        bool ellipsis = false;
        for (size_t i = 0; i < term.size();) {
            if (term[i] == '.') {
                if (term.substr(i, 3) != "..." || ellipsis) throw bad("malformed ellipsis");
                ellipsis = true;
                labels.push_back(kEllipsisMarker);
                i += 3;
            } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
                labels.push_back(term[i++]);
            } else {
                throw bad(std::string("unexpected character '") + term[i] + "'");
            }
        }
        return labels;
    };
    EinsumEquation parsed;
    const size_t arrow = text.find("->");
    const std::string lhs = text.substr(0, arrow);
    if (arrow != std::string::npos) {
        parsed.output = parse_term(std::string_view(text).substr(arrow + 2));
        std::set<int> seen;
        for (int label : *parsed.output)
            if (!seen.insert(label).second) throw bad("an output label repeats");
    }
    size_t start = 0;
    while (true) {
        const size_t comma = lhs.find(',', start);
        parsed.inputs.push_back(parse_term(std::string_view(lhs).substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return parsed;
}

// An operand during the contraction: a strided view (one dimension per distinct label) of memory that either an
// input or `storage` holds.
template <typename C>
struct EinsumOperand {
    std::vector<int> labels;
    Shape dims;
    std::vector<int64_t> strides;
    const C* data = nullptr;
    std::vector<C> storage;
};

using LabelSizes = std::map<int, int64_t>;

// Whether `op` is already contiguous with its dimensions in `order` (so that it can be used as it is).
template <typename C>
bool has_layout(const EinsumOperand<C>& op, const std::vector<int>& order) {
    if (op.labels != order) return false;
    const std::vector<int64_t> contiguous = contiguous_strides(op.dims);
    for (size_t k = 0; k < op.dims.size(); ++k)
        if (op.dims[k] != 1 && op.strides[k] != contiguous[k]) return false;
    return true;
}

// Writes `op` to dst (contiguous) with its dimensions in `order`; labels of `op` missing from `order` are summed.
template <typename C>
void arrange_into(const EinsumOperand<C>& op, const std::vector<int>& order, C* dst, ThreadPool& pool) {
    Shape dims;
    std::vector<int64_t> kept_strides;
    for (int label : order) {
        const size_t k = size_t(std::find(op.labels.begin(), op.labels.end(), label) - op.labels.begin());
        dims.push_back(op.dims[k]);
        kept_strides.push_back(op.strides[k]);
    }
    Shape summed_dims;
    std::vector<int64_t> summed_strides;
    for (size_t k = 0; k < op.labels.size(); ++k) {
        if (std::find(order.begin(), order.end(), op.labels[k]) != order.end()) continue;
        summed_dims.push_back(op.dims[k]);
        summed_strides.push_back(op.strides[k]);
    }
    const int64_t count = shape_size(dims);
    if (count == 0) return;
    if (summed_dims.empty()) {
        movement::copy_strided(reinterpret_cast<std::byte*>(dst), reinterpret_cast<const std::byte*>(op.data),
                               sizeof(C), dims, kept_strides, pool);
        return;
    }
    // Offsets of every summed element relative to the first, enumerated once.
    const int64_t summed_count = shape_size(summed_dims);
    std::vector<int64_t> summed_offsets(static_cast<size_t>(summed_count));
    {
        movement::Odometer at(summed_dims, summed_strides, 0);
        for (int64_t r = 0; r < summed_count; ++r, at.next()) summed_offsets[size_t(r)] = at.offset();
    }
    const C* in = op.data;
    movement::parallel_range(pool, count, std::max<int64_t>(1, summed_count) * int64_t(sizeof(C)),
                             [&](int64_t begin, int64_t end) {
                                 movement::Odometer at(dims, kept_strides, begin);
                                 for (int64_t i = begin; i < end; ++i, at.next()) {
                                     C sum = C(0);
                                     const C* base = in + at.offset();
                                     for (const int64_t offset : summed_offsets) sum = wrapping_add(sum, base[offset]);
                                     dst[i] = sum;
                                 }
                             });
}

// `op` contiguous with its dimensions in `order`: a view of the same memory when that is already the layout, a
// rearranged (and summed) copy otherwise.
template <typename C>
EinsumOperand<C> arrange(const EinsumOperand<C>& op, const std::vector<int>& order, const LabelSizes& sizes,
                         ThreadPool& pool) {
    EinsumOperand<C> result;
    result.labels = order;
    for (int label : order) result.dims.push_back(sizes.at(label));
    result.strides = contiguous_strides(result.dims);
    if (has_layout(op, order)) {
        result.data = op.data;
        return result;
    }
    result.storage.resize(static_cast<size_t>(shape_size(result.dims)));
    result.data = result.storage.data();
    arrange_into(op, order, result.storage.data(), pool);
    return result;
}

// C[p] = op(A[p]) * op(B[p]) for each of `batches` products of contiguous matrices (op = transpose when flagged).
template <typename C>
void batched_gemm(ThreadPool& pool, int64_t batches, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  const C* A, const C* B, C* out) {
    const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
    const int64_t work = M * N * std::max<int64_t>(K, 1);
    constexpr int64_t kWorkPerTask = 1 << 16;
    if (batches == 1 || work >= kWorkPerTask * pool.size()) {  // big products: split each one across the pool
        for (int64_t p = 0; p < batches; ++p)
            gemm<C>(pool, trans_a, trans_b, M, N, K, C(1), A + p * M * K, lda, B + p * K * N, ldb, C(0),
                    out + p * M * N, N);
        return;
    }
    check_gemm_dimensions(M, N, K);  // many small products: whole products per task
    pool.parallel_for(batches, std::max<int64_t>(1, kWorkPerTask / work), [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p)
            gemm_serial<C>(trans_a, trans_b, M, N, K, C(1), A + p * M * K, lda, B + p * K * N, ldb, C(0),
                           out + p * M * N, N);
    });
}

// Contracts two operands over the labels they share and `keep` does not contain, as one batched GEMM of A
// [batch, a_kept, contracted] and B [batch, contracted, b_kept]; an operand already laid out as the transpose of
// that is used in place with GEMM's transpose flag.  Labels only one side has and `keep` lacks are summed first.
// The result's labels are batch + a_kept + b_kept.
template <typename C>
EinsumOperand<C> contract(const EinsumOperand<C>& a, const EinsumOperand<C>& b, const std::set<int>& keep,
                          const LabelSizes& sizes, ThreadPool& pool) {
    const auto has = [](const EinsumOperand<C>& op, int label) {
        return std::find(op.labels.begin(), op.labels.end(), label) != op.labels.end();
    };
    std::vector<int> batch, contracted, a_kept, b_kept;
    for (int label : a.labels) {
        const bool shared = has(b, label), kept = keep.count(label) != 0;
        if (shared && kept)
            batch.push_back(label);
        else if (shared)
            contracted.push_back(label);
        else if (kept)
            a_kept.push_back(label);
    }
    for (int label : b.labels)
        if (!has(a, label) && keep.count(label)) b_kept.push_back(label);

    const auto concat = [](std::initializer_list<const std::vector<int>*> parts) {
        std::vector<int> all;
        for (const auto* part : parts) all.insert(all.end(), part->begin(), part->end());
        return all;
    };
    const std::vector<int> a_order = concat({&batch, &a_kept, &contracted});
    const std::vector<int> a_transposed = concat({&batch, &contracted, &a_kept});
    const std::vector<int> b_order = concat({&batch, &contracted, &b_kept});
    const std::vector<int> b_transposed = concat({&batch, &b_kept, &contracted});
    const bool trans_a = !has_layout(a, a_order) && has_layout(a, a_transposed);
    const bool trans_b = !has_layout(b, b_order) && has_layout(b, b_transposed);
    const EinsumOperand<C> left = arrange(a, trans_a ? a_transposed : a_order, sizes, pool);
    const EinsumOperand<C> right = arrange(b, trans_b ? b_transposed : b_order, sizes, pool);
    const auto size_of = [&](const std::vector<int>& labels) {
        int64_t n = 1;
        for (int label : labels) n *= sizes.at(label);
        return n;
    };
    const int64_t batches = size_of(batch), M = size_of(a_kept), K = size_of(contracted), N = size_of(b_kept);

    EinsumOperand<C> result;
    result.labels = concat({&batch, &a_kept, &b_kept});
    for (int label : result.labels) result.dims.push_back(sizes.at(label));
    result.strides = contiguous_strides(result.dims);
    result.storage.assign(static_cast<size_t>(batches * M * N), C(0));
    result.data = result.storage.data();
    if (!result.storage.empty() && K > 0)
        batched_gemm<C>(pool, batches, trans_a, trans_b, M, N, K, left.data, right.data, result.storage.data());
    return result;
}

class EinsumKernel final : public Kernel {
public:
    explicit EinsumKernel(const NodeInfo& info) : equation_text_(info.attr_string("equation", "")) {
        equation_ = parse_einsum(equation_text_);
        if (equation_.inputs.size() != info.input_count())
            throw KernelError("Einsum: equation '" + equation_text_ + "' has " +
                              std::to_string(equation_.inputs.size()) + " operands but the node has " +
                              std::to_string(info.input_count()) + " inputs");
    }

    void compute(KernelContext& ctx) const override {
        const int32_t type = ctx.input(0).type;
        for (size_t i = 1; i < ctx.input_count(); ++i)
            if (ctx.input(i).type != type) throw KernelError("Einsum: all inputs must have the same element type");
        // Narrow integers are computed in 32 bits (the wrapped low bits are the same); float16 and bfloat16 in
        // float, rounded once at the end (the reference contracts bfloat16 in float32 and casts the result).
        switch (type) {
            case TESS_ELEMENT_FLOAT32:
            case TESS_ELEMENT_FLOAT16:
            case TESS_ELEMENT_BFLOAT16:
                return run<float>(ctx);
            case TESS_ELEMENT_FLOAT64:
                return run<double>(ctx);
            case TESS_ELEMENT_INT8:
            case TESS_ELEMENT_INT16:
            case TESS_ELEMENT_INT32:
                return run<int32_t>(ctx);
            case TESS_ELEMENT_INT64:
                return run<int64_t>(ctx);
            case TESS_ELEMENT_UINT8:
            case TESS_ELEMENT_UINT16:
            case TESS_ELEMENT_UINT32:
                return run<uint32_t>(ctx);
            case TESS_ELEMENT_UINT64:
                return run<uint64_t>(ctx);
            default:
                throw_unsupported_type("Einsum", type);
        }
    }

private:
    template <typename C>
    void run(KernelContext& ctx) const {
        const size_t count = ctx.input_count();
        std::vector<ConvertedInput<C>> inputs;
        inputs.reserve(count);
        for (size_t i = 0; i < count; ++i) inputs.emplace_back(ctx.input(i), ctx.pool());

        // Expand the ellipses and check every operand's rank.
        size_t ellipsis_rank = 0;
        for (size_t i = 0; i < count; ++i) {
            const auto& term = equation_.inputs[i];
            const size_t letters = size_t(std::count_if(term.begin(), term.end(), [](int l) { return l >= 0; }));
            const size_t rank = ctx.input(i).rank();
            const bool has_ellipsis = letters != term.size();
            if (rank < letters || (!has_ellipsis && rank != letters))
                throw KernelError("Einsum: input " + std::to_string(i) + " has shape " +
                                  shape_string(ctx.input(i).shape) + " but its term in '" + equation_text_ + "' has " +
                                  std::to_string(letters) + " labels");
            if (has_ellipsis) ellipsis_rank = std::max(ellipsis_rank, rank - letters);
        }
        LabelSizes sizes;
        std::vector<EinsumOperand<C>> operands(count);
        std::map<int, int> occurrences;  // how often each letter appears in the terms (for the implicit output)
        for (size_t i = 0; i < count; ++i) {
            const Tensor& t = ctx.input(i);
            const auto& term = equation_.inputs[i];
            std::vector<int> dim_labels;
            const size_t letters = size_t(std::count_if(term.begin(), term.end(), [](int l) { return l >= 0; }));
            const size_t covered = t.rank() - letters;  // dimensions the ellipsis stands for
            for (int label : term) {
                if (label != kEllipsisMarker) {
                    dim_labels.push_back(label);
                    ++occurrences[label];
                    continue;
                }
                for (size_t k = 0; k < covered; ++k)
                    dim_labels.push_back(kEllipsisLabel + int(ellipsis_rank - covered + k));
            }
            const std::vector<int64_t> strides = contiguous_strides(t.shape);
            EinsumOperand<C>& op = operands[i];
            op.data = inputs[i].data();
            for (size_t d = 0; d < dim_labels.size(); ++d) {
                const int label = dim_labels[d];
                const auto at = std::find(op.labels.begin(), op.labels.end(), label);
                if (at != op.labels.end()) {  // a repeated label: walk the diagonal
                    const size_t k = size_t(at - op.labels.begin());
                    if (op.dims[k] != t.shape[d])
                        throw KernelError("Einsum: label '" + label_name(label) + "' repeats in input " +
                                          std::to_string(i) + " with different sizes");
                    op.strides[k] += strides[d];
                    continue;
                }
                op.labels.push_back(label);
                op.dims.push_back(t.shape[d]);
                op.strides.push_back(strides[d]);
            }
            for (size_t k = 0; k < op.labels.size(); ++k) {
                auto [entry, fresh] = sizes.emplace(op.labels[k], op.dims[k]);
                if (fresh || entry->second == op.dims[k]) continue;
                if (entry->second == 1)
                    entry->second = op.dims[k];
                else if (op.dims[k] != 1)
                    throw KernelError("Einsum: label '" + label_name(op.labels[k]) + "' has sizes " +
                                      std::to_string(entry->second) + " and " + std::to_string(op.dims[k]));
            }
        }
        // Size-1 dimensions broadcast against the label's size.
        for (auto& op : operands)
            for (size_t k = 0; k < op.labels.size(); ++k)
                if (op.dims[k] != sizes[op.labels[k]]) {
                    op.dims[k] = sizes[op.labels[k]];
                    op.strides[k] = 0;
                }

        std::vector<int> output_labels;
        if (equation_.output) {
            for (int label : *equation_.output) {
                if (label == kEllipsisMarker) {
                    for (size_t k = 0; k < ellipsis_rank; ++k) output_labels.push_back(kEllipsisLabel + int(k));
                } else if (!sizes.count(label)) {
                    throw KernelError("Einsum: output label '" + label_name(label) + "' appears in no input of '" +
                                      equation_text_ + "'");
                } else {
                    output_labels.push_back(label);
                }
            }
        } else {  // numpy's implicit form: the broadcast dimensions, then labels seen once, in character order
            for (size_t k = 0; k < ellipsis_rank; ++k) output_labels.push_back(kEllipsisLabel + int(k));
            for (const auto& [label, seen] : occurrences)
                if (seen == 1) output_labels.push_back(label);
        }
        Shape output_shape;
        for (int label : output_labels) output_shape.push_back(sizes[label]);

        EinsumOperand<C> current = std::move(operands[0]);
        for (size_t i = 1; i < count; ++i) {
            std::set<int> keep(output_labels.begin(), output_labels.end());
            for (size_t j = i + 1; j < count; ++j) keep.insert(operands[j].labels.begin(), operands[j].labels.end());
            current = contract(current, operands[i], keep, sizes, ctx.pool());
        }
        ConvertedOutput<C> out(ctx.output(0, ctx.input(0).type, output_shape));
        arrange_into(current, output_labels, out.data(), ctx.pool());
        out.finish(ctx.pool());
    }

    static std::string label_name(int label) {
        return label >= kEllipsisLabel ? std::string("...") : std::string(1, char(label));
    }

    std::string equation_text_;
    EinsumEquation equation_;
};

// ---- Det ---------------------------------------------------------------------------------------------------------

// Determinants of [..., n, n] by LU decomposition with partial pivoting, in double whatever the input type.
class DetKernel final : public Kernel {
public:
    explicit DetKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() < 2 || x.shape[x.rank() - 1] != x.shape[x.rank() - 2])
            throw KernelError("Det: input must be [..., n, n], got " + shape_string(x.shape));
        const int64_t n = x.shape.back();
        const Shape batch_shape(x.shape.begin(), x.shape.end() - 2);
        const int64_t batch = shape_size(batch_shape);
        const ConvertedInput<double> in(x, ctx.pool());
        ConvertedOutput<double> out(ctx.output(0, x.type, batch_shape));
        const double* src = in.data();
        double* dst = out.data();
        movement::parallel_range(ctx.pool(), batch, n * n * n * int64_t(sizeof(double)),
                                 [&](int64_t begin, int64_t end) {
                                     double* a = thread_scratch_buffer<double>(n * n);
                                     for (int64_t b = begin; b < end; ++b) {
                                         std::copy(src + b * n * n, src + (b + 1) * n * n, a);
                                         dst[b] = lu_determinant(a, n);
                                     }
                                 });
        out.finish(ctx.pool());
    }

private:
    // Destroys a.
    static double lu_determinant(double* a, int64_t n) {
        double det = 1.0;
        for (int64_t k = 0; k < n; ++k) {
            int64_t pivot = k;
            for (int64_t r = k + 1; r < n; ++r)
                if (std::abs(a[r * n + k]) > std::abs(a[pivot * n + k])) pivot = r;
            if (a[pivot * n + k] == 0.0) return 0.0;
            if (pivot != k) {
                std::swap_ranges(a + k * n, a + (k + 1) * n, a + pivot * n);
                det = -det;
            }
            const double diagonal = a[k * n + k];
            det *= diagonal;
            for (int64_t r = k + 1; r < n; ++r) {
                const double factor = a[r * n + k] / diagonal;
                if (factor == 0.0) continue;
                for (int64_t c = k + 1; c < n; ++c) a[r * n + c] -= factor * a[k * n + c];
            }
        }
        return det;
    }
};

// ---- CumProd -----------------------------------------------------------------------------------------------------

class CumProdKernel final : public Kernel {
public:
    explicit CumProdKernel(const NodeInfo& info)
        : exclusive_(info.attr_int("exclusive", 0) != 0), reverse_(info.attr_int("reverse", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const Tensor& axis_tensor = ctx.input(1);
        if (axis_tensor.size() != 1) throw KernelError("CumProd: axis must be a scalar");
        const size_t axis =
            normalize_axis("CumProd", movement::read_integers(axis_tensor, "CumProd axis")[0], input.rank());
        Tensor& output = ctx.output(0, input.type, input.shape);
        const int64_t outer = product(input.shape, 0, axis);
        const int64_t dim = input.shape[axis];
        const int64_t inner = product(input.shape, axis + 1, input.rank());
        dispatch<float, double, int32_t, int64_t, uint32_t, uint64_t, fp::Half, fp::BFloat16>(
            input.type, [&]<typename T>() {
                using Acc =
                    std::conditional_t<std::is_same_v<T, fp::Half> || std::is_same_v<T, fp::BFloat16>, float, T>;
                cumulative_along_axis<T, Acc>(ctx.pool(), input.ptr<T>(), output.ptr<T>(), outer, dim, inner,
                                              exclusive_, reverse_, Acc(1),
                                              [](Acc a, Acc b) { return wrapping_mul(a, b); });
            });
    }

private:
    bool exclusive_;
    bool reverse_;
};

// ---- LpNormalization ---------------------------------------------------------------------------------------------

// x / ||x||_p along one axis (p = 1 or 2); a zero norm gives 0, as the ONNX reference does.
class LpNormalizationKernel final : public Kernel {
public:
    explicit LpNormalizationKernel(const NodeInfo& info) : axis_(info.attr_int("axis", -1)), p_(info.attr_int("p", 2)) {
        if (p_ != 1 && p_ != 2) throw KernelError("LpNormalization: p must be 1 or 2, got " + std::to_string(p_));
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const size_t axis = normalize_axis("LpNormalization", axis_, x.rank());
        const int64_t outer = product(x.shape, 0, axis);
        const int64_t dim = x.shape[axis];
        const int64_t inner = product(x.shape, axis + 1, x.rank());
        Tensor& y = ctx.output(0, x.type, x.shape);
        const auto run = [&]<typename C>() {
            const ConvertedInput<C> in(x, ctx.pool());
            ConvertedOutput<C> out(y);
            normalize<C>(in.data(), out.data(), outer, dim, inner, ctx.pool());
            out.finish(ctx.pool());
        };
        if (x.type == TESS_ELEMENT_FLOAT64)
            run.template operator()<double>();
        else
            run.template operator()<float>();
    }

private:
    template <typename C>
    void normalize(const C* x, C* y, int64_t outer, int64_t dim, int64_t inner, ThreadPool& pool) const {
        const bool l1 = p_ == 1;
        movement::parallel_range(pool, outer, dim * inner * int64_t(sizeof(C)), [&](int64_t begin, int64_t end) {
            C* norms = thread_scratch_buffer<C>(inner);
            for (int64_t o = begin; o < end; ++o) {
                const C* src = x + o * dim * inner;
                C* dst = y + o * dim * inner;
                std::fill(norms, norms + inner, C(0));
                for (int64_t a = 0; a < dim; ++a)
                    for (int64_t i = 0; i < inner; ++i) {
                        const C v = src[a * inner + i];
                        norms[i] += l1 ? std::abs(v) : v * v;
                    }
                for (int64_t i = 0; i < inner; ++i) {
                    const C norm = l1 ? norms[i] : std::sqrt(norms[i]);
                    norms[i] = norm == C(0) ? C(0) : C(1) / norm;
                }
                for (int64_t a = 0; a < dim; ++a)
                    for (int64_t i = 0; i < inner; ++i) dst[a * inner + i] = src[a * inner + i] * norms[i];
            }
        });
    }

    int64_t axis_;
    int64_t p_;
};

// ---- Swish -------------------------------------------------------------------------------------------------------

// fn(begin, end) over [0, n) in parallel chunks (each element costs an exp: worth a task from a few thousand on).
template <typename Fn> void parallel_chunks(ThreadPool& pool, int64_t n, const Fn& fn) {
    constexpr int64_t kGrain = 4096;
    if (n <= kGrain || pool.size() <= 1)
        fn(int64_t(0), n);
    else
        pool.parallel_for(n, kGrain, fn);
}

// x * sigmoid(alpha * x).
class SwishKernel final : public Kernel {
public:
    explicit SwishKernel(const NodeInfo& info) : alpha_(info.attr_float("alpha", 1.0f)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        Tensor& y = ctx.output(0, x.type, x.shape);
        const int64_t n = x.size();
        if (x.type == TESS_ELEMENT_FLOAT64) {
            const double alpha = alpha_;
            const double* in = x.ptr<double>();
            double* out = y.ptr<double>();
            parallel_chunks(ctx.pool(), n, [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) out[i] = in[i] / (1.0 + std::exp(-alpha * in[i]));
            });
            return;
        }
        if (x.type != TESS_ELEMENT_FLOAT32 && !is_16bit_float(x.type)) throw_unsupported_type("Swish", x.type);
        const ConvertedInput<float> in(x, ctx.pool());
        ConvertedOutput<float> out(y);
        const float* src = in.data();
        float* dst = out.data();
        const VectorSwish swish{alpha_};
        parallel_chunks(ctx.pool(), n, [&](int64_t begin, int64_t end) {
            vec::run_best_isa([&] { vec::map(src + begin, dst + begin, end - begin, swish); });
        });
        out.finish(ctx.pool());
    }

private:
    struct VectorSwish {
        float alpha;
        [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return x * vec::sigmoid(alpha * x); }
    };

    float alpha_;
};

// ---- SwiGLU ------------------------------------------------------------------------------------------------------

// Y = Swish_alpha(A) * B = A * sigmoid(alpha * A) * B, for A and B of one shape (no broadcasting).  float16 and
// bfloat16 compute in float and round once, as the conformance data does.
class SwiGLUKernel final : public Kernel {
public:
    explicit SwiGLUKernel(const NodeInfo& info) : alpha_(info.attr_float("alpha", 1.0f)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        if (a.type != b.type) throw KernelError("SwiGLU: A and B have different element types");
        if (a.shape != b.shape)
            throw KernelError("SwiGLU: A and B must have the same shape (no broadcasting), got " +
                              shape_string(a.shape) + " and " + shape_string(b.shape));
        Tensor& y = ctx.output(0, a.type, a.shape);
        const int64_t n = a.size();
        if (a.type == TESS_ELEMENT_FLOAT64) {
            const double alpha = alpha_;
            const double* pa = a.ptr<double>();
            const double* pb = b.ptr<double>();
            double* out = y.ptr<double>();
            parallel_chunks(ctx.pool(), n, [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) out[i] = pa[i] / (1.0 + std::exp(-alpha * pa[i])) * pb[i];
            });
            return;
        }
        if (a.type != TESS_ELEMENT_FLOAT32 && !is_16bit_float(a.type)) throw_unsupported_type("SwiGLU", a.type);
        const ConvertedInput<float> in_a(a, ctx.pool()), in_b(b, ctx.pool());
        ConvertedOutput<float> out(y);
        const float* pa = in_a.data();
        const float* pb = in_b.data();
        float* dst = out.data();
        const VectorSwiGLU swiglu{alpha_};
        parallel_chunks(ctx.pool(), n, [&](int64_t begin, int64_t end) {
            vec::run_best_isa([&] { vec::map2(pa + begin, pb + begin, dst + begin, end - begin, swiglu); });
        });
        out.finish(ctx.pool());
    }

private:
    struct VectorSwiGLU {
        float alpha;
        [[gnu::always_inline]] vec::Vf operator()(vec::Vf a, vec::Vf b) const {
            return a * vec::sigmoid(alpha * a) * b;
        }
    };

    float alpha_;
};

}  // namespace

void register_math_kernels(KernelRegistry& registry) {
    const auto add = [&](const char* op, int since, KernelFactory factory, std::vector<int32_t> types,
                         KernelMemory memory = KernelMemory::Normal) {
        registry.add({"", op, since, 0, {{0, std::move(types)}}, memory, std::move(factory)});
    };
    const std::vector<int32_t> floats{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_FLOAT16,
                                      TESS_ELEMENT_BFLOAT16};
    // Opset 28 only adds bfloat16.
    add("Einsum", 12, make_factory<EinsumKernel>(),
        {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16, TESS_ELEMENT_INT8,
         TESS_ELEMENT_INT16, TESS_ELEMENT_INT32, TESS_ELEMENT_INT64, TESS_ELEMENT_UINT8, TESS_ELEMENT_UINT16,
         TESS_ELEMENT_UINT32, TESS_ELEMENT_UINT64});
    // Opset 22 only adds bfloat16 to Det and LpNormalization.
    add("Det", 11, make_factory<DetKernel>(), floats);
    add("LpNormalization", 1, make_factory<LpNormalizationKernel>(), floats);
    add("Swish", 24, make_factory<SwishKernel>(), floats, KernelMemory::InPlaceInput0);
    // Element k of the output depends only on element k of A and B, so it may take over A's buffer.
    registry.add({"", "SwiGLU", 28, 0, {{0, floats}, {1, floats}}, KernelMemory::InPlaceInput0,
                  make_factory<SwiGLUKernel>()});
    // The scan reads each element before writing it, so it can run in place.
    registry.add({"",
                  "CumProd",
                  26,
                  0,
                  {{0,
                    {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT32, TESS_ELEMENT_INT64,
                     TESS_ELEMENT_UINT32, TESS_ELEMENT_UINT64, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}},
                   {1, {TESS_ELEMENT_INT32, TESS_ELEMENT_INT64}}},
                  KernelMemory::InPlaceInput0,
                  make_factory<CumProdKernel>()});
}

}  // namespace tessera::cpu
