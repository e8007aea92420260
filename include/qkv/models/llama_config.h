// qkv/models/llama_config.h - the Llama 3 and Qwen3 families' configuration: Hugging Face's
// config.json (model_type "llama" or "qwen3"), read and validated once, and the published sizes as
// presets.
//
// Legend: E hidden_size, F intermediate_size, L num_hidden_layers, H num_attention_heads,
// G num_key_value_heads (grouped-query attention: H / G query heads share a key/value head),
// D head_dim (config.json's, or E / H), V vocab_size.
//
// The blocks (the model issue builds them): RMSNorm -> attention (q, k, v, o projections without
// bias; Qwen3: RMSNorm over each head's D of q and k before RoPE; RoPE "half" with rope_theta and
// Llama 3's rope_scaling) -> residual; RMSNorm -> SwiGLU (gate, up: E -> F; down: F -> E) ->
// residual; a final RMSNorm; the head lm_head (V, E), or tok_emb's weight when tie_word_embeddings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/bf16.h"
#include "qkv/kernels/rope.h"
#include "qkv/modules/attention_module.h"

namespace qkv {

enum class LlamaFamily { kLlama, kQwen3 };

struct LlamaConfig {
  LlamaFamily family = LlamaFamily::kLlama;
  int64_t vocab_size = 0;                 // V
  int64_t hidden_size = 0;                // E
  int64_t intermediate_size = 0;          // F
  int64_t num_hidden_layers = 0;          // L
  int64_t num_attention_heads = 0;        // H
  int64_t num_key_value_heads = 0;        // G, dividing H
  int64_t head_dim = 0;                   // D, even (RoPE rotates pairs)
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  kernels::RopeScaling rope_scaling = {};  // Llama 3's ("rope_type": "llama3"), or none
  int64_t max_position_embeddings = 0;    // the context length
  bool tie_word_embeddings = false;
  bool qk_norm() const { return family == LlamaFamily::kQwen3; }  // Qwen3's RMSNorm on q and k
  // How it runs (not config.json's): every product in f32 or bf16 (bf16 operands, f32 sums), and
  // the attention's path.
  Dtype dtype = Dtype::kF32;
  AttentionPath path = AttentionPath::kAuto;
};

// The config.json text's configuration; `where` names it in errors. Refused, naming the key and
// what was expected: a model_type other than llama and qwen3, a field missing or out of range
// (sizes not positive, heads not dividing hidden_size when head_dim is absent, num_key_value_heads
// not dividing num_attention_heads, an odd head_dim), a rope_scaling other than Llama 3's, a
// hidden_act other than silu, attention or MLP biases.
LlamaConfig parse_llama_config(const nlohmann::json& config, const std::string& where = "config.json");
// Hugging Face's config.json for c (what parse_llama_config reads back to c).
nlohmann::json llama_config_json(const LlamaConfig& c);
void validate_llama_config(const LlamaConfig& c, const std::string& where);

// The published configurations of llama-3.2-1b, llama-3.2-3b, qwen3-0.6b, qwen3-1.7b (Hugging
// Face's config.json of meta-llama/Llama-3.2-1B, -3B, Qwen/Qwen3-0.6B, -1.7B); an unknown name is
// an error listing the known ones.
LlamaConfig llama_preset(const std::string& name);
const std::vector<std::string>& llama_preset_names();

const char* llama_family_name(LlamaFamily f);  // "llama" | "qwen3"

}  // namespace qkv
