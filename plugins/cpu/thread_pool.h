// CPU provider: the session's intra-op thread pool.  One per provider instance (= per session); the calling thread
// takes part in the work, so a pool of N threads runs N-1 workers.  Safe to use from several runs at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include <deque>

namespace tessera::cpu {

class ThreadPool {
public:
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

    int threads_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> tasks_;
    bool stop_ = false;
};

}  // namespace tessera::cpu
