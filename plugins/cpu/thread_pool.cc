#include "thread_pool.h"

#include <algorithm>
#include <atomic>

namespace tessera::cpu {

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker() {
    for (;;) {
        std::function<void()> task;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
            if (stop_ && tasks_.empty()) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
        }
        task();
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    int64_t chunks = std::min<int64_t>(threads_, (n + grain - 1) / grain);
    if (chunks <= 1) {
        fn(0, n);
        return;
    }
    // Chunks are claimed from a shared counter, so the caller works too and no chunk waits on a busy worker.
    struct Shared {
        std::atomic<int64_t> next{0};
        std::atomic<int64_t> done{0};
        std::mutex mutex;
        std::condition_variable finished;
    };
    auto shared = std::make_shared<Shared>();
    int64_t per_chunk = (n + chunks - 1) / chunks;
    auto run_chunks = [shared, per_chunk, n, chunks, &fn] {
        for (;;) {
            int64_t c = shared->next.fetch_add(1);
            if (c >= chunks) return;
            int64_t begin = c * per_chunk, end = std::min(n, begin + per_chunk);
            if (begin < end) fn(begin, end);
            if (shared->done.fetch_add(1) + 1 == chunks) {
                std::lock_guard lock(shared->mutex);
                shared->finished.notify_all();
            }
        }
    };
    {
        std::lock_guard lock(mutex_);
        for (int64_t i = 1; i < chunks; ++i) tasks_.push_back(run_chunks);
    }
    wake_.notify_all();
    run_chunks();
    std::unique_lock lock(shared->mutex);
    shared->finished.wait(lock, [&] { return shared->done.load() == chunks; });
}

}  // namespace tessera::cpu
