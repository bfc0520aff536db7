#include "common/log.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace tessera {

namespace {

std::mutex g_mutex;
std::vector<const LogSink*>& sinks() {
    static std::vector<const LogSink*> list;
    return list;
}

const char* level_name(int32_t level) {
    switch (level) {
        case TESS_LOG_ERROR: return "error";
        case TESS_LOG_WARNING: return "warning";
        case TESS_LOG_INFO: return "info";
        default: return "debug";
    }
}

thread_local const std::string* t_run_tag = nullptr;

}  // namespace

ScopedRunLogTag::ScopedRunLogTag(const std::string* tag) : previous_(t_run_tag) {
    if (tag != nullptr && !tag->empty()) t_run_tag = tag;
}

ScopedRunLogTag::~ScopedRunLogTag() { t_run_tag = previous_; }

void add_log_sink(const LogSink* sink) {
    std::lock_guard lock(g_mutex);
    sinks().push_back(sink);
}

void remove_log_sink(const LogSink* sink) {
    std::lock_guard lock(g_mutex);
    auto& list = sinks();
    list.erase(std::remove(list.begin(), list.end(), sink), list.end());
}

void log_message(int32_t level, std::string_view source, std::string_view message) {
    std::string line = std::string("tessera[") + std::string(source) + "] " + level_name(level) + ": ";
    if (t_run_tag != nullptr) line += "[run " + *t_run_tag + "] ";
    line += message;
    std::lock_guard lock(g_mutex);
    if (sinks().empty()) {
        if (level <= TESS_LOG_WARNING) std::fprintf(stderr, "%s\n", line.c_str());
        return;
    }
    for (const LogSink* sink : sinks()) {
        if (level > sink->level) continue;
        if (sink->callback != nullptr) sink->callback(sink->user_data, level, line.c_str());
        else std::fprintf(stderr, "%s\n", line.c_str());
    }
}

}  // namespace tessera
