// The core's error model: C++ code throws tessera::Error; every extern "C" body converts it into a TessStatus.
#pragma once

#include <stdexcept>
#include <string>

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
void release_status(TessStatus* status);

// Converts the exception in flight into a status; for use inside catch (...) only.
TessStatus* status_from_current_exception();

// Throws the status as an Error (taking ownership of it) when it is not NULL.
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
