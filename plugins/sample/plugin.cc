// The sample execution provider: the ABI glue.  Copy this folder to start a provider of your own (README.md).
//
// Every function the core calls is an ABI boundary: it catches every exception and returns a status instead, and it
// touches only C types.  The provider is built against plugin_api/include alone and never links libtessera.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "sample.h"
#include "tessera/plugin_support.hpp"
#include "tessera_sample.h"

namespace sample {

const TessHostApi* g_host = nullptr;

TessStatus* make_error(int32_t code, const std::string& message) {
    return tessera::support::make_status(g_host, code, nullptr, message.c_str());
}

namespace {

// Runs `fn` (which returns a TessStatus*), turning exceptions into statuses: nothing may unwind into the core.  The
// support layer (tessera/plugin_support.hpp) does the work; `what` names the ABI function in messages.
template <typename Fn>
TessStatus* guarded(const char* what, Fn&& fn) noexcept {
    char source[64];
    std::snprintf(source, sizeof source, "sample: %s", what);
    return tessera::support::guarded(g_host, source, std::forward<Fn>(fn));
}

// ---- Counters (read through tessera_sample_stats) ----------------------------------------------------------------

struct Counters {
    std::atomic<uint64_t> live_allocations{0}, live_bytes{0}, total_allocations{0};
    std::atomic<uint64_t> copies_to_host{0}, copies_from_host{0}, bytes_to_host{0}, bytes_from_host{0};
    std::atomic<uint64_t> live_instances{0}, live_compiled{0}, computes{0};
};
Counters g_counters;

// ---- Memory ------------------------------------------------------------------------------------------------------
// The provider's own memory kind.  It is ordinary host memory (host_accessible = 1), but its name is not "cpu", so
// the core treats it as a separate device: every tensor that crosses between this provider and another goes through
// copy_to_host / copy_from_host below.  A GPU provider differs only in what these functions call.
const TessMemoryKind kMemory = {sizeof(TessMemoryKind), "sample", 1, 0};

// Each block carries a small header (its size and the alignment offset) so that free knows what it releases.
struct BlockHeader {
    size_t bytes;
    size_t offset;  // from the start of the malloc'ed block to the user pointer
};

}  // namespace

void* allocate_bytes(size_t bytes, size_t alignment) {
    if (alignment < alignof(std::max_align_t)) alignment = alignof(std::max_align_t);
    if (alignment < sizeof(BlockHeader)) alignment = sizeof(BlockHeader);  // stays a power of two
    void* raw = std::malloc(bytes + alignment + sizeof(BlockHeader));
    if (raw == nullptr) throw std::bad_alloc();
    const auto base = reinterpret_cast<uintptr_t>(raw) + sizeof(BlockHeader);
    const uintptr_t user = (base + alignment - 1) & ~static_cast<uintptr_t>(alignment - 1);
    auto* header = reinterpret_cast<BlockHeader*>(user) - 1;
    header->bytes = bytes;
    header->offset = user - reinterpret_cast<uintptr_t>(raw);
    g_counters.live_allocations.fetch_add(1, std::memory_order_relaxed);
    g_counters.total_allocations.fetch_add(1, std::memory_order_relaxed);
    g_counters.live_bytes.fetch_add(bytes, std::memory_order_relaxed);
    return reinterpret_cast<void*>(user);
}

void free_bytes(void* pointer) {
    if (pointer == nullptr) return;
    auto* header = static_cast<BlockHeader*>(pointer) - 1;
    g_counters.live_allocations.fetch_sub(1, std::memory_order_relaxed);
    g_counters.live_bytes.fetch_sub(header->bytes, std::memory_order_relaxed);
    std::free(static_cast<char*>(pointer) - header->offset);
}

}  // namespace sample

using namespace sample;

// Per-session state.  This provider keeps none beyond what the options said; a device provider would hold its
// stream, its device handle and a memory pool here.
struct TessProviderInstance {
    int32_t threads = 1;
};

namespace {

// ---- The provider table ------------------------------------------------------------------------------------------

TessStatus* check_available(void*) {
    return nullptr;  // always usable; a device provider probes its driver here and says why it cannot run
}

TessStatus* create_instance(void*, const TessProviderOptions* options, TessProviderInstance** out) {
    return guarded("create_instance", [&]() -> TessStatus* {
        auto* instance = new TessProviderInstance;
        if (options != nullptr && TESS_HAS_FIELD(options, TessProviderOptions, intra_op_threads))
            instance->threads = options->intra_op_threads;
        g_counters.live_instances.fetch_add(1, std::memory_order_relaxed);
        *out = instance;
        return nullptr;
    });
}

void release_instance(TessProviderInstance* instance) {
    if (instance == nullptr) return;
    delete instance;
    g_counters.live_instances.fetch_sub(1, std::memory_order_relaxed);
}

// Claim every node parse_node accepts; decline the others with the reason (shown when no provider takes a node).
TessStatus* get_capability(TessProviderInstance*, const TessGraphView* graph, TessCapabilityContext* context) {
    return guarded("get_capability", [&]() -> TessStatus* {
        for (size_t n = 0; n < graph->node_count; ++n) {
            const TessNodeView* node = graph->nodes[n];
            Step step;
            const std::string problem = parse_node(node, step);
            if (problem.empty()) g_host->capability_claim(context, node->index);
            else g_host->capability_decline(context, node->index, problem.c_str());
        }
        return nullptr;
    });
}

TessStatus* compile(TessProviderInstance*, const TessGraphView* graph, TessCompiled** out) {
    return guarded("compile", [&]() -> TessStatus* {
        TessStatus* status = compile_graph(graph, out);
        if (status == nullptr) g_counters.live_compiled.fetch_add(1, std::memory_order_relaxed);
        return status;
    });
}

void release_compiled(TessCompiled* compiled) {
    if (compiled == nullptr) return;
    release_graph(compiled);
    g_counters.live_compiled.fetch_sub(1, std::memory_order_relaxed);
}

TessStatus* compute(TessCompiled* compiled, TessComputeContext* context) {
    g_counters.computes.fetch_add(1, std::memory_order_relaxed);
    return guarded("compute", [&] { return compute_graph(compiled, context); });
}

const TessMemoryKind* memory_kind(TessProviderInstance*) { return &kMemory; }

TessStatus* allocate(TessProviderInstance*, size_t bytes, size_t alignment, void** out) {
    return guarded("allocate", [&]() -> TessStatus* {
        *out = allocate_bytes(bytes, alignment);
        return nullptr;
    });
}

void free_memory(TessProviderInstance*, void* pointer) { free_bytes(pointer); }

// Data transfer.  Both directions block until the copy is done (a device provider synchronizes its stream here).
TessStatus* copy_to_host(TessProviderInstance*, void* host_dst, const void* src, size_t bytes) {
    std::memcpy(host_dst, src, bytes);
    g_counters.copies_to_host.fetch_add(1, std::memory_order_relaxed);
    g_counters.bytes_to_host.fetch_add(bytes, std::memory_order_relaxed);
    return nullptr;
}

TessStatus* copy_from_host(TessProviderInstance*, void* dst, const void* host_src, size_t bytes) {
    std::memcpy(dst, host_src, bytes);
    g_counters.copies_from_host.fetch_add(1, std::memory_order_relaxed);
    g_counters.bytes_from_host.fetch_add(bytes, std::memory_order_relaxed);
    return nullptr;
}

TessProviderApi make_provider() {
    TessProviderApi api{};
    api.struct_size = sizeof(TessProviderApi);
    api.name = "sample";
    api.provider_data = nullptr;
    api.check_available = check_available;
    api.create_instance = create_instance;
    api.release_instance = release_instance;
    api.get_capability = get_capability;
    api.compile = compile;
    api.release_compiled = release_compiled;
    api.compute = compute;
    api.memory_kind = memory_kind;
    api.allocate = allocate;
    api.free = free_memory;
    api.copy_to_host = copy_to_host;
    api.copy_from_host = copy_from_host;
    api.is_fallback = 0;  // a specialist: it goes where the user's priority list puts it
    return api;
}

const TessProviderApi kProvider = make_provider();
const TessProviderApi* const kProviders[] = {&kProvider};

const auto kPlugin = tessera::support::PluginDescription::of_providers("tessera-sample", "1.0", kProviders);

}  // namespace

// ---- Exported symbols (sample.map lists exactly these) -------------------------------------------------------------

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    // The support layer negotiates the ABI version (the highest both sides speak), refuses politely when the ranges
    // do not meet, and fills only the exports fields the core's table has room for.  The host table is kept by the
    // first entry only: later ones (one per environment) may come while sessions of other environments use the
    // provider (provider.h).
    static std::once_flag initialized;
    return tessera::support::enter_plugin(host, exports, kPlugin, initialized, [host] { g_host = host; });
}

extern "C" TESS_EXPORT void tessera_sample_stats(TesseraSampleStats* out) {
    if (out == nullptr) return;
    // Write only the fields the caller's struct has room for (struct_size-first rule).
    TesseraSampleStats s{};
    s.struct_size = sizeof(s);
    s.live_allocations = g_counters.live_allocations.load();
    s.live_bytes = g_counters.live_bytes.load();
    s.total_allocations = g_counters.total_allocations.load();
    s.copies_to_host = g_counters.copies_to_host.load();
    s.copies_from_host = g_counters.copies_from_host.load();
    s.bytes_to_host = g_counters.bytes_to_host.load();
    s.bytes_from_host = g_counters.bytes_from_host.load();
    s.live_instances = g_counters.live_instances.load();
    s.live_compiled = g_counters.live_compiled.load();
    s.computes = g_counters.computes.load();
    const size_t size = out->struct_size < sizeof(s) ? out->struct_size : sizeof(s);
    if (size > sizeof(size_t)) std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
                                           reinterpret_cast<const char*>(&s) + sizeof(size_t), size - sizeof(size_t));
}
