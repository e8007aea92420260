// The sliding-window dataset and its loader. See include/qkv/text/data_loader.h.
#include "qkv/text/data_loader.h"

#include <algorithm>
#include <numeric>

#include "qkv/core/error.h"

namespace qkv {

SlidingWindowDataset::SlidingWindowDataset(std::vector<int64_t> ids, int64_t max_length, int64_t stride)
    : ids_(std::move(ids)), max_length_(max_length), stride_(stride) {
  QKV_CHECK(max_length > 0, "dataset: max_length (", max_length, ") must be positive");
  QKV_CHECK(stride > 0, "dataset: stride (", stride, ") must be positive");
  const int64_t n = static_cast<int64_t>(ids_.size());
  QKV_CHECK(n > max_length, "dataset: the text has ", n, " tokens, too few for one window of max_length ",
            max_length, " (", max_length + 1, " tokens are needed: the inputs and the next token after them)");
  count_ = (n - max_length + stride - 1) / stride;  // len(range(0, n - max_length, stride))
}

void SlidingWindowDataset::get(int64_t i, int64_t* input, int64_t* target) const {
  QKV_CHECK(i >= 0 && i < count_, "dataset: window ", i, " is outside [0, ", count_, ")");
  const int64_t* at = ids_.data() + i * stride_;
  std::copy(at, at + max_length_, input);
  std::copy(at + 1, at + max_length_ + 1, target);
}

DataLoader::DataLoader(const SlidingWindowDataset& dataset, int64_t batch_size, bool shuffle, bool drop_last,
                       Generator* gen)
    : dataset_(dataset), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), gen_(gen) {
  QKV_CHECK(batch_size > 0, "DataLoader: batch_size (", batch_size, ") must be positive");
  QKV_CHECK(!shuffle || gen != nullptr, "DataLoader: shuffling needs a generator");
  QKV_CHECK(batches_per_epoch() > 0, "DataLoader: ", dataset.size(), " windows make no full batch of ",
            batch_size, " with drop_last; use a smaller batch size or more text");
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = dataset_.size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<int64_t> randperm(int64_t n, Generator& gen) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), 0);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(gen.random() % static_cast<uint64_t>(n - i));
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(z + i)]);
  }
  return r;
}

std::vector<WindowBatch> DataLoader::epoch() {
  const int64_t n = dataset_.size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (gen_) gen_->random64();  // _BaseDataLoaderIter's base seed: every iteration draws it, shuffled or not
  if (shuffle_) {
    // RandomSampler: seed = torch.empty((), dtype=torch.int64).random_() -> [0, 2^63)
    const uint64_t seed = gen_->random64() % (uint64_t{1} << 63);
    Generator local(seed);
    order = randperm(n, local);
  }
  std::vector<WindowBatch> batches;
  const int64_t L = dataset_.max_length();
  for (int64_t start = 0; start < n; start += batch_size_) {
    const int64_t b = std::min(batch_size_, n - start);
    if (b < batch_size_ && drop_last_) break;
    WindowBatch tb;
    tb.batch = b;
    tb.length = L;
    tb.inputs.resize(static_cast<size_t>(b * L));
    tb.targets.resize(static_cast<size_t>(b * L));
    for (int64_t j = 0; j < b; ++j)
      dataset_.get(order[static_cast<size_t>(start + j)], tb.inputs.data() + j * L, tb.targets.data() + j * L);
    batches.push_back(std::move(tb));
  }
  return batches;
}

}  // namespace qkv
