// An example custom-operator library: the smallest complete one, meant to be copied.
//
// It adds one operator to the domain "tessera.example":
//
//     ScaledAdd(A, B; alpha = 1.0) -> C = A + alpha * B      (float32, A and B of the same shape)
//
// and shows every part of the custom-op ABI (plugin_api/include/tessera/custom_op.h): the entry point and ABI
// negotiation (through the SDK's support layer, tessera/plugin_support.hpp), parameter type constraints, a check
// callback, shape inference, per-node state created once per session (the parsed alpha), and a compute callback
// that is safe to run concurrently.  It is built against the public headers only and never throws across the
// boundary.
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "tessera/custom_op.h"
#include "tessera/support/plugin_entry.hpp"

namespace {

const TessHostApi* g_host = nullptr;

TessStatus* error(int32_t code, const std::string& message) { return g_host->status_create(code, message.c_str()); }

// Per-node state: what the node's attributes say, parsed once.
struct ScaledAddKernel {
    float alpha = 1.0f;
};

const TessAttributeView* find_attribute(const TessNodeView* node, const char* name) {
    for (size_t i = 0; i < node->attribute_count; ++i)
        if (std::strcmp(node->attributes[i]->name, name) == 0) return node->attributes[i];
    return nullptr;
}

TessStatus* check(void*, const TessNodeView* node) {
    const TessAttributeView* alpha = find_attribute(node, "alpha");
    if (alpha != nullptr && alpha->type != TESS_ATTR_FLOAT) return error(TESS_STATUS_INVALID_MODEL, "alpha must be a float");
    return nullptr;
}

TessStatus* infer_shapes(void*, const TessNodeView* node, TessShapeContext* context) {
    const TessValueView* a = node->inputs[0];
    g_host->shape_set_output(context, 0, TESS_ELEMENT_FLOAT32, a->dims, a->rank);
    return nullptr;
}

TessStatus* create_kernel(void*, const TessNodeView* node, TessCustomOpKernel** out) {
    auto* kernel = new (std::nothrow) ScaledAddKernel;
    if (kernel == nullptr) return error(TESS_STATUS_OUT_OF_MEMORY, "ScaledAdd: out of memory");
    if (const TessAttributeView* alpha = find_attribute(node, "alpha")) kernel->alpha = alpha->f;
    *out = reinterpret_cast<TessCustomOpKernel*>(kernel);
    return nullptr;
}

void release_kernel(void*, TessCustomOpKernel* kernel) { delete reinterpret_cast<ScaledAddKernel*>(kernel); }

TessStatus* compute(void*, TessCustomOpKernel* state, const TessKernelContextApi* api, TessKernelContext* context) {
    const auto* kernel = reinterpret_cast<const ScaledAddKernel*>(state);
    const TessValue* a = api->input(context, 0);
    const TessValue* b = api->input(context, 1);
    size_t rank = g_host->tensor_rank(a);
    const int64_t* dims = g_host->tensor_dims(a);
    size_t count = g_host->tensor_element_count(a);
    if (g_host->tensor_element_count(b) != count || g_host->tensor_rank(b) != rank ||
        std::memcmp(dims, g_host->tensor_dims(b), rank * sizeof(int64_t)) != 0)
        return error(TESS_STATUS_INVALID_ARGUMENT, "ScaledAdd: A and B must have the same shape");
    TessValue* c = nullptr;
    if (TessStatus* status = api->allocate_output(context, 0, TESS_ELEMENT_FLOAT32, dims, rank, &c)) return status;
    const auto* pa = static_cast<const float*>(g_host->tensor_const_data(a));
    const auto* pb = static_cast<const float*>(g_host->tensor_const_data(b));
    auto* pc = static_cast<float*>(g_host->tensor_data(c));
    for (size_t i = 0; i < count; ++i) pc[i] = pa[i] + kernel->alpha * pb[i];
    return nullptr;
}

const int32_t kFloat[] = {TESS_ELEMENT_FLOAT32};
const TessCustomOpParam kA = {sizeof(TessCustomOpParam), "A", kFloat, 1, 0, 0};
const TessCustomOpParam kB = {sizeof(TessCustomOpParam), "B", kFloat, 1, 0, 0};
const TessCustomOpParam kC = {sizeof(TessCustomOpParam), "C", kFloat, 1, 0, 0};
const TessCustomOpParam* const kInputs[] = {&kA, &kB};
const TessCustomOpParam* const kOutputs[] = {&kC};
const char* const kAttributes[] = {"alpha"};

const TessCustomOpApi kScaledAdd = {
    sizeof(TessCustomOpApi), "tessera.example", "ScaledAdd", 1, 0, 2, kInputs, 1, kOutputs, 1, kAttributes,
    nullptr, check, infer_shapes, create_kernel, release_kernel, compute};

const TessCustomOpApi* const kOps[] = {&kScaledAdd};

const auto kPlugin =
    tessera::support::PluginDescription::of_custom_ops("tessera-example-ops", "1.0", kOps);

}  // namespace

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    // The SDK's support layer negotiates the ABI version, refuses politely when the core is too old or too new (or
    // its exports table has no room for custom operators), and runs the initialization once: later entries (one
    // per environment) may come while sessions of other environments run ScaledAdd (provider.h).
    static std::once_flag initialized;
    return tessera::support::enter_plugin(host, exports, kPlugin, initialized, [host] { g_host = host; });
}
