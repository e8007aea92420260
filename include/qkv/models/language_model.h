// qkv/models/language_model.h - what every causal language model in qkv offers: ids in, logits
// out, with and without a KV cache; gradients; its state by name; its description.
//
// Legend: B batch, T tokens, Tn new tokens, V vocabulary, E width, P positions already in the cache.
//
//   forward(ids (B, T), observer)        -> logits (B, T, V)     T <= context_length(); the
//                                           observer (models/observer.h) sees every layer's values
//   head_logits(x (B, T, E))             -> what the model's end (final norm, head) makes of a
//                                           residual stream x: the logit lens
//   backward(dlogits (B, T, V))          adds every parameter's gradient (module.h's .grad rule)
//   forward_cached(ids (B, Tn), cache)   -> logits of the last new token (B, V), what forward()
//                                           of the whole sequence gives there; the cache grows by Tn
//   forward_cached_into(..., logits)     the same into the caller's (B, V) floats
//
// Every family is this interface over one implementation (DecoderModel, models/decoder.h), and a
// model says what it is through spec() (models/decoder_spec.h) and family() (models/family.h):
// generation, training, the explorer, the benchmarks and the front door (qkv/qkv.h) ask it, and
// never cast it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/models/decoder_spec.h"
#include "qkv/models/observer.h"
#include "qkv/modules/module.h"

namespace qkv {

struct ModelFamily;

class LanguageModel : public Module {
 public:
  // What it is: its description, and its family's registry entry.
  virtual const DecoderSpec& spec() const = 0;
  const ModelFamily& family() const;
  int64_t vocab_size() const { return spec().vocab_size; }          // V
  int64_t context_length() const { return spec().context_length; } // the most positions a sequence may have
  // Its configuration as its family writes it (config.json's keys, the book's cfg) with "dtype",
  // the products' precision; and a line for people: "GPT model: 12 layers x 12 heads, ...".
  virtual nlohmann::json config_json() const = 0;
  virtual std::string describe() const = 0;

  // ids: batch * tokens ids, row-major (B, T), 1 <= T <= context_length() -> logits (B, T, V).
  // observer: told each layer's values as they are made (its wants_trace() asks the attention to
  // record its trace), or null.
  virtual Tensor forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                         ForwardObserver* observer = nullptr) = 0;
  // x (B, T, E), a residual stream -> the logits the model's final norm and head make of it
  // (B, T, V). Replaces what the last forward kept for backward of those two.
  virtual Tensor head_logits(const Tensor& x) = 0;
  // dlogits (B, T, V) of the last forward: adds into every parameter's gradient.
  virtual void backward(const Tensor& dlogits) = 0;

  // A KV cache for `batch` sequences of up to `capacity` positions (0 or more than
  // context_length(): context_length()). Throws qkv::Error when the model has nothing to cache (no
  // attention layers) or past the memory limit.
  virtual kernels::KvCache make_cache(int64_t batch, kernels::CacheDtype dtype = kernels::CacheDtype::kF32,
                                      int64_t capacity = 0) const = 0;
  // The cache a generation or a chat keeps unless told otherwise: bf16 when the products run in
  // bf16 (a bf16 checkpoint, a GGUF file, --dtype bf16: half the cache's bytes and memory, as
  // llama.cpp keeps f16), f32 otherwise.
  kernels::CacheDtype default_cache_dtype() const {
    return spec().attention.dtype == Dtype::kBF16 ? kernels::CacheDtype::kBF16 : kernels::CacheDtype::kF32;
  }
  // ids (B, Tn), the next Tn tokens of each sequence at positions P .. P + Tn - 1 with
  // P = cache.length() -> the logits of the last of them (B, V); commits the step. Needs eval mode
  // (no active dropout) and P + Tn <= context_length(); leaves the last forward's state (for
  // backward) intact.
  Tensor forward_cached(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache) {
    QKV_CHECK(batch >= 1, type_name(), ": the batch (", batch, ") must be at least 1");
    Tensor logits = Tensor::empty({batch, vocab_size()});
    forward_cached_into(ids, batch, tokens, cache, logits.data());
    return logits;
  }
  // The same, the logits written into `logits` (B V floats); allocates nothing once the model's
  // working rows have grown to the step's size.
  virtual void forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                                   kernels::KvCache& cache, float* logits) = 0;
  // Whether forward_cached can run (a model without attention layers has no cache).
  virtual bool has_cache() const = 0;

  // Dropout as for sequences [begin, begin + B) of a batch of `total`: the masks the whole batch's
  // forward gives those sequences (a data-parallel rank's slice; Dropout::set_batch_slice).
  // (0, 0): whole batches.
  virtual void set_batch_slice(int64_t begin, int64_t total) = 0;

  // bf16 weights for inference: every product's weight rounded to bf16 now and kept beside the
  // floats, read by cached steps when the products are bf16 (half the bytes per decoded token). A
  // snapshot: train(true) drops it, and a caller that changes the weights otherwise
  // (load_state_dict, an optimizer step) calls this again. false: drops it.
  virtual void keep_bf16_weights(bool on = true) = 0;
  virtual bool has_bf16_weights() const = 0;
  // Whether the weights are held in bf16 only (a BF16 checkpoint loaded for generation): the state
  // dict, backward and training are refused.
  virtual bool bf16_only() const = 0;
  // The bytes of product weights one cached step reads (every block's and the head's, once): their
  // quantized blocks, their bf16 copies when the products are bf16, else the floats.
  virtual int64_t step_weight_bytes() const = 0;
};

}  // namespace qkv
