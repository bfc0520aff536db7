/*
 * Tessera plugin ABI: how a shared library contributes execution providers.
 *
 * A plugin exports one symbol, TESS_PLUGIN_ENTRY_NAME, of type TessPluginEntryFn.  The core calls it when an
 * environment loads the plugin, with the range of ABI versions it speaks and a table of host functions; the plugin
 * picks a version inside both ranges and fills a TessPluginExports table.  Either side refuses politely (an
 * ABI_MISMATCH status) when the ranges do not meet.  Every environment that loads the file makes its own entry call
 * (see TessPluginExports.shutdown); the core never makes two entry calls at once, but a later one may come while
 * sessions of another environment run the plugin on other threads, so a plugin writes its global state (the host
 * table it keeps, provider tables it fills in) in its first entry call only.
 *
 * A plugin never links libtessera: everything it needs from the core comes through TessHostApi, so a provider can be
 * built against these headers alone.
 *
 * Failures: every function a plugin gives the core returns normally (no C++ exception or longjmp leaves it) and
 * reports a failure as a TessStatus* made with TessHostApi.status_create (common.h: NULL is success; whoever receives
 * a non-NULL status owns it).
 *
 * Versions: every struct, field and function in this header exists since ABI 1 (API 0.1).  A field marked "appended"
 * was added at the end of its struct within ABI 1, so a table written by an earlier ABI-1 build may end before it:
 * its reader tests TESS_HAS_FIELD first (common.h).
 *
 * Lifetimes:  plugin  ⊃  provider instance (one per session)  ⊃  compiled partition  ⊃  one compute call.
 * The graph views handed to a provider live only for the call that receives them; copy what you keep (the one
 * exception: TessValueView.constant in a compile view).  Who owns each pointer, and until when, is written next to it.
 *
 * Threads: an environment may create sessions from several threads at once, and several environments may load the
 * same plugin, so the functions of different instances run concurrently; each function below says what the core
 * serializes and what may run at once.
 */
#ifndef TESSERA_PROVIDER_H_
#define TESSERA_PROVIDER_H_

#include "tessera/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ABI versions.  A version is bumped when a reader must know about a change (a field it must read, a changed
 * meaning); a field appended that a reader may ignore does not bump it (TESS_HAS_FIELD).  The core offers its range in
 * TessHostApi.abi_version_min/max, the plugin answers with TessPluginExports.abi_version. */
#define TESS_PLUGIN_ABI_VERSION_MIN 1
#define TESS_PLUGIN_ABI_VERSION_MAX 1
#define TESS_PLUGIN_ENTRY_NAME "tess_plugin_entry"

/* The domain of the compound operators the core's graph optimizer writes (optimization level EXTENDED and up).  A
 * provider that claims one of them in a capability query gets fused nodes instead of the nodes they replace; one that
 * does not keeps the original nodes (the optimizer asks before it fuses, and fuses only where the provider that
 * would run every replaced node runs the fused one).  Operators, all opset 1 (since ABI 1):
 *   FusedConv(X, W, [B], [Z]) -> Y: Y = activation(Conv(X, W, B) + Z), float32; Conv's attributes, plus
 *     `activation` (string: Relu, Clip, LeakyRelu, HardSigmoid, Sigmoid, Tanh; absent = none) and
 *     `activation_params` (floats: Clip [min, max], LeakyRelu [alpha], HardSigmoid [alpha, beta]); Z has Y's shape.
 *     The same signature as onnxruntime's com.microsoft FusedConv.
 *   Gelu(X) -> Y: ONNX's Gelu (opset 20) with `approximate` "none" or "tanh", for models of any opset.
 *   FusedMatMulBias(A, B, bias) -> Y: Y = activation(MatMul(A, B) + bias), float32; B 2-D [K, N], bias N elements
 *     shaped [N] or [1, ..., 1, N] (added along Y's last axis); `activation` and `activation_params` as FusedConv's,
 *     or "Gelu" with `approximate` ("none" or "tanh") as ONNX's Gelu.
 *   QuantizedLookup(X, table) -> Y: Y[n, c, ...] = table[c, b] (table[0, b] for a [1, 256] table), b the bits of
 *     X's element read as an unsigned byte; X uint8 or int8 with its channels on axis 1; table a constant
 *     [C, 256] or [1, 256] of Y's type (uint8 or int8).  Replaces DequantizeLinear -> per-channel float operators
 *     -> QuantizeLinear (added after the others; a provider that does not claim it keeps the original nodes).
 *   Attention(Q, K, V, [attn_mask]) -> Y: ONNX's Attention (opset 23) for models of any opset, as the optimizer
 *     writes it: 3-D float32 Q [B, S, H * D], K [B, T, H * D], V [B, T, H * Dv], `q_num_heads` = `kv_num_heads` = H,
 *     `scale`, and a float32 additive mask broadcasting to [B, H, S, T]; Y [B, S, H * Dv].  Replaces attention written
 *     out with Reshape/Transpose head splits, MatMul, Div or Mul, Add, Softmax and MatMul (added after the others);
 *     a row whose mask is -inf everywhere gets zero weights (the written-out Softmax gives NaN there). */
#define TESS_FUSED_OPS_DOMAIN "ai.tessera"

/* ---- Read-only graph views ---------------------------------------------------------------------------------
 * Built and owned by the core for a capability query, a compile call or a custom-op callback; valid only during that
 * call (every string, array and value they point to included; TessValueView.constant says its exception).  Arrays
 * are arrays of pointers so that each struct can grow without changing the stride.  Enumerations in a view (kind,
 * element_type, TessAttributeView.type) may hold values newer than these headers: treat a value you do not know as
 * unsupported (decline the node).  Since ABI 1. */

typedef struct TessGraphView TessGraphView;

/* A value (edge) of the graph. */
typedef struct TessValueView {
    size_t struct_size;
    const char* name;
    int32_t kind;         /* TessValueKind; TESS_VALUE_UNKNOWN when the model does not say */
    int32_t element_type; /* TessElementType (of the tensors inside, for sequences and optionals) */
    int64_t rank;         /* -1 when unknown */
    const int64_t* dims;  /* rank entries; -1 for a dimension not known before running */
    /* Non-NULL for an initializer or a folded constant, in host memory, owned by the core.  In a view passed to
     * compile it stays valid, unchanged, until the compiled object is released (or until the provider gives up its
     * read with TessHostApi.compile_release_constant), so a provider may read weights in place instead of copying
     * them; in any other view it is valid for the call only. */
    const TessValue* constant;
} TessValueView;

/* Attribute types: ONNX's AttributeProto.AttributeType numbers. */
typedef enum TessAttributeType {
    TESS_ATTR_UNDEFINED = 0,
    TESS_ATTR_FLOAT = 1,
    TESS_ATTR_INT = 2,
    TESS_ATTR_STRING = 3,
    TESS_ATTR_TENSOR = 4,
    TESS_ATTR_GRAPH = 5,
    TESS_ATTR_FLOATS = 6,
    TESS_ATTR_INTS = 7,
    TESS_ATTR_STRINGS = 8,
    TESS_ATTR_TENSORS = 9,
    TESS_ATTR_GRAPHS = 10,
    TESS_ATTR_SPARSE_TENSOR = 11,
    TESS_ATTR_SPARSE_TENSORS = 12,
    TESS_ATTR_TYPE_PROTO = 13,
    TESS_ATTR_TYPE_PROTOS = 14
} TessAttributeType;

typedef struct TessAttributeView {
    size_t struct_size;
    const char* name;
    int32_t type;                      /* TessAttributeType */
    float f;                           /* FLOAT */
    int64_t i;                         /* INT */
    const char* s;                     /* STRING: bytes, not NUL-terminated in general */
    size_t s_len;
    size_t count;                      /* element count for FLOATS, INTS, STRINGS, TENSORS, GRAPHS */
    const float* floats;
    const int64_t* ints;
    const char* const* strings;        /* count entries */
    const size_t* string_lens;         /* count entries */
    const TessValue* tensor;           /* TENSOR, host memory */
    const TessValue* const* tensors;   /* TENSORS */
    const TessGraphView* graph;        /* GRAPH */
    const TessGraphView* const* graphs;/* GRAPHS */
} TessAttributeView;

typedef struct TessNodeView {
    size_t struct_size;
    size_t index;          /* stable index of the node in the session's graph; used to claim it */
    const char* name;      /* may be "" */
    const char* op_type;
    const char* domain;    /* "" for the default ONNX domain */
    int64_t opset;         /* the model's opset import for `domain` */
    size_t input_count;
    const TessValueView* const* inputs;   /* NULL entries for omitted optional inputs */
    size_t output_count;
    const TessValueView* const* outputs;  /* NULL entries for omitted optional outputs */
    size_t attribute_count;
    const TessAttributeView* const* attributes;
    /* Values of the enclosing graph that this node's subgraphs (If, Loop, Scan bodies) read by name.  The provider
     * receives them like inputs: a compiled graph's inputs include them, and a subgraph view lists them neither as
     * inputs nor as constants.  Appended (TESS_HAS_FIELD(node, TessNodeView, implicit_inputs)). */
    size_t implicit_input_count;
    const TessValueView* const* implicit_inputs;
} TessNodeView;

/* A graph or a subgraph.  For a subgraph (an attribute's body) the inputs are its formal parameters in order, and
 * values it reads from enclosing graphs appear only as node inputs (see TessNodeView.implicit_inputs). */
struct TessGraphView {
    size_t struct_size;
    const char* name;
    size_t node_count;
    const TessNodeView* const* nodes;     /* topologically ordered */
    size_t input_count;                   /* values read from outside (constants are not inputs) */
    const TessValueView* const* inputs;
    size_t output_count;                  /* values that leave the graph */
    const TessValueView* const* outputs;
    size_t opset_count;
    const char* const* opset_domains;
    const int64_t* opset_versions;
};

/* ---- Host functions the core lends to plugins --------------------------------------------------------------- */

typedef struct TessCapabilityContext TessCapabilityContext;
typedef struct TessComputeContext TessComputeContext;
typedef struct TessShapeContext TessShapeContext;   /* custom_op.h */
struct TessCustomOpApi;                              /* custom_op.h */

/* The core's table, passed to the entry function: owned by the core, unchanged and valid as long as the plugin is
 * loaded.  A function that takes a context may be called only during the call that received that context; the
 * others may be called from any thread unless their comment says otherwise.  Since ABI 1. */
typedef struct TessHostApi {
    size_t struct_size;       /* the size of the core's table; test TESS_HAS_FIELD before using an appended field */
    uint32_t abi_version_min; /* the range the core speaks; the plugin picks TessPluginExports.abi_version in it */
    uint32_t abi_version_max;

    /* Status objects (what every plugin function returns on error).  Thread-safe.  status_create copies `message`
     * and returns a status its caller owns.  Every non-NULL status a plugin returns to the core must come from
     * status_create: any other pointer is reported as a plugin fault and leaked, never freed.  A status the plugin
     * receives (from a host function, or from a custom-op callback a host provider calls) is the plugin's: return it
     * or release it with status_release.  status_message's string is owned by the status, valid until its release. */
    TessStatus* (*status_create)(int32_t code, const char* message);
    int32_t (*status_code)(const TessStatus* status);
    const char* (*status_message)(const TessStatus* status);
    void (*status_release)(TessStatus* status);

    /* Logging through the environment's logger.  Thread-safe; the strings are used during the call only. */
    void (*log)(int32_t level, const char* source, const char* message);

    /* Values: the same semantics as the consumer functions of the same names in tessera.h (what a returned pointer
     * belongs to and how long it lives, which threads may use a value).  A value the core hands the plugin (compute
     * inputs, constants, attribute tensors) is the core's: read it, never release it. */
    int32_t (*value_kind)(const TessValue* value);
    int32_t (*value_element_type)(const TessValue* value);
    size_t (*tensor_rank)(const TessValue* value);
    const int64_t* (*tensor_dims)(const TessValue* value);
    size_t (*tensor_element_count)(const TessValue* value);
    size_t (*tensor_byte_size)(const TessValue* value);
    void* (*tensor_data)(TessValue* value);
    const void* (*tensor_const_data)(const TessValue* value);
    TessStatus* (*tensor_get_string)(const TessValue* value, size_t index, const char** data, size_t* len);
    TessStatus* (*tensor_set_string)(TessValue* value, size_t index, const char* data, size_t len);
    size_t (*sequence_length)(const TessValue* value);
    const TessValue* (*sequence_at)(const TessValue* value, size_t index);
    int32_t (*optional_has_value)(const TessValue* value);
    const TessValue* (*optional_value)(const TessValue* value);
    /* Host-memory values a provider builds itself (for sequence/optional outputs); released with value_release
     * unless ownership passes to the core through compute_set_output. */
    TessStatus* (*value_create_tensor)(int32_t element_type, const int64_t* dims, size_t rank, TessValue** out);
    TessStatus* (*value_create_sequence)(int32_t element_type, TessValue* const* items, size_t count,
                                         TessValue** out);
    TessStatus* (*value_create_optional)(int32_t element_type, TessValue* inner, TessValue** out);
    void (*value_release)(TessValue* value);

    /* Capability query: claim a node of the view (by TessNodeView.index), or decline it with a reason that the
     * core shows when nobody runs the node.  Nodes neither claimed nor declined count as declined, with the reason
     * "not supported".  Only during the get_capability call that received `context`; `reason` is copied; a claim of
     * a node the view does not offer is ignored. */
    void (*capability_claim)(TessCapabilityContext* context, size_t node_index);
    void (*capability_decline)(TessCapabilityContext* context, size_t node_index, const char* reason);

    /* Compute: inputs in the order of the compiled graph's inputs (NULL for an absent optional value), outputs in
     * the order of its outputs.  Only during the compute call that received `context`.  Inputs are owned by the core
     * and valid for that call only; tensors arrive in this provider's memory kind (the core copied those produced
     * elsewhere), string tensors, sequences and optionals in host memory.  allocate_output returns a tensor in the
     * provider's own memory (allocated with its allocator), owned by the core from the start: write it during the
     * call, do not keep `*out`.  set_output hands over a complete value the provider built (any kind); ownership
     * passes to the core, even on error. */
    size_t (*compute_input_count)(const TessComputeContext* context);
    const TessValue* (*compute_input)(const TessComputeContext* context, size_t index);
    size_t (*compute_output_count)(const TessComputeContext* context);
    TessStatus* (*compute_allocate_output)(TessComputeContext* context, size_t index, int32_t element_type,
                                           const int64_t* dims, size_t rank, TessValue** out);
    TessStatus* (*compute_set_output)(TessComputeContext* context, size_t index, TessValue* value);

    /* A host tensor over memory the value does not own (valid while the caller keeps `data` alive); lets a
     * provider show its own buffers to custom-op kernels.  Not for strings.  The caller owns the view and releases it
     * with value_release, which leaves `data` alone.  Thread-safe. */
    TessStatus* (*value_create_tensor_view)(int32_t element_type, const int64_t* dims, size_t rank, void* data,
                                            size_t byte_size, TessValue** out);
    /* Custom-op shape inference (custom_op.h): output `index` has this element type and shape (rank -1: unknown,
     * dims entries -1: unknown).  Only during the infer_shapes call that received `context`; `dims` is copied. */
    void (*shape_set_output)(TessShapeContext* context, size_t index, int32_t element_type, const int64_t* dims,
                             int64_t rank);

    /* ---- Appended in ABI 1; a plugin checks TESS_HAS_FIELD(host, TessHostApi, field) before calling. ---- */

    /* Compile: the compiled object being built made its own copy (a prepacked form) of the constant that node
     * `node_index` of `graph` reads as input `input_index`, and will never read the view's constant again.  Once
     * every reader of a constant has said so, the core frees it, so that a prepacked weight is held once.  Call it
     * only from the compile call that received `graph`, on that thread; other calls are ignored. */
    void (*compile_release_constant)(const TessGraphView* graph, size_t node_index, size_t input_index);

    /* Profiling.  compute_profiling is nonzero when the run that `context` belongs to is being profiled; the
     * provider then reports each node it ran with compute_profile_node: the node's name and op type (as in the
     * view), its input shapes as text ("[1,3,224,224] [64,3,7,7]"; may be NULL), and when it started and ended in
     * nanoseconds of CLOCK_MONOTONIC.  Strings are copied.  Thread-safe; only during compute. */
    int32_t (*compute_profiling)(const TessComputeContext* context);
    void (*compute_profile_node)(TessComputeContext* context, const char* node_name, const char* op_type,
                                 const char* input_shapes, int64_t start_ns, int64_t end_ns);

    /* Nonzero once the run that `context` belongs to must stop: it was terminated from another thread or passed
     * its deadline (TessRunOptions).  A provider that runs several nodes or a long loop (Loop, Scan) in one compute
     * call checks it between them and then returns a status with TESS_STATUS_CANCELLED; the core also checks between
     * compute calls.  Cheap (an atomic load and a clock read).  Thread-safe; only during compute.  Since ABI 1,
     * API 0.1 (appended). */
    int32_t (*compute_should_stop)(const TessComputeContext* context);
} TessHostApi;

/* ---- What a provider implements ------------------------------------------------------------------------------ */

typedef struct TessProviderInstance TessProviderInstance; /* the provider's per-session state */
typedef struct TessCompiled TessCompiled;                 /* a compiled fused subgraph */

/* Session settings a provider instance receives.  Owned by the core, valid only during create_instance (copy what
 * you keep), except custom_ops, below.  Since ABI 1. */
typedef struct TessProviderOptions {
    size_t struct_size;
    int32_t intra_op_threads; /* the session's pool size; the provider must not use more host threads */
    size_t config_count;      /* provider-specific "key" = "value" pairs (reserved, 0 today) */
    const char* const* config_keys;
    const char* const* config_values;
    /* Custom operators of the loaded custom-op libraries (custom_op.h).  A host provider may claim the nodes they
     * match and run them; others ignore them.  The array and the tables it points to are owned by the core's session
     * and stay valid until the session is released (its compiled objects are released first), not for the instance's
     * whole life: an instance can outlive its session (see free).  Appended (TESS_HAS_FIELD). */
    size_t custom_op_count;
    const struct TessCustomOpApi* const* custom_ops;
    /* Appended in ABI 1 (check TESS_HAS_FIELD).  The session's memory limit in bytes (0: none): a provider keeps
     * the memory it allocates for this instance (outputs, run buffers) within it and fails a run that would pass it
     * with TESS_STATUS_OUT_OF_MEMORY, leaving the instance usable.  Since API 0.1. */
    uint64_t memory_limit_bytes;
} TessProviderOptions;

/* The plugin's table (TessPluginExports.providers): static, or owned by the plugin until unload, with every string
 * it points to.  Required: name, create_instance, get_capability, compile, release_compiled, compute, allocate and
 * free; the other functions may be NULL.  Since ABI 1. */
typedef struct TessProviderApi {
    size_t struct_size;        /* sizeof(TessProviderApi) of the headers the plugin was built with: the core reads
                                  only the fields it covers, and skips a table too short to hold copy_from_host */
    const char* name;          /* "cpu", "cuda", ...; unique among loaded providers (a plugin that offers a loaded
                                  name is skipped) */
    void* provider_data;       /* the plugin's; passed back as the first argument of the functions below */

    /* NULL when the provider can run on this machine; otherwise a status (UNAVAILABLE) with the exact reason,
     * shown in the plugin report.  Called once after each entry call, on the thread that loads the plugin.
     * Optional (NULL: available). */
    TessStatus* (*check_available)(void* provider_data);

    /* One instance per session that uses the provider, created with the session; sessions created on different
     * threads create their instances concurrently.  `options` as TessProviderOptions says; `*out` is the
     * provider's until release_instance.  Thread safety: for one instance the core serializes get_capability and
     * compile (a session is created on one thread); different instances may be in them at once, and compute may
     * run concurrently on one compiled object. */
    TessStatus* (*create_instance)(void* provider_data, const TessProviderOptions* options,
                                   TessProviderInstance** out);
    /* Called once, after every compiled object of the instance is released and after the last free of memory it
     * allocated: possibly after its session is released, on the thread that lets go of the last of them.  Optional. */
    void (*release_instance)(TessProviderInstance* instance);

    /* Claims nodes of `graph` (the still-unassigned part of the session's graph) through the host's capability
     * functions.  May be called several times per session (partitioning, a retry after a failed compile, the
     * optimizer's questions, constant folding).  `graph` and `context` are valid during the call only: must not
     * keep pointers into `graph`.  A non-NULL status claims nothing (while partitioning, it skips the provider for
     * the session, or fails the session in strict mode). */
    TessStatus* (*get_capability)(TessProviderInstance* instance, const TessGraphView* graph,
                                  TessCapabilityContext* context);

    /* Compiles one fused subgraph.  Each partition the session runs is compiled once per session; the core may also
     * compile a view it then releases at once (a retry after another partition's compile failed, a node folded into
     * a constant while the session is created).  `graph` is valid during the call only, except its constants
     * (TessValueView.constant), which are what the provider may prepack (TessHostApi.compile_release_constant).
     * `*out` is the provider's until release_compiled.  A failure hands the partition's nodes to the next provider,
     * or fails the session in strict mode. */
    TessStatus* (*compile)(TessProviderInstance* instance, const TessGraphView* graph, TessCompiled** out);
    /* Called once per compiled object, before release_instance: when the session is released (on the thread that
     * releases it), or earlier for a compiled object the core drops. */
    void (*release_compiled)(TessCompiled* compiled);

    /* Runs a compiled subgraph.  Called concurrently from several threads for one compiled object (tess_session_run
     * is thread-safe): treat `compiled` as read-only and keep per-call state on the stack.  Each call has its own
     * context, valid during the call only (TessHostApi's compute functions).  Outputs must be complete (or the work
     * ordered on the provider's stream so that a later copy_to_host or compute sees it) when it returns. */
    TessStatus* (*compute)(TessCompiled* compiled, TessComputeContext* context);

    /* The memory this provider's allocations live in.  Owned by the provider, valid until release_instance (tensors
     * the instance allocated point to it).  Called once, when the instance is created.  Optional (NULL: host
     * memory). */
    const TessMemoryKind* (*memory_kind)(TessProviderInstance* instance);
    /* The provider's allocator.  alignment is a power of two >= 64 for tensors.  Thread-safe (concurrent runs).  The
     * memory is the core's until it passes it back to free. */
    TessStatus* (*allocate)(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out);
    /* Thread-safe.  May be called after the session is released (a caller may keep outputs): every allocation keeps
     * its instance alive, and release_instance comes after the last free. */
    void (*free)(TessProviderInstance* instance, void* pointer);
    /* Data transfer between the provider's memory and host memory; both block until the copy is done.  Thread-safe
     * (concurrent runs).  May be NULL when memory_kind is host memory. */
    TessStatus* (*copy_to_host)(TessProviderInstance* instance, void* host_dst, const void* src, size_t bytes);
    TessStatus* (*copy_from_host)(TessProviderInstance* instance, void* dst, const void* host_src, size_t bytes);

    /* Non-zero for a general-purpose host provider meant to run whatever nothing else claims: it goes last in the
     * default priority order.  Read only when struct_size covers it. */
    int32_t is_fallback;
} TessProviderApi;

/* ---- The entry point ------------------------------------------------------------------------------------------ */

/* The core's table, zeroed and passed to the entry function: the plugin fills it during that call and keeps no
 * pointer to it.  What the plugin writes into it must stay valid until the library is unloaded.  Since ABI 1. */
typedef struct TessPluginExports {
    size_t struct_size;   /* set by the core to the size it allocated; the plugin writes only fields that fit */
    uint32_t abi_version; /* chosen by the plugin inside both ranges; outside the core's, the plugin is skipped */
    const char* name;     /* static */
    const char* version;  /* static */
    size_t provider_count;
    const TessProviderApi* const* providers; /* static, or owned by the plugin until unload */
    /* Called once the environment that loaded the plugin, and every session, value and provider instance that came
     * from it, have let go; the library is unloaded afterwards (may be NULL).  Each environment that loads the same
     * file makes its own entry call and, later, its own shutdown call: a plugin with global state counts them.
     * Appended: written only when struct_size covers it. */
    void (*shutdown)(void);
    /* Custom operators this library adds (custom_op.h); static, or owned by the plugin until unload.  Appended:
     * written only when struct_size covers it (a plugin whose operators do not fit refuses with ABI_MISMATCH). */
    size_t custom_op_count;
    const struct TessCustomOpApi* const* custom_ops;
} TessPluginExports;

/* Entry function.  `host` lives as long as the plugin is loaded; `exports` only during the call.  Called once per
 * environment that loads the plugin, never twice at once in a process (see the top of this file).  Return NULL after
 * filling `exports`, or a status made with host->status_create (ABI_MISMATCH when host->abi_version_min..max misses
 * the plugin's own range); the plugin report shows its message.  Since ABI 1. */
typedef TessStatus* (*TessPluginEntryFn)(const TessHostApi* host, TessPluginExports* exports);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_PROVIDER_H_ */
