// MPI start-up, bounded waits and the configuration check (qkv/mpi/communicator.h).
#include "qkv/mpi/communicator.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

namespace qkv::mpi {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One string from rank `root` to every rank (its length, then its bytes), bounded.
std::string broadcast_string(const Communicator& comm, const std::string& text, int root, const std::string& what) {
  uint64_t length = comm.rank() == root ? text.size() : 0;
  std::vector<MPI_Request> r(1);
  MPI_Ibcast(&length, 1, MPI_UINT64_T, root, comm.comm(), &r[0]);
  comm.wait_all(r, what);
  std::string out = comm.rank() == root ? text : std::string(length, '\0');
  MPI_Ibcast(out.data(), static_cast<int>(length), MPI_CHAR, root, comm.comm(), &r[0]);
  comm.wait_all(r, what);
  return out;
}

}  // namespace

Session::Session(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (provided < MPI_THREAD_FUNNELED) {
    std::cerr << "qkv: error: this MPI gives thread level " << provided << ", qkv needs MPI_THREAD_FUNNELED\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

Session::~Session() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

double default_timeout_seconds() {
  if (const char* s = std::getenv("QKV_MPI_TIMEOUT"); s && *s) {
    char* end = nullptr;
    const double t = std::strtod(s, &end);
    QKV_CHECK(end && *end == '\0' && std::isfinite(t) && t > 0, "QKV_MPI_TIMEOUT=", s,
              ": must be a positive number of seconds");
    return t;
  }
  return 600.0;
}

Communicator::Communicator(MPI_Comm comm, double timeout_seconds) : comm_(comm), timeout_(timeout_seconds) {
  QKV_CHECK(std::isfinite(timeout_seconds) && timeout_seconds > 0, "Communicator: the timeout (", timeout_seconds,
            " s) must be positive");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

bool Communicator::test_all(std::vector<MPI_Request>& requests) const {
  if (requests.empty()) return true;
  int done = 0;
  MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
  return done != 0;
}

void Communicator::wait_all(std::vector<MPI_Request>& requests, const std::string& what) const {
  const Clock::time_point t0 = Clock::now();
  // Poll rather than MPI_Waitall: a blocking wait has no bound. Spin briefly (a message between
  // ranks on one machine takes microseconds), then sleep between polls.
  for (int spins = 0; !test_all(requests); ++spins) {
    if (seconds_since(t0) > timeout_)
      abort(str(what, ": no answer after ", timeout_, " s (QKV_MPI_TIMEOUT): a rank died or stalled"));
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Communicator::barrier(const std::string& what) const {
  std::vector<MPI_Request> r(1);
  MPI_Ibarrier(comm_, &r[0]);
  wait_all(r, what);
}

void say_once(const Communicator& comm, const std::string& line) {
  if (comm.rank() == 0) {  // one write, so that other ranks' and mpirun's output cannot cut the line
    const std::string text = line + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
  comm.barrier("waiting for rank 0 to report an error every rank has");
}

void Communicator::abort(const std::string& message) const {
  std::cerr << "qkv: rank " << rank_ << " of " << size_ << ": error: " << message << std::endl;
  MPI_Abort(comm_, 1);
  std::abort();  // MPI_Abort does not return
}

uint64_t digest(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

void check_agreement(const Communicator& comm, const std::string& what, const std::string& description,
                     const std::string& problem) {
  const int n = comm.size();
  // (digest, has a problem) of every rank, and rank 0's digest to compare with.
  const uint64_t mine[2] = {digest(description), problem.empty() ? 0u : 1u};
  std::vector<uint64_t> all(2 * static_cast<size_t>(n));
  std::vector<MPI_Request> r(1);
  MPI_Iallgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm.comm(), &r[0]);
  comm.wait_all(r, what + ": comparing the ranks' configurations");
  for (int k = 0; k < n; ++k)
    if (all[2 * static_cast<size_t>(k) + 1] != 0) {
      const std::string message = broadcast_string(comm, problem, k, what);
      throw AgreementError(str(what, ": rank ", k, " of ", n, ": ", message));
    }
  std::vector<int> differ;
  for (int k = 1; k < n; ++k)
    if (all[2 * static_cast<size_t>(k)] != all[0]) differ.push_back(k);
  if (differ.empty()) return;
  const std::string first = broadcast_string(comm, description, 0, what);
  const std::string other = broadcast_string(comm, description, differ[0], what);
  std::string ranks;
  for (size_t i = 0; i < differ.size(); ++i) ranks += (i ? ", " : "") + std::to_string(differ[i]);
  throw AgreementError(str(what, ": rank", differ.size() > 1 ? "s " : " ", ranks, " of ", n,
                           differ.size() > 1 ? " were" : " was", " started with a configuration different from rank 0's: rank 0 has {",
                           first, "}, rank ", differ[0], " has {", other, "}"));
}

}  // namespace qkv::mpi
