// The intra-op thread pool: a failure to start its threads is one clean error, never a hang or a crash; every index
// runs once; chunk i goes to thread i.
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/thread_pool.h"

// Sanitizer builds (clang spells it __has_feature, gcc __SANITIZE_*__).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSERA_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TESSERA_TEST_SANITIZED 1
#endif
#endif

namespace {

// Bytes of address space the process uses now (from /proc/self/statm, in pages).
size_t address_space_bytes() {
    size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    return pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// In a child process whose address space leaves room for a few thread stacks only, asks for 64 threads: the
// constructor must throw (before the fix it destroyed the condition variable its started workers waited on, and
// never returned).  An alarm turns a hang into a failure.
void start_more_threads_than_memory_allows() {
    ::alarm(30);
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max = address_space_bytes() + (48u << 20);
    if (::setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(3);
    try {
        tessera::cpu::ThreadPool pool(64);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        std::_Exit(std::string(e.what()).find("cannot start intra-op thread") != std::string::npos ? 0 : 2);
    }
    std::_Exit(1);  // every thread started: the limit did not bite
}

}  // namespace

TEST(ThreadPoolDeathTest, ThreadCreationFailureIsACleanError) {
#ifdef TESSERA_TEST_SANITIZED
    GTEST_SKIP() << "the sanitizers' shadow memory needs more address space than the limit this test sets";
#endif
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(start_more_threads_than_memory_allows(), ::testing::ExitedWithCode(0), "cannot start intra-op thread");
}

TEST(ThreadPool, RunsEveryIndexOnce) {
    tessera::cpu::ThreadPool pool(4);
    std::vector<int> hits(1000, 0);
    pool.parallel_for(1000, 7, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
    });
    for (int h : hits) EXPECT_EQ(h, 1);
}

// Chunk i of every region goes to thread i (the caller is thread 0), so that consecutive operators splitting the same
// index space find their data in the cache of the core that wrote it.  Each chunk waits until all four have started,
// so no thread can finish early and take another's chunk: the mapping is then exactly the preferred one.
TEST(ThreadPool, ChunkIGoesToThreadIInEveryRegion) {
    tessera::cpu::ThreadPool pool(4);
    std::array<std::thread::id, 4> first{}, second{};
    for (auto* ids : {&first, &second}) {
        std::atomic<int> started{0};
        pool.parallel_for(4, 1, [&](int64_t begin, int64_t end) {
            for (int64_t c = begin; c < end; ++c) (*ids)[static_cast<size_t>(c)] = std::this_thread::get_id();
            started.fetch_add(1);
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (started.load() < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        });
    }
    EXPECT_EQ(first[0], std::this_thread::get_id());
    EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
    EXPECT_EQ(first, second);
}
