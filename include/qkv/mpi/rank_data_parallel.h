// qkv/mpi/rank_data_parallel.h - the ranks of an MPI job as a data-parallel Trainer sees them
// (qkv/train/data_parallel.h): sums in a fixed order, the stop flag's maximum, every wait bounded.
//
// Why not MPI_Allreduce(MPI_SUM): Open MPI picks its reduction algorithm (recursive doubling,
// ring, Rabenseifner, ...) by message size and rank count, and each adds the ranks' values in its
// own order and grouping, so the rounding of a float sum would change with the rank count and the
// gradient size. Here a sum is a gather to rank 0, additions in rank order (0, 1, ..., N-1) in
// double, and a broadcast of the result: every rank gets the same bits, and the same inputs always
// give the same sum. It moves N times the gradient through rank 0, in chunks of at most
// kSumChunk values (rank 0 holds N chunks at a time); for the models `qkv train` builds that is
// little next to a step's compute.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/mpi/communicator.h"
#include "qkv/train/data_parallel.h"

namespace qkv::mpi {

class RankDataParallel : public DataParallel {
 public:
  static constexpr int64_t kSumChunk = int64_t{1} << 18;  // values per gather

  explicit RankDataParallel(const Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int ranks() const override { return comm_.size(); }
  void sum_floats(float* values, int64_t n) override;
  void sum_doubles(double* values, int64_t n) override;
  int max_int(int value) override;

 private:
  template <typename T>
  void sum_in_rank_order(T* values, int64_t n, MPI_Datatype type);

  const Communicator& comm_;
  std::vector<float> gathered_f_;   // (N, chunk) on rank 0
  std::vector<double> gathered_d_;  // (N, chunk) on rank 0
};

}  // namespace qkv::mpi
