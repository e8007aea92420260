// qkv/train/ranks.h - the ranks of a data-parallel training run as a training loop sees them: which
// one it is, how many there are, their sums, and a check that every rank runs the same thing. The
// MPI layer implements it (qkv/mpi/train_ranks.h); a run alone has none.
#pragma once

#include <string>

#include "qkv/train/data_parallel.h"

namespace qkv {

class TrainRanks {
 public:
  virtual ~TrainRanks() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  virtual DataParallel& data_parallel() = 0;
  // Collective: every rank throws the same error (said once, by rank 0) when some rank has a
  // problem ("" for none) or was started with a description different from rank 0's.
  virtual void check_agreement(const std::string& description, const std::string& problem) = 0;
};

}  // namespace qkv
