// qkv/models/attention_lm.h - the attention-lm family: chapter 3's attention-only language model,
// token embedding + positional embedding + N blocks of causal MultiHeadAttention, each with a
// residual connection + a linear output head. A DecoderModel (models/decoder.h) of lm_spec(config).
//
//   ids (B, T) -> x = tok_emb.weight[ids] + pos_emb.weight[0:T]        (B, T, C)
//              -> for each block: x = x + MultiHeadAttention(x)        (B, T, C)
//              -> logits = out_head(x) = x @ out_head.weight.T + bias  (B, T, V)
//
// C = d_model; each block is the book's MultiHeadAttention(C, C, context_length, dropout,
// num_heads, qkv_bias), without norms or feed-forward. State names are those of the PyTorch twin in
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

#include "qkv/models/decoder_spec.h"
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
                true}.at_least(0),
    c.vocab_size...);
  v(OptionField{"d_model", "--d-model", "Embedding and attention width", true, true}.at_least(1), c.d_model...);
  v(OptionField{"num_heads", "--num-heads", "Heads per attention block", true, true}.at_least(1), c.attention.heads...);
  v(OptionField{"num_layers", "--num-layers", "Attention blocks", true, true}.at_least(1), c.num_layers...);
  v(OptionField{"context_length", "--context-length",
                "Positions the model has (default: the task's sequence length; 64 for text)", false, true}
        .at_least(0),
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

// The one description of an attention LM of `c` (the attention-lm family: no norms, no
// feed-forward, learned positions, out_head with a bias, dropout on the attention weights only,
// bf16 mode in the attention blocks only); and back.
DecoderSpec lm_spec(const LMConfig& c);
LMConfig lm_config_of(const DecoderSpec& s);

// What an attention LM was trained on, which decides its tokenizer: a built-in task (copy, reverse:
// the task's letters), a text file (GPT-2's tokens of it), or fixed batches of ids (none).
enum class TrainTask { kCopy, kReverse, kText, kData };
TrainTask parse_train_task(const std::string& name);  // "copy" | "reverse" | "text" | "data"
const char* train_task_name(TrainTask task);
const std::vector<std::string>& train_task_names();  // every name, in enum order
bool is_builtin_task(TrainTask task);  // copy or reverse
inline nlohmann::json option_to_json(TrainTask v) { return train_task_name(v); }
void read_option(const nlohmann::json& j, TrainTask& out, const std::string& key);

}  // namespace qkv
