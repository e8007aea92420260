// qkv/models/llama.h - the Llama 3, Qwen2.5 and Qwen3 families, as the book's bonus chapters and
// Hugging Face's LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM compute them.
//
// Legend: B batch, T tokens, E hidden_size, F intermediate_size, H num_attention_heads, G
// num_key_value_heads (grouped-query attention: H / G query heads share a key/value head), D
// head_dim (config.json's, or E / H), V vocab_size, L num_hidden_layers.
//
//   ids (B, T) -> x = embed_tokens.weight[ids]                                  (B, T, E)
//              -> L x block (model.layers.N):
//                   x = x + o_proj(attention(norm(q_proj h), norm(k_proj h), v_proj h))   h = input_layernorm(x)
//                        q (B, H, T, D), k, v (B, G, T, D), each + its bias (Qwen2: q_proj.bias (H D),
//                        k_proj.bias, v_proj.bias (G D)); QK-norm (Qwen3) then RoPE "half"
//                        (rope_theta, Llama 3's scaling) on q and k; causal; o_proj (E, H D)
//                   x = x + down_proj(silu(gate_proj h) * up_proj h)            h = post_attention_layernorm(x)
//              -> norm(x) -> lm_head: x @ lm_head.weight^T                     (B, T, V), no bias
//
// As a DecoderSpec (models/decoder_spec.h): RMSNorm (eps rms_norm_eps, QK-norm's too), SwiGLU of
// width F, no learned positions, no biases but Qwen2's on q, k and v, no dropout; the head its own (V, E) tensor, or
// embed_tokens.weight when tie_word_embeddings. State names are Hugging Face's:
// model.embed_tokens.weight, model.layers.N.input_layernorm.weight,
// model.layers.N.self_attn.{q,k,v,o}_proj.weight, model.layers.N.self_attn.{q,k,v}_proj.bias (Qwen2),
// model.layers.N.self_attn.{q,k}_norm.weight (Qwen3),
// model.layers.N.post_attention_layernorm.weight, model.layers.N.mlp.{gate,up,down}_proj.weight,
// model.norm.weight, lm_head.weight (not when tied). Built from a Generator the weights are drawn
// as PyTorch's modules draw theirs (embeddings N(0, 1), projections nn.Linear's uniform) in that
// order. Their files: Hugging Face's folder (models/hf_folder.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/models/decoder_spec.h"

namespace qkv {

// config.json (model_type "llama", "qwen2" or "qwen3") read into the one description; `where` names it in
// errors. Refused, naming the key and what was expected: another model_type, a key missing or of
// the wrong type, a size out of range (validate_decoder_spec with config.json's keys: heads not
// dividing hidden_size when head_dim is absent, num_key_value_heads not dividing
// num_attention_heads, an odd head_dim), a rope_scaling other than Llama 3's, a hidden_act other
// than silu, attention or MLP biases (Qwen2: MLP biases, or use_sliding_window true).
DecoderSpec read_llama_config(const nlohmann::json& config, const std::string& where = "config.json");
// Hugging Face's config.json of a spec of these families (what read_llama_config reads back).
nlohmann::json llama_config_json(const DecoderSpec& spec);

// The published configurations of llama-3.2-1b, llama-3.2-3b, qwen2.5-0.5b, qwen3-0.6b, qwen3-1.7b
// (Hugging Face's config.json of meta-llama/Llama-3.2-1B, -3B, Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B,
// -1.7B); an unknown name is
// an error listing the known ones.
DecoderSpec llama_preset(const std::string& name);
const std::vector<std::string>& llama_preset_names();

}  // namespace qkv
