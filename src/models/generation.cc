// Generation. See include/qkv/models/generation.h.
#include "qkv/models/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv {

int64_t pick_next_token(const float* last, int64_t V, const SamplingOptions& o, Generator& gen,
                        std::vector<double>& p) {
  if (o.temperature == 0.0) return std::max_element(last, last + V) - last;
  p.resize(static_cast<size_t>(V));
  double cut = -std::numeric_limits<double>::infinity();
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<float> sorted(last, last + V);
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
    cut = sorted[static_cast<size_t>(o.top_k - 1)];
  }
  double m = -std::numeric_limits<double>::infinity(), total = 0.0;
  for (int64_t j = 0; j < V; ++j)
    if (last[j] >= cut) m = std::max(m, last[j] / o.temperature);
  for (int64_t j = 0; j < V; ++j)
    total += (p[static_cast<size_t>(j)] = last[j] >= cut ? std::exp(last[j] / o.temperature - m) : 0.0);
  double u = static_cast<double>(gen.random64() % (uint64_t{1} << 53)) * 0x1.0p-53 * total;  // exact: < 2^53
  int64_t next = V - 1;
  for (int64_t j = 0; j < V; ++j) {
    if (u < p[static_cast<size_t>(j)]) {
      next = j;
      break;
    }
    u -= p[static_cast<size_t>(j)];
  }
  while (p[static_cast<size_t>(next)] == 0.0 && next > 0) --next;  // rounding past the end
  return next;
}

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const SamplingOptions& o,
                              const TokenCallback& on_token) {
  QKV_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  QKV_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens (", o.max_new_tokens, ") must not be negative");
  QKV_CHECK(o.temperature >= 0.0 && std::isfinite(o.temperature), "generate: temperature (", o.temperature,
            ") must be finite and >= 0");
  QKV_CHECK(o.top_k >= 0, "generate: top_k (", o.top_k, ") must not be negative");
  const int64_t V = model.vocab_size(), ctx = model.context_length();
  for (int64_t id : prompt)
    QKV_CHECK(id >= 0 && id < V, "generate: prompt id ", id, " is outside the model's vocabulary of ", V);
  // The ids kept: the prompt and the new ones, plus the new ones returned (8 bytes each), checked
  // up front so that a huge max_new_tokens is refused rather than growing without bound.
  const int64_t prompt_size = static_cast<int64_t>(prompt.size());
  const int64_t most = std::numeric_limits<int64_t>::max() / 16 - prompt_size;
  check_memory_request(o.max_new_tokens > most ? std::numeric_limits<int64_t>::max()
                                               : (prompt_size + 2 * o.max_new_tokens) * 8,
                       "generate: the ids of the prompt and max_new_tokens");
  Generator gen(o.seed);
  const bool was_training = model.is_training();
  model.eval();
  std::vector<int64_t> ids = prompt, out;
  ids.reserve(static_cast<size_t>(prompt_size + o.max_new_tokens));
  out.reserve(static_cast<size_t>(o.max_new_tokens));
  std::optional<kernels::KvCache> cache;
  if (o.kv_cache && o.max_new_tokens > 0 && model.has_cache()) cache.emplace(model.make_cache(1, o.cache_dtype));
  int64_t cache_start = 0;  // the cache holds the positions of ids[cache_start, cache_start + length)
  std::vector<double> p;
  std::vector<int64_t> window;
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const int64_t N = static_cast<int64_t>(ids.size()), T = std::min(ctx, N), start = N - T;
    Tensor logits;
    const float* last = nullptr;
    if (cache) {
      // The window ids[start, N) starts at position 0: once it slides, every position moves, and
      // the cache starts again from the whole window (what the uncached loop computes).
      if (start != cache_start) {
        cache->reset();
        cache_start = start;
      }
      const int64_t first = cache_start + cache->length();
      window.assign(ids.begin() + first, ids.end());
      logits = model.forward_cached(window, 1, N - first, *cache);  // (1, V)
      last = logits.data();
    } else {
      window.assign(ids.end() - T, ids.end());
      logits = model.forward(window, 1, T);  // (1, T, V)
      last = logits.data() + (T - 1) * V;
    }
    if (o.on_logits) o.on_logits(last, V);
    const int64_t next = pick_next_token(last, V, o, gen, p);
    ids.push_back(next);
    out.push_back(next);
    if (on_token && !on_token(next)) break;
  }
  model.train(was_training);
  return out;
}

}  // namespace qkv
