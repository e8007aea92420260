// qkv train under mpirun: the ranks of a data-parallel run as the command sees them
// (train_ranks.cc, built with the MPI layer only; train_command.cc uses it behind QKV_HAVE_MPI).
#pragma once

#include <functional>
#include <string>

#include "qkv/train/data_parallel.h"

namespace qkv::cli {

class TrainRanks {
 public:
  virtual ~TrainRanks() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  virtual DataParallel& data_parallel() = 0;
  // Collective: every rank throws the same error (printed once, by rank 0) when some rank has a
  // problem ("" for none) or was started with a description different from rank 0's.
  virtual void check_agreement(const std::string& description, const std::string& problem) = 0;
};

// Whether mpirun (Open MPI, or a PMI launcher) started this process: only then does qkv train
// start MPI; run alone, nothing changes.
bool started_by_mpirun();

// Starts MPI, runs `body` with the ranks, ends MPI; returns body's exit status. An error every
// rank has (the configuration check, an AllRanksError, a bad QKV_MPI_TIMEOUT) is printed by rank 0
// alone, and every rank returns 1; any other error ends the job (MPI_Abort) with the rank's
// message.
int with_train_ranks(const std::function<int(TrainRanks&)>& body);

}  // namespace qkv::cli
