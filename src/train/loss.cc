// Cross-entropy. See include/qkv/train/loss.h.
#include "qkv/train/loss.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"

namespace qkv {

float CrossEntropyLoss::forward(const Tensor& logits, const std::vector<int64_t>& targets) {
  QKV_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "cross_entropy: logits must be (..., num_classes), got ",
            logits.describe());
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  QKV_CHECK(static_cast<int64_t>(targets.size()) == N, "cross_entropy: ", targets.size(),
            " targets for logits ", shape_str(logits.shape()), " (", N, " rows of ", V, " classes)");
  Tensor x = logits.contiguous();
  probs_ = Tensor::empty({N, V});
  shape_ = logits.shape();
  targets_ = targets;
  count_ = correct_ = 0;
  total_ = 0.0;
  double total = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = targets[static_cast<size_t>(i)];
    QKV_CHECK(t == ignore_index_ || (t >= 0 && t < V), "cross_entropy: target ", t, " at row ", i,
              " is outside [0, ", V, ") and is not ignore_index (", ignore_index_, ")");
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
    if (t == ignore_index_) continue;
    ++count_;
    if (argmax == t) ++correct_;
    total += -static_cast<double>(row[t] - m - std::log(sum));
  }
  total_ = total;
  return static_cast<float>(total / static_cast<double>(count_));  // 0 / 0 = NaN when nothing counts
}

Tensor CrossEntropyLoss::backward(float dloss) const { return backward_over(count_, dloss); }

Tensor CrossEntropyLoss::backward_over(int64_t count, float dloss) const {
  QKV_CHECK(count >= count_, "cross_entropy: the mean over ", count, " targets cannot hold this batch's ", count_);
  const int64_t N = probs_.dim() == 2 ? probs_.size(0) : 0, V = N ? probs_.size(1) : 0;
  Tensor d = Tensor::zeros(shape_);
  if (count_ == 0) return d;
  const float scale = dloss / static_cast<float>(count);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = targets_[static_cast<size_t>(i)];
    if (t == ignore_index_) continue;  // ignored rows add nothing to the loss
    const float* p = probs_.data() + i * V;
    float* g = d.data() + i * V;
    // loss_i = -(x_t - logsumexp(x)) / count:  d/dx_j = (softmax_j - [j == t]) / count
    for (int64_t j = 0; j < V; ++j) g[j] = p[j] * scale;
    g[t] = (p[t] - 1.0f) * scale;
  }
  return d;
}

}  // namespace qkv
