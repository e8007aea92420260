// qkv/models/llama.h - the Llama 3 and Qwen3 families (llama_config.h), as the book's bonus chapters
// and Hugging Face's LlamaForCausalLM / Qwen3ForCausalLM compute them.
//
// Legend: B batch, T tokens, E hidden_size, F intermediate_size, H query heads, G key/value heads,
// D head_dim, V vocab_size, L layers.
//
//   ids (B, T) -> x = embed_tokens.weight[ids]                                  (B, T, E)
//              -> L x LlamaBlock:
//                   x = x + o_proj(attention(norm(q_proj h), norm(k_proj h), v_proj h))   h = input_layernorm(x)
//                        q (B, H, T, D), k, v (B, G, T, D); QK-norm (Qwen3) then RoPE "half"
//                        (rope_theta, Llama 3's scaling) on q and k; causal; o_proj (E, H D)
//                   x = x + down_proj(silu(gate_proj h) * up_proj h)            h = post_attention_layernorm(x)
//              -> norm(x) -> lm_head: x @ lm_head.weight^T                     (B, T, V), no bias
//
// Every norm is an RMSNorm (eps rms_norm_eps); no projection has a bias; no dropout. The head is
// its own (V, E) tensor, or embed_tokens.weight when tie_word_embeddings (one tensor, both
// gradients added into it). State names are Hugging Face's: model.embed_tokens.weight,
// model.layers.N.input_layernorm.weight, model.layers.N.self_attn.{q,k,v,o}_proj.weight,
// model.layers.N.self_attn.{q,k}_norm.weight (Qwen3), model.layers.N.post_attention_layernorm.weight,
// model.layers.N.mlp.{gate,up,down}_proj.weight, model.norm.weight, lm_head.weight (not when tied).
// Built from a Generator the weights are drawn as PyTorch's modules draw theirs (embeddings N(0, 1),
// projections nn.Linear's uniform) in the order above; a checkpoint replaces them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/models/language_model.h"
#include "qkv/models/llama_config.h"
#include "qkv/modules/feed_forward.h"
#include "qkv/modules/layer_norm.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/multi_head_attention.h"

namespace qkv {

class LlamaBlock : public Module {
 public:
  LlamaBlock(const LlamaConfig& c, Generator& gen);
  const char* type_name() const override { return "LlamaBlock"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr);  // (B, T, E) -> (B, T, E)
  Tensor backward(const Tensor& doutput);
  // The block's products in bf16 (LlamaModel::keep_bf16_weights), read by cached steps in bf16 mode.
  struct Weights16 {
    std::vector<uint16_t> qkv, out, gate, up, down;  // (Q, E), (E, H D), (F, E), (F, E), (E, F)
  };
  // Working rows from the caller: h, a (B Tn, E); gate, up (B Tn, F).
  struct Scratch {
    float *h, *a, *gate, *up;
  };
  // x (B, Tn, E) at the cache's next positions, updated in place; records nothing for backward;
  // allocates nothing once the attention's buffers have grown.
  void forward_cached(float* x, int64_t B, int64_t Tn, kernels::KvCache& cache, int64_t layer, const Weights16* w16,
                      const Scratch& scratch);

  RMSNorm input_layernorm;
  MultiHeadAttention self_attn;  // W_query/W_key/W_value/out_proj are q_proj/k_proj/v_proj/o_proj
  RMSNorm post_attention_layernorm;
  SwiGLUFeedForward mlp;
};

class LlamaModel : public LanguageModel {
 public:
  LlamaModel(const LlamaConfig& config, Generator& gen);  // validated; gen only draws the weights
  const char* type_name() const override { return "LlamaModel"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;

  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t context_length() const override { return config.max_position_embeddings; }
  // config.json's keys, and "dtype": the products' precision
  nlohmann::json config_json() const override;
  std::string describe() const override;

  Tensor forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) override;  // (B, T, V)
  void backward(const Tensor& dlogits) override;
  kernels::KvCache make_cache(int64_t batch, kernels::CacheDtype dtype = kernels::CacheDtype::kF32,
                              int64_t capacity = 0) const override;
  using LanguageModel::forward_cached;  // (B, V) of the last new token, through forward_cached_into
  void forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache,
                           float* logits) override;
  bool has_cache() const override { return !layers.empty(); }
  void record_traces(bool on) { traces_.assign(on ? layers.size() : 0, AttentionTrace{}); }
  const std::vector<AttentionTrace>& traces() const { return traces_; }
  // Every projection and the head rounded to bf16 now and kept beside the floats, read by cached
  // steps when config.dtype is bf16 (as GPTModel::keep_bf16_weights; train(true) drops them).
  void keep_bf16_weights(bool on = true);
  bool has_bf16_weights() const { return !layers16_.empty(); }
  // Inference with the weights in bf16 only (a bf16 checkpoint in about its file size): every
  // two-dimensional weight - the projections, the embedding, the head - read as bf16 bits by
  // read16(state name, out) straight into the bf16 copies, the float tensors never filled (built
  // with the generator's init draws off, their memory is never mapped); the norms' weights by
  // read32. Needs config.dtype bf16. Afterwards forward() runs the cached computation over a fresh
  // cache (every position's logits, the same numbers as forward_cached gives), and the state dict,
  // backward, train(true), traces and keep_bf16_weights(false) are refused with a qkv::Error
  // saying to load the model with f32 products.
  void load_bf16_only(const std::function<void(const std::string&, uint16_t*)>& read16,
                      const std::function<void(const std::string&, float*)>& read32);
  bool bf16_only() const { return bf16_only_; }

  LlamaConfig config;
  Embedding embed_tokens;          // weight (V, E)
  std::vector<LlamaBlock> layers;  // model.layers.N
  RMSNorm norm;                    // weight (E)
  Linear lm_head;                  // weight (V, E), no bias; embed_tokens' tensors when tied

 private:
  Shape x_shape_;  // (B, T, E) of the last forward
  std::vector<AttentionTrace> traces_;
  std::vector<LlamaBlock::Weights16> layers16_;
  std::vector<uint16_t> head16_;   // (V, E)
  std::vector<uint16_t> embed16_;  // (V, E) bf16-only and untied (tied: head16_)
  bool bf16_only_ = false;
  void check_floats(const char* what) const;
  // The cached computation: logits of the last position of each sequence (B, V), or of every
  // position (B, Tn, V) with all_rows.
  void cached_pass(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache,
                   float* logits, bool all_rows);
  std::vector<float> step_x_, step_h_, step_a_, step_gate_, step_up_, step_last_;
};

}  // namespace qkv
