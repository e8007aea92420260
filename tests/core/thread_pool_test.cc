// The thread pool: every task runs exactly once, workers index scratch safely, exceptions come
// back to the caller, nesting runs inline, nested pools of different sizes each give their own
// worker indices, and the thread count comes from where it should.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"
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
  // Threads are created once, not per call: across many calls the tasks run on at most
  // num_threads distinct threads (the caller and the pool's own).
  ThreadPool pool(3);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 2000; ++call)
    pool.parallel_for(4, [&](int64_t task, int) {
      total.fetch_add(task + 1);
      std::lock_guard<std::mutex> lock(mutex);
      seen.insert(std::this_thread::get_id());
    });
  EXPECT_EQ(total.load(), 2000 * 10);
  EXPECT_GE(seen.size(), 1u);
  EXPECT_LE(seen.size(), static_cast<size_t>(pool.num_threads()));
  EXPECT_EQ(seen.count(std::this_thread::get_id()), 1u) << "the caller takes a share as worker 0";
}

// Two tasks that each wait for the other to start: they finish only if both threads run them at
// once, so the pool's thread must take up the job however long it was idle (spinning, asleep, or
// in between); a lost wake-up fails here after ten seconds instead of hanging.
// fn() run on another thread; a call still not back after 30 seconds (a thread asleep that nobody
// wakes) ends the test process with a message instead of hanging until ctest's timeout.
template <typename Fn>
void ReturnsWithinSeconds(const std::string& what, Fn&& fn) {
  std::promise<void> done;
  std::thread caller([&] {
    fn();
    done.set_value();
  });
  if (done.get_future().wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::cerr << "ThreadPool: " << what << " has not returned after 30 s: a lost wake-up\n";
    std::abort();
  }
  caller.join();
}

bool RanTogether(ThreadPool& pool) {
  std::atomic<int> started{0};
  std::atomic<bool> alone{false};
  pool.parallel_for(2, [&](int64_t, int) {
    started.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2)
      if (std::chrono::steady_clock::now() > until) {
        alone = true;
        return;
      }
  });
  return !alone.load();
}

TEST(ThreadPool, AnIdleThreadTakesUpTheNextJobHoweverLongItWaited) {
  ThreadPool pool(2);
  for (int round = 0; round < 3; ++round)
    for (int micros : {0, 1, 20, 100, 1000, 20000}) {  // from still spinning to long asleep
      std::this_thread::sleep_for(std::chrono::microseconds(micros));
      bool together = false;
      ReturnsWithinSeconds("a job after " + std::to_string(micros) + " us idle",
                           [&] { together = RanTogether(pool); });
      ASSERT_TRUE(together) << "after " << micros << " us idle, round " << round;
    }
}

TEST(ThreadPool, TheCallerWaitsForASlowWorkerAsleepOrSpinning) {
  // The pool's thread runs one slow task while the caller has nothing left: the caller looks for
  // the job's end, then sleeps, and must be woken when it ends; every task has run by then.
  ThreadPool pool(2);
  for (int micros : {0, 5, 50, 500, 5000, 30000}) {
    std::atomic<int> ran{0};
    std::atomic<bool> slow_taken{false};
    ReturnsWithinSeconds("a job with a " + std::to_string(micros) + " us task", [&] {
      pool.parallel_for(2, [&](int64_t, int worker) {
        if (worker != 0 && !slow_taken.exchange(true)) std::this_thread::sleep_for(std::chrono::microseconds(micros));
        ran.fetch_add(1);
      });
    });
    EXPECT_EQ(ran.load(), 2) << micros << " us";
  }
}

TEST(ThreadPool, ManyJobsEndingAsTheCallerGoesToSleepEachWakeIt) {
  // The last worker out and a caller going to sleep meet in a window of a few instructions: the
  // caller marks itself asleep, then looks at the count of busy workers; the worker counts itself
  // out, then looks for a sleeping caller. Each must see the other's write (a store passing the
  // load after it leaves both asleep; qemu-user running the aarch64 build on x86 did that). Tasks
  // of 0 to 300 us on the pool's thread sweep the moment the job ends across the caller's spin.
  ThreadPool pool(2);
  std::atomic<int64_t> ran{0};
  constexpr int kJobs = 6000;
  ReturnsWithinSeconds("one of " + std::to_string(kJobs) + " short jobs", [&] {
    for (int job = 0; job < kJobs; ++job) {
      const auto micros = std::chrono::microseconds(job % 301);
      std::atomic<int> started{0};
      pool.parallel_for(2, [&](int64_t, int worker) {
        started.fetch_add(1);  // one task each: the caller's ends at once, the pool thread's after `micros`
        const auto start = std::chrono::steady_clock::now();
        while (started.load() < 2 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
        }
        while (worker != 0 && std::chrono::steady_clock::now() - start < micros) {
        }
        ran.fetch_add(1);
      });
    }
  });
  EXPECT_EQ(ran.load(), 2 * kJobs);
}

TEST(ThreadPool, AThreadKeepsLookingForTheNextJobThroughAStepsGaps) {
  // A decoding step's jobs come 10-60 us apart (the layer's norms, rotations and attention on the
  // calling thread between its products). The pool's thread must still be looking when the next
  // one comes, not asleep on the condition variable (a voluntary context switch of that thread,
  // then a futex wake). Jobs 70 us apart, each run by both threads at once; a job is judged when
  // the time from the pool thread's end of the last job to this job's hand-out was under 90 us
  // (other processes on the cores, as under ctest -j, stall the calling thread past any spin now
  // and then: those jobs say nothing), and the pool thread's own voluntary switches in between
  // (RUSAGE_THREAD) say whether it slept. A spin of 2,000 pauses (42 us on Zen 5) slept before
  // almost every judged job.
  using Clock = std::chrono::steady_clock;
  ThreadPool pool(2);
  auto voluntary_switches = [] {
    rusage usage{};
    getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_nvcsw;
  };
  constexpr int kJobs = 1000;
  int judged = 0, slept = 0;
  for (int attempt = 0; attempt < 5 && judged < kJobs / 2; ++attempt) {
    Clock::time_point last_end{};  // the pool thread's end of the last job
    long last_switches = -1;       // its voluntary switches then
    for (int job = 0; job < kJobs; ++job) {
      const auto start = Clock::now();
      while (Clock::now() - start < std::chrono::microseconds(70)) {
      }
      const Clock::time_point posted = Clock::now();
      std::atomic<int> started{0};
      long switches_at_start = -1, switches_at_end = -1;
      Clock::time_point end{};
      pool.parallel_for(2, [&](int64_t, int worker) {
        if (worker != 0) switches_at_start = voluntary_switches();
        started.fetch_add(1);
        const auto until = Clock::now() + std::chrono::seconds(10);
        while (started.load() < 2 && Clock::now() < until) {
        }
        if (worker != 0) {
          switches_at_end = voluntary_switches();
          end = Clock::now();
        }
      });
      if (switches_at_start >= 0 && last_switches >= 0 && posted - last_end < std::chrono::microseconds(90)) {
        ++judged;
        slept += switches_at_start > last_switches;
      }
      last_switches = switches_at_end;
      last_end = end;
    }
  }
  if (judged < 100) GTEST_SKIP() << "only " << judged << " jobs came within 90 us of the last: the cores are too busy";
  EXPECT_LE(slept, judged / 4) << "the pool's thread slept before " << slept << " of " << judged
                               << " jobs handed out within 90 us of its last";
}

// parallel_runs: every item in exactly one call, each call whole grains from a grain's start (the
// last grain of the items shorter), on every thread count.
TEST(ThreadPool, ParallelRunsCoverEveryItemOnceInWholeGrains) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t items : {0, 1, 7, 16, 17, 1000, 4099})
      for (int64_t grain : {1, 16, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(items));
        std::atomic<int> calls{0};
        pool.parallel_runs(items, grain, [&](int64_t begin, int64_t end, int worker) {
          calls.fetch_add(1);
          ASSERT_GE(worker, 0);
          ASSERT_LT(worker, threads);
          ASSERT_LT(begin, end);
          ASSERT_EQ(begin % grain, 0) << "begin " << begin;
          ASSERT_TRUE(end == items || end % grain == 0) << "end " << end;
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < items; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " threads, " << items << " items, grain "
                                                              << grain << ": item " << i;
        if (items == 0) {
          EXPECT_EQ(calls.load(), 0);
        }
      }
  }
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_runs(10, 0, [](int64_t, int64_t, int) {}), Error);
}

// A thread done with its own run takes the tail of another's: the thread that runs item 0 holds its
// first piece until item 31, the end of the same run, has been run, which only the other thread can
// do, from the run's back (without stealing this would wait for ever: 10 s, then fail).
TEST(ThreadPool, AThreadDoneWithItsRunTakesTheTailOfASlowOne) {
  ThreadPool pool(2);
  const int64_t items = 64;  // two runs: [0, 32) and [32, 64)
  std::vector<std::atomic<int>> by(static_cast<size_t>(items));
  for (auto& b : by) b.store(-1);
  bool waited_out = false;
  pool.parallel_runs(items, 1, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t i = begin; i < end; ++i) by[static_cast<size_t>(i)].store(worker);
    if (begin == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (by[31].load() < 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      waited_out = by[31].load() < 0;
    }
  });
  EXPECT_FALSE(waited_out) << "nobody took item 31 from the back of the slow thread's run";
  EXPECT_NE(by[31].load(), by[0].load());
  for (int64_t i = 0; i < items; ++i) EXPECT_GE(by[static_cast<size_t>(i)].load(), 0) << "item " << i;
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

// Calls parallel_for on `inner` from inside the tasks of `outer`, each inner task recording its
// worker in an array sized by the inner pool and writing its scratch: a worker index of the wrong
// pool lands outside both. The outer pool's first num_threads tasks wait for each other, so they
// run on num_threads different threads: every outer worker index calls in, not only the caller's.
void ExpectInnerWorkersInRange(ThreadPool& outer, ThreadPool& inner) {
  const size_t inner_threads = static_cast<size_t>(inner.num_threads());
  std::vector<std::atomic<int64_t>> tasks_per_worker(inner_threads);
  std::atomic<int64_t> inner_tasks{0};
  std::atomic<int> started{0};
  std::vector<std::atomic<int>> outer_workers_seen(static_cast<size_t>(outer.num_threads()));
  outer.parallel_for(16, [&](int64_t task, int outer_worker) {
    ASSERT_LT(outer_worker, outer.num_threads());
    outer_workers_seen.at(static_cast<size_t>(outer_worker)).store(1);
    if (task < outer.num_threads()) {
      started.fetch_add(1);
      while (started.load() < outer.num_threads()) std::this_thread::yield();
    }
    inner.parallel_for(8, [&](int64_t, int worker) {  // (the value written is the outer task)
      ASSERT_GE(worker, 0);
      ASSERT_LT(worker, inner.num_threads()) << "a worker index of the outer (" << outer.num_threads()
                                             << "-thread) pool";
      tasks_per_worker.at(static_cast<size_t>(worker)).fetch_add(1);
      float* s = inner.scratch(worker, 256);
      for (int i = 0; i < 256; ++i) s[i] = static_cast<float>(task);
      for (int i = 0; i < 256; ++i) ASSERT_EQ(s[i], static_cast<float>(task)) << "another thread wrote here";
      inner_tasks.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_tasks.load(), 16 * 8);
  for (auto& seen : outer_workers_seen) EXPECT_EQ(seen.load(), 1) << "an outer worker ran no task";
  int64_t recorded = 0;
  for (auto& n : tasks_per_worker) recorded += n.load();
  EXPECT_EQ(recorded, 16 * 8);
}

TEST(ThreadPool, NestedPoolsOfDifferentSizesGiveTheInnerPoolsWorkers) {
  ThreadPool four(4), two(2), one(1);
  ExpectInnerWorkersInRange(four, two);
  ExpectInnerWorkersInRange(four, one);
  ExpectInnerWorkersInRange(two, four);
  ExpectInnerWorkersInRange(one, four);
  ExpectInnerWorkersInRange(two, one);
}

TEST(ThreadPool, ReenteringAPoolOnTheSameThreadRunsInlineOnItsWorker) {
  // A -> B -> A -> B on one thread: B has one thread, so its tasks run on the thread that called
  // it, which is a worker of A (inline, A's index) and then of B again (inline, not waiting for
  // B's call lock, which this very thread holds).
  ThreadPool a(4), b(1);
  std::atomic<int> innermost{0};
  a.parallel_for(8, [&](int64_t, int a_worker) {
    b.parallel_for(2, [&](int64_t, int b_worker) {
      EXPECT_EQ(b_worker, 0);
      a.parallel_for(3, [&](int64_t, int worker) {
        EXPECT_EQ(worker, a_worker) << "inline, on this thread's index in A";
        b.parallel_for(2, [&](int64_t, int worker_b) {
          EXPECT_EQ(worker_b, b_worker);
          float* s = a.scratch(a_worker, 64);
          s[0] = 1.0f;
          innermost.fetch_add(1);
        });
      });
    });
  });
  EXPECT_EQ(innermost.load(), 8 * 2 * 3 * 2);
}

TEST(ThreadPool, ReenteringABusyPoolFromAnotherPoolsThreadThrowsInsteadOfDeadlocking) {
  // A's task calls B; B's two tasks wait for each other, so one runs on the calling thread (a
  // worker of A: re-entering A runs inline) and one on B's own thread, which is not A's worker and
  // finds A busy waiting for this B call: that one must throw, not hang.
  ThreadPool a(2), b(2);
  std::atomic<int> inline_ok{0}, threw{0};
  a.parallel_for(1, [&](int64_t, int a_worker) {
    const std::thread::id a_thread = std::this_thread::get_id();
    std::atomic<int> started{0};
    b.parallel_for(2, [&](int64_t, int) {
      started.fetch_add(1);
      while (started.load() < 2) std::this_thread::yield();
      try {
        a.parallel_for(2, [&](int64_t, int worker) { EXPECT_EQ(worker, a_worker); });
        EXPECT_EQ(std::this_thread::get_id(), a_thread);
        inline_ok.fetch_add(1);
      } catch (const Error& e) {
        EXPECT_NE(std::this_thread::get_id(), a_thread);
        EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
        threw.fetch_add(1);
      }
    });
  });
  EXPECT_EQ(inline_ok.load(), 1);
  EXPECT_EQ(threw.load(), 1);
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
  // the cap of --threads holds for the variable too (it let 1,000 threads start where --threads stops at 64)
  setenv("QKV_NUM_THREADS", std::to_string(limits().max_threads).c_str(), 1);
  EXPECT_EQ(default_thread_count(), limits().max_threads);
  setenv("QKV_NUM_THREADS", std::to_string(limits().max_threads + 1).c_str(), 1);
  try {
    default_thread_count();
    ADD_FAILURE() << "QKV_NUM_THREADS above the cap was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("from 1 to " + std::to_string(limits().max_threads)), std::string::npos)
        << e.what();
  }
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

// A pinned call keeps the default pool it started with - on its own thread and on the pool threads
// running its jobs - while another thread replaces the default, which does not wait for it; the old
// pool lives until the pin ends. (The Python bindings pin every call; set_num_threads used to wait
// for running calls, and deadlocked when called from inside one.)
TEST(ThreadPool, APinnedCallKeepsItsDefaultPoolWhileTheDefaultIsReplaced) {
  set_default_thread_count(2);
  std::promise<void> pinned, replaced;
  std::shared_future<void> replaced_seen = replaced.get_future().share();
  std::vector<int> counts;  // default_pool()'s threads inside the pinned call, before and after
  std::atomic<int> inner_other{0};
  std::thread call([&] {
    DefaultPoolPin pin;
    ThreadPool& mine = default_pool();
    pinned.set_value();
    replaced_seen.wait();
    counts.push_back(default_pool().num_threads());
    std::atomic<bool> second_started{false};
    mine.parallel_for(2, [&](int64_t task, int) {  // task 1 runs on the pool's thread: task 0 waits for it
      if (task == 1) second_started = true;
      while (!second_started) std::this_thread::yield();
      if (&default_pool() != &mine) inner_other.fetch_add(1);
    });
    { DefaultPoolPin nested; counts.push_back(default_pool().num_threads()); }
    counts.push_back(default_pool().num_threads());
  });
  pinned.get_future().wait();
  set_default_thread_count(3);  // returns at once: the pinned call is waiting for us
  EXPECT_EQ(default_pool().num_threads(), 3);
  EXPECT_EQ(default_pool_threads(), 3);
  replaced.set_value();
  call.join();
  EXPECT_EQ(counts, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(inner_other.load(), 0);
  {
    DefaultPoolPin pin;  // a new call pins the new pool
    EXPECT_EQ(default_pool().num_threads(), 3);
    set_default_thread_count(1);
    EXPECT_EQ(default_pool().num_threads(), 3);
    EXPECT_EQ(default_pool_threads(), 1);
  }
  EXPECT_EQ(default_pool().num_threads(), 1);
  EXPECT_THROW(set_default_thread_count(0), Error);  // refused, the default kept
  EXPECT_EQ(default_pool().num_threads(), 1);
  set_default_thread_count(default_thread_count());
}

}  // namespace
}  // namespace qkv
