#include "runtime/kernel_source.h"

#include <algorithm>
#include <cstring>

#include "runtime/host.h"

namespace tessera::cpu {

namespace {

// Why a custom operator cannot take this node ("" when it can).
std::string custom_op_mismatch(const TessCustomOpApi& op, const TessNodeView& node) {
    if (node.opset < op.since_version || (op.end_version != 0 && node.opset > op.end_version))
        return "opset " + std::to_string(node.opset) + " is outside the versions the library serves";
    bool variadic = op.input_count > 0 && op.inputs[op.input_count - 1]->variadic;
    if (node.input_count > op.input_count && !variadic)
        return std::to_string(node.input_count) + " inputs, the operator takes at most " + std::to_string(op.input_count);
    for (size_t i = 0; i < op.input_count; ++i) {
        const TessCustomOpParam& param = *op.inputs[i];
        bool present = i < node.input_count && node.inputs[i] != nullptr;
        if (!present && !param.optional && !param.variadic) return std::string("input '") + param.name + "' is missing";
    }
    for (size_t i = 0; i < node.input_count; ++i) {
        if (node.inputs[i] == nullptr) continue;
        const TessCustomOpParam& param = *op.inputs[std::min(i, op.input_count - 1)];
        int32_t type = node.inputs[i]->element_type;
        if (param.type_count == 0 || type == TESS_ELEMENT_UNDEFINED) continue;
        if (std::find(param.types, param.types + param.type_count, type) == param.types + param.type_count)
            return std::string("input '") + param.name + "' of type " + element_type_name(type) + " is not supported";
    }
    if (op.check != nullptr) {
        TessStatus* status = op.check(op.op_data, &node);
        if (status != nullptr) {
            std::string why = host().status_message(status);
            host().status_release(status);
            return why.empty() ? "the library declined the node" : why;
        }
    }
    return "";
}

// Runs a custom operator: inputs and outputs are shown to the library as host TessValues over our buffers.
class CustomOpKernel final : public Kernel {
public:
    CustomOpKernel(const TessCustomOpApi& op, const NodeInfo& info) : op_(op) {
        if (op.create_kernel != nullptr) {
            TessStatus* status = op.create_kernel(op.op_data, &info.view(), &kernel_);
            check_status(status, std::string(op.domain) + ":" + op.name);
        }
    }
    ~CustomOpKernel() override {
        if (kernel_ != nullptr && op_.release_kernel != nullptr) op_.release_kernel(op_.op_data, kernel_);
    }

    void compute(KernelContext& ctx) const override {
        Adapter adapter{ctx, {}, {}};
        struct Cleanup {
            Adapter& a;
            ~Cleanup() {
                for (TessValue* v : a.views) host().value_release(v);
            }
        } cleanup{adapter};
        adapter.inputs.resize(ctx.input_count(), nullptr);
        for (size_t i = 0; i < ctx.input_count(); ++i) {
            if (!ctx.has_input(i)) continue;
            const TessValue* v = ctx.input_value(i);
            if (v == nullptr) v = adapter.view(ctx.input(i));
            adapter.inputs[i] = v;
        }
        TessStatus* status = op_.compute(op_.op_data, kernel_, &kApi, reinterpret_cast<TessKernelContext*>(&adapter));
        check_status(status, std::string(op_.domain) + ":" + op_.name);
    }

private:
    struct Adapter {
        KernelContext& ctx;
        std::vector<const TessValue*> inputs;
        std::vector<TessValue*> views;  // released after the call

        TessValue* view(const Tensor& t) {
            if (t.type == TESS_ELEMENT_STRING) return t.value;
            TessValue* v = nullptr;
            check_status(host().value_create_tensor_view(t.type, t.shape.data(), t.shape.size(), t.data,
                                                         t.byte_size(), &v),
                         "custom op view");
            views.push_back(v);
            return v;
        }
    };

    static Adapter& self(TessKernelContext* c) { return *reinterpret_cast<Adapter*>(c); }
    static size_t input_count(TessKernelContext* c) { return self(c).inputs.size(); }
    static const TessValue* input(TessKernelContext* c, size_t i) {
        return i < self(c).inputs.size() ? self(c).inputs[i] : nullptr;
    }
    static size_t output_count(TessKernelContext* c) { return self(c).ctx.output_count(); }
    static TessStatus* allocate_output(TessKernelContext* c, size_t i, int32_t type, const int64_t* dims, size_t rank,
                                       TessValue** out) {
        try {
            if (i >= self(c).ctx.output_count()) return host().status_create(TESS_STATUS_INVALID_ARGUMENT, "no such output");
            Tensor& t = self(c).ctx.output(i, type, Shape(dims, dims + rank));
            *out = self(c).view(t);
            return nullptr;
        } catch (const std::exception& e) {
            return host().status_create(TESS_STATUS_RUNTIME_ERROR, e.what());
        }
    }
    static TessStatus* set_output(TessKernelContext* c, size_t i, TessValue* value) {
        try {
            self(c).ctx.set_output_value(i, value);
            return nullptr;
        } catch (const std::exception& e) {
            return host().status_create(TESS_STATUS_RUNTIME_ERROR, e.what());
        }
    }
    static constexpr TessKernelContextApi kApi = {sizeof(TessKernelContextApi), input_count, input, output_count,
                                                  allocate_output, set_output};

    const TessCustomOpApi& op_;
    TessCustomOpKernel* kernel_ = nullptr;
};

}  // namespace

KernelSource::Match KernelSource::find(const TessNodeView& node, std::string* why) const {
    Match match;
    std::string registry_why;
    if (registry != nullptr) match.def = registry->find(node, &registry_why);
    if (match) return match;
    std::string custom_why;
    for (const TessCustomOpApi* op : custom_ops) {
        if (std::strcmp(op->domain, node.domain) != 0 || std::strcmp(op->name, node.op_type) != 0) continue;
        std::string problem = custom_op_mismatch(*op, node);
        if (problem.empty()) {
            match.custom = op;
            return match;
        }
        custom_why = std::string("custom op ") + op->domain + ":" + op->name + ": " + problem;
    }
    if (why != nullptr) *why = custom_why.empty() ? registry_why : custom_why;
    return match;
}

std::unique_ptr<Kernel> KernelSource::create(const Match& match, const NodeInfo& info) const {
    if (match.def != nullptr) return match.def->factory(info);
    return std::make_unique<CustomOpKernel>(*match.custom, info);
}

}  // namespace tessera::cpu
