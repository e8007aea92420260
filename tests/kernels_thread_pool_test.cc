// The thread pool: every task runs exactly once, workers index scratch safely, exceptions come
// back to the caller, nesting runs inline, and the thread count comes from where it should.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"

namespace qkv {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t task, int worker) {
        ASSERT_GE(worker, 0);
        ASSERT_LT(worker, threads);
        hits[static_cast<size_t>(task)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "task " << i;
    }
  }
}

TEST(ThreadPool, ReusesThreadsAcrossManyCalls) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 2000; ++call)
    pool.parallel_for(4, [&](int64_t task, int) { total.fetch_add(task + 1); });
  EXPECT_EQ(total.load(), 2000 * 10);
}

TEST(ThreadPool, ScratchIsPerWorkerAlignedAndKept) {
  ThreadPool pool(2);
  std::vector<float*> first(2, nullptr);
  pool.parallel_for(64, [&](int64_t, int worker) {
    float* s = pool.scratch(worker, 1000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s) % 64, 0u);
    for (int i = 0; i < 1000; ++i) s[i] = static_cast<float>(worker);  // no other worker writes here
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(s[i], static_cast<float>(worker));
  });
  float* a = pool.scratch(0, 1000);
  EXPECT_EQ(pool.scratch(0, 10), a) << "a smaller request reuses the buffer";
}

TEST(ThreadPool, RethrowsTheFirstExceptionAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, [&](int64_t task, int) {
                 if (task == 37) throw std::runtime_error("task 37 failed");
               }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.parallel_for(10, [&](int64_t, int) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 10);
}

TEST(ThreadPool, NestedCallsRunInlineOnTheSameWorker) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](int64_t, int outer_worker) {
    pool.parallel_for(3, [&](int64_t, int worker) {
      EXPECT_EQ(worker, outer_worker);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 12);
}

TEST(ThreadPool, ThreadCountFromTheEnvironment) {
  const char* saved = std::getenv("QKV_NUM_THREADS");
  std::string keep = saved ? saved : "";
  setenv("QKV_NUM_THREADS", "3", 1);
  EXPECT_EQ(default_thread_count(), 3);
  setenv("QKV_NUM_THREADS", "zero", 1);
  EXPECT_THROW(default_thread_count(), Error);
  setenv("QKV_NUM_THREADS", "0", 1);
  EXPECT_THROW(default_thread_count(), Error);
  unsetenv("QKV_NUM_THREADS");
  EXPECT_EQ(default_thread_count(), hardware_cores());
  if (saved) setenv("QKV_NUM_THREADS", keep.c_str(), 1);
  EXPECT_GE(hardware_cores(), 1);
}

TEST(ThreadPool, RejectsABadCountAndWarnsAboveTheCores) {
  EXPECT_THROW(ThreadPool(0), Error);
  testing::internal::CaptureStderr();
  { ThreadPool pool(hardware_cores() + 1); }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
}

}  // namespace
}  // namespace qkv
