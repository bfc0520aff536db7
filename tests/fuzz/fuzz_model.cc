// Fuzzes a model file through the public C API: the bytes are a ModelProto that is loaded (parsing, validation,
// shape inference, functions, external data refused for lack of a base directory), optimized, partitioned and
// compiled by the CPU provider, then run once with generated inputs, and every output is read back in full.
//
// Resources are bounded so that a finding is a bug, not a model that legitimately asks for too much:
//  - inputs are generated only for declared shapes of at most kMaxInputElements elements (unknown dimensions are 1,
//    an unknown rank is a one-element vector); a model that declares more is skipped;
//  - every run has a timeout (Loop, Scan and long chains of nodes stop between nodes);
//  - tensors the model itself asks for are bounded by the allocator: __asan_default_options below makes an
//    allocation above max_allocation_size_mb fail, which the runtime reports as an out-of-memory error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tessera/tessera.h"

#ifndef TESSERA_FUZZ_PLUGIN_DIR
#error "TESSERA_FUZZ_PLUGIN_DIR (the build tree's plugin directory) must be defined"
#endif

// Failed huge allocations return NULL (aligned_alloc, which tensors use, then becomes a clean out-of-memory error)
// instead of aborting; scripts/fuzz.sh passes the same limits to libFuzzer (-rss_limit_mb, -malloc_limit_mb).
extern "C" const char* __asan_default_options() {
    return "allocator_may_return_null=1:max_allocation_size_mb=256:detect_leaks=1";
}

namespace {

constexpr size_t kMaxInputElements = size_t{1} << 16;  // per input
constexpr size_t kMaxInputs = 64;
constexpr int64_t kRunTimeoutMs = 2000;  // below libFuzzer's -timeout=10, so a slow run is an error, not a hang

TessEnv* g_env = nullptr;
TessSessionOptions* g_options = nullptr;
TessRunOptions* g_run_options = nullptr;

void discard_log(void*, int32_t, const char*) {}

// Aborts on a failure that no fuzzed input can cause (the harness's own setup).
void check(TessStatus* status, const char* what) {
    if (status == nullptr) return;
    std::fprintf(stderr, "fuzz_model: %s: %s\n", what, tess_status_message(status));
    std::abort();
}

// Reads every byte (or string) of a value, so that an output whose buffer is smaller than its shape says is caught
// by ASan here rather than by a user later.
uint64_t touch(const TessValue* value) {
    uint64_t sum = 0;
    switch (tess_value_kind(value)) {
        case TESS_VALUE_TENSOR: {
            if (tess_value_element_type(value) == TESS_ELEMENT_STRING) {
                for (size_t i = 0; i < tess_tensor_element_count(value); ++i) {
                    const char* data = nullptr;
                    size_t len = 0;
                    if (TessStatus* s = tess_tensor_get_string(value, i, &data, &len)) {
                        tess_status_release(s);
                        continue;
                    }
                    for (size_t k = 0; k < len; ++k) sum += static_cast<unsigned char>(data[k]);
                }
                break;
            }
            const auto* bytes = static_cast<const unsigned char*>(tess_tensor_const_data(value));
            const size_t size = tess_tensor_byte_size(value);
            if (bytes != nullptr)
                for (size_t i = 0; i < size; ++i) sum += bytes[i];
            break;
        }
        case TESS_VALUE_SEQUENCE:
            for (size_t i = 0; i < tess_sequence_length(value); ++i) sum += touch(tess_sequence_at(value, i));
            break;
        case TESS_VALUE_OPTIONAL:
            if (tess_optional_has_value(value)) sum += touch(tess_optional_value(value));
            break;
        default:
            break;
    }
    return sum;
}

// The element count of a declared shape with unknown dimensions taken as 1; false when it exceeds the cap.
bool generated_shape(const TessValueInfo& info, std::vector<int64_t>& dims) {
    if (info.rank < 0) {
        dims = {1};
        return true;
    }
    if (info.rank > 16) return false;
    dims.assign(info.dims, info.dims + info.rank);
    size_t count = 1;
    for (int64_t& d : dims) {
        if (d < 0) d = 1;
        if (d > static_cast<int64_t>(kMaxInputElements)) return false;
        count *= static_cast<size_t>(d);
        if (count > kMaxInputElements) return false;
    }
    return true;
}

// A zero-filled tensor (empty strings for string tensors) of the declared type and shape.
TessValue* make_tensor(int32_t element_type, const std::vector<int64_t>& dims) {
    TessValue* value = nullptr;
    if (TessStatus* s = tess_value_create_tensor(element_type, dims.data(), dims.size(), &value)) {
        tess_status_release(s);  // e.g. an undefined element type: the run then reports the missing input
        return nullptr;
    }
    return value;
}

// An input for one declared graph input; NULL when the declaration is too large to honour (the model is skipped).
TessValue* make_input(const TessValueInfo& info, bool& too_large) {
    std::vector<int64_t> dims;
    if (!generated_shape(info, dims)) {
        too_large = true;
        return nullptr;
    }
    switch (info.kind) {
        case TESS_VALUE_SEQUENCE: {  // a sequence of one tensor
            TessValue* item = make_tensor(info.element_type, dims);
            TessValue* sequence = nullptr;
            TessStatus* s = tess_value_create_sequence(info.element_type, &item, item != nullptr ? 1 : 0, &sequence);
            tess_status_release(s);
            return sequence;
        }
        case TESS_VALUE_OPTIONAL: {  // an empty optional
            TessValue* optional = nullptr;
            tess_status_release(tess_value_create_optional(info.element_type, nullptr, &optional));
            return optional;
        }
        default:
            return make_tensor(info.element_type, dims);
    }
}

void run_once(TessSession* session) {
    const size_t input_count = tess_session_input_count(session);
    if (input_count > kMaxInputs) return;
    std::vector<const char*> names;
    std::vector<TessValue*> inputs;
    bool too_large = false;
    for (size_t i = 0; i < input_count && !too_large; ++i) {
        TessValueInfo info{};
        info.struct_size = sizeof(info);
        check(tess_session_input_info(session, i, &info), "input info");
        TessValue* value = make_input(info, too_large);
        if (value == nullptr) continue;  // left out: the run reports it missing
        names.push_back(info.name);
        inputs.push_back(value);
    }
    if (!too_large) {
        const size_t output_count = tess_session_output_count(session);
        std::vector<TessValue*> outputs(output_count, nullptr);
        std::vector<const TessValue*> const_inputs(inputs.begin(), inputs.end());
        TessStatus* status = tess_session_run_with_options(session, g_run_options, names.data(), const_inputs.data(),
                                                           names.size(), nullptr, output_count, outputs.data());
        if (status == nullptr) {
            volatile uint64_t sink = 0;
            for (TessValue* out : outputs) sink = sink + touch(out);
        }
        tess_status_release(status);
        for (TessValue* out : outputs) tess_value_release(out);
    }
    for (TessValue* in : inputs) tess_value_release(in);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // One environment for the whole run: plugin discovery is not what this harness fuzzes, and loading the CPU
    // provider once keeps its coverage counters registered from the start.
    const char* dir = std::getenv("TESSERA_FUZZ_PLUGIN_DIR");
    TessEnvOptions options{};
    options.struct_size = sizeof(options);
    options.log_level = TESS_LOG_WARNING;  // warnings are formatted (that code runs) and then dropped
    options.log_callback = discard_log;
    options.plugin_path = dir != nullptr ? dir : TESSERA_FUZZ_PLUGIN_DIR;
    options.no_default_plugin_dirs = 1;
    check(tess_env_create(&options, &g_env), "creating the environment");
    if (tess_env_provider_count(g_env) == 0) {
        std::fprintf(stderr, "fuzz_model: no provider loaded from %s\n", options.plugin_path);
        std::abort();
    }
    check(tess_session_options_create(&g_options), "session options");
    // One thread: no pool to start per session, and a run is deterministic.
    check(tess_session_options_set_intra_op_threads(g_options, 1), "threads");
    check(tess_run_options_create(&g_run_options), "run options");
    check(tess_run_options_set_timeout_ms(g_run_options, kRunTimeoutMs), "timeout");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    TessSession* session = nullptr;
    // No base directory: external data must be refused (tests/fuzz/fuzz_tensor.cc fuzzes reading it).
    TessStatus* status = tess_session_create_from_bytes(g_env, data, size, nullptr, g_options, &session);
    if (status != nullptr) {
        tess_status_release(status);
        return 0;
    }
    run_once(session);
    tess_session_release(session);
    return 0;
}
