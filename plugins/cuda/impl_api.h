/*
 * The internal interface between the thin CUDA plugin (libtessera_cuda.so, no CUDA link dependency) and its
 * implementation library (libtessera_cuda_impl.so, which links the CUDA runtime, cuBLAS and cuDNN).
 *
 * The plugin dlopens the implementation from <plugin dir>/cuda/ inside check_available, looks up
 * TESS_CUDA_IMPL_OPEN_NAME and calls it once.  The implementation checks the machine (driver, devices, compute
 * capability, library versions) and either fills the table or returns an UNAVAILABLE status whose message is the
 * exact reason.  Both libraries are built from one source tree, so the table is versioned only as a safety net.
 * Plain C, like the public ABI: nothing C++ crosses this boundary either.
 */
#ifndef TESSERA_CUDA_IMPL_API_H_
#define TESSERA_CUDA_IMPL_API_H_

#include "tessera/provider.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TESS_CUDA_IMPL_VERSION 1u
#define TESS_CUDA_IMPL_OPEN_NAME "tessera_cuda_impl_open"
#define TESS_CUDA_IMPL_FILE "libtessera_cuda_impl.so"

typedef struct TessCudaImpl {
    size_t struct_size;
    uint32_t version;        /* TESS_CUDA_IMPL_VERSION */
    const char* description; /* "CUDA 13.0 (driver 13.0), cuBLAS 13.0.0, cuDNN 9.19.0; device 0: NVIDIA H100 ..." */

    /* The provider functions, with the semantics of TessProviderApi (provider.h). */
    TessStatus* (*create_instance)(const TessProviderOptions* options, TessProviderInstance** out);
    void (*release_instance)(TessProviderInstance* instance);
    TessStatus* (*get_capability)(TessProviderInstance* instance, const TessGraphView* graph,
                                  TessCapabilityContext* context);
    TessStatus* (*compile)(TessProviderInstance* instance, const TessGraphView* graph, TessCompiled** out);
    void (*release_compiled)(TessCompiled* compiled);
    TessStatus* (*compute)(TessCompiled* compiled, TessComputeContext* context);
    const TessMemoryKind* (*memory_kind)(TessProviderInstance* instance);
    TessStatus* (*allocate)(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out);
    void (*free)(TessProviderInstance* instance, void* pointer);
    TessStatus* (*copy_to_host)(TessProviderInstance* instance, void* host_dst, const void* src, size_t bytes);
    TessStatus* (*copy_from_host)(TessProviderInstance* instance, void* dst, const void* host_src, size_t bytes);
} TessCudaImpl;

/* NULL after filling `impl` (whose struct_size the caller sets); otherwise a status made with host->status_create,
 * TESS_STATUS_UNAVAILABLE with the reason when this machine cannot run the provider. */
typedef TessStatus* (*TessCudaImplOpenFn)(const TessHostApi* host, TessCudaImpl* impl);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_CUDA_IMPL_API_H_ */
