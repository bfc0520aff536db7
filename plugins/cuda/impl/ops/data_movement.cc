// CUDA provider operators: data movement -- Transpose, Concat, and Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// which alias their input (no copy).
#include "ops/op_table.h"

namespace tessera::cuda::ops {
namespace {

struct TransposeStep final : Step {
    Shape perm;  // empty: reverse
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const size_t rank = x.dims.size();
        Shape p = perm;
        if (p.empty())
            for (size_t i = 0; i < rank; ++i) p.push_back(static_cast<int64_t>(rank - 1 - i));
        if (p.size() != rank)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": perm " + shape_string(p) + " does not match rank " +
                                                   std::to_string(rank));
        std::vector<bool> seen(rank, false);
        for (int64_t& v : p) {
            v = normalize_axis(v, static_cast<int64_t>(rank), "perm entry");
            if (seen[v]) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": perm repeats an axis");
            seen[v] = true;
        }
        Shape in_strides(rank, 1), out(rank);
        for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * x.dims[i];
        for (size_t i = 0; i < rank; ++i) out[i] = x.dims[p[i]];
        Tensor& y = r.output(*this, 0, x.type, out);
        // Merge output dimensions that stay contiguous in the source, drop size-1 dimensions.
        std::vector<int64_t> dims, strides;
        for (size_t i = 0; i < rank; ++i) {
            if (out[i] == 1) continue;
            const int64_t s = in_strides[p[i]];
            if (!dims.empty() && strides.back() == s * out[i]) {
                dims.back() *= out[i];
                strides.back() = s;
            } else {
                dims.push_back(out[i]);
                strides.push_back(s);
            }
        }
        if (y.bytes() == 0) return;
        if (dims.empty() || (dims.size() == 1 && strides[0] == 1)) {
            check_cuda(cudaMemcpyAsync(y.data, x.data, y.bytes(), cudaMemcpyDeviceToDevice, r.stream()), label.c_str());
            return;
        }
        if (dims.size() > static_cast<size_t>(kMaxDims))
            fail(TESS_STATUS_NOT_IMPLEMENTED, label + ": transposes of more than 8 dimensions are not supported");
        TransposePlan plan;
        plan.rank = static_cast<int>(dims.size());
        plan.n = y.count();
        for (size_t i = 0; i < dims.size(); ++i) {
            plan.out_dims[i] = dims[i];
            plan.src_strides[i] = strides[i];
        }
        check_launch(launch_transpose(element_size(x.type), x.data, y.data, plan, r.stream()), *this);
    }
};

struct ConcatStep final : Step {
    int64_t axis = 0;
    void run(Run& r) override {
        std::vector<const Tensor*> xs;
        for (size_t k = 0; k < in.size(); ++k) xs.push_back(&r.required(*this, k));
        const Tensor& first = *xs[0];
        const int64_t rank = first.rank();
        const int64_t a = normalize_axis(axis, rank, "axis");
        Shape out = first.dims;
        out[a] = 0;
        for (const Tensor* x : xs) {
            bool ok = x->rank() == rank && x->type == first.type;
            for (int64_t d = 0; ok && d < rank; ++d) ok = d == a || x->dims[d] == first.dims[d];
            if (!ok)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": inputs " + shape_string(first.dims) + " and " +
                                                       shape_string(x->dims) + " cannot be concatenated on axis " +
                                                       std::to_string(a));
            out[a] += x->dims[a];
        }
        Tensor& y = r.output(*this, 0, first.type, out);
        const size_t es = element_size(first.type);
        const int64_t outer = product(out, 0, a);
        const size_t out_row = static_cast<size_t>(product(out, a, rank)) * es;
        size_t offset = 0;
        for (const Tensor* x : xs) {
            const size_t row = static_cast<size_t>(product(x->dims, a, rank)) * es;
            if (row > 0 && outer > 0) {
                char* dst = static_cast<char*>(y.data) + offset;
                if (outer == 1)
                    check_cuda(cudaMemcpyAsync(dst, x->data, row, cudaMemcpyDeviceToDevice, r.stream()), label.c_str());
                else
                    check_cuda(cudaMemcpy2DAsync(dst, out_row, x->data, row, row, static_cast<size_t>(outer),
                                                 cudaMemcpyDeviceToDevice, r.stream()),
                               label.c_str());
            }
            offset += row;
        }
    }
};

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input's memory with another shape.
struct AliasStep final : Step {
    enum class Kind { Reshape, Flatten, Squeeze, Unsqueeze, Identity } kind = Kind::Identity;
    bool from_input = false;  // the shape / axes come from input 1 (else from `ints`)
    Shape ints;               // Reshape shape or Squeeze/Unsqueeze axes from attributes
    bool allow_zero = false;
    int64_t axis = 1;         // Flatten

    Shape reshape(const Shape& in, const Shape& shape) const {
        Shape out(shape.size());
        int infer = -1;
        int64_t known = 1;
        for (size_t i = 0; i < shape.size(); ++i) {
            int64_t d = shape[i];
            if (d == 0 && !allow_zero) {
                if (i >= in.size())
                    fail(TESS_STATUS_INVALID_ARGUMENT, label + ": shape " + shape_string(shape) + " copies dimension " +
                                                           std::to_string(i) + " of " + shape_string(in));
                d = in[i];
            }
            if (d == -1) {
                if (infer >= 0) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": shape " + shape_string(shape) + " has two -1");
                infer = static_cast<int>(i);
                continue;
            }
            if (d < 0) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": shape " + shape_string(shape) + " is not valid");
            out[i] = d;
            known *= d;
        }
        const int64_t total = element_count(in);
        if (infer >= 0) {
            if (known == 0 || total % known != 0)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": cannot reshape " + shape_string(in) + " to " + shape_string(shape));
            out[infer] = total / known;
        }
        if (element_count(out) != total)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": cannot reshape " + shape_string(in) + " to " + shape_string(shape));
        return out;
    }

    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const int64_t rank = x.rank();
        Shape out;
        switch (kind) {
            case Kind::Identity: out = x.dims; break;
            case Kind::Reshape: out = reshape(x.dims, from_input ? r.read_ints(*this, 1) : ints); break;
            case Kind::Flatten: {
                const int64_t a = normalize_axis(axis, rank, "axis", true);
                out = {product(x.dims, 0, a), product(x.dims, a, rank)};
                break;
            }
            case Kind::Squeeze: {
                Shape axes = ints;
                if (from_input && in.size() > 1 && in[1] >= 0) axes = r.read_ints(*this, 1);
                std::vector<bool> drop(rank, false);
                if (axes.empty()) {
                    for (int64_t d = 0; d < rank; ++d) drop[d] = x.dims[d] == 1;
                } else {
                    for (int64_t v : axes) {
                        const int64_t a = normalize_axis(v, rank, "axis");
                        if (x.dims[a] != 1)
                            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": dimension " + std::to_string(a) + " of " +
                                                                   shape_string(x.dims) + " is not 1");
                        drop[a] = true;
                    }
                }
                for (int64_t d = 0; d < rank; ++d)
                    if (!drop[d]) out.push_back(x.dims[d]);
                break;
            }
            case Kind::Unsqueeze: {
                const Shape axes = from_input ? r.read_ints(*this, 1) : ints;
                const int64_t out_rank = rank + static_cast<int64_t>(axes.size());
                std::vector<bool> inserted(out_rank, false);
                for (int64_t v : axes) {
                    const int64_t a = normalize_axis(v, out_rank, "axis");
                    if (inserted[a]) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": axes repeat " + std::to_string(a));
                    inserted[a] = true;
                }
                size_t next = 0;
                for (int64_t d = 0; d < out_rank; ++d) out.push_back(inserted[d] ? 1 : x.dims[next++]);
                break;
            }
        }
        r.alias(*this, 0, x, out);
    }
};

}  // namespace

void register_data_movement_ops(OpTable& t) {
    t.add("Transpose", 1, 0, float_x(), {
        [](const Node& n) { return check_unary(n); },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<TransposeStep>();
            wire(ctx, *s, n);
            s->perm = n.ints("perm");
            return s;
        }});
    // Concat 1-3 defaults axis to 1; 4+ requires it.
    t.add("Concat", 1, 0, float_x(), {
        [](const Node& n) -> std::string {
            if (n.attr("axis") == nullptr && n.opset() >= 4) return "axis is missing";
            return all_same_float(n);
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<ConcatStep>();
            wire(ctx, *s, n);
            s->axis = n.i("axis", 1);
            return s;
        }});

    // Aliases.  Reshape takes its shape from an attribute before opset 5 and from an int64 input since; Squeeze and
    // Unsqueeze take their axes from an attribute before opset 13 and from an int64 input since: one entry per
    // signature, the same check and build (which read the node's opset).
    auto int64_input = [](const Node& n, size_t k, bool required) -> std::string {
        const TessValueView* v = n.in(k);
        if (v == nullptr) return required ? "input " + std::to_string(k) + " is missing" : "";
        if (v->element_type != TESS_ELEMENT_INT64) return "input " + std::to_string(k) + " must be int64";
        return "";
    };
    const InputTypes x_and_int64 = {{0, float_types()}, {1, {TESS_ELEMENT_INT64}}};
    const OpFns reshape = {
        [int64_input](const Node& n) -> std::string {
            if (std::string why = check_unary(n); !why.empty()) return why;
            return n.opset() >= 5 ? int64_input(n, 1, true) : "";
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<AliasStep>();
            wire(ctx, *s, n);
            s->kind = AliasStep::Kind::Reshape;
            s->allow_zero = n.i("allowzero", 0) != 0;
            if (n.opset() >= 5) {
                s->from_input = true;
                s->host_only[1] = true;
            } else {
                s->ints = n.ints("shape");
            }
            return s;
        }};
    t.add("Reshape", 1, 4, float_x(), reshape);
    t.add("Reshape", 5, 0, x_and_int64, reshape);
    t.add("Flatten", 1, 0, float_x(), {
        [](const Node& n) { return check_unary(n); },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<AliasStep>();
            wire(ctx, *s, n);
            s->kind = AliasStep::Kind::Flatten;
            s->axis = n.i("axis", 1);
            return s;
        }});
    const OpFns squeeze = {
        [int64_input](const Node& n) -> std::string {
            if (std::string why = check_unary(n); !why.empty()) return why;
            return n.opset() >= 13 ? int64_input(n, 1, false) : "";
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<AliasStep>();
            wire(ctx, *s, n);
            s->kind = AliasStep::Kind::Squeeze;
            if (n.opset() >= 13) {
                s->from_input = true;
                if (s->host_only.size() > 1) s->host_only[1] = true;
            } else {
                s->ints = n.ints("axes");
            }
            return s;
        }};
    t.add("Squeeze", 1, 12, float_x(), squeeze);
    t.add("Squeeze", 13, 0, x_and_int64, squeeze);
    const OpFns unsqueeze = {
        [int64_input](const Node& n) -> std::string {
            if (std::string why = check_unary(n); !why.empty()) return why;
            return n.opset() >= 13 ? int64_input(n, 1, true) : "";
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<AliasStep>();
            wire(ctx, *s, n);
            s->kind = AliasStep::Kind::Unsqueeze;
            if (n.opset() >= 13) {
                s->from_input = true;
                s->host_only[1] = true;
            } else {
                s->ints = n.ints("axes");
            }
            return s;
        }};
    t.add("Unsqueeze", 1, 12, float_x(), unsqueeze);
    t.add("Unsqueeze", 13, 0, x_and_int64, unsqueeze);
    // Identity 14+ also passes sequences and 16+ optionals: check_unary declines anything but tensors.
    t.add("Identity", 1, 0, float_x(), {
        [](const Node& n) { return check_unary(n); },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<AliasStep>();
            wire(ctx, *s, n);
            s->kind = AliasStep::Kind::Identity;
            return s;
        }});
}

}  // namespace tessera::cuda::ops
