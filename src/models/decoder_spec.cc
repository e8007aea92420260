// The one description of a decoder, validated once. See include/qkv/models/decoder_spec.h.
#include "qkv/models/decoder_spec.h"

#include <cmath>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

std::string own_name(DecoderField f) {
  switch (f) {
    case DecoderField::kVocabSize: return "vocab_size";
    case DecoderField::kContextLength: return "context_length";
    case DecoderField::kWidth: return "width";
    case DecoderField::kLayers: return "layers";
    case DecoderField::kFfWidth: return "ff_width";
    case DecoderField::kNormEps: return "norm_eps";
    case DecoderField::kLayerKinds: return "layer_kinds";
    case DecoderField::kLinearValueHeads: return "linear.value_heads";
    case DecoderField::kLinearKeyHeads: return "linear.key_heads";
    case DecoderField::kLinearKeyDim: return "linear.key_dim";
    case DecoderField::kLinearValueDim: return "linear.value_dim";
    case DecoderField::kLinearConvKernel: return "linear.conv_kernel";
  }
  return "?";
}

// A Gated DeltaNet block's parameters: its products' (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a,
// out_proj) and, with `all`, the convolution, dt_bias, A_log and the gated norm's weight.
int64_t linear_block_parameters(const DecoderSpec& s, bool all, const char* what) {
  const LinearAttentionSizes& l = s.linear;
  auto mul = [what](int64_t x, int64_t y) { return checked_mul(x, y, what); };
  auto add = [what](int64_t x, int64_t y) { return checked_add(x, y, what); };
  const int64_t Kd = mul(l.key_heads, l.key_dim), Vd = mul(l.value_heads, l.value_dim);
  const int64_t C = add(mul(2, Kd), Vd), E = s.width;
  int64_t n = add(add(mul(C, E), mul(Vd, E)), add(mul(mul(2, l.value_heads), E), mul(E, Vd)));
  if (all) n = add(n, add(add(mul(C, l.conv_kernel), mul(2, l.value_heads)), l.value_dim));
  return n;
}

}  // namespace

const char* layer_kind_name(LayerKind k) { return k == LayerKind::kLinear ? "linear_attention" : "full_attention"; }

int64_t DecoderSpec::linear_layers() const {
  int64_t n = 0;
  for (LayerKind k : layer_kinds) n += k == LayerKind::kLinear;
  return n;
}

DecoderNames spec_names() { return {own_name, kernels::spec_field_name}; }

void validate_decoder_spec(const DecoderSpec& s, const std::string& where, const DecoderNames& names) {
  auto key = [&](DecoderField f) { return names.field(f); };
  for (const auto& [field, v] : {std::pair{DecoderField::kVocabSize, s.vocab_size},
                                 {DecoderField::kContextLength, s.context_length}, {DecoderField::kWidth, s.width}})
    QKV_CHECK(v > 0, where, ": ", key(field), " (", v, ") must be positive");
  QKV_CHECK(s.layers >= 0, where, ": ", key(DecoderField::kLayers), " (", s.layers, ") must not be negative");
  if (s.ff != FeedForwardKind::kNone)
    QKV_CHECK(s.ff_width > 0, where, ": ", key(DecoderField::kFfWidth), " (", s.ff_width, ") must be positive");
  if (s.norm != NormKind::kNone)
    QKV_CHECK(std::isfinite(s.norm_eps) && s.norm_eps > 0, where, ": ", key(DecoderField::kNormEps), " (",
              s.norm_eps, ") must be a positive number");
  const kernels::AttentionSpec& a = s.attention;
  kernels::validate_attention_spec(a, where, names.attention);
  QKV_CHECK(a.causal, where, ": a decoder's attention is causal (attention.causal must be true)");
  QKV_CHECK(a.window <= s.context_length, where, ": ", names.attention(kernels::SpecField::kWindow), " (", a.window,
            ") must be in [0, ", key(DecoderField::kContextLength), " = ", s.context_length, "] (0: no window)");
  QKV_CHECK(a.dtype == Dtype::kF32 || s.path != AttentionPath::kTextbook, where,
            ": bf16 products run on the fused attention; the textbook path computes in f32 only");
  QKV_CHECK(a.dtype == Dtype::kF32 || a.dropout == 0.0 || s.path == AttentionPath::kFused, where,
            ": bf16 products with dropout (", a.dropout, ") need the fused attention (auto runs the textbook path ",
            "while dropout is on, for PyTorch's masks, in f32)");
  QKV_CHECK(!s.norm_unit_offset || s.norm == NormKind::kRMSNorm, where,
            ": the (1 + weight) scale is RMSNorm's; this model's norm is ", norm_kind_name(s.norm));
  QKV_CHECK(s.layer_kinds.empty() || static_cast<int64_t>(s.layer_kinds.size()) == s.layers, where, ": ",
            key(DecoderField::kLayerKinds), " has ", s.layer_kinds.size(), " entries for ", key(DecoderField::kLayers),
            " (", s.layers, "): one per layer");
  if (s.linear_layers() == 0) return;
  const LinearAttentionSizes& l = s.linear;
  for (const auto& [field, v] : {std::pair{DecoderField::kLinearValueHeads, l.value_heads},
                                 {DecoderField::kLinearKeyHeads, l.key_heads}, {DecoderField::kLinearKeyDim, l.key_dim},
                                 {DecoderField::kLinearValueDim, l.value_dim},
                                 {DecoderField::kLinearConvKernel, l.conv_kernel}})
    QKV_CHECK(v > 0, where, ": ", key(field), " (", v, ") must be positive (the model has ", s.linear_layers(),
              " linear-attention layers)");
  QKV_CHECK(l.value_heads % l.key_heads == 0, where, ": ", key(DecoderField::kLinearValueHeads), " (", l.value_heads,
            ") must be a multiple of ", key(DecoderField::kLinearKeyHeads), " (", l.key_heads, ")");
  QKV_CHECK(s.norm == NormKind::kRMSNorm && s.attention.dropout == 0.0, where,
            ": linear-attention layers come with RMSNorm and no dropout (Qwen3.5's)");
  linear_block_parameters(s, true, "a linear-attention layer's parameters");  // in int64
}

int64_t product_parameters(const DecoderSpec& s) {
  const kernels::AttentionSpec& a = s.attention;
  const int64_t E = s.width, F = s.ff_width;
  const int64_t attention = E * (a.width() * (s.attention_gate ? 2 : 1) + 2 * a.kv_width()) + a.width() * E;
  const int64_t ff = s.ff == FeedForwardKind::kGelu ? 2 * E * F : s.ff == FeedForwardKind::kSwiGLU ? 3 * E * F : 0;
  const int64_t linear = s.linear_layers();
  return (s.layers - linear) * attention + linear * linear_block_parameters(s, false, "the products' parameters") +
         s.layers * ff + s.vocab_size * E;
}

int64_t decoder_parameters(const DecoderSpec& s, const char* what) {
  const kernels::AttentionSpec& a = s.attention;
  const int64_t E = s.width, F = s.ff_width, V = s.vocab_size;
  auto mul = [what](int64_t x, int64_t y) { return checked_mul(x, y, what); };
  auto add = [what](int64_t x, int64_t y) { return checked_add(x, y, what); };
  const int64_t Q = mul(a.heads, a.head_dim), KV = mul(a.groups(), a.head_dim);
  const int64_t norm = s.norm == NormKind::kLayerNorm ? mul(2, E) : s.norm == NormKind::kRMSNorm ? E : 0;
  int64_t attention = add(add(mul(Q, E), mul(mul(2, KV), E)), mul(E, Q));
  if (s.attention_gate) attention = add(attention, mul(Q, E));
  if (s.qkv_bias) attention = add(attention, add(s.attention_gate ? mul(2, Q) : Q, mul(2, KV)));
  if (s.out_bias) attention = add(attention, E);
  if (a.qk_norm) attention = add(attention, mul(2, a.head_dim));
  const int64_t ff = s.ff == FeedForwardKind::kGelu     ? add(mul(2, mul(E, F)), add(F, E))
                     : s.ff == FeedForwardKind::kSwiGLU ? mul(3, mul(E, F))
                                                        : 0;
  const int64_t norms = s.ff == FeedForwardKind::kNone ? norm : mul(2, norm);
  const int64_t linear = s.linear_layers();
  int64_t n = add(mul(V, E), mul(s.layers - linear, add(add(attention, ff), norms)));
  if (linear > 0) n = add(n, mul(linear, add(add(linear_block_parameters(s, true, what), ff), norms)));
  if (s.learned_positions) n = add(n, mul(s.context_length, E));
  n = add(n, norm);  // the final norm
  if (!s.tied_head) n = add(n, mul(V, E));
  if (s.head_bias) n = add(n, V);
  return n;
}

void check_decoder_fits(const DecoderSpec& s, const char* what) {
  check_memory_request(checked_bytes(decoder_parameters(s, what), 4, what), what);
}

}  // namespace qkv
