#include "exec/profiler.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "common/log.h"
#include "common/status.h"

namespace tessera {

namespace {

void append_json_string(std::string& out, std::string_view text) {
    out += '"';
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) out += fmt::format("\\u{:04x}", c);
                else out += ch;
        }
    }
    out += '"';
}

const char* category_name(int category) {
    static const char* const names[] = {"session", "run", "partition", "node"};
    return names[category];
}

}  // namespace

Profiler::Profiler(std::string path, int64_t origin_ns)
    : path_(std::move(path)), origin_ns_(origin_ns), pid_(static_cast<int>(::getpid())) {
    strings_.emplace_back();  // id 0: ""
    string_ids_.emplace("", 0);
}

Profiler::~Profiler() {
    try {
        end();
    } catch (const std::exception& e) {
        log_message(TESS_LOG_WARNING, "profiler", e.what());
    } catch (...) {
    }
}

int64_t Profiler::now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

uint32_t Profiler::intern(std::string_view text) {
    auto it = string_ids_.find(text);
    if (it != string_ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back(text);
    string_ids_.emplace(strings_.back(), id);
    return id;
}

uint32_t Profiler::thread_id() {
    auto [it, inserted] = thread_ids_.emplace(std::this_thread::get_id(), 0);
    if (inserted) it->second = static_cast<uint32_t>(thread_ids_.size());  // 1, 2, ... in order of first event
    return it->second;
}

void Profiler::add(const Event& event) {
    if (events_.size() >= kMaxEvents) {
        if (dropped_++ == 0)
            log_message(TESS_LOG_WARNING, "profiler",
                        fmt::format("{} events recorded: later ones are left out of the trace '{}'", kMaxEvents,
                                    path_));
        return;
    }
    events_.push_back(event);
}

void Profiler::session_phase(const std::string& name, int64_t start_ns, int64_t end_ns, const std::string& args_json) {
    if (!active()) return;
    std::lock_guard lock(mutex_);
    Event e{Category::Session, thread_id(), intern(name)};
    e.detail = intern(args_json);
    e.start_ns = start_ns;
    e.end_ns = end_ns;
    add(e);
}

int64_t Profiler::begin_run() { return next_run_.fetch_add(1, std::memory_order_relaxed); }

void Profiler::run(int64_t run, int64_t start_ns, int64_t end_ns) {
    if (!active()) return;
    std::lock_guard lock(mutex_);
    Event e{Category::Run, thread_id(), intern("run")};
    e.run = run;
    e.start_ns = start_ns;
    e.end_ns = end_ns;
    add(e);
    ++runs_;
    run_ns_ += std::max<int64_t>(0, end_ns - start_ns);
}

void Profiler::partition(int64_t run, size_t partition, const std::string& provider, size_t node_count,
                         int64_t start_ns, int64_t end_ns) {
    if (!active()) return;
    std::lock_guard lock(mutex_);
    Event e{Category::Partition, thread_id(), intern(fmt::format("partition {} ({})", partition, provider))};
    e.provider = intern(provider);
    e.run = run;
    e.partition = static_cast<int64_t>(partition);
    e.count = static_cast<int64_t>(node_count);
    e.start_ns = start_ns;
    e.end_ns = end_ns;
    add(e);
}

void Profiler::node(int64_t run, size_t partition, const std::string& provider, const char* name, const char* op_type,
                    const char* input_shapes, int64_t start_ns, int64_t end_ns) {
    if (!active()) return;
    const std::string_view op = op_type != nullptr ? op_type : "";
    const std::string_view label = name != nullptr && name[0] != '\0' ? std::string_view(name) : op;
    std::lock_guard lock(mutex_);
    Event e{Category::Node, thread_id(), intern(label)};
    e.op_type = intern(op);
    e.provider = intern(provider);
    e.detail = intern(input_shapes != nullptr ? input_shapes : "");
    e.run = run;
    e.partition = static_cast<int64_t>(partition);
    e.start_ns = start_ns;
    e.end_ns = std::max(start_ns, end_ns);
    add(e);
    OpTotal& total = op_totals_[e.op_type];
    total.ns += e.end_ns - e.start_ns;
    ++total.calls;
}

std::string Profiler::trace_json() const {
    std::lock_guard lock(mutex_);
    std::vector<const Event*> order;
    order.reserve(events_.size());
    for (const Event& e : events_) order.push_back(&e);
    // By start time; an enclosing event (longer) before what it encloses.
    std::stable_sort(order.begin(), order.end(), [](const Event* a, const Event* b) {
        if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
        return a->end_ns > b->end_ns;
    });
    std::string out = "{\"traceEvents\":[";
    out.reserve(64 + order.size() * 200);
    bool first = true;
    for (const Event* e : order) {
        out += first ? "\n" : ",\n";
        first = false;
        out += "{\"ph\":\"X\",\"cat\":";
        append_json_string(out, category_name(static_cast<int>(e->category)));
        out += ",\"name\":";
        append_json_string(out, strings_[e->name]);
        out += fmt::format(",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},\"args\":", pid_, e->tid,
                           static_cast<double>(e->start_ns - origin_ns_) / 1000.0,
                           static_cast<double>(e->end_ns - e->start_ns) / 1000.0);
        switch (e->category) {
            case Category::Session:
                out += strings_[e->detail].empty() ? "{}" : strings_[e->detail];
                break;
            case Category::Run:
                out += fmt::format("{{\"run\":{}}}", e->run);
                break;
            case Category::Partition:
                out += "{\"provider\":";
                append_json_string(out, strings_[e->provider]);
                out += fmt::format(",\"partition\":{},\"nodes\":{},\"run\":{}}}", e->partition, e->count, e->run);
                break;
            case Category::Node:
                out += "{\"op_type\":";
                append_json_string(out, strings_[e->op_type]);
                out += ",\"provider\":";
                append_json_string(out, strings_[e->provider]);
                out += ",\"input_shapes\":";
                append_json_string(out, strings_[e->detail]);
                out += fmt::format(",\"partition\":{},\"run\":{}}}", e->partition, e->run);
                break;
        }
        out += '}';
    }
    out += "\n],\"displayTimeUnit\":\"ms\"}\n";
    return out;
}

const std::string& Profiler::end() {
    active_.store(false, std::memory_order_release);
    {
        std::lock_guard lock(mutex_);
        if (written_) return path_;
        written_ = true;  // one attempt: a failed write is reported once
    }
    const std::string text = trace_json();
    std::ofstream file(path_, std::ios::binary | std::ios::trunc);
    if (!file) fail(TESS_STATUS_RUNTIME_ERROR, "cannot write the profile '{}': {}", path_, std::strerror(errno));
    file.write(text.data(), static_cast<std::streamsize>(text.size()));
    file.close();
    if (!file) fail(TESS_STATUS_RUNTIME_ERROR, "cannot write the profile '{}': {}", path_, std::strerror(errno));
    return path_;
}

std::string Profiler::summary(size_t max_rows) const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<uint32_t, OpTotal>> rows(op_totals_.begin(), op_totals_.end());
    std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
        if (a.second.ns != b.second.ns) return a.second.ns > b.second.ns;
        return strings_[a.first] < strings_[b.first];
    });
    int64_t node_ns = 0, calls = 0;
    for (const auto& [op, total] : rows) {
        node_ns += total.ns;
        calls += total.calls;
    }
    std::string out = fmt::format("profile: {} run{}", runs_, runs_ == 1 ? "" : "s");
    if (runs_ > 0) out += fmt::format(", {:.3f} ms per run", static_cast<double>(run_ns_) / 1e6 / runs_);
    out += fmt::format(", {} node calls, {:.3f} ms in nodes\n", calls, static_cast<double>(node_ns) / 1e6);
    if (rows.empty()) return out;
    size_t width = 7;  // "op type"
    for (size_t r = 0; r < rows.size() && r < max_rows; ++r) width = std::max(width, strings_[rows[r].first].size());
    out += fmt::format("  {:<{}}  {:>8}  {:>11}  {:>10}  {:>6}\n", "op type", width, "calls", "total ms", "mean ms",
                       "share");
    auto line = [&](std::string_view name, const OpTotal& t) {
        const double ms = static_cast<double>(t.ns) / 1e6;
        const double share = node_ns > 0 ? 100.0 * static_cast<double>(t.ns) / static_cast<double>(node_ns) : 0.0;
        out += fmt::format("  {:<{}}  {:>8}  {:>11.3f}  {:>10.4f}  {:>5.1f}%\n", name, width, t.calls, ms,
                           t.calls > 0 ? ms / static_cast<double>(t.calls) : 0.0, share);
    };
    OpTotal rest;
    size_t rest_types = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
        if (r < max_rows) {
            line(strings_[rows[r].first], rows[r].second);
        } else {
            rest.ns += rows[r].second.ns;
            rest.calls += rows[r].second.calls;
            ++rest_types;
        }
    }
    if (rest_types > 0) line(fmt::format("({} more)", rest_types), rest);
    return out;
}

}  // namespace tessera
