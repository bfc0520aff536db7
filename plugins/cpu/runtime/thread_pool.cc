#include "runtime/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <system_error>

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

// How long an idle worker keeps polling for the next region before it sleeps.  Inference runs post regions every
// few to few hundred microseconds; a futex wake-up costs tens of microseconds, polling costs one core while a run
// is in progress.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

#if TESSERA_CPU_X86
inline void cpu_relax() { _mm_pause(); }
#else
inline void cpu_relax() {}  // no portable spin-wait hint; the polling is bounded by kSpinBeforeSleep
#endif

}  // namespace

ThreadPool::ThreadPool(int threads)
    : threads_(std::max(1, threads)), claimed_(std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(threads_))) {
    workers_.reserve(static_cast<size_t>(threads_ - 1));
    for (int i = 1; i < threads_; ++i) {
        try {
            workers_.emplace_back([this, i] { worker(i); });
        } catch (const std::system_error& e) {
            const int started = static_cast<int>(workers_.size());
            stop_workers();
            throw std::runtime_error("cannot start intra-op thread " + std::to_string(started + 1) + " of " +
                                     std::to_string(threads_) + ": " + e.what());
        }
    }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    {
        std::lock_guard lock(mutex_);
        stop_.store(true);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
}

void ThreadPool::worker(int index) {
    // Epoch 0 is the pool's before any region: a worker that starts running only after the first region was
    // posted must still see it as new (reading the epoch here made such a worker skip it).
    uint64_t seen = 0;
    for (;;) {
        // Spin for the next region, then sleep.
        const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
        uint64_t now_epoch = epoch_.load(std::memory_order_acquire);
        for (int i = 0; now_epoch == seen && !stop_.load(std::memory_order_relaxed); ++i) {
            cpu_relax();
            if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) {
                std::unique_lock lock(mutex_);
                sleepers_.fetch_add(1);
                wake_.wait(lock, [&] { return stop_.load() || epoch_.load() != seen; });
                sleepers_.fetch_sub(1);
            }
            now_epoch = epoch_.load(std::memory_order_acquire);
        }
        if (stop_.load()) return;
        seen = now_epoch;
        active_.fetch_add(1);
        if (open_.load()) run_chunks(index);  // seq_cst: pairs with the poster's close-then-drain
        active_.fetch_sub(1, std::memory_order_release);
    }
}

void ThreadPool::run_chunks(int self) {
    const auto run = [this](int64_t c) {
        if (claimed_[c].load(std::memory_order_relaxed) || claimed_[c].exchange(true, std::memory_order_acquire))
            return;
        const int64_t begin = c * per_chunk_, end = std::min(n_, begin + per_chunk_);
        if (begin < end) (*fn_)(begin, end);
        done_chunks_.fetch_add(1, std::memory_order_acq_rel);
    };
    if (self < chunks_) run(self);
    for (int64_t c = 0; c < chunks_; ++c) run(c);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int64_t chunks = std::min<int64_t>(threads_, (n + grain - 1) / grain);
    bool expected = false;
    if (chunks <= 1 || !slot_busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
        fn(0, n);  // one chunk, or the pool is busy with another region (a concurrent run, or nesting)
        return;
    }
    // No worker reads the region fields now: the previous region was closed and drained before its poster
    // released the slot, and late workers check `open_` before touching anything.
    fn_ = &fn;
    n_ = n;
    per_chunk_ = (n + chunks - 1) / chunks;
    chunks_ = chunks;
    for (int64_t c = 0; c < chunks; ++c) claimed_[c].store(false, std::memory_order_relaxed);
    done_chunks_.store(0, std::memory_order_relaxed);
    open_.store(true, std::memory_order_release);
    epoch_.fetch_add(1);
    if (sleepers_.load() > 0) {
        { std::lock_guard lock(mutex_); }  // a worker between its check and its wait holds the mutex: let it wait
        wake_.notify_all();
    }

    run_chunks(0);
    // The caller works too; what is left are chunks a worker is finishing.
    for (int i = 0; done_chunks_.load(std::memory_order_acquire) < chunks; ++i) {
        if (i < 4096) cpu_relax();
        else std::this_thread::yield();
    }
    open_.store(false);  // seq_cst, so that the drain below cannot miss a worker that still saw the region open
    // Workers that announced themselves may still be reading the fields: wait until they leave.
    for (int i = 0; active_.load() != 0; ++i) {
        if (i < 4096) cpu_relax();
        else std::this_thread::yield();
    }
    slot_busy_.store(false, std::memory_order_release);
}

}  // namespace tessera::cpu
