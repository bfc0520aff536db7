#include "common/status.h"

#include <mutex>
#include <new>
#include <unordered_set>

#include "common/log.h"

namespace tessera {

namespace {
// Returned when even the error report cannot be allocated; never deleted.
TessStatus g_out_of_memory{TESS_STATUS_OUT_OF_MEMORY, "out of memory"};

constexpr const char* kForeignMessage = "plugin fault: a status the host did not create";

// The statuses make_status handed out and nobody released yet.  Plugins return statuses across the ABI; a plugin
// that returns its own object (or one it already released) must not make the host free or read foreign memory.
// A registry rather than a magic field inside TessStatus: checking a magic field means reading through a pointer
// that may point anywhere.  Leaked on purpose so that statuses released during static destruction still find it.
struct Registry {
    std::mutex mutex;
    std::unordered_set<const TessStatus*> live;
};
Registry& registry() {
    static Registry* r = new Registry;
    return *r;
}
}  // namespace

bool is_host_status(const TessStatus* status) {
    if (status == nullptr) return false;
    if (status == &g_out_of_memory) return true;
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    return r.live.count(status) != 0;
}

void release_status(TessStatus* status) {
    if (status == nullptr || status == &g_out_of_memory) return;
    bool ours = false;
    {
        Registry& r = registry();
        std::lock_guard lock(r.mutex);
        ours = r.live.erase(status) != 0;
    }
    if (ours) {
        delete status;
        return;
    }
    try {
        log_message(TESS_LOG_ERROR, "status",
                    "a status the host did not create (or one already released) was released; it is left alone");
    } catch (...) {
    }
}

TessStatus* make_status(TessStatusCode code, std::string message) {
    TessStatus* status = nullptr;
    try {
        status = new TessStatus{code, std::move(message)};
        Registry& r = registry();
        std::lock_guard lock(r.mutex);
        r.live.insert(status);
        return status;
    } catch (...) {
        delete status;
        return &g_out_of_memory;
    }
}

TessStatus* adopt_plugin_status(TessStatus* status, std::string_view who) {
    if (status == nullptr || is_host_status(status)) return status;
    std::string message = fmt::format("plugin fault: {} returned a status the host did not create", who);
    try {
        log_message(TESS_LOG_WARNING, "plugins", message + " (it is leaked, not freed)");
    } catch (...) {
    }
    return make_status(TESS_STATUS_INTERNAL, std::move(message));
}

TessStatusCode checked_status_code(const TessStatus* status) {
    if (status == nullptr) return TESS_STATUS_OK;
    return is_host_status(status) ? status->code : TESS_STATUS_INTERNAL;
}

const char* checked_status_message(const TessStatus* status) {
    if (status == nullptr) return "";
    return is_host_status(status) ? status->message.c_str() : kForeignMessage;
}

TessStatus* status_from_current_exception() {
    try {
        throw;
    } catch (const Error& e) {
        return make_status(e.code(), e.what());
    } catch (const std::bad_alloc&) {
        return make_status(TESS_STATUS_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception& e) {
        return make_status(TESS_STATUS_INTERNAL, e.what());
    } catch (...) {
        return make_status(TESS_STATUS_INTERNAL, "unknown exception");
    }
}

void throw_if_error(TessStatus* status, const std::string& context) {
    if (status == nullptr) return;
    status = adopt_plugin_status(status, "the plugin");
    TessStatusCode code = status->code;
    std::string message = context.empty() ? status->message : context + ": " + status->message;
    release_status(status);
    throw Error(code, message);
}

}  // namespace tessera
