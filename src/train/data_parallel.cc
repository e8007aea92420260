// The slices of a data-parallel batch. See include/qkv/train/data_parallel.h.
#include "qkv/train/data_parallel.h"

#include <algorithm>

namespace qkv {

BatchSlice batch_slice(int64_t batch, int rank, int ranks) {
  QKV_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "data-parallel training: rank ", rank, " is not one of ", ranks,
            " ranks");
  QKV_CHECK(batch >= ranks, "data-parallel training: the batch size (", batch, ") must be at least the number of ranks (",
            ranks, "): every rank takes a slice of each batch");
  return {batch * rank / ranks, batch * (rank + 1) / ranks};
}

void sum_gradients(DataParallel& dp, const std::vector<Param>& params, std::vector<float>& scratch) {
  size_t n = 0;
  for (const Param& p : params) n += static_cast<size_t>(p.grad->numel());
  scratch.resize(n);
  size_t at = 0;
  for (const Param& p : params) {
    QKV_CHECK(p.grad->is_contiguous(), "data-parallel training: the gradient of ", p.name, " is not contiguous");
    std::copy_n(p.grad->data(), p.grad->numel(), scratch.data() + at);
    at += static_cast<size_t>(p.grad->numel());
  }
  dp.sum_floats(scratch.data(), static_cast<int64_t>(n));
  at = 0;
  for (const Param& p : params) {
    std::copy_n(scratch.data() + at, p.grad->numel(), p.grad->data());
    at += static_cast<size_t>(p.grad->numel());
  }
}

}  // namespace qkv
