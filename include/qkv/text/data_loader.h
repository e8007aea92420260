// qkv/text/data_loader.h - the book's sliding-window dataset and its DataLoader, over token ids.
//
// SlidingWindowDataset is chapter 2's GPTDatasetV1: for i in range(0, len(ids) - max_length, stride)
//   input  = ids[i     : i + max_length]
//   target = ids[i + 1 : i + max_length + 1]      (the next token at every position)
// DataLoader groups windows into batches of (batch_size, max_length) ids, in order or shuffled, and
// drops a last incomplete batch when drop_last is set.
//
// Shuffling reproduces PyTorch: with Generator g seeded like torch.manual_seed(s), the epochs come
// in the order that `torch.manual_seed(s); DataLoader(dataset, batch_size, shuffle=True)` gives.
// Each iteration of a PyTorch loader, shuffled or not, draws one int64 from the global generator
// (its base seed for workers); a shuffled one's RandomSampler then draws another int64 and seeds a
// fresh generator with it, from which torch.randperm(n) is a Fisher-Yates shuffle with
// random() % (n - i). Given a generator, epoch() draws as PyTorch does (a loader in order too, so a
// loop that iterates it between other draws keeps PyTorch's sequence).
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/generator.h"

namespace qkv {

class SlidingWindowDataset {
 public:
  // Fails if ids cannot fill one window (needs max_length + 1 ids), naming both numbers.
  SlidingWindowDataset(std::vector<int64_t> ids, int64_t max_length, int64_t stride);
  int64_t size() const { return count_; }
  int64_t max_length() const { return max_length_; }
  // Copies window i's input and target (max_length ids each).
  void get(int64_t i, int64_t* input, int64_t* target) const;

 private:
  std::vector<int64_t> ids_;
  int64_t max_length_, stride_, count_;
};

struct WindowBatch {
  int64_t batch = 0, length = 0;  // (batch, length)
  std::vector<int64_t> inputs;    // (batch, length) row-major
  std::vector<int64_t> targets;   // (batch, length) row-major
};

class DataLoader {
 public:
  // gen: the global generator each iteration draws from (required when shuffling; without it an
  // unshuffled loader draws nothing).
  DataLoader(const SlidingWindowDataset& dataset, int64_t batch_size, bool shuffle, bool drop_last,
             Generator* gen = nullptr);
  std::vector<WindowBatch> epoch();  // the batches of one pass; shuffled anew each call
  int64_t batches_per_epoch() const;

 private:
  const SlidingWindowDataset& dataset_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  Generator* gen_;
};

// torch.randperm(n, generator=g) on the CPU.
std::vector<int64_t> randperm(int64_t n, Generator& gen);

}  // namespace qkv
