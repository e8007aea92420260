// qkv/models/attention_lm.h - an attention-only language model: token embedding + positional
// embedding + N blocks of causal MultiHeadAttention, each with a residual connection + a linear
// output head.
//
//   ids (B, T) -> x = tok_emb.weight[ids] + pos_emb.weight[0:T]        (B, T, C)
//              -> for each block: x = x + MultiHeadAttention(x)        (B, T, C)
//              -> logits = out_head(x) = x @ out_head.weight.T + bias  (B, T, V)
//
// C = d_model; each block is the book's MultiHeadAttention(C, C, context_length, dropout,
// num_heads, qkv_bias). State names are those of the PyTorch twin in
// tests/pytorch/attention_lm.py (tok_emb.weight, pos_emb.weight, blocks.0.W_query.weight, ...,
// blocks.0.mask, out_head.weight, out_head.bias), and built from Generator(s) it holds what
// torch.manual_seed(s) followed by that class's constructor holds. Dropout (on the attention
// weights) draws from the same generator, as PyTorch's global generator, so training with dropout
// reproduces PyTorch's masks too.
#pragma once

#include <concepts>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/multi_head_attention.h"
#include "qkv/models/language_model.h"
#include "qkv/models/option_fields.h"

namespace qkv {

struct LMConfig {
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  int64_t d_model = 64;    // C: the embeddings' and the blocks' width
  int64_t num_layers = 2;
  bool qkv_bias = false;
  AttentionPath path = AttentionPath::kAuto;  // the blocks' computation (fused unless PyTorch dropout)
  // The blocks' attention (kernels/attention_spec.h): heads (4 by default), head_dim = d_model /
  // heads (set by set_head_dim; validate_lm_config checks heads * head_dim == d_model), causal,
  // kv_heads, rope, window, alibi, softcap (all off by default), dropout on the attention weights,
  // dtype: f32, or bf16 (mixed precision: bf16 products and q, k, v; fp32 master weights,
  // optimiser state, sums, softmax and gradients; the embeddings and the output head stay f32).
  kernels::AttentionSpec attention = {.heads = 4, .head_dim = 16};
};

// head_dim = d_model / heads, the only width the attention LM's blocks have (the book's
// MultiHeadAttention(d_model, d_model, ..., num_heads)); throws qkv::Error "d_model (10) must be
// divisible by num_heads (4)". Called where a config is read (JSON, the command line's flags).
void set_head_dim(LMConfig& c);

// Throws qkv::Error naming the first field out of its range (and its value) with what it must be;
// the attention's fields by their JSON keys (validate_attention_spec with attention_config_name).
void validate_lm_config(const LMConfig& c);

// LMConfig's fields, once (see option_fields.h): JSON keys as the checkpoints' "model" object
// spells them (every one required but "attention" and the variants, absent from the first
// checkpoints: an absent one keeps its default), and the flags of `qkv train`. head_dim is not a
// field: set_head_dim derives it.
template <typename V, typename... C>
  requires(std::same_as<std::remove_const_t<C>, LMConfig> && ...)
void visit_fields(V&& v, C&... c) {
  v(OptionField{"vocab_size", "--vocab-size", "--data only: the vocabulary size (default: largest id + 1)", false,
                true},
    c.vocab_size...);
  v(OptionField{"d_model", "--d-model", "Embedding and attention width", true, true}, c.d_model...);
  v(OptionField{"num_heads", "--num-heads", "Heads per attention block", true, true}, c.attention.heads...);
  v(OptionField{"num_layers", "--num-layers", "Attention blocks", true, true}, c.num_layers...);
  v(OptionField{"context_length", "--context-length",
                "Positions the model has (default: the task's sequence length; 64 for text)", false, true},
    c.context_length...);
  v(OptionField{"dropout", "--dropout", "Dropout on the attention weights, in [0, 1)", true, true},
    c.attention.dropout...);
  v(OptionField{"qkv_bias", "--qkv-bias", "Give the query, key and value projections a bias", false, true},
    c.qkv_bias...);
  v(OptionField{"attention", "--attention",
                "auto (fused; textbook while dropout is on, for PyTorch's masks) | fused | textbook", true, false},
    c.path...);
  v(OptionField{"num_kv_heads", "--num-kv-heads",
                "Key/value heads G, dividing --num-heads (grouped-query attention; 1: multi-query; 0: --num-heads)",
                true, false},
    c.attention.kv_heads...);
  v(OptionField{"rope", "--rope",
                "Rotary position embedding of queries and keys: none | half (pairs i, i + D/2: the book's Llama) | "
                "interleaved (pairs 2i, 2i + 1: GPT-J, Meta's Llama)",
                true, false},
    c.attention.rope...);
  v(OptionField{"rope_base", "--rope-base", "RoPE's base (frequencies base^(-2i/D)), > 0", true, false},
    c.attention.rope_base...);
  v(OptionField{"window", "--window", "Sliding window: query i sees keys j > i - W (0: no window)", true, false},
    c.attention.window...);
  v(OptionField{"alibi", "--alibi", "ALiBi bias -slope_h * (i - j) with the paper's slopes", false, false},
    c.attention.alibi...);
  v(OptionField{"softcap", "--softcap", "Cap the scaled scores as C * tanh(x / C) (Gemma 2; 0: none)", true, false},
    c.attention.softcap...);
  v(OptionField{"dtype", "--dtype",
                "The attention blocks' products: f32 | bf16 (mixed precision: bf16 products, fp32 master weights "
                "and optimiser state)",
                true, false},
    c.attention.dtype...);
}

nlohmann::json to_json(const LMConfig& c);
// Throws qkv::Error naming a missing, unknown or ill-typed key.
LMConfig lm_config_from_json(const nlohmann::json& j);

class AttentionLM : public LanguageModel {
 public:
  AttentionLM(const LMConfig& config, Generator& gen);
  const char* type_name() const override { return "AttentionLM"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;

  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t context_length() const override { return config.context_length; }
  nlohmann::json config_json() const override;
  std::string describe() const override;

  // ids: batch * tokens ids, row-major (B, T), T <= context_length -> logits (B, T, V)
  Tensor forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) override;
  // dlogits (B, T, V) of the last forward: adds into every parameter's gradient.
  void backward(const Tensor& dlogits) override;

  // Data-parallel training: the batches to come are sequences [begin, begin + n) of batches of
  // `total`; every block's dropout draws each sequence's mask as the whole batch would (Dropout's
  // set_batch_slice). (0, 0): whole batches.
  void set_batch_slice(int64_t begin, int64_t total);

  // Inference with a KV cache (decoding): a cache of every block's keys and values for `batch`
  // sequences of up to context_length positions (layers = blocks, capacity = context_length).
  // Throws qkv::Error for a model without blocks (nothing to cache) or past the memory limit.
  kernels::KvCache make_cache(int64_t batch, kernels::CacheDtype dtype = kernels::CacheDtype::kF32,
                              int64_t capacity = 0) const override;
  // ids (B, Tn), row-major: the next Tn tokens of each sequence, at positions P .. P + Tn - 1
  // with P = cache.length() -> the logits of the last of them (B, V), what forward() of the
  // whole sequence gives at position P + Tn - 1 (the output head runs on that row only). Every
  // block attends over the cache (MultiHeadAttention::forward_cached), then the step is committed
  // (cache.length() += Tn). Needs eval mode (no active dropout), P + Tn <= context_length, a cache
  // from make_cache (or of the same shape) with no step in progress; qkv::Error otherwise. Leaves
  // the state of the last forward (for backward) intact. Start a new sequence with cache.reset().
  Tensor forward_cached(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                        kernels::KvCache& cache) override;
  bool has_cache() const override { return !blocks.empty(); }

  // Where a forward on `ids` first produces a NaN or infinity: a parameter (by state-dict name),
  // or an intermediate ("blocks.1.attn_scores", "logits", ...). "" when everything is finite.
  // Runs in eval mode and draws nothing.
  std::string first_non_finite(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens);

  LMConfig config;
  Embedding tok_emb;                     // weight (V, C)
  PositionalEmbedding pos_emb;           // weight (context_length, C)
  std::vector<MultiHeadAttention> blocks;
  Linear out_head;                       // weight (V, C), bias (V)

 private:
  Shape x_shape_;  // (B, T, C) of the last forward
};

}  // namespace qkv
