// The slices of a data-parallel batch. See include/qkv/train/data_parallel.h.
#include "qkv/train/data_parallel.h"

namespace qkv {

BatchSlice batch_slice(int64_t batch, int rank, int ranks) {
  QKV_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "data-parallel training: rank ", rank, " is not one of ", ranks,
            " ranks");
  QKV_CHECK(batch >= ranks, "data-parallel training: the batch size (", batch, ") must be at least the number of ranks (",
            ranks, "): every rank takes a slice of each batch");
  return {batch * rank / ranks, batch * (rank + 1) / ranks};
}

}  // namespace qkv
