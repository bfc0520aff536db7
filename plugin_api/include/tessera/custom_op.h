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
 * The node views the callbacks receive follow provider.h's rules for views: valid only during the call.
 *
 * Threads: check, infer_shapes and create_kernel run while a session is created, and sessions may be created on
 * several threads at once, so these callbacks (and op_data, which every session shares) must be thread-safe across
 * sessions; compute runs concurrently for one kernel.
 *
 * Versions: every struct, field and callback in this header exists since ABI 1 (API 0.1).  The rules of provider.h
 * hold here too: callbacks return normally and report failures as statuses made with TessHostApi.status_create.
 */
#ifndef TESSERA_CUSTOM_OP_H_
#define TESSERA_CUSTOM_OP_H_

#include "tessera/provider.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One formal input or output of a custom operator.  The library's: static, or owned by it until unload.  Since
 * ABI 1. */
typedef struct TessCustomOpParam {
    size_t struct_size;
    const char* name;
    const int32_t* types; /* allowed element types (TessElementType); NULL or type_count 0: any */
    size_t type_count;
    int32_t optional;     /* non-zero: may be omitted */
    int32_t variadic;     /* non-zero (last parameter only): may repeat */
} TessCustomOpParam;

/* Per-node state a library creates (parsed attributes, prepacked constants); opaque to the core, owned by the
 * library from create_kernel until release_kernel. */
typedef struct TessCustomOpKernel TessCustomOpKernel;

/* The context a custom op computes in, implemented by the provider that runs it.  Inputs are host tensors (or
 * sequences/optionals) valid for the call; outputs are allocated through it.  The table and the context are the
 * provider's, valid only during the compute call that receives them.  Since ABI 1. */
typedef struct TessKernelContext TessKernelContext;
typedef struct TessKernelContextApi {
    size_t struct_size;
    size_t (*input_count)(TessKernelContext* context);
    /* Owned by the provider, valid during the call only; NULL for an omitted input. */
    const TessValue* (*input)(TessKernelContext* context, size_t index);
    size_t (*output_count)(TessKernelContext* context);
    /* A host tensor for output `index`, owned by the context; write its data before compute returns, and do not keep
     * `*out` after it. */
    TessStatus* (*allocate_output)(TessKernelContext* context, size_t index, int32_t element_type,
                                   const int64_t* dims, size_t rank, TessValue** out);
    /* Hands over a complete value built with TessHostApi.value_create_* (ownership passes, even on error). */
    TessStatus* (*set_output)(TessKernelContext* context, size_t index, TessValue* value);
} TessKernelContextApi;

/* Shape inference (TessShapeContext, declared in provider.h): the library states each output's element type and,
 * when it knows it, its shape, with TessHostApi.shape_set_output. */

/* The library's table (TessPluginExports.custom_ops): static, or owned by the library until unload, with every
 * string, array and parameter it points to.  A library offering an operator whose domain, name and opset range
 * overlap a loaded one's is skipped.  Required: domain, name, compute (and the parameter arrays their counts
 * announce); the other callbacks may be NULL.  Since ABI 1. */
typedef struct TessCustomOpApi {
    size_t struct_size;     /* sizeof(TessCustomOpApi) of the headers the library was built with; the core skips a
                               table too short to hold compute */
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
    void* op_data;          /* the library's; passed back to every callback, from every session and thread */

    /* Optional: decides whether this node (types, attributes) can run; return a status whose message is the reason
     * when it cannot.  NULL: every node matching domain, name, version and parameter types is accepted.  Called by
     * the host provider during its capability query, after those matches; the status goes to that provider. */
    TessStatus* (*check)(void* op_data, const TessNodeView* node);
    /* Optional: output types and shapes from the node's input types and shapes (unknown dims are -1), stated with
     * TessHostApi.shape_set_output.  Called by the core while a session is created, before partitioning, for
     * every node whose domain, name and opset match; a failure fails the session. */
    TessStatus* (*infer_shapes)(void* op_data, const TessNodeView* node, TessShapeContext* context);
    /* Creates the node's state when a session compiles it (during the host provider's compile); NULL create_kernel
     * means stateless (kernel = NULL).  Copy what the kernel keeps from `node`. */
    TessStatus* (*create_kernel)(void* op_data, const TessNodeView* node, TessCustomOpKernel** out);
    /* Optional.  Releases a kernel create_kernel made, with the compiled partition that holds it (when its session
     * is released, or earlier when the core drops the partition), on the thread that releases it. */
    void (*release_kernel)(void* op_data, TessCustomOpKernel* kernel);
    /* Runs the node.  Called concurrently for one kernel from several runs: treat the kernel as read-only and write
     * only the outputs.  `api` and `context` are valid during the call only. */
    TessStatus* (*compute)(void* op_data, TessCustomOpKernel* kernel, const TessKernelContextApi* api,
                           TessKernelContext* context);
} TessCustomOpApi;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_CUSTOM_OP_H_ */
