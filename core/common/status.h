// The core's error model: C++ code throws tessera::Error; every extern "C" body converts it into a TessStatus.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "tessera/common.h"

struct TessStatus {
    TessStatusCode code;
    std::string message;
};

namespace tessera {

class Error : public std::runtime_error {
public:
    Error(TessStatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    TessStatusCode code() const { return code_; }

private:
    TessStatusCode code_;
};

template <typename... Args>
[[noreturn]] void fail(TessStatusCode code, fmt::format_string<Args...> format, Args&&... args) {
    throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

TessStatus* make_status(TessStatusCode code, std::string message);
// Frees a status the host made; any other pointer (a plugin's own object, a status released twice) is left alone
// and logged, never freed: freeing memory the host did not allocate ends in `free(): invalid pointer` at best.
void release_status(TessStatus* status);

// Whether `status` is a live status that make_status returned (NULL is not).  Statuses are only made on error
// paths, so the registry behind this (a set of live pointers under a mutex) costs nothing on the hot path; it never
// dereferences the pointer it is asked about.
bool is_host_status(const TessStatus* status);

// A status a plugin returned, checked before the core reads it: NULL stays NULL, a host-made status is returned as
// is, and anything else is replaced by an INTERNAL status "plugin fault: <who> returned a status the host did not
// create" (the foreign object is leaked: it cannot be freed safely).
TessStatus* adopt_plugin_status(TessStatus* status, std::string_view who);

// Code and message of a status that may not be host-made (the consumer and host accessor functions): a foreign
// pointer reads as TESS_STATUS_INTERNAL with a message saying so, without being dereferenced.
TessStatusCode checked_status_code(const TessStatus* status);
const char* checked_status_message(const TessStatus* status);

// Converts the exception in flight into a status; for use inside catch (...) only.
TessStatus* status_from_current_exception();

// Throws the status as an Error (taking ownership of it) when it is not NULL.  A status the host did not make
// (a plugin fault) is thrown as INTERNAL, naming `context`, and is not freed.
void throw_if_error(TessStatus* status, const std::string& context = {});

// Runs fn, returning NULL or the error as a status: the shape of every extern "C" body.
template <typename Fn> TessStatus* guarded(Fn&& fn) noexcept {
    try {
        fn();
        return nullptr;
    } catch (...) {
        return status_from_current_exception();
    }
}

}  // namespace tessera
