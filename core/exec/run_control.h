// What may stop a run early: a terminate flag another thread sets (TessRunOptions) and a deadline.  The executor
// checks it between partitions; providers check it between nodes through TessHostApi::compute_should_stop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tessera {

struct RunControl {
    const std::atomic<bool>* terminate = nullptr;  // NULL: none
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    int64_t timeout_ms = 0;  // what the deadline was made from, for the message

    bool should_stop() const {
        if (terminate != nullptr && terminate->load(std::memory_order_relaxed)) return true;
        return deadline != std::chrono::steady_clock::time_point::max() &&
               std::chrono::steady_clock::now() >= deadline;
    }
    // Throws a CANCELLED error when the run must stop.
    void check() const;
};

}  // namespace tessera
