// qkv/models/gpt.h - the GPT family: the book's GPT model (chapter 4), GPT-2's architecture.
//
// Legend: B batch, T tokens, E emb_dim, V vocab_size, H n_heads, D = E / H, L n_layers.
//
//   ids (B, T) -> x = tok_emb.weight[ids] + pos_emb.weight[0:T]       (B, T, E)
//              -> x = drop_emb(x)
//              -> L x block (trf_blocks.N):
//                   x = x + drop_shortcut(att(norm1(x)))             att: the book's MultiHeadAttention(E, E, ...)
//                   x = x + drop_shortcut(ff(norm2(x)))              ff: Linear(E, 4E) -> GELU -> Linear(4E, E)
//              -> final_norm(x) -> out_head: x @ out_head.weight.T   (B, T, V), no bias
//
// As a DecoderSpec (models/decoder_spec.h): LayerNorm (eps 1e-5), GELU of width 4E, learned
// positions, biases on out_proj and the feed-forward (on q, k, v with qkv_bias), one dropout rate
// (the book's drop_rate) for the embeddings, the attention weights and the shortcuts. The head is
// the book's own Linear, or tied to tok_emb.weight as GPT-2's files are (tied_head). State names
// are the book's: tok_emb.weight, pos_emb.weight, trf_blocks.N.att.{W_query,W_key,W_value}.{weight,bias},
// trf_blocks.N.att.out_proj.{weight,bias}, trf_blocks.N.att.mask, trf_blocks.N.ff.layers.{0,2}.
// {weight,bias}, trf_blocks.N.norm{1,2}.{scale,shift}, final_norm.{scale,shift}, out_head.weight
// (not listed when tied). Built from Generator(s) it holds what torch.manual_seed(s) followed by
// the book's GPTModel(cfg) holds, and in training mode its dropouts draw PyTorch's masks from that
// generator in the book's order. Its files: models/gpt_weights.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/models/decoder_spec.h"

namespace qkv {

// The book's GPT_CONFIG dict's sizes as a spec: E / H must divide ("emb_dim (10) must be divisible
// by n_heads (4)"); validated (the book's keys in messages).
DecoderSpec gpt_spec(int64_t vocab_size, int64_t context_length, int64_t emb_dim, int64_t n_heads, int64_t n_layers,
                     double drop_rate, bool qkv_bias, bool tied_head = false);

// The book's cfg dict as JSON: vocab_size, context_length, emb_dim, n_heads, n_layers, drop_rate,
// qkv_bias (all required), tied_head, attention (auto | fused | textbook), dtype (f32 | bf16);
// an unknown key, a missing or ill-typed one is a qkv::Error naming it.
DecoderSpec gpt_spec_from_cfg(const nlohmann::json& cfg, const std::string& where = "the GPT configuration");
nlohmann::json gpt_cfg_json(const DecoderSpec& spec);

// GPT-2's sizes with the book's GPT_CONFIG_124M settings (drop_rate 0.1, qkv_bias false, untied):
// gpt2-small (E 768, L 12, H 12), gpt2-medium (1024, 24, 16), gpt2-large (1280, 36, 20),
// gpt2-xl (1600, 48, 25); vocabulary 50,257; context 1,024. Throws qkv::Error naming the known ones.
DecoderSpec gpt_preset(const std::string& name);
const std::vector<std::string>& gpt_preset_names();

}  // namespace qkv
