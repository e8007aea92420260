// qkv/models/qwen3_5.h - the Qwen3.5 family (its text model), as the book's ch05/16_qwen3.5 and
// Hugging Face's Qwen3_5ForConditionalGeneration compute it.
//
// Legend: B batch, T tokens, E hidden_size, F intermediate_size, H num_attention_heads, G
// num_key_value_heads, D head_dim, R = D * partial_rotary_factor the rotated dims, V vocab_size,
// L num_hidden_layers; Hv, Hk, Dk, Dv, K the linear layers' value heads, key heads, key and value
// widths and convolution kernel (linear_num_value_heads, ...).
//
//   ids (B, T) -> x = embed_tokens.weight[ids]                                       (B, T, E)
//              -> L x block (model.language_model.layers.N), layer_types[N] saying which mixer:
//                   h = input_layernorm(x)
//                   full_attention:   q, gate = q_proj(h) per head (each head's D query rows, then its D
//                                     gate rows); QK-norm, RoPE "half" on the first R of D (rope_theta);
//                                     x = x + o_proj(attention(q, k_proj h, v_proj h) * sigmoid(gate))
//                   linear_attention: x = x + linear_attn(h), Gated DeltaNet (modules/gated_deltanet_layer.h)
//                   x = x + down_proj(silu(gate_proj h) * up_proj h)            h = post_attention_layernorm(x)
//              -> norm(x) -> lm_head (embed_tokens.weight when tied)           (B, T, V)
// Every RMSNorm but the linear layers' gated one scales by 1 + weight (zero-initialised), computed
// in float32 (eps rms_norm_eps); the linear layers compute in f32 whatever the products' dtype.
// State names are Hugging Face's, below model.language_model.: embed_tokens.weight,
// layers.N.{input_layernorm,post_attention_layernorm}.weight, layers.N.self_attn.{q,k,v,o}_proj.weight,
// layers.N.self_attn.{q,k}_norm.weight, layers.N.linear_attn.{in_proj_qkv,in_proj_z,in_proj_b,
// in_proj_a,out_proj}.weight, .conv1d.weight, .dt_bias, .A_log, .norm.weight,
// layers.N.mlp.{gate,up,down}_proj.weight, norm.weight; lm_head.weight unless tied. A folder's
// vision tower (model.visual.) and multi-token-prediction layers (mtp.) are not the text model's:
// skipped. Built from a Generator the weights are drawn as the book's Qwen3_5Model draws them.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/models/decoder_spec.h"

namespace qkv {

// config.json (model_type "qwen3_5", the text model's keys under "text_config") read into the one
// description; `where` names it in errors. Refused, naming the key and what was expected: another
// model_type, a key missing or of the wrong type, sizes out of range (validate_decoder_spec with
// config.json's keys), a layer type other than the two, a layer_types list not one per layer, a
// partial_rotary_factor leaving no even number of rotated dims, a rope_type other than "default",
// a hidden_act other than silu, attention biases, experts (Qwen3.5's MoE models).
DecoderSpec read_qwen3_5_config(const nlohmann::json& config, const std::string& where = "config.json");
// Its config.json (what read_qwen3_5_config reads back).
nlohmann::json qwen3_5_config_json(const DecoderSpec& spec);

// The published configuration of qwen3.5-0.8b (Qwen/Qwen3.5-0.8B's text model, as the book's
// notebook gives it); an unknown name is an error naming the known one.
DecoderSpec qwen3_5_preset(const std::string& name);

}  // namespace qkv
