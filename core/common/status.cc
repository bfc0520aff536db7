#include "common/status.h"

#include <new>

namespace tessera {

namespace {
// Returned when even the error report cannot be allocated; never deleted.
TessStatus g_out_of_memory{TESS_STATUS_OUT_OF_MEMORY, "out of memory"};
}  // namespace

void release_status(TessStatus* status) {
    if (status != &g_out_of_memory) delete status;
}

TessStatus* make_status(TessStatusCode code, std::string message) {
    try {
        return new TessStatus{code, std::move(message)};
    } catch (...) {
        return &g_out_of_memory;
    }
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
    TessStatusCode code = status->code;
    std::string message = context.empty() ? status->message : context + ": " + status->message;
    release_status(status);
    throw Error(code, message);
}

}  // namespace tessera
