/*
 * Tessera consumer API: environments, plugins, sessions, values and runs.
 *
 * Conventions (they hold for every function below unless its comment says otherwise):
 *  - Functions return TessStatus*; NULL is success, anything else is an error the caller owns and releases with
 *    tess_status_release.  Output parameters are written only on success.
 *  - Every *_release function accepts NULL and does nothing then.
 *  - Strings returned as `const char*` are owned by the object they came from and stay valid until it is released.
 *  - Thread safety: a TessEnv and a TessSession may be used from several threads at once (tess_session_run included);
 *    a TessSessionOptions and a TessValue must not be mutated while another thread uses them.
 *  - No function aborts the process or lets an exception escape.
 */
#ifndef TESSERA_TESSERA_H_
#define TESSERA_TESSERA_H_

#include "tessera/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TESS_API_VERSION_MAJOR 0
#define TESS_API_VERSION_MINOR 2
#define TESS_API_VERSION_PATCH 0

/* The library's version string, TESS_VERSION_STRING of tessera/version.h ("0.1.0"); static. */
TESS_EXPORT const char* tess_version(void);

/* ---- Status ------------------------------------------------------------------------------------------------ */

/* Code of a status; TESS_STATUS_OK for NULL. */
TESS_EXPORT TessStatusCode tess_status_code(const TessStatus* status);
/* Message of a status; "" for NULL.  Owned by the status. */
TESS_EXPORT const char* tess_status_message(const TessStatus* status);
TESS_EXPORT void tess_status_release(TessStatus* status);

/* ---- Environment: plugin discovery and logging ------------------------------------------------------------- */

typedef struct TessEnv TessEnv;

typedef void (*TessLogCallback)(void* user_data, int32_t level, const char* message);

typedef struct TessEnvOptions {
    size_t struct_size;
    int32_t log_level;            /* TessLogLevel; messages above it are dropped.  Default TESS_LOG_WARNING. */
    TessLogCallback log_callback; /* NULL: warnings and errors go to stderr */
    void* log_user_data;
    /* Colon-separated directories searched after <libdir>/tessera/plugins and TESSERA_PLUGIN_PATH.  May be NULL. */
    const char* plugin_path;
    /* Non-zero: skip <libdir>/tessera/plugins and TESSERA_PLUGIN_PATH (only plugin_path and explicit loads). */
    int32_t no_default_plugin_dirs;
    /* ---- Appended in API 0.1: plugin isolation.  (The int64 comes first so that it starts past the padding of the
     * older struct, whose struct_size was 48.) ---- */
    /* How long one plugin file may take to load and unload in its probe process before it counts as hung and is
     * skipped, in milliseconds.  0 (the default): TESSERA_PLUGIN_PROBE_TIMEOUT_MS, or 10000.  Since API 0.1. */
    int64_t plugin_probe_timeout_ms;
    /* TessPluginProbe: whether plugin files are probed in a child process before they are loaded.  Since API 0.1. */
    int32_t plugin_probe;
} TessEnvOptions;

/* Plugin isolation (TessEnvOptions.plugin_probe).  By default every plugin file discovery finds, and every file given
 * to tess_env_load_plugin, is first loaded and unloaded by a helper process (tessera-plugin-scanner, installed in
 * <libdir>/tessera/).  A plugin that crashes, aborts, ends the process or hangs there is never loaded into this
 * process: the plugin report lists it as skipped with what happened.  Verdicts are cached per file (path, size and
 * modification time) in $XDG_CACHE_HOME/tessera/plugin-probes.txt (~/.cache/... without XDG_CACHE_HOME), so a file
 * is probed again only when it changes or the core does (one that hung, also when the timeout grows).  Without the
 * helper, files are loaded in process (with a warning).  Since API 0.1. */
typedef enum TessPluginProbe {
    TESS_PLUGIN_PROBE_AUTO = 0,  /* probe files without a cached verdict; TESSERA_PLUGIN_PROBE=0 turns probing off */
    TESS_PLUGIN_PROBE_OFF = 1,   /* load every file in this process, unprobed (a debugger sees the plugin's crash) */
    TESS_PLUGIN_PROBE_RESCAN = 2 /* probe every file again, ignoring cached verdicts, and cache the new ones */
} TessPluginProbe;

/* Creates an environment and loads every plugin found by discovery.  A broken plugin never fails this call: it is
 * recorded in the plugin report with the reason (every entry of a plugin directory is reported, except hidden
 * files and directories whose names do not look like a library).  `options` may be NULL (defaults).  Release with
 * tess_env_release after every session created from it has been released. */
TESS_EXPORT TessStatus* tess_env_create(const TessEnvOptions* options, TessEnv** out_env);
TESS_EXPORT void tess_env_release(TessEnv* env);

/* Loads one plugin file explicitly (probed first, as in discovery).  The outcome is also appended to the plugin
 * report; the returned status says why the file was skipped when it was.  Thread-safe, but sessions created earlier
 * do not see the new plugin. */
TESS_EXPORT TessStatus* tess_env_load_plugin(TessEnv* env, const char* path);

typedef enum TessPluginState {
    TESS_PLUGIN_LOADED = 0,      /* usable */
    TESS_PLUGIN_UNAVAILABLE = 1, /* loaded, but it says it cannot run here (no device, missing library) */
    TESS_PLUGIN_SKIPPED = 2      /* not loaded: not a library, no entry symbol, ABI out of range, init failed, or it
                                    crashed, aborted, exited or hung in its probe (TessPluginProbe) */
} TessPluginState;

/* One entry of the plugin report.  Strings are owned by the environment and stay valid until it is released: entries
 * are appended as plugins load and never replaced, so reading the report again invalidates nothing. */
typedef struct TessPluginInfo {
    size_t struct_size;
    const char* path;
    const char* name;    /* "" when the plugin could not tell it */
    const char* version; /* "" when unknown */
    int32_t state;       /* TessPluginState */
    const char* reason;  /* "" for loaded plugins */
    uint32_t abi_version;    /* negotiated ABI version; 0 when none */
    size_t provider_count;   /* execution providers it contributed */
    const char* providers;   /* their names, comma-separated */
    size_t custom_op_count;  /* custom operators it contributed (custom_op.h) */
    const char* custom_ops;  /* "domain:name" entries, comma-separated */
} TessPluginInfo;

TESS_EXPORT size_t tess_env_plugin_count(const TessEnv* env);
/* Fills `out` (whose struct_size the caller sets) with entry `index`. */
TESS_EXPORT TessStatus* tess_env_plugin_info(const TessEnv* env, size_t index, TessPluginInfo* out);

/* Names of the usable execution providers in default priority order (CPU last), as of the last
 * tess_env_provider_count call (a plugin loaded later may change the order).  Each name is owned by the env and stays
 * valid until it is released. */
TESS_EXPORT size_t tess_env_provider_count(const TessEnv* env);
TESS_EXPORT const char* tess_env_provider_name(const TessEnv* env, size_t index);

/* What the core has asked of one provider through its table since the environment was created, over every session
 * of the environment: instances, compiled partitions and tensors the provider allocated that are still alive, and the
 * copies across its memory boundary.  Once every session, and every value they returned, is released, the live
 * counts are 0 for a provider that frees what it is given back: the leak check of `tessera provider-test`.  Since
 * API 0.1. */
typedef struct TessProviderStats {
    size_t struct_size;          /* set by the caller; only the fields that fit are written */
    uint64_t live_instances;     /* provider instances created and not yet released */
    uint64_t live_compiled;      /* compiled partitions not yet released */
    uint64_t live_allocations;   /* tensors allocated with the provider's allocator and not yet freed */
    uint64_t total_allocations;
    uint64_t copies_to_host;     /* tensors copied out of the provider's memory (host-memory providers: 0) */
    uint64_t copies_from_host;   /* tensors copied into it */
    uint64_t bytes_to_host;
    uint64_t bytes_from_host;
} TessProviderStats;

/* Fills `out` for the provider named `provider`; NOT_FOUND when the environment has no such usable provider.
 * Thread-safe; the counts are a snapshot. */
TESS_EXPORT TessStatus* tess_env_provider_stats(const TessEnv* env, const char* provider, TessProviderStats* out);

/* ---- Session options --------------------------------------------------------------------------------------- */

typedef struct TessSessionOptions TessSessionOptions;

TESS_EXPORT TessStatus* tess_session_options_create(TessSessionOptions** out);
TESS_EXPORT void tess_session_options_release(TessSessionOptions* options);
/* Provider priority list, most preferred first.  Empty (the default): every usable provider, CPU last.  The names
 * are copied.  A name that is not loaded is an error at session creation in strict mode and a warning otherwise. */
TESS_EXPORT TessStatus* tess_session_options_set_providers(TessSessionOptions* options, const char* const* names,
                                                           size_t count);
/* Threads of the session's intra-op pool; 0 (default) means one per core; at most 1024. */
TESS_EXPORT TessStatus* tess_session_options_set_intra_op_threads(TessSessionOptions* options, int32_t threads);
/* Strict mode: a node no listed provider claims, or a listed provider that is unavailable or fails to compile, is
 * an error instead of a fallback to the next provider. */
TESS_EXPORT TessStatus* tess_session_options_set_strict(TessSessionOptions* options, int32_t strict);
/* Graph optimization level, as in onnxruntime: TESS_OPTIMIZATION_DISABLED (0) runs only the lowerings a graph needs
 * to run; BASIC (1) adds semantics-preserving rewrites in the default domain (constant folding, Identity removal,
 * BatchNormalization folded into Conv); EXTENDED (2) adds fusions into compound operators (FusedConv, provider.h)
 * where the provider that runs the original nodes runs the fused one; ALL (3, the default) everything.  99
 * (onnxruntime's ORT_ENABLE_ALL) means ALL.  Any other value is TESS_STATUS_INVALID_ARGUMENT at session creation.
 * Since API 0.1. */
enum {
    TESS_OPTIMIZATION_DISABLED = 0,
    TESS_OPTIMIZATION_BASIC = 1,
    TESS_OPTIMIZATION_EXTENDED = 2,
    TESS_OPTIMIZATION_ALL = 3
};
TESS_EXPORT TessStatus* tess_session_options_set_optimization_level(TessSessionOptions* options, int32_t level);
/* Profiling, as onnxruntime's enable_profiling: a session created with a file path records how long session
 * creation took (phases "load", "providers", "optimize", "partition", "compile"), every run, every partition's
 * compute call and every node its provider reports (name, op type, provider, input shapes), and writes them to
 * `file_path` as a Chrome trace (JSON; ui.perfetto.dev or chrome://tracing open it) when profiling ends
 * (tess_session_end_profiling) or, at the latest, when the session is released.  The file is written at exactly
 * that path and replaced when it exists; a directory that does not exist fails session creation.  NULL or ""
 * (the default) turns profiling off.  The path is copied.  Since API 0.1. */
TESS_EXPORT TessStatus* tess_session_options_set_profiling(TessSessionOptions* options, const char* file_path);
/* Saves the optimized graph, as onnxruntime's SessionOptions.optimized_model_filepath: session creation writes the
 * graph the optimizer produced (at the session's optimization level) to `file_path` as an ONNX model, after the
 * graph optimizer ran and before partitioning, so that it shows what the providers are offered.  The file is
 * replaced when it exists.  Nodes the optimizer fused keep its own domain (TESS_FUSED_OPS_DOMAIN, "ai.tessera",
 * imported by the model): Tessera runs the file, other runtimes may not.  A model too large for one protobuf file
 * (2 GiB) stores its initializers of 1 KiB and more in "<file name>.data" next to it as ONNX external data.  A file
 * that cannot be written (its directory does not exist or is not writable, the disk is full) fails session
 * creation with TESS_STATUS_RUNTIME_ERROR and a message naming the path.  NULL or "" (the default) saves nothing.
 * The path is copied.  Since API 0.1. */
TESS_EXPORT TessStatus* tess_session_options_set_optimized_model_path(TessSessionOptions* options,
                                                                      const char* file_path);
/* A memory limit in bytes for what each execution provider allocates while the session runs (outputs, run arenas,
 * intermediates; not the weights, which are loaded before): a run that would pass it fails with
 * TESS_STATUS_OUT_OF_MEMORY and the session stays usable.  0 (default): no limit.  Providers built before API 0.1
 * ignore it.  Since API 0.1. */
TESS_EXPORT TessStatus* tess_session_options_set_memory_limit(TessSessionOptions* options, uint64_t bytes);

/* ---- Sessions ---------------------------------------------------------------------------------------------- */

typedef struct TessSession TessSession;

/* Loads, optimizes, partitions and compiles a model.  `options` may be NULL.  External data files are read only
 * from inside the model's directory.  The env must outlive the session. */
TESS_EXPORT TessStatus* tess_session_create(TessEnv* env, const char* model_path, const TessSessionOptions* options,
                                            TessSession** out_session);
/* As above from serialized ModelProto bytes (copied).  External data is resolved against `base_dir`; NULL forbids
 * external data. */
TESS_EXPORT TessStatus* tess_session_create_from_bytes(TessEnv* env, const void* data, size_t size,
                                                       const char* base_dir, const TessSessionOptions* options,
                                                       TessSession** out_session);
TESS_EXPORT void tess_session_release(TessSession* session);

/* Describes a graph input or output.  Pointers are owned by the session. */
typedef struct TessValueInfo {
    size_t struct_size;
    const char* name;
    int32_t kind;               /* TessValueKind */
    int32_t element_type;       /* TessElementType of the tensor, or of the tensors inside a sequence/optional */
    int64_t rank;               /* -1 when unknown */
    const int64_t* dims;        /* rank entries, -1 for a dimension that is not fixed */
    const char* const* dim_params; /* rank entries; symbolic name or "" */
} TessValueInfo;

TESS_EXPORT size_t tess_session_input_count(const TessSession* session);
TESS_EXPORT size_t tess_session_output_count(const TessSession* session);
TESS_EXPORT TessStatus* tess_session_input_info(const TessSession* session, size_t index, TessValueInfo* out);
TESS_EXPORT TessStatus* tess_session_output_info(const TessSession* session, size_t index, TessValueInfo* out);
/* Non-zero when input `index` has an initializer: a default value the caller may leave out or override (what
 * onnxruntime calls an overridable initializer).  0 for an index out of range.  Since API 0.1. */
TESS_EXPORT int32_t tess_session_input_has_default(const TessSession* session, size_t index);

/* What the model says about itself: ModelProto's producer, domain, doc string and version, the graph's name and doc
 * string, and its metadata_props (custom key/value pairs, in model order).  Strings are owned by the session and
 * valid until it is released ("" when the model leaves a field empty).  Since API 0.1. */
typedef struct TessModelMetadata {
    size_t struct_size;
    const char* producer_name;
    const char* producer_version;
    const char* domain;
    const char* description;
    const char* graph_name;
    const char* graph_description;
    int64_t model_version;
    size_t custom_count;
    const char* const* custom_keys;    /* custom_count entries */
    const char* const* custom_values;  /* custom_count entries */
} TessModelMetadata;

TESS_EXPORT TessStatus* tess_session_model_metadata(const TessSession* session, TessModelMetadata* out);

/* The partition plan: the fused subgraphs in execution order. */
typedef struct TessPartitionInfo {
    size_t struct_size;
    const char* provider;       /* provider that compiled it */
    size_t node_count;
    const char* const* node_names;  /* node_count entries ("op_type#index" for unnamed nodes) */
    const char* const* node_ops;    /* node_count entries: "domain:op_type" or "op_type" */
    size_t input_count;             /* values it reads that another partition or the caller produces */
    const char* const* inputs;
    size_t output_count;            /* values it produces that leave it */
    const char* const* outputs;
    size_t copy_count;              /* tensors copied in from another memory kind for it on every run (a tensor
                                       read by several partitions of one memory kind is copied once, for the first) */
    const char* memory_kind;        /* name of the memory its provider computes in ("cpu" for host memory) */
    const int32_t* input_copied;    /* input_count entries: non-zero when that input lives in another memory kind and
                                       reaches the partition through a copy */
} TessPartitionInfo;

TESS_EXPORT size_t tess_session_partition_count(const TessSession* session);
TESS_EXPORT TessStatus* tess_session_partition_info(const TessSession* session, size_t index, TessPartitionInfo* out);

/* Runs the model.  Inputs are matched by name; every graph input without an initializer must be given.  Output
 * values are new and owned by the caller (release each with tess_value_release); they live in host memory.
 * Safe to call from several threads at once on one session. */
TESS_EXPORT TessStatus* tess_session_run(TessSession* session, const char* const* input_names,
                                         const TessValue* const* inputs, size_t input_count,
                                         const char* const* output_names, size_t output_count,
                                         TessValue** outputs);

/* ---- Run options: stopping a run ---------------------------------------------------------------------------- */

/* A run made with run options stops with TESS_STATUS_CANCELLED when another thread sets `terminate`, or when it has
 * taken longer than its timeout.  Runs are checked between the nodes a provider runs (and between the iterations of
 * Loop and Scan), so a single long kernel finishes first.  The session stays usable.  Since API 0.1. */
typedef struct TessRunOptions TessRunOptions;

/* New options: not terminated, no timeout.  Release with tess_run_options_release once no run uses them. */
TESS_EXPORT TessStatus* tess_run_options_create(TessRunOptions** out);
TESS_EXPORT void tess_run_options_release(TessRunOptions* options);
/* Non-zero: every run using these options stops at its next check, and runs started with them fail at once until
 * it is set back to 0.  Safe to call from any thread while runs use the options. */
TESS_EXPORT TessStatus* tess_run_options_set_terminate(TessRunOptions* options, int32_t terminate);
TESS_EXPORT int32_t tess_run_options_get_terminate(const TessRunOptions* options);
/* A run using these options stops once it has taken longer than `timeout_ms` milliseconds; 0 (the default) means
 * no limit.  Must not change while a run uses the options. */
TESS_EXPORT TessStatus* tess_run_options_set_timeout_ms(TessRunOptions* options, int64_t timeout_ms);

/* ---- Appended in API 0.2: tagging and profiling one run.  A consumer built against 0.1 never calls these and its
 * runs behave as before: no tag, no per-run profile. ---- */

/* A tag for the runs made with these options (a request id, say): every message the core or a provider logs on the
 * thread that called tess_session_run_with_options while such a run is in progress starts with "[run TAG] "
 * (messages logged by a provider's own worker threads carry no tag), and the core logs each tagged run's start,
 * end and time at TESS_LOG_DEBUG.  The string is copied; NULL or "" removes the tag.  Must not change while a run
 * uses the options.  Since API 0.2. */
TESS_EXPORT TessStatus* tess_run_options_set_log_tag(TessRunOptions* options, const char* tag);
/* The current tag ("" when none); owned by the options, valid until the tag changes or they are released.  Since
 * API 0.2. */
TESS_EXPORT const char* tess_run_options_get_log_tag(const TessRunOptions* options);
/* Profiles each run made with these options on its own, whether or not the session was created with profiling
 * (tess_session_options_set_profiling): the run's partitions and nodes are written, when the run ends (also when it
 * fails), as a Chrome trace (Perfetto, chrome://tracing) to `path`, replacing the file; several runs sharing the
 * options write it in turn, the last one to end winning.  Such a run is recorded in that file instead of in the
 * session's profile.  A trace that cannot be written is logged as an error; the run's own result stands.  The
 * string is copied; NULL or "" turns per-run profiling off.  Must not change while a run uses the options.  Since
 * API 0.2. */
TESS_EXPORT TessStatus* tess_run_options_set_profile_path(TessRunOptions* options, const char* path);

/* tess_session_run with run options; `run_options` may be NULL (as tess_session_run).  Thread-safe like it; several
 * runs may share one TessRunOptions (setting terminate then stops them all). */
TESS_EXPORT TessStatus* tess_session_run_with_options(TessSession* session, const TessRunOptions* run_options,
                                                      const char* const* input_names, const TessValue* const* inputs,
                                                      size_t input_count, const char* const* output_names,
                                                      size_t output_count, TessValue** outputs);

/* Ends profiling (tess_session_options_set_profiling): stops recording, writes the trace file and sets *path_out to
 * its path, owned by the session and valid until it is released.  Later calls write nothing and return the same
 * path; a session created without profiling gives "".  An error (the file cannot be written) still ends profiling.
 * Thread-safe: runs in progress record nothing more.  Since API 0.1. */
TESS_EXPORT TessStatus* tess_session_end_profiling(TessSession* session, const char** path_out);
/* A text summary of the profile so far (before or after it ended): runs and their mean time, then node time by
 * operator type, most first, with calls, total and mean milliseconds and share of all node time; at most `max_rows`
 * op types (a last line adds up the rest).  *text_out is owned by the session and valid until it is released; ""
 * when the session is not profiled.  Thread-safe.  Since API 0.1. */
TESS_EXPORT TessStatus* tess_session_profiling_summary(TessSession* session, size_t max_rows, const char** text_out);

/* ---- Values ------------------------------------------------------------------------------------------------ */

/* A host tensor whose memory the runtime allocates (64-byte aligned, zero-filled). */
TESS_EXPORT TessStatus* tess_value_create_tensor(int32_t element_type, const int64_t* dims, size_t rank,
                                                 TessValue** out);
/* A host tensor over caller memory; nothing is copied.  The caller keeps `data` alive and unchanged while the value
 * exists; `deleter`, when not NULL, is called with (deleter_data, data) when the value is released.  Not for strings. */
TESS_EXPORT TessStatus* tess_value_create_tensor_over(int32_t element_type, const int64_t* dims, size_t rank,
                                                      void* data, size_t byte_size,
                                                      void (*deleter)(void* deleter_data, void* data),
                                                      void* deleter_data, TessValue** out);
/* A sequence that takes ownership of `count` values (all of one kind), even when it fails.  `element_type` names the tensor type of
 * the elements so that an empty sequence is typed. */
TESS_EXPORT TessStatus* tess_value_create_sequence(int32_t element_type, TessValue* const* items, size_t count,
                                                   TessValue** out);
/* An optional that takes ownership of `inner`, even when it fails (NULL: an empty optional of a tensor of
 * `element_type`). */
TESS_EXPORT TessStatus* tess_value_create_optional(int32_t element_type, TessValue* inner, TessValue** out);
TESS_EXPORT void tess_value_release(TessValue* value);

TESS_EXPORT int32_t tess_value_kind(const TessValue* value);          /* TessValueKind */
TESS_EXPORT int32_t tess_value_element_type(const TessValue* value);  /* of the tensor, or the contained tensors */

/* Tensor accessors; each returns 0 / NULL when `value` is not a tensor. */
TESS_EXPORT size_t tess_tensor_rank(const TessValue* value);
TESS_EXPORT const int64_t* tess_tensor_dims(const TessValue* value); /* owned by the value */
TESS_EXPORT size_t tess_tensor_element_count(const TessValue* value);
TESS_EXPORT size_t tess_tensor_byte_size(const TessValue* value);   /* 0 for strings */
TESS_EXPORT void* tess_tensor_data(TessValue* value);               /* NULL for strings */
TESS_EXPORT const void* tess_tensor_const_data(const TessValue* value);
/* String elements (TESS_ELEMENT_STRING tensors, host only).  get: the pointer stays valid until the element is set
 * again or the value released; the bytes need not end with NUL, `len` counts them.  set: the bytes are copied. */
TESS_EXPORT TessStatus* tess_tensor_get_string(const TessValue* value, size_t index, const char** data, size_t* len);
TESS_EXPORT TessStatus* tess_tensor_set_string(TessValue* value, size_t index, const char* data, size_t len);

/* Sequence accessors.  Items are owned by the sequence. */
TESS_EXPORT size_t tess_sequence_length(const TessValue* value);
TESS_EXPORT const TessValue* tess_sequence_at(const TessValue* value, size_t index);
/* Optional accessors.  The inner value is owned by the optional; NULL when it is empty. */
TESS_EXPORT int32_t tess_optional_has_value(const TessValue* value);
TESS_EXPORT const TessValue* tess_optional_value(const TessValue* value);

/* Bytes of one element for fixed-size types; 0 for strings and packed sub-byte types. */
TESS_EXPORT size_t tess_element_size(int32_t element_type);
/* Bytes needed for `count` elements, sub-byte types included; 0 for strings. */
TESS_EXPORT size_t tess_element_storage_bytes(int32_t element_type, size_t count);
/* ONNX name of an element type ("float", "int64", ...); static. */
TESS_EXPORT const char* tess_element_type_name(int32_t element_type);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_TESSERA_H_ */
