// Generation. See include/qkv/models/generation.h.
#include "qkv/models/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/pointwise.h"
#include "qkv/core/torch_math.h"

namespace qkv {

namespace {

// The first index of the largest value (torch.argmax on the CPU).
int64_t first_argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (v[j] > v[best]) best = j;
  return best;
}

// NaN or +inf anywhere (the first one is then looked for to name it), or no value above -inf: a
// clear error. Returns the scan (its argmax is the greedy choice).
LogitsScan check_logits(const float* last, int64_t V) {
  const LogitsScan scan = scan_logits(last, V);  // one SIMD pass (core/pointwise.h)
  if (scan.bad) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    int64_t j = 0;
    while (!std::isnan(last[j]) && last[j] != kInf) ++j;
    QKV_CHECK(false, "the model's next-token logits hold ", std::isnan(last[j]) ? "NaN" : "+inf", " (at id ", j, " of ",
              V, "): its weights or its input made them non-finite, so no token can be chosen");
  }
  QKV_CHECK(scan.any_finite, "the model's next-token logits are all -inf: no token can be chosen");
  return scan;
}

}  // namespace

int64_t pick_next_token(const float* last, int64_t V, const SamplingOptions& o, Generator& gen,
                        std::vector<float>& z) {
  // NaN or +inf (weights holding them, or values that overflow) leave no distribution to draw
  // from: torch.multinomial refuses them, and so does qkv, at temperature 0 too. -inf is a token
  // never drawn; all of them -inf is refused as well.
  const LogitsScan scan = check_logits(last, V);
  if (o.temperature == 0.0 && !(o.top_k > 0 && o.top_k < V)) return scan.argmax;
  z.assign(last, last + V);
  // logits = where(logits < topk(logits, k)[-1], -inf, logits)
  if (o.top_k > 0 && o.top_k < V) {
    std::nth_element(z.begin(), z.begin() + (o.top_k - 1), z.end(), std::greater<float>());  // z as scratch
    const float min_val = z[static_cast<size_t>(o.top_k - 1)];
    z.assign(last, last + V);
    for (float& x : z)
      if (x < min_val) x = -std::numeric_limits<float>::infinity();
  }
  if (o.temperature == 0.0) return first_argmax(z.data(), V);
  // probs = softmax(logits / temperature), in float32 as torch.softmax computes it (to the bit:
  // core/torch_math.h)
  const auto t = static_cast<float>(o.temperature);
  for (float& x : z) x = x / t;
  torch_softmax(z.data(), V);
  // A temperature so small that logits / t overflows (or underflows to -inf everywhere) leaves
  // softmax undefined (torch_softmax's NaN: z held no NaN); its limit as t -> 0 is the greedy
  // choice, and that is what is returned.
  if (std::isnan(z[0])) return first_argmax(last, V);
  // next = multinomial(probs, 1) = argmax(probs / q), q ~ Exp(1) = -log(1 - u) per entry, u the low
  // 53 bits of a random64() times 2^-53: the first index of the largest, as first_argmax. Every entry
  // draws its u (the generator's stream, taken a block at a time), but the logarithm is taken only
  // where the entry could win. Since -log(1 - u) >= u >= lo, lo being u cut to its top 24 bits,
  // p / q <= p / lo; an entry with p <= fl(fl(0.999 best) lo) has p / q below best by more than the
  // roundings of q and of the quotient (about 1e-7 each against 1e-3), so it is not the first
  // largest. A block where every entry is so is skipped whole (most of them, once a large quotient
  // is found). u = 0 (lo = 0: only p = 0 passes) and a NaN best (the test is false) take the whole
  // path.
  constexpr int64_t kBlock = 512;
  uint32_t words[2 * kBlock];
  // lo for entry j of a block: the top 24 of u's 53 bits (the high word's low 21, the low word's top 3)
  auto lo_of = [&words](int64_t j) {
    const uint32_t top = ((words[2 * j] & 0x1FFFFFu) << 3) | (words[2 * j + 1] >> 29);
    return static_cast<float>(static_cast<int32_t>(top)) * 0x1.0p-24f;
  };
  int64_t best = -1;
  float best_value = 0.0f;
  for (int64_t j0 = 0; j0 < V; j0 += kBlock) {
    const int64_t n = std::min(kBlock, V - j0);
    gen.random(words, 2 * n);  // entry j's random64() is (words[2 j] << 32) | words[2 j + 1]
    const float* p = z.data() + j0;
    if (best >= 0) {
      const float c = best_value * 0.999f;
      int32_t open = 0;
      for (int64_t j = 0; j < n; ++j) open |= !(p[j] <= c * lo_of(j));
      if (open == 0) continue;
    }
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t bits = (static_cast<uint64_t>(words[2 * j]) << 32) | words[2 * j + 1];
      const double u = static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
      if (best >= 0 && p[j] <= best_value * 0.999f * lo_of(j)) continue;
      const auto q = static_cast<float>(-std::log(1.0 - u));
      const float v = p[j] / q;
      if (best < 0 || v > best_value) {
        best = j0 + j;
        best_value = v;
      }
    }
  }
  return best;
}

void check_sampling_options(const SamplingOptions& o, int64_t V, const char* who) {
  QKV_CHECK(o.max_new_tokens >= 0, who, ": max_new_tokens (", o.max_new_tokens, ") must not be negative");
  QKV_CHECK(o.temperature >= 0.0 && std::isfinite(o.temperature), who, ": temperature (", o.temperature,
            ") must be finite and >= 0");
  QKV_CHECK(o.top_k >= 0 && o.top_k <= V, who, ": top_k (", o.top_k, ") must be in [1, vocab_size = ", V,
            "] (or 0 for every token)");
  QKV_CHECK(!o.eos_id || (*o.eos_id >= 0 && *o.eos_id < V), who, ": eos_id (", o.eos_id.value_or(0),
            ") is outside the vocabulary of ", V);
  for (int64_t id : o.stop_ids)
    QKV_CHECK(id >= 0 && id < V, who, ": stop id ", id, " is outside the vocabulary of ", V);
}

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const SamplingOptions& o,
                              const TokenCallback& on_token) {
  QKV_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  check_sampling_options(o, model.vocab_size(), "generate");
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
  Generator own(o.seed);
  Generator& gen = o.generator ? *o.generator : own;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<int64_t> ids = prompt, out;
  ids.reserve(static_cast<size_t>(prompt_size + o.max_new_tokens));
  out.reserve(static_cast<size_t>(o.max_new_tokens));
  std::optional<kernels::KvCache> cache;
  // the cache holds at most the window: the context, or the prompt and the new tokens when fewer
  if (o.kv_cache && o.max_new_tokens > 0 && model.has_cache())
    cache.emplace(model.make_cache(1, o.cache_dtype.value_or(model.default_cache_dtype()), std::min(ctx, prompt_size + o.max_new_tokens)));
  int64_t cache_start = 0;  // the cache holds the positions of ids[cache_start, cache_start + length)
  std::vector<float> p, step_logits(cache ? static_cast<size_t>(V) : 0);  // the cached steps write into it
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
      model.forward_cached_into(window, 1, N - first, *cache, step_logits.data());  // (1, V)
      last = step_logits.data();
    } else {
      window.assign(ids.end() - T, ids.end());
      logits = model.forward(window, 1, T);  // (1, T, V)
      last = logits.data() + (T - 1) * V;
    }
    if (o.on_logits) o.on_logits(last, V);
    const int64_t next = pick_next_token(last, V, o, gen, p);
    if ((o.eos_id && next == *o.eos_id) || std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end())
      break;
    ids.push_back(next);
    out.push_back(next);
    if (on_token && !on_token(next)) break;
  }
  model.train(was_training);
  return out;
}

std::vector<int64_t> generate_timed(LanguageModel& model, const std::vector<int64_t>& prompt,
                                    const SamplingOptions& options, const TokenCallback& on_token,
                                    GenerationTimes& times) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto first = start, last = start;  // when the first and the last new token came
  int64_t count = 0;
  std::vector<int64_t> out = generate(model, prompt, options, [&](int64_t id) {
    last = Clock::now();
    if (count++ == 0) first = last;
    return on_token ? on_token(id) : true;
  });
  times.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  times.prefill_ms = count > 0 ? std::chrono::duration<double, std::milli>(first - start).count() : 0.0;
  const double decode_s = std::chrono::duration<double>(last - first).count();
  times.tokens_per_s = decode_s > 0 ? static_cast<double>(count - 1) / decode_s : 0.0;
  return out;
}

}  // namespace qkv
