// CPU provider: the session's intra-op thread pool.  One per provider instance (= per session); the calling thread
// takes part in the work, so a pool of N threads runs N-1 workers.
//
// Built for many small parallel regions (a MobileNet runs ~150 of them per inference): posting a region allocates
// nothing, and workers spin briefly before they sleep so that back-to-back regions do not pay a futex wake-up each.
// The pool runs one region at a time; a second caller (another run on the same session, or a kernel that nests a
// parallel_for inside one) runs its region inline on its own thread, so concurrent runs stay correct and never wait
// on each other.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class ThreadPool {
public:
    // Starts threads - 1 workers.  Throws std::runtime_error (after stopping the workers it did start) when the
    // system refuses a thread, so that a session asking for too many fails cleanly instead of hanging.
    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return threads_; }

    // Splits [0, n) into contiguous chunks of at least `grain` items and calls fn(begin, end) on each, in parallel.
    // Returns when every chunk is done.  fn must not throw (kernels validate before parallel regions).
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker();
    void stop_workers();
    // Claims and runs chunks of the posted region until none is left.
    void run_chunks();

    int threads_;
    std::vector<std::thread> workers_;

    // The posted region.  Written by its poster before `open_` is set (release); read by workers only after they
    // have announced themselves in `active_` and seen `open_` (acquire).
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0, per_chunk_ = 0, chunks_ = 0;
    std::atomic<int64_t> next_chunk_{0};
    std::atomic<int64_t> done_chunks_{0};
    std::atomic<bool> open_{false};
    std::atomic<int> active_{0};      // workers inside run_chunks()
    std::atomic<bool> slot_busy_{false};  // a caller owns the region slot

    // Wake-ups: workers spin on `epoch_`, then sleep on `wake_` once `sleepers_` says so.
    std::atomic<uint64_t> epoch_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
};

}  // namespace tessera::cpu
