// CPU provider: the session's intra-op thread pool.  One per provider instance (= per session); the calling thread
// takes part in the work, so a pool of N threads runs N-1 workers.
//
// Built for many small parallel regions (a MobileNet runs ~150 of them per inference): posting a region allocates
// nothing, and workers spin briefly before they sleep so that back-to-back regions do not pay a futex wake-up each.
// The pool runs one region at a time; a second caller (another run on the same session, or a kernel that nests a
// parallel_for inside one) runs its region inline on its own thread, so concurrent runs stay correct and never wait
// on each other.
//
// Chunk i of a region goes first to thread i (the caller is thread 0), and a thread that is done takes any chunk
// still unclaimed.  So consecutive regions that split the same index space the same way keep each part on one
// core, where the previous operator left its data: on two cores, a MobileNetV2 projection reading the other core's
// half of its input took longer than the whole layer on one (180 against 132 us).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

// The first row of band `band` when `rows` rows are cut into `bands` bands of (nearly) equal height.  Kernels that
// split output rows use it, so that two operators cutting the same rows into 2 and 4 blocks agree on the halves.
inline int64_t band_begin(int64_t rows, int64_t bands, int64_t band) { return rows * band / bands; }

class ThreadPool {
public:
    // Starts threads - 1 workers.  Throws std::runtime_error (after stopping the workers it did start) when the
    // system refuses a thread, so that a session asking for too many fails cleanly instead of hanging.
    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return threads_; }

    // Splits [0, n) into min(size(), ceil(n / grain)) contiguous chunks of equal size (the last may be shorter) and
    // calls fn(begin, end) on each, in parallel; chunk i preferably on thread i (see above).  Returns when every
    // chunk is done.  fn must not throw (kernels validate before parallel regions).
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker(int index);
    void stop_workers();
    // Runs chunk `self` if still unclaimed, then claims and runs the others until none is left.
    void run_chunks(int self);

    int threads_;
    std::vector<std::thread> workers_;

    // The posted region.  Written by its poster before `open_` is set (release); read by workers only after they
    // have announced themselves in `active_` and seen `open_` (acquire).
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0, per_chunk_ = 0, chunks_ = 0;
    std::unique_ptr<std::atomic<bool>[]> claimed_;  // per chunk (at most threads_), reset by each poster
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
