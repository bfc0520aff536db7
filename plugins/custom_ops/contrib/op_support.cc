// The com.microsoft contrib-op library: node and tensor accessors, and the C trampolines that turn an OpSpec into
// a TessCustomOpApi (every callback catches everything; nothing thrown here crosses the ABI).
#include "op_support.h"

#include <deque>
#include <exception>
#include <new>

namespace tessera::contrib {

const TessHostApi* g_host = nullptr;

std::string shape_string(std::span<const int64_t> dims) { return support::shape_string(dims.data(), dims.size()); }

// ---- Node ----------------------------------------------------------------------------------------------------

std::string Node::label() const {
    std::string s = std::string(kDomain) + ":" + view_->op_type;
    if (view_->name != nullptr && view_->name[0] != '\0') s += std::string(" '") + view_->name + "'";
    return s;
}

const TessAttributeView* Node::attribute(const char* name) const {
    for (size_t i = 0; i < view_->attribute_count; ++i)
        if (std::strcmp(view_->attributes[i]->name, name) == 0) return view_->attributes[i];
    return nullptr;
}

namespace {

const TessAttributeView* typed(const Node& node, const char* name, int32_t type, const char* what) {
    const TessAttributeView* a = node.attribute(name);
    if (a != nullptr && a->type != type) fail(std::string("attribute '") + name + "' must be " + what);
    return a;
}

}  // namespace

float Node::get_float(const char* name, float fallback) const {
    const TessAttributeView* a = typed(*this, name, TESS_ATTR_FLOAT, "a float");
    return a == nullptr ? fallback : a->f;
}

int64_t Node::get_int(const char* name, int64_t fallback) const {
    const TessAttributeView* a = typed(*this, name, TESS_ATTR_INT, "an int");
    return a == nullptr ? fallback : a->i;
}

std::string Node::get_string(const char* name, const std::string& fallback) const {
    const TessAttributeView* a = typed(*this, name, TESS_ATTR_STRING, "a string");
    return a == nullptr ? fallback : std::string(a->s, a->s_len);
}

std::vector<int64_t> Node::get_ints(const char* name) const {
    const TessAttributeView* a = typed(*this, name, TESS_ATTR_INTS, "a list of ints");
    if (a == nullptr || a->count == 0) return {};
    return {a->ints, a->ints + a->count};
}

std::vector<float> Node::get_floats(const char* name) const {
    const TessAttributeView* a = typed(*this, name, TESS_ATTR_FLOATS, "a list of floats");
    if (a == nullptr || a->count == 0) return {};
    return {a->floats, a->floats + a->count};
}

std::optional<std::vector<int64_t>> Node::input_dims(size_t i) const {
    const TessValueView* v = input(i);
    if (v == nullptr || v->rank < 0) return std::nullopt;
    std::vector<int64_t> dims(static_cast<size_t>(v->rank), -1);
    if (v->dims != nullptr)
        for (size_t d = 0; d < dims.size(); ++d) dims[d] = v->dims[d];
    return dims;
}

void require_same_type(const Node& node, std::initializer_list<size_t> indices) {
    int32_t type = TESS_ELEMENT_UNDEFINED;
    size_t first = 0;
    for (size_t i : indices) {
        int32_t t = node.input_type(i);
        if (t == TESS_ELEMENT_UNDEFINED) continue;
        if (type == TESS_ELEMENT_UNDEFINED) {
            type = t;
            first = i;
        } else if (t != type) {
            fail("inputs " + std::to_string(first) + " and " + std::to_string(i) + " must have the same element type (" +
                 element_type_name(type) + " and " + element_type_name(t) + ")");
        }
    }
}

// ---- Tensors ---------------------------------------------------------------------------------------------------

Tensor Tensor::of(const TessValue* value) {
    if (g_host->value_kind(value) != TESS_VALUE_TENSOR) fail("expected a tensor input");
    Tensor t;
    t.value = value;
    t.type = g_host->value_element_type(value);
    t.dims = std::span<const int64_t>(g_host->tensor_dims(value), g_host->tensor_rank(value));
    t.count = g_host->tensor_element_count(value);
    t.data = g_host->tensor_const_data(value);
    return t;
}

Tensor Context::input(size_t i, const char* name) const {
    if (!has_input(i)) fail(std::string("input '") + name + "' is missing");
    return Tensor::of(api_->input(context_, i));
}

void* Context::output(size_t i, int32_t type, std::span<const int64_t> dims) const {
    TessValue* value = nullptr;
    if (TessStatus* status = api_->allocate_output(context_, i, type, dims.data(), dims.size(), &value)) {
        std::string message = g_host->status_message(status);
        int32_t code = g_host->status_code(status);
        g_host->status_release(status);
        fail("allocating output " + std::to_string(i) + ": " + message, code);
    }
    return g_host->tensor_data(value);
}

// ---- Trampolines ------------------------------------------------------------------------------------------------

namespace {

// A spec and the C tables built from it; kept alive (at stable addresses) as long as the library is loaded.
struct OpHolder {
    OpSpec spec;
    std::vector<TessCustomOpParam> input_params, output_params;
    std::vector<const TessCustomOpParam*> input_ptrs, output_ptrs;
    TessCustomOpApi api{};
};

std::deque<OpHolder>& holders() {
    static std::deque<OpHolder> all;
    return all;
}

const OpSpec& spec_of(void* op_data) { return static_cast<OpHolder*>(op_data)->spec; }

template <typename F>
TessStatus* guarded(F&& f) noexcept {
    return support::guarded(g_host, "com.microsoft contrib ops", std::forward<F>(f));
}

TessStatus* check_trampoline(void* op_data, const TessNodeView* node) {
    return guarded([&] {
        const OpSpec& spec = spec_of(op_data);
        if (spec.check != nullptr) spec.check(Node(node));
    });
}

TessStatus* infer_trampoline(void* op_data, const TessNodeView* node, TessShapeContext* context) {
    // Shape inference never fails a session: what cannot be inferred stays unknown (the check callback and the
    // kernel report real problems with their reasons).
    try {
        const OpSpec& spec = spec_of(op_data);
        if (spec.infer != nullptr) spec.infer(Node(node), ShapeOut(context));
    } catch (...) {
    }
    return nullptr;
}

TessStatus* create_trampoline(void* op_data, const TessNodeView* node, TessCustomOpKernel** out) {
    *out = nullptr;
    return guarded([&] {
        const OpSpec& spec = spec_of(op_data);
        Node n(node);
        if (spec.check != nullptr) spec.check(n);
        std::unique_ptr<Kernel> kernel = spec.create(n);
        *out = reinterpret_cast<TessCustomOpKernel*>(kernel.release());
    });
}

void release_trampoline(void*, TessCustomOpKernel* kernel) { delete reinterpret_cast<Kernel*>(kernel); }

TessStatus* compute_trampoline(void* op_data, TessCustomOpKernel* kernel, const TessKernelContextApi* api,
                               TessKernelContext* context) {
    try {
        reinterpret_cast<const Kernel*>(kernel)->compute(Context(api, context));
        return nullptr;
    } catch (const support::Error& e) {
        return support::make_status(g_host, e.code(), spec_of(op_data).name, e.what());
    } catch (const std::bad_alloc&) {
        return g_host->status_create(TESS_STATUS_OUT_OF_MEMORY, "com.microsoft contrib ops: out of memory");
    } catch (const std::exception& e) {
        std::string message = std::string(spec_of(op_data).name) + ": " + e.what();
        return g_host->status_create(TESS_STATUS_RUNTIME_ERROR, message.c_str());
    } catch (...) {
        return g_host->status_create(TESS_STATUS_RUNTIME_ERROR, "com.microsoft contrib ops: unknown error");
    }
}

void fill_params(const std::vector<ParamSpec>& specs, std::vector<TessCustomOpParam>& params,
                 std::vector<const TessCustomOpParam*>& ptrs) {
    params.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
        params[i] = TessCustomOpParam{sizeof(TessCustomOpParam), specs[i].name,
                                      specs[i].types.empty() ? nullptr : specs[i].types.data(),
                                      specs[i].types.size(), specs[i].optional ? 1 : 0, 0};
        ptrs.push_back(&params[i]);
    }
}

}  // namespace

const TessCustomOpApi* make_op(OpSpec spec) {
    OpHolder& h = holders().emplace_back();
    h.spec = std::move(spec);
    fill_params(h.spec.inputs, h.input_params, h.input_ptrs);
    fill_params(h.spec.outputs, h.output_params, h.output_ptrs);
    TessCustomOpApi& api = h.api;
    api.struct_size = sizeof(TessCustomOpApi);
    api.domain = kDomain;
    api.name = h.spec.name;
    api.since_version = 1;
    api.end_version = 0;
    api.input_count = h.input_ptrs.size();
    api.inputs = h.input_ptrs.data();
    api.output_count = h.output_ptrs.size();
    api.outputs = h.output_ptrs.data();
    api.attribute_count = h.spec.attributes.size();
    api.attribute_names = h.spec.attributes.data();
    api.op_data = &h;
    api.check = check_trampoline;
    api.infer_shapes = infer_trampoline;
    api.create_kernel = create_trampoline;
    api.release_kernel = release_trampoline;
    api.compute = compute_trampoline;
    return &api;
}

}  // namespace tessera::contrib
