// qkv/train/data_parallel.h - what the Trainer needs from the ranks of a data-parallel run, as an
// interface the training library owns and the MPI layer implements (qkv/mpi/rank_data_parallel.h), so
// src/train never depends on MPI.
//
// Every rank draws the same global batch of B sequences (the data streams and generators stay
// identical on every rank), takes its slice of it (batch_slice below), and runs forward and
// backward on that slice with the loss normalised by the global count of targets, so that
//   sum over ranks of (gradient of the slice)  ==  gradient of the whole batch's mean loss.
// The ranks sum the gradients (sum_floats), every rank clips and steps the same optimiser on the
// same sums, and the weights stay equal on every rank, bit for bit.
//
// Determinism: sums are added in rank order, in double, and every rank gets the same bits (an
// implementation must not depend on timing or on the reduction tree MPI picks), so a run repeats
// exactly and differs from the single-process run only by where float32 partial sums of the
// gradients are rounded (about 1e-7 relative; tests/mpi/train_dp_test.sh asserts 1e-6 on every
// step's loss and every tensor of the final checkpoint).
#pragma once

#include <cstdint>

#include <vector>

#include "qkv/core/error.h"
#include "qkv/train/optimizer.h"

namespace qkv {

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual int rank() const = 0;   // this rank, in [0, ranks())
  virtual int ranks() const = 0;  // N >= 1
  // Collective: values[i] = sum over ranks r of values_r[i], added in rank order (in double for
  // floats), the same bits on every rank. n may be 0.
  virtual void sum_floats(float* values, int64_t n) = 0;
  virtual void sum_doubles(double* values, int64_t n) = 0;
  // Collective: the largest of the ranks' values (a stop flag: one rank's signal stops them all).
  virtual int max_int(int value) = 0;
};

// Rank r of N takes sequences [begin, end) of a batch of B: B * r / N to B * (r + 1) / N, slices
// that differ by at most one sequence. Every rank needs one: B >= N (Trainer checks it).
// An error every rank of a data-parallel run throws alike (rank 0 could not write the checkpoint):
// the command line reports it once.
class AllRanksError : public Error {
 public:
  using Error::Error;
};

struct BatchSlice {
  int64_t begin = 0, end = 0;
};
BatchSlice batch_slice(int64_t batch, int rank, int ranks);

// Collective: every parameter's gradient replaced by its sum over the ranks, in one sum_floats
// call (the gradients side by side in `scratch`, in params' order).
void sum_gradients(DataParallel& dp, const std::vector<Param>& params, std::vector<float>& scratch);

}  // namespace qkv
