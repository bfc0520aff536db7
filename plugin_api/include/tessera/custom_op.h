/*
 * Tessera custom-operator ABI: how a shared library adds operators to domains.
 *
 * A custom-op library is a plugin like any other (provider.h): it exports tess_plugin_entry and fills
 * TessPluginExports.custom_ops instead of (or besides) providers.  The core hands the operators of every loaded
 * library to the providers of each session (TessProviderOptions.custom_ops); a host provider such as "cpu" claims the
 * nodes they match and runs them inside its fused partitions, so custom-op nodes are partitioned and executed like
 * any other node.
 *
 * Lifetimes: a TessCustomOpApi lives as long as its library is loaded.  A kernel (per-node state) is created when a
 * session compiles the node and released with the compiled partition; compute may run concurrently on one kernel.
 */
#ifndef TESSERA_CUSTOM_OP_H_
#define TESSERA_CUSTOM_OP_H_

#include "tessera/provider.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One formal input or output of a custom operator. */
typedef struct TessCustomOpParam {
    size_t struct_size;
    const char* name;
    const int32_t* types; /* allowed element types (TessElementType); NULL or type_count 0: any */
    size_t type_count;
    int32_t optional;     /* non-zero: may be omitted */
    int32_t variadic;     /* non-zero (last parameter only): may repeat */
} TessCustomOpParam;

/* Per-node state a library creates (parsed attributes, prepacked constants); opaque to the core. */
typedef struct TessCustomOpKernel TessCustomOpKernel;

/* The context a custom op computes in, implemented by the provider that runs it.  Inputs are host tensors (or
 * sequences/optionals) valid for the call; outputs are allocated through it. */
typedef struct TessKernelContext TessKernelContext;
typedef struct TessKernelContextApi {
    size_t struct_size;
    size_t (*input_count)(TessKernelContext* context);
    const TessValue* (*input)(TessKernelContext* context, size_t index);  /* NULL for an omitted input */
    size_t (*output_count)(TessKernelContext* context);
    /* A host tensor for output `index`, owned by the context; write its data before compute returns. */
    TessStatus* (*allocate_output)(TessKernelContext* context, size_t index, int32_t element_type,
                                   const int64_t* dims, size_t rank, TessValue** out);
    /* Hands over a complete value built with TessHostApi.value_create_* (ownership passes, even on error). */
    TessStatus* (*set_output)(TessKernelContext* context, size_t index, TessValue* value);
} TessKernelContextApi;

/* Shape inference (TessShapeContext, declared in provider.h): the library states each output's element type and,
 * when it knows it, its shape, with TessHostApi.shape_set_output. */

typedef struct TessCustomOpApi {
    size_t struct_size;
    const char* domain;     /* e.g. "com.microsoft"; "" is not allowed (that is ONNX's own domain) */
    const char* name;       /* op_type */
    int64_t since_version;  /* first opset of `domain` served */
    int64_t end_version;    /* last opset served; 0 = open-ended */
    size_t input_count;
    const TessCustomOpParam* const* inputs;
    size_t output_count;
    const TessCustomOpParam* const* outputs;
    size_t attribute_count; /* attributes the operator reads (for documentation and inspection) */
    const char* const* attribute_names;
    void* op_data;          /* passed back to every callback */

    /* Optional: decides whether this node (types, attributes) can run; return a status whose message is the reason
     * when it cannot.  NULL: every node matching domain, name, version and parameter types is accepted. */
    TessStatus* (*check)(void* op_data, const TessNodeView* node);
    /* Optional: output types and shapes from the node's input types and shapes (unknown dims are -1). */
    TessStatus* (*infer_shapes)(void* op_data, const TessNodeView* node, TessShapeContext* context);
    /* Creates the node's state when a session compiles it; NULL create_kernel means stateless (kernel = NULL). */
    TessStatus* (*create_kernel)(void* op_data, const TessNodeView* node, TessCustomOpKernel** out);
    void (*release_kernel)(void* op_data, TessCustomOpKernel* kernel);
    /* Runs the node.  Called concurrently for one kernel from several runs. */
    TessStatus* (*compute)(void* op_data, TessCustomOpKernel* kernel, const TessKernelContextApi* api,
                           TessKernelContext* context);
} TessCustomOpApi;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_CUSTOM_OP_H_ */
