// tessera provider-test: entry-function checks (entry_checks.h).
//
// Each check loads the plugin in a child process, calls tess_plugin_entry with a host table whose ABI range or
// struct size is chosen by the check, and inspects what came back: a newer or an older core must be refused with
// an ABI_MISMATCH status (never accepted, never a crash); a core whose range spans the plugin's must be accepted
// with a version inside both ranges and complete tables; a core with the exports or host table of an earlier build
// (smaller struct_size) must not see a byte written past its table.
#include "provider_kit/entry_checks.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "provider_kit/isolated.h"
#include "tessera/custom_op.h"

namespace tessera::provider_kit {

namespace {

// ---- The kit's host table: statuses and logging; a plugin's entry function needs nothing else ------------------

struct KitStatus {
    int32_t code;
    std::string message;
};
TessStatus* kit_status_create(int32_t code, const char* message) {
    return reinterpret_cast<TessStatus*>(new KitStatus{code, message != nullptr ? message : ""});
}
int32_t kit_status_code(const TessStatus* s) { return reinterpret_cast<const KitStatus*>(s)->code; }
const char* kit_status_message(const TessStatus* s) { return reinterpret_cast<const KitStatus*>(s)->message.c_str(); }
void kit_status_release(TessStatus* s) { delete reinterpret_cast<KitStatus*>(s); }
void kit_log(int32_t, const char*, const char*) {}

TessHostApi kit_host(uint32_t abi_min, uint32_t abi_max, size_t struct_size = sizeof(TessHostApi)) {
    TessHostApi host{};
    host.struct_size = struct_size;
    host.abi_version_min = abi_min;
    host.abi_version_max = abi_max;
    host.status_create = kit_status_create;
    host.status_code = kit_status_code;
    host.status_message = kit_status_message;
    host.status_release = kit_status_release;
    host.log = kit_log;
    return host;
}

constexpr unsigned char kCanary = 0xa5;

// What one entry call returned, inspected in the child; "" when the expectation held, otherwise why not.
struct EntryCall {
    uint32_t core_min = TESS_PLUGIN_ABI_VERSION_MIN, core_max = TESS_PLUGIN_ABI_VERSION_MAX;
    size_t exports_size = sizeof(TessPluginExports);
    size_t host_size = sizeof(TessHostApi);
    enum class Expect { Refusal, Acceptance, Either } expect = Expect::Either;
};

std::string describe_tables(const TessPluginExports& e, size_t size) {
    std::string problems;
    auto problem = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
    if (e.name == nullptr || e.name[0] == '\0') problem("no plugin name");
    const bool has_ops = size >= offsetof(TessPluginExports, custom_ops) + sizeof(e.custom_ops);
    const size_t op_count = has_ops ? e.custom_op_count : 0;
    if (e.provider_count == 0 && op_count == 0) problem("neither providers nor custom operators");
    if (e.provider_count > 0 && e.providers == nullptr) problem("provider_count without a providers array");
    for (size_t i = 0; e.providers != nullptr && i < e.provider_count; ++i) {
        const TessProviderApi* p = e.providers[i];
        const std::string at = "provider " + std::to_string(i);
        if (p == nullptr) {
            problem(at + " is NULL");
            continue;
        }
        if (p->struct_size < offsetof(TessProviderApi, is_fallback)) problem(at + " has a struct_size too small");
        if (p->name == nullptr || p->name[0] == '\0') problem(at + " has no name");
        if (!p->create_instance || !p->release_instance || !p->get_capability || !p->compile ||
            !p->release_compiled || !p->compute || !p->memory_kind || !p->allocate || !p->free)
            problem(at + " lacks a function every provider must have");
    }
    for (size_t i = 0; has_ops && e.custom_ops != nullptr && i < op_count; ++i) {
        const TessCustomOpApi* op = e.custom_ops[i];
        const std::string at = "custom op " + std::to_string(i);
        if (op == nullptr) {
            problem(at + " is NULL");
            continue;
        }
        if (op->domain == nullptr || op->domain[0] == '\0' || op->name == nullptr) problem(at + " has no domain:name");
        if (op->compute == nullptr) problem(at + " has no compute");
        if (op->since_version < 1) problem(at + " has since_version < 1");
    }
    return problems;
}

std::string call_entry(const std::string& path, const EntryCall& call) {
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return std::string("cannot load: ") + ::dlerror();
    auto entry = reinterpret_cast<TessPluginEntryFn>(::dlsym(library, TESS_PLUGIN_ENTRY_NAME));
    if (entry == nullptr) return "no " TESS_PLUGIN_ENTRY_NAME " symbol";
    const TessHostApi host = kit_host(call.core_min, call.core_max, call.host_size);
    // The exports table the core allocated, followed by bytes the plugin must not touch.
    std::vector<unsigned char> buffer(sizeof(TessPluginExports) + 64, kCanary);
    std::memset(buffer.data(), 0, call.exports_size);
    auto* exports = reinterpret_cast<TessPluginExports*>(buffer.data());
    exports->struct_size = call.exports_size;
    TessStatus* status = entry(&host, exports);
    for (size_t i = call.exports_size; i < buffer.size(); ++i)
        if (buffer[i] != kCanary)
            return "wrote byte " + std::to_string(i) + " past the exports table of " +
                   std::to_string(call.exports_size) + " bytes";
    if (status != nullptr) {
        const int32_t code = kit_status_code(status);
        const std::string message = kit_status_message(status);
        kit_status_release(status);
        if (call.expect == EntryCall::Expect::Acceptance)
            return "refused: " + message;
        if (call.expect == EntryCall::Expect::Refusal && code != TESS_STATUS_ABI_MISMATCH)
            return "refused with status code " + std::to_string(code) + " instead of ABI_MISMATCH: " + message;
        return "";
    }
    if (call.expect == EntryCall::Expect::Refusal)
        return "accepted a core of ABI " + std::to_string(call.core_min) + ".." + std::to_string(call.core_max) +
               " (chose version " + std::to_string(exports->abi_version) + ")";
    if (exports->abi_version < call.core_min || exports->abi_version > call.core_max)
        return "chose ABI version " + std::to_string(exports->abi_version) + ", outside the core's range " +
               std::to_string(call.core_min) + ".." + std::to_string(call.core_max);
    return describe_tables(*exports, call.exports_size);
}

}  // namespace

std::vector<CheckResult> check_entry(const std::string& plugin_path, int timeout_seconds) {
    struct Case {
        const char* name;
        EntryCall call;
    };
    using Expect = EntryCall::Expect;
    std::vector<Case> cases;
    cases.push_back({"entry: this core's ABI range is accepted, with complete tables", {}});
    cases.back().call.expect = Expect::Acceptance;
    cases.push_back({"entry: a core spanning every ABI version (1..1000) gets a version inside both ranges", {}});
    cases.back().call.core_min = 1;
    cases.back().call.core_max = 1000;
    cases.back().call.expect = Expect::Acceptance;
    cases.push_back({"entry: a newer core (ABI 1000..1003) is refused with ABI_MISMATCH", {}});
    cases.back().call.core_min = 1000;
    cases.back().call.core_max = 1003;
    cases.back().call.expect = Expect::Refusal;
    cases.push_back({"entry: an older core (ABI 0..0) is refused with ABI_MISMATCH", {}});
    cases.back().call.core_min = 0;
    cases.back().call.core_max = 0;
    cases.back().call.expect = Expect::Refusal;
    cases.push_back({"entry: an earlier exports table (ending before `shutdown`) is not written past", {}});
    cases.back().call.exports_size = offsetof(TessPluginExports, shutdown);
    cases.push_back({"entry: an earlier host table (before the functions appended in ABI 1) is handled", {}});
    cases.back().call.host_size = offsetof(TessHostApi, compile_release_constant);

    std::vector<CheckResult> results;
    for (const Case& c : cases) {
        const IsolatedOutcome outcome = run_isolated([&] { return call_entry(plugin_path, c.call); }, timeout_seconds);
        CheckResult r;
        r.name = c.name;
        r.passed = outcome.finished && outcome.text.empty();
        r.detail = outcome.finished ? outcome.text : outcome.failure;
        results.push_back(std::move(r));
    }
    return results;
}

}  // namespace tessera::provider_kit
