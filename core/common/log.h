// Logging.  Each environment registers a sink; messages go to every live sink (plugins log without knowing which
// environment loaded them).  With no sink, warnings and errors go to stderr.
#pragma once

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

}  // namespace tessera
