// qkv/train/loss.h - cross-entropy over logits, as torch.nn.functional.cross_entropy.
//
//   loss = mean over rows i whose target is not ignore_index of  -log softmax(logits[i])[target[i]]
//
// logits (N, V), or (..., V) read as (N, V) with N the product of the leading dims; targets holds
// N ids, each in [0, V) or equal to ignore_index (default -100, as PyTorch). reduction='mean':
// when every target is ignored the mean is 0 / 0 = NaN, as in PyTorch.
//
// backward(dloss) = dL/dlogits = (softmax(logits) - onehot(target)) * dloss / count on counted
// rows, 0 on ignored rows.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(int64_t ignore_index = -100) : ignore_index_(ignore_index) {}

  float forward(const Tensor& logits, const std::vector<int64_t>& targets);
  Tensor backward(float dloss = 1.0f) const;  // shaped as the last forward's logits
  // The same with the mean taken over `count` targets rather than count(): a slice of a batch
  // whose loss is the mean over the whole batch's `count` counted targets (data-parallel).
  Tensor backward_over(int64_t count, float dloss = 1.0f) const;

  int64_t ignore_index() const { return ignore_index_; }
  int64_t count() const { return count_; }      // targets that counted in the last forward
  int64_t correct() const { return correct_; }  // of those, how many the argmax of logits got right
  double total() const { return total_; }       // the sum of the counted rows' losses (the mean's numerator)

 private:
  int64_t ignore_index_;
  Tensor probs_;                  // (N, V) softmax of the last forward's logits
  Shape shape_;                   // the logits' shape
  std::vector<int64_t> targets_;  // (N)
  int64_t count_ = 0, correct_ = 0;
  double total_ = 0.0;
};

}  // namespace qkv
