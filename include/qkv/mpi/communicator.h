// qkv/mpi/communicator.h - the MPI layer's handle on the ranks: who this rank is, waits that end
// (a rank that died or stalled makes the others exit with an error, not hang), and the check that
// every rank was started with the same configuration.
//
// Threads: only the thread that made the Session calls MPI (MPI_THREAD_FUNNELED). The kernels'
// pool threads never do; ring attention runs its computation on another thread while this one
// drives the messages (communicator.cc, ring_attention.cc).
//
// Timeouts: every wait is bounded by timeout_seconds (default 600, or QKV_MPI_TIMEOUT seconds).
// Past it the rank prints what it waited for and from which rank, and calls MPI_Abort: pending
// transfers cannot be cancelled portably, so nothing short of ending the job is safe, and mpirun
// then ends every rank. (A rank that is killed makes mpirun end the others by itself.)
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::mpi {

// MPI_Init_thread on construction (once per process), MPI_Finalize on destruction.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

// The bound on any wait, in seconds: QKV_MPI_TIMEOUT if set (a positive number), else 600.
double default_timeout_seconds();

class Communicator {
 public:
  explicit Communicator(MPI_Comm comm = MPI_COMM_WORLD, double timeout_seconds = default_timeout_seconds());
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  double timeout_seconds() const { return timeout_; }
  int next() const { return (rank_ + 1) % size_; }          // the ring's neighbours
  int previous() const { return (rank_ + size_ - 1) % size_; }

  // Whether every request has completed (MPI_Testall; completed ones become MPI_REQUEST_NULL).
  bool test_all(std::vector<MPI_Request>& requests) const;
  // Waits for every request, polling; past the timeout, prints "<what>" and aborts (see above).
  void wait_all(std::vector<MPI_Request>& requests, const std::string& what) const;
  // Collective: returns once every rank has called it (a bounded wait, as wait_all).
  void barrier(const std::string& what) const;
  // Prints "qkv: rank R: error: <message>" to stderr and calls MPI_Abort on this communicator.
  [[noreturn]] void abort(const std::string& message) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  double timeout_;
};

// Thrown on every rank alike by check_agreement: the command line prints it once (rank 0).
class AgreementError : public Error {
 public:
  using Error::Error;
};

// Collective, for an error every rank has: rank 0 writes `line` to stderr and flushes it, then
// every rank waits for the others. Only then may a rank exit: mpirun ends the whole job as soon as
// one rank exits with an error, and a rank 0 still on its way to printing would be cut off.
void say_once(const Communicator& comm, const std::string& line);

// Collective. Every rank hands in a description of its configuration (flags, shapes, options) and
// any problem it found with its own inputs ("" if none). If some rank reports a problem, or a
// description differs from rank 0's (compared by a 64-bit digest), every rank throws the same
// AgreementError: "<what>: rank 2 of 4: <problem>" or "<what>: ranks 1, 3 of 4 were started with a
// configuration different from rank 0's: rank 0 has {<description>}, rank 1 has {<description>}".
void check_agreement(const Communicator& comm, const std::string& what, const std::string& description,
                     const std::string& problem = "");

// FNV-1a, 64 bits: the digest check_agreement compares.
uint64_t digest(const std::string& text);

}  // namespace qkv::mpi
