// Small helpers shared by the Tessera backend for Triton: errors as exceptions inside the backend and as
// TRITONSERVER_Error* at the C boundary, logging into Triton's log, and RAII for Triton objects we own.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"
#include "triton/core/tritonbackend.h"
#include "triton/core/tritonserver.h"

namespace tessera_triton {

// An error with the Triton code it should reach the client with.  Everything inside the backend throws this (or
// tessera::Error, or std::exception); only the extern "C" entry points turn exceptions into TRITONSERVER_Error*.
class BackendError : public std::runtime_error {
public:
    BackendError(TRITONSERVER_Error_Code code, const std::string& message)
        : std::runtime_error(message), code_(code) {}
    TRITONSERVER_Error_Code code() const noexcept { return code_; }

private:
    TRITONSERVER_Error_Code code_;
};

inline BackendError invalid_arg(const std::string& message) {
    return BackendError(TRITONSERVER_ERROR_INVALID_ARG, message);
}
inline BackendError internal_error(const std::string& message) {
    return BackendError(TRITONSERVER_ERROR_INTERNAL, message);
}

// Throws for a non-null Triton error, taking its message and deleting it.
inline void check_triton(TRITONSERVER_Error* error, const char* what) {
    if (error == nullptr) return;
    const TRITONSERVER_Error_Code code = TRITONSERVER_ErrorCode(error);
    std::string message = std::string(what) + ": " + TRITONSERVER_ErrorMessage(error);
    TRITONSERVER_ErrorDelete(error);
    throw BackendError(code, message);
}

// Maps a Tessera status code to the Triton code a client should see: bad requests stay INVALID_ARG, a device
// that is not there is UNAVAILABLE, a cancelled run CANCELLED, everything else INTERNAL.
inline TRITONSERVER_Error_Code triton_code_for(tessera::StatusCode code) noexcept {
    switch (code) {
        case TESS_STATUS_INVALID_ARGUMENT:
        case TESS_STATUS_INVALID_MODEL: return TRITONSERVER_ERROR_INVALID_ARG;
        case TESS_STATUS_NOT_FOUND: return TRITONSERVER_ERROR_NOT_FOUND;
        case TESS_STATUS_NOT_IMPLEMENTED: return TRITONSERVER_ERROR_UNSUPPORTED;
        case TESS_STATUS_UNAVAILABLE: return TRITONSERVER_ERROR_UNAVAILABLE;
        case TESS_STATUS_CANCELLED: return TRITONSERVER_ERROR_CANCELLED;
        default: return TRITONSERVER_ERROR_INTERNAL;
    }
}

// The TRITONSERVER_Error* for whatever is being handled in a catch block; never throws.
inline TRITONSERVER_Error* current_exception_to_triton() noexcept {
    try {
        throw;
    } catch (const BackendError& e) {
        return TRITONSERVER_ErrorNew(e.code(), e.what());
    } catch (const tessera::Error& e) {
        return TRITONSERVER_ErrorNew(triton_code_for(e.code()), (std::string("tessera: ") + e.what()).c_str());
    } catch (const std::bad_alloc&) {
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "tessera backend: out of memory");
    } catch (const std::exception& e) {
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, e.what());
    } catch (...) {
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "tessera backend: unknown exception");
    }
}

// Runs `body` and returns its exceptions as a TRITONSERVER_Error*: every extern "C" entry point is one call of this.
template <typename Body>
TRITONSERVER_Error* guarded(Body&& body) noexcept {
    try {
        body();
        return nullptr;
    } catch (...) {
        return current_exception_to_triton();
    }
}

// Logging into Triton's log (never throws: a failed log line is dropped).
inline void log(TRITONSERVER_LogLevel level, const std::string& message, const char* file = __builtin_FILE(),
                int line = __builtin_LINE()) noexcept {
    if (!TRITONSERVER_LogIsEnabled(level)) return;
    TRITONSERVER_Error* error = TRITONSERVER_LogMessage(level, file, line, message.c_str());
    if (error != nullptr) TRITONSERVER_ErrorDelete(error);
}
inline void log_info(const std::string& message, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    log(TRITONSERVER_LOG_INFO, message, file, line);
}
inline void log_warning(const std::string& message, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    log(TRITONSERVER_LOG_WARN, message, file, line);
}
inline void log_error(const std::string& message, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    log(TRITONSERVER_LOG_ERROR, message, file, line);
}
inline void log_verbose(const std::string& message, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    log(TRITONSERVER_LOG_VERBOSE, message, file, line);
}

// Logs and deletes an error we cannot hand to anyone (a failed release, a failed statistics report).
inline void log_and_delete(TRITONSERVER_Error* error, const char* what) noexcept {
    if (error == nullptr) return;
    try {
        log_error(std::string(what) + ": " + TRITONSERVER_ErrorMessage(error));
    } catch (...) {  // out of memory for the message: the line is dropped, never the process
    }
    TRITONSERVER_ErrorDelete(error);
}

// "a, b, c" for log lines and error messages; `if_empty` when there is nothing to list.
inline std::string join(const std::vector<std::string>& items, const std::string& if_empty = "",
                        const std::string& separator = ", ") {
    if (items.empty()) return if_empty;
    std::string text = items.front();
    for (size_t i = 1; i < items.size(); ++i) text += separator + items[i];
    return text;
}

// Triton's statistics are in nanoseconds of the steady clock.
inline uint64_t now_ns() noexcept {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

// Owns a TRITONSERVER_Message (model configurations come and go as these).
class MessageHandle {
public:
    explicit MessageHandle(TRITONSERVER_Message* message = nullptr) noexcept : message_(message) {}
    MessageHandle(const MessageHandle&) = delete;
    MessageHandle& operator=(const MessageHandle&) = delete;
    ~MessageHandle() { log_and_delete(message_ != nullptr ? TRITONSERVER_MessageDelete(message_) : nullptr,
                                      "deleting a Triton message"); }
    TRITONSERVER_Message* get() const noexcept { return message_; }
    TRITONSERVER_Message** out() noexcept { return &message_; }

    // The message's JSON text.
    std::string json() const {
        const char* base = nullptr;
        size_t size = 0;
        check_triton(TRITONSERVER_MessageSerializeToJson(message_, &base, &size), "serializing a Triton message");
        return std::string(base, size);
    }

private:
    TRITONSERVER_Message* message_ = nullptr;
};

}  // namespace tessera_triton
