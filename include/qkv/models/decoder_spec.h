// qkv/models/decoder_spec.h - what a decoder-only language model is, as one value.
//
// Every family qkv runs (models/family.h: the attention-only LM, the book's GPT and GPT-2, Llama 3,
// Qwen3) is this one decoder with different choices. A family's source - Hugging Face's
// config.json, the book's cfg dict, a `qkv train` checkpoint's options - is read into a
// DecoderSpec once, validated once (validate_decoder_spec), and a DecoderModel (models/decoder.h)
// is built from it. Code that needs to know what a model is asks its spec (LanguageModel::spec()).
//
// Legend: B batch, T tokens, V vocab_size, E width, L layers, F ff_width, H heads, G key/value
// heads, D head_dim (the attention's: kernels/attention_spec.h).
//
//   ids (B, T) -> x = embed[ids] (+ pos_emb[0:T] with learned_positions)     (B, T, E)
//              -> x = dropout(x)                                              shortcut_dropout
//              -> L x block:
//                   x = x + dropout(attention(norm1(x)))     attention: q, k, v (H D | G D, E) (+ qkv_bias),
//                                                            the spec's QK-norm, RoPE, window, ...; o (E, H D)
//                   x = x + dropout(ff(norm2(x)))            ff: none, or GELU / SwiGLU of width F
//              -> norm(x) -> head: x W^T (+ head_bias)                        (B, T, V)
//
//   norm   kNone: the identity (the attention-only LM: no norms at all) | kLayerNorm: scale, shift,
//          eps norm_eps | kRMSNorm: weight, eps norm_eps
//   ff     kNone: no second half (the attention-only LM) | kGelu: Linear(E, F) -> GELU (tanh) ->
//          Linear(F, E), with biases | kSwiGLU: down(silu(gate(x)) * up(x)), without
//   the head is tok_emb's weight when tied_head (one tensor, both gradients added into it)
//   norm_unit_offset: every RMSNorm (the blocks', the final one, QK-norm's) scales by 1 + weight,
//          the weights zero-initialised (Qwen3.5)
//   attention_gate: out_proj(context * sigmoid(gate)), the gate's rows packed with the queries' in
//          q (2 H D, E): each head's D query rows, then its D gate rows (Qwen3.5's q_proj)
//   layer_kinds: which blocks mix tokens by attention and which by Qwen3.5's Gated DeltaNet
//          (modules/gated_deltanet_layer.h: x = x + linear_attention(norm1(x)), sized by `linear`,
//          in f32; config.json's layer_types); empty: every block attends
//   dropout: attention.dropout on the attention weights; with shortcut_dropout the same rate on the
//   embeddings and each shortcut too (the book's one drop_rate)
//   attention.dtype: the precision of every product of the model (bf16: bf16 operands, f32 sums),
//   the head's too unless head_f32
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/kernels/attention_spec.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/feed_forward.h"
#include "qkv/modules/norm.h"

namespace qkv {

// What mixes a block's tokens (config.json's layer_types: "full_attention" | "linear_attention").
enum class LayerKind { kAttention, kLinear };
const char* layer_kind_name(LayerKind k);

// Qwen3.5's Gated DeltaNet layers' sizes (config.json's linear_num_value_heads, linear_num_key_heads,
// linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim).
struct LinearAttentionSizes {
  int64_t value_heads = 0, key_heads = 0, key_dim = 0, value_dim = 0, conv_kernel = 0;
  bool operator==(const LinearAttentionSizes&) const = default;
};

struct DecoderSpec {
  std::string family;          // the registry's name of its family: "attention-lm" | "gpt" | "llama" | "qwen3"
  int64_t vocab_size = 0;      // V
  int64_t context_length = 0;  // the most positions a sequence may have
  int64_t width = 0;           // E: the embeddings, the residual stream
  int64_t layers = 0;          // L, >= 0
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  FeedForwardKind ff = FeedForwardKind::kGelu;
  int64_t ff_width = 0;        // F
  bool learned_positions = true;  // pos_emb (context_length, E) added to the token embeddings
  bool tied_head = false;
  bool qkv_bias = false;       // biases on q, k, v
  bool out_bias = true;        // a bias on the attention's output projection (GELU's linears always have
                               // theirs, SwiGLU's none)
  bool head_bias = false;
  bool head_f32 = false;       // the head's product in f32 whatever attention.dtype (the attention-only
                               // LM's mixed precision: only its attention blocks run in bf16)
  bool shortcut_dropout = true;
  AttentionPath path = AttentionPath::kAuto;  // how the attention is computed (modules/attention_module.h)
  // heads, kv_heads, head_dim, rope and its base and scaling, qk_norm, window, alibi, softcap,
  // dropout, dtype; causal always
  kernels::AttentionSpec attention;
  bool norm_unit_offset = false;  // RMSNorms scale by 1 + weight (Qwen3.5)
  bool attention_gate = false;    // the attention's output gate, packed in q (Qwen3.5)
  std::vector<LayerKind> layer_kinds = {};  // empty (every block attends), or one per layer
  LinearAttentionSizes linear = {};         // the kLinear blocks' sizes

  LayerKind kind(int64_t layer) const {
    return layer_kinds.empty() ? LayerKind::kAttention : layer_kinds[static_cast<size_t>(layer)];
  }
  int64_t linear_layers() const;  // how many blocks are kLinear
};

// A field of the spec, for messages: each family names them its own way (config.json's
// "hidden_size", the book's emb_dim).
enum class DecoderField {
  kVocabSize, kContextLength, kWidth, kLayers, kFfWidth, kNormEps, kLayerKinds,
  kLinearValueHeads, kLinearKeyHeads, kLinearKeyDim, kLinearValueDim, kLinearConvKernel
};
struct DecoderNames {
  std::string (*field)(DecoderField);  // the family's key for a field
  kernels::SpecNamer attention;        // ... and for the attention's
};
DecoderNames spec_names();  // the spec's own: vocab_size, context_length, width, layers, ff_width, norm_eps

// Every rule, once: sizes positive (layers >= 0; ff_width with a feed-forward), norm_eps finite and
// positive with a norm, the attention spec valid (validate_attention_spec) and causal, a window
// within the context, bf16 products on the fused path; layer_kinds empty or one per layer, with
// linear blocks the linear sizes positive (value heads a multiple of key heads) and RMSNorm; the
// unit offset with RMSNorm only. Throws qkv::Error (AttentionSpecError for the
// attention's fields) "<where>: <key> (<value>) must ..." with keys named by `names`.
void validate_decoder_spec(const DecoderSpec& s, const std::string& where, const DecoderNames& names = spec_names());

// The parameters the products read: every projection, feed-forward and head weight (P of the
// benchmarks: each decoded token reads them once).
int64_t product_parameters(const DecoderSpec& s);
// Every parameter of a model of the spec (embeddings, norms and biases too), in checked
// arithmetic: a count beyond int64 is a qkv::Error naming `what` ("exceeds the largest size").
int64_t decoder_parameters(const DecoderSpec& s, const char* what = "the model's parameters");
// A model of the spec fits the memory limit (core/limits.h: its parameters in float32), checked
// before anything is allocated: every model is built only after this.
void check_decoder_fits(const DecoderSpec& s, const char* what = "the model's parameters");

}  // namespace qkv
