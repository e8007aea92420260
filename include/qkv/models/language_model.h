// qkv/models/language_model.h - what every causal language model in qkv offers: ids in, logits
// out, with and without a KV cache; gradients; its state by name; its configuration.
//
// Legend: B batch, T tokens, Tn new tokens, V vocabulary, P positions already in the cache.
//
//   forward(ids (B, T))                  -> logits (B, T, V)     T <= context_length()
//   backward(dlogits (B, T, V))          adds every parameter's gradient (module.h's .grad rule)
//   forward_cached(ids (B, Tn), cache)   -> logits of the last new token (B, V), what forward()
//                                           of the whole sequence gives there; the cache grows by Tn
//   forward_cached_into(..., logits)     the same into the caller's (B, V) floats
//
// Generation (generation.h), training (qkv/train) and the front door (qkv/qkv.h) use models only
// through this interface; a family (the attention-only LM today) is one class implementing it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/modules/module.h"

namespace qkv {

class LanguageModel : public Module {
 public:
  virtual int64_t vocab_size() const = 0;      // V
  virtual int64_t context_length() const = 0;  // the most positions a sequence may have
  // The model's configuration as JSON (the family's own keys) and a line for people:
  // "attention LM: 2 layers x 4 heads, d_model 64, vocab 17, context 32".
  virtual nlohmann::json config_json() const = 0;
  virtual std::string describe() const = 0;

  // ids: batch * tokens ids, row-major (B, T), 1 <= T <= context_length() -> logits (B, T, V).
  virtual Tensor forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) = 0;
  // dlogits (B, T, V) of the last forward: adds into every parameter's gradient.
  virtual void backward(const Tensor& dlogits) = 0;

  // A KV cache for `batch` sequences of up to `capacity` positions (0 or more than
  // context_length(): context_length()). Throws qkv::Error when the model has nothing to cache (no
  // attention layers) or past the memory limit.
  virtual kernels::KvCache make_cache(int64_t batch, kernels::CacheDtype dtype, int64_t capacity = 0) const = 0;
  // ids (B, Tn), the next Tn tokens of each sequence at positions P .. P + Tn - 1 with
  // P = cache.length() -> the logits of the last of them (B, V); commits the step. Needs eval mode
  // (no active dropout) and P + Tn <= context_length(); leaves the last forward's state (for
  // backward) intact.
  virtual Tensor forward_cached(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                                kernels::KvCache& cache) {
    QKV_CHECK(batch >= 1, type_name(), ": the batch (", batch, ") must be at least 1");
    Tensor logits = Tensor::empty({batch, vocab_size()});
    forward_cached_into(ids, batch, tokens, cache, logits.data());
    return logits;
  }
  // The same, the logits written into `logits` (B V floats). A family overrides one of the two: one
  // whose step allocates nothing (GPTModel, LlamaModel) this one, another forward_cached (whose
  // result this copies).
  virtual void forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                                   kernels::KvCache& cache, float* logits) {
    const Tensor y = forward_cached(ids, batch, tokens, cache).contiguous();
    std::memcpy(logits, y.data(), static_cast<size_t>(y.numel()) * sizeof(float));
  }
  // Whether forward_cached can run (a model without attention layers has no cache).
  virtual bool has_cache() const = 0;
};

}  // namespace qkv
