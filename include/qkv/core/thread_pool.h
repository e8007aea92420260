// qkv/core/thread_pool.h - the one way qkv runs things in parallel.
//
//   ThreadPool pool(2);
//   pool.parallel_for(num_tasks, [&](int64_t task, int worker) { ... });
//
// A persistent pool of num_threads - 1 threads plus the calling thread. parallel_for hands out
// tasks 0, 1, 2, ... in increasing order to whichever thread is free (so put the longest tasks
// first) and returns when all have run. Idle threads look for the next job for up to about 100
// microseconds (a model's step hands out jobs back to back), then sleep on a condition variable,
// so a pool between calls costs nothing and never fights the BLAS or another process for the
// cores. Results must not depend on which worker ran a task: `worker` is only for indexing
// per-worker scratch memory.
//
// The thread count comes from, in order: the constructor argument (the command line's
// --threads), the environment variable QKV_NUM_THREADS, the number of cores this process may run
// on. More threads than cores is allowed but warned about on stderr (they would time-share cores).
//
// Nesting. A thread knows, pool by pool, which worker it is: the (pool, worker) pairs it is running
// tasks for right now. A parallel_for on a pool this thread is already a worker of (anywhere up
// its chain: A -> B -> A on one thread included) runs its tasks inline with that pool's worker
// index, adding no parallelism. Any other caller - a plain thread, or a worker of another pool -
// is an outside caller: it waits for the pool's previous outside call to end, hands the tasks to
// the pool's threads and takes a share itself as worker 0 of this pool. So `worker` always
// indexes this pool's per-worker memory, whatever pool the caller came from. One case cannot
// work and throws qkv::Error instead of deadlocking: a thread of pool B calling pool A while the
// call on B was made from inside a task of A (A is busy waiting for that very B call).
// If a task throws, the remaining tasks are skipped and the first exception is rethrown by
// parallel_for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace qkv {

int hardware_cores();         // CPUs this process may run on (sched affinity), at least 1
int default_thread_count();   // QKV_NUM_THREADS if set (validated), else hardware_cores()

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads = default_thread_count());  // >= 1; warns above the cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task, worker) for every task in [0, num_tasks); worker in [0, num_threads()), this
  // pool's index of the thread that runs the task (see Nesting above).
  template <typename Fn>
  void parallel_for(int64_t num_tasks, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(num_tasks, [](void* f, int64_t task, int worker) { (*static_cast<F*>(f))(task, worker); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Runs fn(begin, end, worker) over pieces of [0, items), each `grain` items (the last shorter),
  // for a stream one pass reads in order (a decoding step's weights): each thread walks one
  // contiguous run of the pieces forward, so its reads stay one stream the prefetchers follow; a
  // thread done with its run takes pieces from the back of the run with the most left, so a
  // thread that started late or ran slow delays the call by about one piece, not by its run's
  // tail. Claims are a quarter of what is left (at least one piece): a few per run. Every item is
  // in exactly one call of fn; which thread runs it, and where the pieces split, must not change
  // fn's results.
  template <typename Fn>
  void parallel_runs(int64_t items, int64_t grain, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    runs(items, grain,
         [](void* f, int64_t begin, int64_t end, int worker) { (*static_cast<F*>(f))(begin, end, worker); },
         const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Per-worker scratch: at least `floats` floats, 64-byte aligned, uninitialised, kept and reused
  // between calls (it only grows). Ask for it at the start of a task, never inside a hot loop;
  // the pointer stays valid until the same worker asks for more (a nested parallel_for on this
  // pool runs on the same worker, so a task that nests asks after the nested call returns).
  // `worker` is the index parallel_for gave, in [0, num_threads()).
  float* scratch(int worker, size_t floats);

 private:
  using TaskFn = void (*)(void*, int64_t, int);
  struct Frame;  // one (pool, worker) pair a thread is running tasks for (thread_pool.cc)
  static thread_local const Frame* innermost_;  // this thread's frames, innermost first

  using RangeFn = void (*)(void*, int64_t, int64_t, int);
  void run(int64_t num_tasks, TaskFn fn, void* ctx);
  void runs(int64_t items, int64_t grain, RangeFn fn, void* ctx);
  void run_inline(int64_t num_tasks, TaskFn fn, void* ctx, int worker);
  void worker_loop(int worker);
  void drain(int worker, const Frame* parent, bool parent_elsewhere);  // takes the current job's tasks

  struct alignas(64) Scratch {
    std::unique_ptr<float[]> owner;  // over-allocated by 16 floats for alignment
    float* data = nullptr;
    size_t capacity = 0;
  };

  int num_threads_;
  std::vector<std::thread> threads_;
  std::vector<Scratch> scratch_;

  std::mutex call_mutex_;  // one parallel_for at a time from outside the pool (its worker 0 is the caller)
  std::mutex mutex_;
  std::condition_variable wake_;  // workers wait for a new job
  std::condition_variable done_;  // the caller waits for the job's end
  // Handing a job over takes no lock: the caller writes the job's fields, then bumps generation_;
  // workers spinning on it start at once, each decrements busy_ when out of the job, and the caller
  // spins on busy_. The mutex and condition variables serve only threads that stopped spinning.
  alignas(64) std::atomic<uint64_t> generation_{0};  // bumped per job
  std::atomic<bool> stopping_{false};
  std::atomic<int> sleepers_{0};            // workers asleep on wake_ (or about to be)
  alignas(64) std::atomic<int> busy_{0};    // workers still inside the current job
  std::atomic<bool> caller_asleep_{false};  // the caller waits on done_ (or is about to)

  // The current job (written before generation_ is bumped, read after).
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  const Frame* caller_frame_ = nullptr;  // the calling thread's innermost frame (or none)
  ThreadPool* caller_pin_ = nullptr;      // the calling thread's pinned default pool (or none)
  int64_t num_tasks_ = 0;
  alignas(64) std::atomic<int64_t> next_task_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

// The process-wide pool the kernels use when not given one. Created on first use with
// default_thread_count() threads, or with the count given to set_default_thread_count. On a thread
// that holds a DefaultPoolPin (or works on a job of one that does), the pinned pool.
ThreadPool& default_pool();
// Replaces the default pool (e.g. from --threads) without waiting. The old pool lives on while a
// DefaultPoolPin holds it; unpinned, it must not be running a parallel_for (the command line sets
// its threads before any work).
void set_default_thread_count(int num_threads);
// The process-wide default pool's thread count (what set_default_thread_count last set), pinned or not.
int default_pool_threads();

// Holds the default pool of the moment for a call that may run while another thread replaces it
// (the Python bindings: set_num_threads from any thread, a streamed generate's callback included).
// While the pin lives, default_pool() on this thread, and on the pool threads running its jobs,
// is the pinned pool; the last pin of a replaced pool destroys it.
//
//   { DefaultPoolPin pin; model.forward(...); }   // one pool from the call's start to its end
class DefaultPoolPin {
 public:
  DefaultPoolPin();
  ~DefaultPoolPin();
  DefaultPoolPin(const DefaultPoolPin&) = delete;
  DefaultPoolPin& operator=(const DefaultPoolPin&) = delete;

 private:
  std::shared_ptr<ThreadPool> pool_;
  ThreadPool* saved_;  // the thread's pin before this one (pins nest)
};

}  // namespace qkv
