// qkv/train/sampling.h - text generation with a trained AttentionLM.
//
// Each new token: run the model on the last context_length ids, take the last position's logits,
// and pick the next id: with temperature 0 the largest logit (greedy, first on ties); otherwise
// logits / temperature, keep only the top_k largest (top_k 0: all; ties at the k-th value stay,
// as the book's `torch.where(logits < min_val, -inf, logits)`), softmax, and draw from that
// distribution with one double uniform of Generator(seed) per token.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/train/attention_lm.h"

namespace qkv {

struct SamplingOptions {
  int64_t max_new_tokens = 50;
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 123;
};

// Returns only the new ids. The model runs in eval mode (no dropout).
std::vector<int64_t> generate(AttentionLM& model, const std::vector<int64_t>& prompt, const SamplingOptions& options);

}  // namespace qkv
