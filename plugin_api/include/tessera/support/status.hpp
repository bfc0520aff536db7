/*
 * Tessera plugin support (header-only C++17, installed with the SDK): errors and the exception guard.
 *
 * Inside a plugin, failures are C++ exceptions; at the ABI boundary they must become TessStatus objects, because
 * nothing may unwind into the core.  Throw `Error` (or a class derived from it) with the status code the core should
 * see; wrap the body of every function the core calls in `guarded`.  Both are thread-safe.
 *
 * The host table passed to these functions is the one the plugin's entry function received (provider.h): it lives as
 * long as the plugin is loaded.
 */
#ifndef TESSERA_SUPPORT_STATUS_HPP_
#define TESSERA_SUPPORT_STATUS_HPP_

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/provider.h"

namespace tessera::support {

/* A failure with the TessStatusCode the core should report.  what() is the whole message. */
class Error : public std::runtime_error {
public:
    Error(int32_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
    int32_t code() const noexcept { return code_; }

private:
    int32_t code_;
};

[[noreturn]] inline void fail(int32_t code, const std::string& message) { throw Error(code, message); }

/* A new status from the host; `source` (may be NULL) prefixes the message as "source: message".  Never throws: when
 * the prefixed text cannot be built the bare message is used. */
inline TessStatus* make_status(const TessHostApi* host, int32_t code, const char* source,
                               const char* message) noexcept {
    if (source != nullptr && source[0] != '\0') {
        try {
            const std::string text = std::string(source) + ": " + message;
            return host->status_create(code, text.c_str());
        } catch (...) {
        }
    }
    return host->status_create(code, message);
}

/* Throws the status as an Error (taking ownership: the status is released) when it is not NULL.  For statuses the
 * host's own functions return (value_create_tensor, compute_allocate_output, ...); `what` prefixes the message. */
inline void throw_if_error(const TessHostApi* host, TessStatus* status, const char* what = nullptr) {
    if (status == nullptr) return;
    const int32_t code = host->status_code(status);
    std::string message = host->status_message(status);
    host->status_release(status);
    if (what != nullptr && what[0] != '\0') message = std::string(what) + ": " + message;
    throw Error(code, message);
}

/* Runs `fn` and returns NULL, or the TessStatus* that `fn` returns when it returns one; any exception becomes a
 * status instead of unwinding:
 *   Error                -> its own code and message
 *   std::bad_alloc       -> TESS_STATUS_OUT_OF_MEMORY, "source: out of memory"
 *   other std::exception -> TESS_STATUS_INTERNAL, "source: what()"
 *   anything else        -> TESS_STATUS_INTERNAL, "source: unknown exception"
 * `source` names the plugin or the function (e.g. "cpu", "sample: compile"); may be NULL. */
template <typename Fn>
TessStatus* guarded(const TessHostApi* host, const char* source, Fn&& fn) noexcept {
    try {
        if constexpr (std::is_same_v<std::invoke_result_t<Fn>, TessStatus*>) {
            return std::forward<Fn>(fn)();
        } else {
            std::forward<Fn>(fn)();
            return nullptr;
        }
    } catch (const Error& e) {
        return make_status(host, e.code(), nullptr, e.what());
    } catch (const std::bad_alloc&) {
        return make_status(host, TESS_STATUS_OUT_OF_MEMORY, source, "out of memory");
    } catch (const std::exception& e) {
        return make_status(host, TESS_STATUS_INTERNAL, source, e.what());
    } catch (...) {
        return make_status(host, TESS_STATUS_INTERNAL, source, "unknown exception");
    }
}

}  // namespace tessera::support

#endif  // TESSERA_SUPPORT_STATUS_HPP_
