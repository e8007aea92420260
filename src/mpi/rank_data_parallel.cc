// Sums over the ranks in rank order, and the stop flag's maximum (qkv/mpi/rank_data_parallel.h).
#include "qkv/mpi/rank_data_parallel.h"

#include <algorithm>
#include <type_traits>

namespace qkv::mpi {

template <typename T>
void RankDataParallel::sum_in_rank_order(T* values, int64_t n, MPI_Datatype type) {
  const int ranks = comm_.size();
  if (ranks == 1 || n == 0) return;
  std::vector<T>& gathered = [this]() -> std::vector<T>& {
    if constexpr (std::is_same_v<T, float>) return gathered_f_;
    else return gathered_d_;
  }();
  std::vector<MPI_Request> r(1);
  for (int64_t at = 0; at < n; at += kSumChunk) {
    const int64_t m = std::min(kSumChunk, n - at);  // this chunk's values
    if (comm_.rank() == 0) gathered.resize(static_cast<size_t>(ranks * m));
    // gathered (N, m): row k is rank k's chunk
    MPI_Igather(values + at, static_cast<int>(m), type, comm_.rank() == 0 ? gathered.data() : nullptr,
                static_cast<int>(m), type, 0, comm_.comm(), &r[0]);
    comm_.wait_all(r, "data-parallel training: a sum over the ranks (gathering on rank 0)");
    if (comm_.rank() == 0)
      for (int64_t i = 0; i < m; ++i) {
        double sum = 0.0;  // rank 0's value first, then rank 1's, ...
        for (int k = 0; k < ranks; ++k) sum += static_cast<double>(gathered[static_cast<size_t>(k * m + i)]);
        values[at + i] = static_cast<T>(sum);
      }
    MPI_Ibcast(values + at, static_cast<int>(m), type, 0, comm_.comm(), &r[0]);
    comm_.wait_all(r, "data-parallel training: a sum over the ranks (the broadcast from rank 0)");
  }
}

void RankDataParallel::sum_floats(float* values, int64_t n) { sum_in_rank_order(values, n, MPI_FLOAT); }

void RankDataParallel::sum_doubles(double* values, int64_t n) { sum_in_rank_order(values, n, MPI_DOUBLE); }

int RankDataParallel::max_int(int value) {
  int out = value;
  std::vector<MPI_Request> r(1);
  MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, comm_.comm(), &r[0]);
  comm_.wait_all(r, "data-parallel training: agreeing whether to stop");
  return out;
}

}  // namespace qkv::mpi
