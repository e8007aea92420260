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
  }
  return "?";
}

}  // namespace

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
}

int64_t product_parameters(const DecoderSpec& s) {
  const kernels::AttentionSpec& a = s.attention;
  const int64_t E = s.width, F = s.ff_width;
  const int64_t attention = E * (a.width() + 2 * a.kv_width()) + a.width() * E;
  const int64_t ff = s.ff == FeedForwardKind::kGelu ? 2 * E * F : s.ff == FeedForwardKind::kSwiGLU ? 3 * E * F : 0;
  return s.layers * (attention + ff) + s.vocab_size * E;
}

int64_t decoder_parameters(const DecoderSpec& s, const char* what) {
  const kernels::AttentionSpec& a = s.attention;
  const int64_t E = s.width, F = s.ff_width, V = s.vocab_size;
  auto mul = [what](int64_t x, int64_t y) { return checked_mul(x, y, what); };
  auto add = [what](int64_t x, int64_t y) { return checked_add(x, y, what); };
  const int64_t Q = mul(a.heads, a.head_dim), KV = mul(a.groups(), a.head_dim);
  const int64_t norm = s.norm == NormKind::kLayerNorm ? mul(2, E) : s.norm == NormKind::kRMSNorm ? E : 0;
  int64_t attention = add(add(mul(Q, E), mul(mul(2, KV), E)), mul(E, Q));
  if (s.qkv_bias) attention = add(attention, add(Q, mul(2, KV)));
  if (s.out_bias) attention = add(attention, E);
  if (a.qk_norm) attention = add(attention, mul(2, a.head_dim));
  const int64_t ff = s.ff == FeedForwardKind::kGelu     ? add(mul(2, mul(E, F)), add(F, E))
                     : s.ff == FeedForwardKind::kSwiGLU ? mul(3, mul(E, F))
                                                        : 0;
  const int64_t block = add(add(attention, ff), s.ff == FeedForwardKind::kNone ? norm : mul(2, norm));
  int64_t n = add(mul(V, E), mul(s.layers, block));
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
