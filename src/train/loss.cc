// Cross-entropy. See include/qkv/train/loss.h.
#include "qkv/train/loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"

namespace qkv {

float CrossEntropyLoss::forward(const Tensor& logits, const std::vector<int64_t>& targets) {
  QKV_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "cross_entropy: logits must be (..., num_classes), got ",
            logits.describe());
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  QKV_CHECK(static_cast<int64_t>(targets.size()) == N, "cross_entropy: ", targets.size(),
            " targets for logits ", shape_str(logits.shape()), " (", N, " rows of ", V, " classes)");
  for (int64_t i = 0; i < N; ++i) {  // every target checked before anything is kept
    const int64_t t = targets[static_cast<size_t>(i)];
    QKV_CHECK(t == ignore_index_ || (t >= 0 && t < V), "cross_entropy: target ", t, " at row ", i,
              " is outside [0, ", V, ") and is not ignore_index (", ignore_index_, ")");
  }
  Tensor x = logits.contiguous();
  probs_ = Tensor::empty({N, V});
  shape_ = logits.shape();
  targets_ = targets;
  count_ = correct_ = 0;
  total_ = 0.0;
  // The rows split over the pool: each row computed as before, its loss kept in `row_loss` and
  // summed in row order, so no bit depends on the threads.
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  std::vector<char> row_correct(static_cast<size_t>(N), 0);
  default_pool().parallel_for(N, [&](int64_t i, int) {
    const int64_t t = targets[static_cast<size_t>(i)];
    const float* row = x.data() + i * V;
    float* p = probs_.data() + i * V;
    // log_softmax as PyTorch computes it: x - max - log(sum(exp(x - max))).
    float m = -std::numeric_limits<float>::infinity();
    int64_t argmax = 0;
    for (int64_t j = 0; j < V; ++j)
      if (row[j] > m || std::isnan(row[j])) {
        m = row[j];
        argmax = j;
        if (std::isnan(m)) break;
      }
    float sum = 0.0f;
    for (int64_t j = 0; j < V; ++j) sum += (p[j] = std::exp(row[j] - m));
    for (int64_t j = 0; j < V; ++j) p[j] /= sum;
    if (t == ignore_index_) return;
    row_correct[static_cast<size_t>(i)] = argmax == t;
    row_loss[static_cast<size_t>(i)] = -static_cast<double>(row[t] - m - std::log(sum));
  });
  double total = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[static_cast<size_t>(i)] == ignore_index_) continue;
    ++count_;
    correct_ += row_correct[static_cast<size_t>(i)];
    total += row_loss[static_cast<size_t>(i)];
  }
  total_ = total;
  return static_cast<float>(total / static_cast<double>(count_));  // 0 / 0 = NaN when nothing counts
}

Tensor CrossEntropyLoss::backward(float dloss) const { return backward_over(count_, dloss); }

Tensor CrossEntropyLoss::backward_over(int64_t count, float dloss) const {
  QKV_CHECK(count >= count_, "cross_entropy: the mean over ", count, " targets cannot hold this batch's ", count_);
  const int64_t N = probs_.dim() == 2 ? probs_.size(0) : 0, V = N ? probs_.size(1) : 0;
  Tensor d = Tensor::empty(shape_);  // every element written below (fresh zero pages cost a fault each)
  const float scale = count_ == 0 ? 0.0f : dloss / static_cast<float>(count);
  default_pool().parallel_for(N, [&](int64_t i, int) {
    const int64_t t = targets_[static_cast<size_t>(i)];
    float* g = d.data() + i * V;
    if (t == ignore_index_) {  // ignored rows add nothing to the loss
      std::fill(g, g + V, 0.0f);
      return;
    }
    const float* p = probs_.data() + i * V;
    // loss_i = -(x_t - logsumexp(x)) / count:  d/dx_j = (softmax_j - [j == t]) / count
    for (int64_t j = 0; j < V; ++j) g[j] = p[j] * scale;
    g[t] = (p[t] - 1.0f) * scale;
  });
  return d;
}

}  // namespace qkv
