// Generation. See include/qkv/train/sampling.h.
#include "qkv/train/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/error.h"

namespace qkv {

std::vector<int64_t> generate(AttentionLM& model, const std::vector<int64_t>& prompt, const SamplingOptions& o) {
  QKV_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  QKV_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens (", o.max_new_tokens, ") must not be negative");
  QKV_CHECK(o.temperature >= 0.0 && std::isfinite(o.temperature), "generate: temperature (", o.temperature,
            ") must be finite and >= 0");
  QKV_CHECK(o.top_k >= 0, "generate: top_k (", o.top_k, ") must not be negative");
  const int64_t V = model.config.vocab_size, ctx = model.config.context_length;
  for (int64_t id : prompt)
    QKV_CHECK(id >= 0 && id < V, "generate: prompt id ", id, " is outside the model's vocabulary of ", V);
  Generator gen(o.seed);
  const bool was_training = model.is_training();
  model.eval();
  std::vector<int64_t> ids = prompt, out;
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const int64_t T = std::min<int64_t>(ctx, static_cast<int64_t>(ids.size()));
    std::vector<int64_t> window(ids.end() - T, ids.end());
    Tensor logits = model.forward(window, 1, T);  // (1, T, V)
    const float* last = logits.data() + (T - 1) * V;
    int64_t next = 0;
    if (o.temperature == 0.0) {
      next = std::max_element(last, last + V) - last;
    } else {
      double cut = -std::numeric_limits<double>::infinity();
      if (o.top_k > 0 && o.top_k < V) {
        std::vector<float> sorted(last, last + V);
        std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
        cut = sorted[static_cast<size_t>(o.top_k - 1)];
      }
      double m = -std::numeric_limits<double>::infinity(), total = 0.0;
      for (int64_t j = 0; j < V; ++j)
        if (last[j] >= cut) m = std::max(m, last[j] / o.temperature);
      for (int64_t j = 0; j < V; ++j) total += (p[static_cast<size_t>(j)] = last[j] >= cut ? std::exp(last[j] / o.temperature - m) : 0.0);
      double u = static_cast<double>(gen.random64() % (uint64_t{1} << 53)) * 0x1.0p-53 * total;  // exact: < 2^53
      next = V - 1;
      for (int64_t j = 0; j < V; ++j) {
        if (u < p[static_cast<size_t>(j)]) {
          next = j;
          break;
        }
        u -= p[static_cast<size_t>(j)];
      }
      while (p[static_cast<size_t>(next)] == 0.0 && next > 0) --next;  // rounding past the end
    }
    ids.push_back(next);
    out.push_back(next);
  }
  model.train(was_training);
  return out;
}

}  // namespace qkv
