// qkv/models/generation.h - text generation with any of qkv's language models.
//
// Each new token, as the book's generate (chapter 5) picks it:
//
//   idx_cond = idx[:, -context_size:]; logits = model(idx_cond)[:, -1, :]
//   top-k:        logits = where(logits < topk(logits, k)[-1], -inf, logits)   (ties at the k-th stay)
//   temperature:  probs = softmax(logits / temperature); next = torch.multinomial(probs, 1)
//   greedy (temperature 0): next = argmax(logits)                              (the first on ties)
//   a temperature so small that logits / temperature overflows: greedy, softmax's limit as t -> 0
//   (PyTorch's softmax gives NaN there and torch.multinomial raises)
//   logits holding NaN or +inf, or all -inf: qkv::Error (as torch.multinomial raises; greedy too)
//   eos_id:       stop (without appending it) when next is eos_id
//
// torch.multinomial(probs, 1) on the CPU is argmax(probs / q) with q ~ Exp(1) drawn for every one
// of the V entries (q = -log(1 - u), u one 53-bit uniform of the generator per entry, as
// Tensor.exponential_ draws them), in float32: so with Generator(seed) in place of
// torch.manual_seed(seed), the draws and the tokens are PyTorch's (up to float32 rounding of the
// softmax deciding a near tie). The generator is a fresh Generator(seed), or one given that already
// drew (an untrained model's weights: the book's torch.manual_seed(S); GPTModel(cfg); generate).
//
// With kv_cache (the default) the model keeps every block's keys and values (kernels/kv_cache.h):
// the prompt's last context_length ids run once (a prefill), then each step runs only the token
// just picked. Positions are absolute, so once the ids outgrow the context the window slides: the
// cache is reset and the whole window of the last context_length ids runs again, as the uncached
// loop does every step. Both loops compute the same logits (up to the order of floating-point
// sums: within 1e-5 relative with an fp32 cache) and share the code picking the next id. A bf16
// cache halves the cache's memory and rounds the keys and values to bf16.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/models/language_model.h"

namespace qkv {

struct SamplingOptions {
  int64_t max_new_tokens = 50;
  double temperature = 1.0;  // >= 0; 0: greedy
  int64_t top_k = 0;         // 0: every token; else in [1, vocab]
  uint64_t seed = 123;       // the draws' generator: Generator(seed), unless `generator` is given
  Generator* generator = nullptr;  // draw from this one instead (continuing where it stands)
  std::optional<int64_t> eos_id;   // stop, without adding it, when this id is picked
  std::vector<int64_t> stop_ids;   // the same for each of these (a family's end tokens)
  bool kv_cache = true;                                          // false: recompute the window every token
  std::optional<kernels::CacheDtype> cache_dtype;  // with kv_cache; none: the model's default_cache_dtype()
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

// The same, timed: `seconds` the whole generation; `prefill_ms` the prompt through the model and
// the first token picked; `tokens_per_s` the tokens after the first over their time.
struct GenerationTimes {
  double seconds = 0, prefill_ms = 0, tokens_per_s = 0;
};
std::vector<int64_t> generate_timed(LanguageModel& model, const std::vector<int64_t>& prompt,
                                    const SamplingOptions& options, const TokenCallback& on_token,
                                    GenerationTimes& times);

// Throws qkv::Error naming the option out of range for a vocabulary of V: max_new_tokens < 0, a
// temperature not finite or negative, top_k outside [0, V], eos_id or a stop id outside [0, V).
// `who` starts the message ("generate", "chat").
void check_sampling_options(const SamplingOptions& options, int64_t V, const char* who);

// The next id from one position's logits (V floats) as described above; `gen` is drawn from
// (V draws) only when temperature > 0; `scratch` is V floats of working space.
int64_t pick_next_token(const float* logits, int64_t vocab, const SamplingOptions& options, Generator& gen,
                        std::vector<float>& scratch);

}  // namespace qkv
