/*
 * Tessera — types shared by the consumer API, the provider ABI and the custom-op ABI.
 *
 * Rules for everything under plugin_api/ (they are what keeps the ABI stable):
 *  - Only C types cross the boundary: no C++ classes, no STL, no exceptions.
 *  - Errors are TessStatus objects; a NULL TessStatus* means success.
 *  - Every struct passed across the boundary starts with `size_t struct_size` and only ever grows at its end,
 *    so a reader checks TESS_HAS_FIELD before touching a field that was added later.
 *  - Enumerations are passed as int32_t so that new values never change a struct's layout; a reader treats a value it
 *    does not know as unsupported (declines, or reports it), never as undefined behaviour.
 *  - No function returns by longjmp or lets an exception escape across the boundary.
 *  - Versions: everything in this header exists since API 0.1 (ABI 1) unless its comment names a later version.
 *    tessera.h marks each consumer function with the API version it appeared in; provider.h and custom_op.h mark
 *    the fields appended within ABI 1.
 */
#ifndef TESSERA_COMMON_H_
#define TESSERA_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TESS_EXPORT __declspec(dllexport)
#else
#define TESS_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct that announced `struct_size` is large enough to hold `field`. */
#define TESS_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* ---------------------------------------------------------------------------------------------------------------
 * Status.  Opaque; NULL means success.  Whoever receives a non-NULL status owns it and releases it with
 * tess_status_release (consumers) or TessHostApi.status_release (plugins).
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct TessStatus TessStatus;

typedef enum TessStatusCode {
    TESS_STATUS_OK = 0,
    TESS_STATUS_INVALID_ARGUMENT = 1, /* the caller passed something wrong (name, type, shape, NULL) */
    TESS_STATUS_NOT_FOUND = 2,        /* a file, a plugin, a provider or a value does not exist */
    TESS_STATUS_INVALID_MODEL = 3,    /* the model is malformed or uses something it must not */
    TESS_STATUS_NOT_IMPLEMENTED = 4,  /* no provider can run an operator / a feature is missing */
    TESS_STATUS_OUT_OF_MEMORY = 5,
    TESS_STATUS_RUNTIME_ERROR = 6,    /* a kernel failed while running */
    TESS_STATUS_UNAVAILABLE = 7,      /* a provider or device is not usable on this machine */
    TESS_STATUS_ABI_MISMATCH = 8,     /* a plugin and the core share no ABI version */
    TESS_STATUS_INTERNAL = 9,         /* a bug in Tessera or a plugin */
    TESS_STATUS_CANCELLED = 10        /* a run was terminated or passed its deadline (TessRunOptions); since API 0.1 */
} TessStatusCode;

/* ---------------------------------------------------------------------------------------------------------------
 * Element types.  The values are ONNX's TensorProto.DataType numbers, so a model's types pass through unchanged.
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum TessElementType {
    TESS_ELEMENT_UNDEFINED = 0,
    TESS_ELEMENT_FLOAT32 = 1,
    TESS_ELEMENT_UINT8 = 2,
    TESS_ELEMENT_INT8 = 3,
    TESS_ELEMENT_UINT16 = 4,
    TESS_ELEMENT_INT16 = 5,
    TESS_ELEMENT_INT32 = 6,
    TESS_ELEMENT_INT64 = 7,
    TESS_ELEMENT_STRING = 8, /* host only; elements are read and written with the string accessors */
    TESS_ELEMENT_BOOL = 9,   /* one byte per element, 0 or 1 */
    TESS_ELEMENT_FLOAT16 = 10,
    TESS_ELEMENT_FLOAT64 = 11,
    TESS_ELEMENT_UINT32 = 12,
    TESS_ELEMENT_UINT64 = 13,
    TESS_ELEMENT_COMPLEX64 = 14,
    TESS_ELEMENT_COMPLEX128 = 15,
    TESS_ELEMENT_BFLOAT16 = 16,
    TESS_ELEMENT_FLOAT8E4M3FN = 17,
    TESS_ELEMENT_FLOAT8E4M3FNUZ = 18,
    TESS_ELEMENT_FLOAT8E5M2 = 19,
    TESS_ELEMENT_FLOAT8E5M2FNUZ = 20,
    TESS_ELEMENT_UINT4 = 21, /* sub-byte types are stored packed as one bit stream, low bits first: two (or four)
                                elements per byte, or four 6-bit elements per three bytes; the last byte zero padded */
    TESS_ELEMENT_INT4 = 22,
    TESS_ELEMENT_FLOAT4E2M1 = 23,
    TESS_ELEMENT_FLOAT8E8M0 = 24,
    TESS_ELEMENT_UINT2 = 25,
    TESS_ELEMENT_INT2 = 26,
    TESS_ELEMENT_FLOAT6E2M3 = 27,
    TESS_ELEMENT_FLOAT6E3M2 = 28
} TessElementType;

/* What a runtime value is.  Sequences hold values; optionals hold one value or none. */
typedef enum TessValueKind {
    TESS_VALUE_UNKNOWN = 0,
    TESS_VALUE_TENSOR = 1,
    TESS_VALUE_SEQUENCE = 2,
    TESS_VALUE_OPTIONAL = 3,
    TESS_VALUE_MAP = 4
} TessValueKind;

/* Runtime value: a tensor, a sequence or an optional.  Opaque; created and released through the API. */
typedef struct TessValue TessValue;

/* Where a tensor's bytes live.  Two memory kinds are the same place when their names are equal; "cpu" is plain
 * host memory, which every consumer can read.  A provider whose memory is host-addressable but still separate
 * (a staging heap, a unified-memory device) sets host_accessible yet keeps its own name, and the core copies. */
typedef struct TessMemoryKind {
    size_t struct_size;
    const char* name;        /* "cpu", "cuda:0", ... ; static, or owned by the provider and valid until the instance
                                that returned it is released */
    int32_t host_accessible; /* non-zero when the host may dereference the pointers */
    int32_t device_id;
} TessMemoryKind;

#define TESS_HOST_MEMORY_NAME "cpu"

/* Log levels used by the log callback and TessHostApi.log. */
typedef enum TessLogLevel {
    TESS_LOG_ERROR = 0,
    TESS_LOG_WARNING = 1,
    TESS_LOG_INFO = 2,
    TESS_LOG_DEBUG = 3
} TessLogLevel;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_COMMON_H_ */
