// What a caller's TessRunOptions ask of one run.  What may stop it early: a terminate flag another thread sets and a
// deadline; the executor checks them between partitions, providers between nodes through
// TessHostApi::compute_should_stop.  And how it is observed: a log tag and a trace file of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace tessera {

struct RunControl {
    const std::atomic<bool>* terminate = nullptr;  // NULL: none
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    int64_t timeout_ms = 0;  // what the deadline was made from, for the message
    const std::string* log_tag = nullptr;       // NULL or empty: untagged (ScopedRunLogTag)
    const std::string* profile_path = nullptr;  // NULL or empty: the run is not profiled on its own

    bool should_stop() const {
        if (terminate != nullptr && terminate->load(std::memory_order_relaxed)) return true;
        return deadline != std::chrono::steady_clock::time_point::max() &&
               std::chrono::steady_clock::now() >= deadline;
    }
    // Throws a CANCELLED error when the run must stop.
    void check() const;
};

}  // namespace tessera
