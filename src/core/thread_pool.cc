// The persistent thread pool. See include/qkv/core/thread_pool.h.
#include "qkv/core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

std::mutex g_default_mutex;
std::shared_ptr<ThreadPool> g_default_pool;
// The default pool this thread's calls use while a DefaultPoolPin lives on it, or on the thread
// whose job this pool thread is running (null: the process-wide one).
thread_local ThreadPool* t_pinned_default = nullptr;

}  // namespace

// A thread's identity, pool by pool. Every thread running tasks of a pool - the caller as worker 0,
// a pool thread as its own index, an inline nested call - pushes one frame for the time it runs
// them; frames live on that thread's stack and chain outwards through `parent`. A pool thread's
// chain continues into the frames of the thread that handed it the job (parent_elsewhere): those
// are not this thread's identities, they only tell that the job was started from inside a task of
// the pools they name.
struct ThreadPool::Frame {
  // Pushed on this thread's chain for the frame's lifetime.
  Frame(const ThreadPool* pool_, int worker_, const Frame* parent_, bool parent_elsewhere_)
      : pool(pool_), worker(worker_), parent(parent_), parent_elsewhere(parent_elsewhere_), saved(innermost_) {
    innermost_ = this;
  }
  ~Frame() { innermost_ = saved; }
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;

  const ThreadPool* pool;
  int worker;
  const Frame* parent;
  bool parent_elsewhere;  // `parent` is a frame of another thread (the job's caller)
  const Frame* saved;     // this thread's innermost frame before this one
};

thread_local const ThreadPool::Frame* ThreadPool::innermost_ = nullptr;

int hardware_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

int default_thread_count() {
  const char* env = std::getenv("QKV_NUM_THREADS");
  if (env == nullptr || *env == '\0') return hardware_cores();
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  const int max = limits().max_threads;  // as --threads: 8 per core, at least 64
  QKV_CHECK(end != env && *end == '\0' && n >= 1 && n <= max, "QKV_NUM_THREADS must be a whole number from 1 to ", max,
            " (8 threads per core, at least 64), got '", env, "'");
  return static_cast<int>(n);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  QKV_CHECK(num_threads >= 1 && num_threads <= 1024, "ThreadPool: the thread count must be from 1 to ",
            "1024, got ", num_threads);
  const int cores = hardware_cores();
  if (num_threads > cores)
    std::cerr << "qkv: warning: " << num_threads << " threads requested but this process may run on "
              << cores << " core" << (cores == 1 ? "" : "s") << "; threads beyond that time-share cores "
              << "and usually run slower\n";
  scratch_.resize(static_cast<size_t>(num_threads));
  threads_.reserve(static_cast<size_t>(num_threads - 1));
  for (int w = 1; w < num_threads; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

float* ThreadPool::scratch(int worker, size_t floats) {
  Scratch& s = scratch_[static_cast<size_t>(worker)];
  if (s.capacity < floats) {
    s.owner.reset(new float[floats + 16]);
    auto addr = reinterpret_cast<uintptr_t>(s.owner.get());
    s.data = s.owner.get() + ((64 - addr % 64) % 64) / sizeof(float);
    s.capacity = floats;
  }
  return s.data;
}

void ThreadPool::drain(int worker, const Frame* parent, bool parent_elsewhere) {
  const Frame frame(this, worker, parent, parent_elsewhere);
  for (;;) {
    if (failed_.load(std::memory_order_relaxed)) break;
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) break;
    try {
      fn_(ctx_, task, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failed_.exchange(true)) error_ = std::current_exception();
    }
  }
}

namespace {
// How long a worker keeps looking for the next job, and the caller for the job's end, before
// sleeping on the condition variable: a model's step hands out hundreds of short jobs back to back
// (a decoded token: five products per layer, each a few tens of microseconds, with the layer's
// norms, rotations and attention between them on the calling thread), and waking a sleeping thread
// costs a futex call and a reschedule each time. Counted in time, not in pause instructions: a
// pause takes ~20 ns on Zen 5 and longer on Intel cores; 2,000 of them (this spin before) were 42 us on Zen 5,
// and a Qwen3-0.6B-shaped decoding step put its pool thread to sleep ~28 times a token.
constexpr auto kSpinTime = std::chrono::microseconds(100);
inline void pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
// Spins until done() or kSpinTime has passed; returns done().
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      pause();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}
}  // namespace

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    const bool job = spin_until([&] {
      return generation_.load(std::memory_order_acquire) != seen || stopping_.load(std::memory_order_relaxed);
    });
    if (!job) {
      // Asleep: counted first, then the job looked for under the mutex. run() bumps the generation
      // first, then looks for sleepers: whichever comes second sees the other's change.
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return stopping_.load() || generation_.load() != seen; });
      sleepers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen = generation_.load(std::memory_order_acquire);  // the job's fields were written before it
    t_pinned_default = caller_pin_;  // the caller's pin holds that pool until the caller returns
    drain(worker, caller_frame_, true);
    t_pinned_default = nullptr;
    // The last worker out wakes the caller if it went to sleep (the same two-sided order as above).
    if (busy_.fetch_sub(1) == 1 && caller_asleep_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run_inline(int64_t num_tasks, TaskFn fn, void* ctx, int worker) {
  const Frame frame(this, worker, innermost_, false);
  for (int64_t task = 0; task < num_tasks; ++task) fn(ctx, task, worker);
}

void ThreadPool::run(int64_t num_tasks, TaskFn fn, void* ctx) {
  if (num_tasks <= 0) return;
  // Is this thread already a worker of this pool? Its own frames say so; past the first frame
  // borrowed from another thread, a frame of this pool means the call that started this thread's
  // job came from inside one of this pool's tasks.
  bool own = true;
  for (const Frame* f = innermost_; f != nullptr; f = f->parent) {
    if (f->pool == this) {
      QKV_CHECK(own, "ThreadPool: parallel_for called on a ", num_threads_, "-thread pool from a thread of another ",
                "pool whose job was started inside a task of this one: this pool is busy waiting for that job ",
                "(a deadlock); call the inner pool from the outer pool's worker, or use one pool");
      return run_inline(num_tasks, fn, ctx, f->worker);  // nested: inline, on this thread's worker index
    }
    own = own && !f->parent_elsewhere;
  }
  // An outside caller (possibly a worker of another pool): worker 0 of this pool, one at a time.
  std::lock_guard<std::mutex> call(call_mutex_);
  if (num_threads_ == 1 || num_tasks == 1) return run_inline(num_tasks, fn, ctx, 0);
  // The job's fields, then the generation that publishes them: a spinning worker sees it at once; a
  // sleeping one (the pool idle a while) is woken.
  fn_ = fn;
  ctx_ = ctx;
  caller_frame_ = innermost_;
  caller_pin_ = t_pinned_default;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  busy_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a worker between counting itself and waiting
    wake_.notify_all();
  }
  drain(0, innermost_, false);
  if (!spin_until([&] { return busy_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mutex_);
    // An exchange, not a store: a read-modify-write is ordered before the load of busy_ that
    // follows on every machine and emulator. qemu-user, running the aarch64 build on x86, let a
    // store-release pass a later load-acquire: the caller read busy_ before its mark was seen,
    // the last worker out read the mark before it was written, and both slept.
    caller_asleep_.exchange(true);
    done_.wait(lock, [&] { return busy_.load() == 0; });
    caller_asleep_.store(false);
  }
  // every worker is out of the job: its error (written before its busy_ decrement) is seen here
  std::exception_ptr error = std::move(error_);
  error_ = nullptr;
  if (error) std::rethrow_exception(error);
}

namespace {
// One run of pieces [front, back): front << 32 | back, claimed from either end by one CAS.
struct alignas(64) PieceRun {
  std::atomic<uint64_t> span{0};
};
constexpr uint64_t kLow32 = 0xFFFFFFFFu;

// Takes a quarter of what is left (at least one piece) from the run's front (its owner) or back (a
// thread done with its own run); false when the run is empty.
bool claim(PieceRun& run, bool from_front, int64_t& first, int64_t& last) {
  uint64_t span = run.span.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t front = static_cast<int64_t>(span >> 32), back = static_cast<int64_t>(span & kLow32);
    if (front >= back) return false;
    const int64_t take = std::max<int64_t>(1, (back - front) / 4);
    first = from_front ? front : back - take;
    last = first + take;
    const uint64_t next = from_front ? (static_cast<uint64_t>(last) << 32 | static_cast<uint64_t>(back))
                                     : (static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(first));
    if (run.span.compare_exchange_weak(span, next, std::memory_order_relaxed)) return true;
  }
}
}  // namespace

void ThreadPool::runs(int64_t items, int64_t grain, RangeFn fn, void* ctx) {
  if (items <= 0) return;
  QKV_CHECK(grain >= 1, "ThreadPool::parallel_runs: the grain must be at least 1 item, got ", grain);
  const int64_t pieces = (items + grain - 1) / grain;
  QKV_CHECK(pieces <= static_cast<int64_t>(kLow32), "ThreadPool::parallel_runs: ", pieces,
            " pieces; at most 2^32 - 1 (a larger grain)");
  const int64_t count = std::min<int64_t>(num_threads_, pieces);
  if (count == 1) return parallel_for(1, [&](int64_t, int worker) { fn(ctx, 0, items, worker); });
  PieceRun local[16];  // a 2-16-thread pool's runs on the stack; larger pools' on the heap
  std::unique_ptr<PieceRun[]> heap;
  PieceRun* state = local;
  if (count > 16) {
    heap.reset(new PieceRun[static_cast<size_t>(count)]);
    state = heap.get();
  }
  for (int64_t r = 0; r < count; ++r) {
    const auto front = static_cast<uint64_t>(r * pieces / count), back = static_cast<uint64_t>((r + 1) * pieces / count);
    state[r].span.store(front << 32 | back, std::memory_order_relaxed);
  }
  auto pieces_to_items = [&](int64_t first, int64_t last, int worker) {
    fn(ctx, first * grain, std::min(items, last * grain), worker);
  };
  parallel_for(count, [&](int64_t own, int worker) {
    int64_t first = 0, last = 0;
    while (claim(state[own], true, first, last)) pieces_to_items(first, last, worker);
    for (;;) {  // the run with the most left, from its back
      int64_t most = 0, victim = -1;
      for (int64_t r = 0; r < count; ++r) {
        const uint64_t span = state[r].span.load(std::memory_order_relaxed);
        const int64_t left = static_cast<int64_t>(span & kLow32) - static_cast<int64_t>(span >> 32);
        if (left > most) {
          most = left;
          victim = r;
        }
      }
      if (victim < 0) return;
      if (claim(state[victim], false, first, last)) pieces_to_items(first, last, worker);
    }
  });
}

namespace {
// The process-wide default pool, made on first use.
std::shared_ptr<ThreadPool> process_default_pool() {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  if (!g_default_pool) g_default_pool = std::make_shared<ThreadPool>(default_thread_count());
  return g_default_pool;
}
}  // namespace

ThreadPool& default_pool() {
  if (t_pinned_default != nullptr) return *t_pinned_default;
  return *process_default_pool();  // the global keeps it alive (replaced only by set_default_thread_count)
}

void set_default_thread_count(int num_threads) {
  std::shared_ptr<ThreadPool> old;  // destroyed after the lock, when no pin holds it
  std::lock_guard<std::mutex> lock(g_default_mutex);
  if (g_default_pool && g_default_pool->num_threads() == num_threads) return;
  auto fresh = std::make_shared<ThreadPool>(num_threads);  // a bad count throws before any change
  old = std::exchange(g_default_pool, std::move(fresh));
}

int default_pool_threads() { return process_default_pool()->num_threads(); }

DefaultPoolPin::DefaultPoolPin() : saved_(t_pinned_default) {
  if (saved_ != nullptr) return;  // nested: the outer pin's pool stays
  pool_ = process_default_pool();
  t_pinned_default = pool_.get();
}

DefaultPoolPin::~DefaultPoolPin() { t_pinned_default = saved_; }

}  // namespace qkv
