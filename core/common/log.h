// Logging.  Each environment registers a sink; messages go to every live sink (plugins log without knowing which
// environment loaded them).  With no sink, warnings and errors go to stderr.
#pragma once

#include <string>
#include <string_view>

#include "tessera/tessera.h"

namespace tessera {

struct LogSink {
    int32_t level = TESS_LOG_WARNING;
    TessLogCallback callback = nullptr;  // NULL: stderr
    void* user_data = nullptr;
};

void add_log_sink(const LogSink* sink);
void remove_log_sink(const LogSink* sink);
void log_message(int32_t level, std::string_view source, std::string_view message);

// While it lives, messages logged on this thread start with "[run TAG] " (TessRunOptions' log tag): a run's caller
// can then tell its own messages apart from those of concurrent runs.  NULL or an empty tag: no prefix.  Nests.
class ScopedRunLogTag {
public:
    explicit ScopedRunLogTag(const std::string* tag);
    ~ScopedRunLogTag();
    ScopedRunLogTag(const ScopedRunLogTag&) = delete;
    ScopedRunLogTag& operator=(const ScopedRunLogTag&) = delete;

private:
    const std::string* previous_;
};

}  // namespace tessera
