/* docs/plugins.md, "A custom-operator library": Swish(X; beta = 1.0) = X * sigmoid(beta * X) in the domain
 * "docs.example", float32.  Compiled, loaded and run by tests/docs (test_docs.sh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/custom_op.h"

static const TessHostApi* host;

/* [snippet:kernel] */
/* Per-node state, created when a session compiles the node: the parsed attribute. */
typedef struct SwishKernel { float beta; } SwishKernel;

static const TessAttributeView* attribute(const TessNodeView* node, const char* name) {
    size_t i;
    for (i = 0; i < node->attribute_count; ++i)
        if (strcmp(node->attributes[i]->name, name) == 0) return node->attributes[i];
    return NULL;
}

/* Called during partitioning: a non-NULL status declines the node, its message is the reason. */
static TessStatus* check(void* op_data, const TessNodeView* node) {
    const TessAttributeView* beta = attribute(node, "beta");
    (void)op_data;
    if (beta != NULL && beta->type != TESS_ATTR_FLOAT)
        return host->status_create(TESS_STATUS_INVALID_MODEL, "Swish: beta must be a float");
    return NULL;
}

/* Output 0 has X's type and shape (dims of -1 stay unknown). */
static TessStatus* infer_shapes(void* op_data, const TessNodeView* node, TessShapeContext* context) {
    (void)op_data;
    host->shape_set_output(context, 0, TESS_ELEMENT_FLOAT32, node->inputs[0]->dims, node->inputs[0]->rank);
    return NULL;
}

static TessStatus* create_kernel(void* op_data, const TessNodeView* node, TessCustomOpKernel** out) {
    const TessAttributeView* beta = attribute(node, "beta");
    SwishKernel* kernel = (SwishKernel*)malloc(sizeof *kernel);
    (void)op_data;
    if (kernel == NULL) return host->status_create(TESS_STATUS_OUT_OF_MEMORY, "Swish: out of memory");
    kernel->beta = beta != NULL ? beta->f : 1.0f;
    *out = (TessCustomOpKernel*)kernel;
    return NULL;
}

static void release_kernel(void* op_data, TessCustomOpKernel* kernel) { (void)op_data; free(kernel); }

/* Runs concurrently for one kernel from several runs: read the kernel, write only the outputs. */
static TessStatus* compute(void* op_data, TessCustomOpKernel* state, const TessKernelContextApi* api,
                           TessKernelContext* context) {
    const SwishKernel* kernel = (const SwishKernel*)state;
    const TessValue* x = api->input(context, 0);
    TessValue* y = NULL;
    size_t i, count = host->tensor_element_count(x);
    const float* in;
    float* out;
    TessStatus* status = api->allocate_output(context, 0, TESS_ELEMENT_FLOAT32, host->tensor_dims(x),
                                              host->tensor_rank(x), &y);
    (void)op_data;
    if (status != NULL) return status;
    in = (const float*)host->tensor_const_data(x);
    out = (float*)host->tensor_data(y);
    for (i = 0; i < count; ++i) out[i] = in[i] / (1.0f + expf(-kernel->beta * in[i]));
    return NULL;
}
/* [end:kernel] */

/* [snippet:table] */
static const int32_t float_only[] = {TESS_ELEMENT_FLOAT32};
static const TessCustomOpParam param_x = {sizeof(TessCustomOpParam), "X", float_only, 1, 0, 0};
static const TessCustomOpParam param_y = {sizeof(TessCustomOpParam), "Y", float_only, 1, 0, 0};
static const TessCustomOpParam* const inputs[] = {&param_x};
static const TessCustomOpParam* const outputs[] = {&param_y};
static const char* const attribute_names[] = {"beta"};

static const TessCustomOpApi swish = {
    sizeof(TessCustomOpApi),
    "docs.example", "Swish", /* domain, op_type */
    1, 0,                    /* opsets of "docs.example" served: 1 and later */
    1, inputs, 1, outputs,
    1, attribute_names,
    NULL,                    /* op_data */
    check, infer_shapes, create_kernel, release_kernel, compute};
static const TessCustomOpApi* const ops[] = {&swish};
/* [end:table] */

/* [snippet:entry] */
TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host_api, TessPluginExports* exports) {
    if (host_api->abi_version_min > 1 || host_api->abi_version_max < 1)
        return host_api->status_create(TESS_STATUS_ABI_MISMATCH, "docs-swish speaks plugin ABI 1");
    /* custom_ops sits at the end of the exports table: write it only when the core's table has it. */
    if (!TESS_HAS_FIELD(exports, TessPluginExports, custom_ops))
        return host_api->status_create(TESS_STATUS_ABI_MISMATCH, "this core does not take custom operators");
    if (host == NULL) host = host_api; /* once: a later call (another environment) may come while this one runs */
    exports->abi_version = 1;
    exports->name = "docs-swish";
    exports->version = "1.0";
    exports->custom_op_count = 1;
    exports->custom_ops = ops;
    return NULL;
}
/* [end:entry] */
