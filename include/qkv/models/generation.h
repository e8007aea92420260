// qkv/models/generation.h - text generation with a trained AttentionLM.
//
// Each new token: run the model on the last context_length ids, take the last position's logits,
// and pick the next id: with temperature 0 the largest logit (greedy, first on ties); otherwise
// logits / temperature, keep only the top_k largest (top_k 0: all; ties at the k-th value stay,
// as the book's `torch.where(logits < min_val, -inf, logits)`), softmax, and draw from that
// distribution with one double uniform of Generator(seed) per token.
//
// With kv_cache (the default) the model keeps every block's keys and values (kernels/kv_cache.h):
// the prompt's last context_length ids run once (a prefill), then each step runs only the token
// just picked. Positions are absolute (pos_emb), so once the ids outgrow the context the window
// slides: the cache is reset and the whole window of the last context_length ids runs again, as
// the uncached loop does every step. Both loops compute the same logits (up to the order of
// floating-point sums: within 1e-5 relative with an fp32 cache) and share the code picking the
// next id. A bf16 cache halves the cache's memory and rounds the keys and values to bf16.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/kernels/kv_cache.h"
#include "qkv/models/attention_lm.h"

namespace qkv {

struct SamplingOptions {
  int64_t max_new_tokens = 50;
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 123;
  bool kv_cache = true;                                          // false: recompute the window every token
  kernels::CacheDtype cache_dtype = kernels::CacheDtype::kF32;   // with kv_cache
  // Called with each step's last-position logits (V floats), before the next id is picked.
  std::function<void(const float* logits, int64_t vocab)> on_logits = nullptr;
};

// Called with each new id as soon as it is picked; returning false stops the generation there
// (the ids so far are returned).
using TokenCallback = std::function<bool(int64_t id)>;

// Returns only the new ids. The model runs in eval mode (no dropout). Throws qkv::Error on an
// empty prompt, an id outside the vocabulary, bad options, or a max_new_tokens whose ids would
// not fit the memory limit (core/limits.h).
std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              const TokenCallback& on_token = nullptr);

// The next id from one position's logits (V floats) as described above; `gen` is drawn from
// only when temperature > 0, and `probabilities` is scratch of V doubles.
int64_t pick_next_token(const float* logits, int64_t vocab, const SamplingOptions& options, Generator& gen,
                        std::vector<double>& probabilities);

}  // namespace qkv
