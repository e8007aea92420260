// A ring step's overlap of computation and transfers (ring_step.h).
#include "mpi/ring_step.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

namespace qkv::mpi {
namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void run_step(const Communicator& comm, std::vector<MPI_Request>& requests, const std::function<void()>& compute,
              const std::string& what, RingTimes& times) {
  const Clock::time_point t0 = Clock::now();
  if (requests.empty()) {  // nothing in flight: no second thread
    compute();
    times.compute += seconds(Clock::now() - t0);
    return;
  }
  std::atomic<bool> computed{false};
  std::exception_ptr error;
  Clock::time_point compute_end{};
  std::thread worker([&] {
    try {
      compute();
    } catch (...) {
      error = std::current_exception();
    }
    compute_end = Clock::now();
    computed.store(true, std::memory_order_release);
  });
  // MPI moves large messages only inside MPI calls (no progress thread), so poll while the
  // computation runs: every 200 microseconds, a negligible share of a core.
  while (!comm.test_all(requests)) {
    if (computed.load(std::memory_order_acquire) && seconds(Clock::now() - compute_end) > comm.timeout_seconds()) {
      worker.join();
      comm.abort(str(what, ": no answer after ", comm.timeout_seconds(), " s (QKV_MPI_TIMEOUT): a rank died or stalled"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const Clock::time_point transfer_end = Clock::now();
  worker.join();
  times.compute += seconds(compute_end - t0);
  times.comm += seconds(transfer_end - t0);
  if (transfer_end > compute_end) times.wait += seconds(transfer_end - compute_end);
  if (error) std::rethrow_exception(error);
}

}  // namespace qkv::mpi
