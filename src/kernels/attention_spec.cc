// The attention spec's one validator. See include/qkv/kernels/attention_spec.h.
#include "qkv/kernels/attention_spec.h"

#include <cmath>

namespace qkv::kernels {
namespace {

[[noreturn]] void refuse(SpecField field, const std::string& who, const std::string& message) {
  throw AttentionSpecError(field, who.empty() ? message : who + ": " + message);
}

}  // namespace

std::string spec_field_name(SpecField field) {
  switch (field) {
    case SpecField::kHeads: return "heads";
    case SpecField::kKvHeads: return "kv_heads";
    case SpecField::kHeadDim: return "head_dim";
    case SpecField::kWindow: return "window";
    case SpecField::kRope: return "rope";
    case SpecField::kRopeBase: return "rope_base";
    case SpecField::kRopeScaling: return "rope_scaling";
    case SpecField::kRopeDim: return "rope_dim";
    case SpecField::kQkNorm: return "qk_norm_eps";
    case SpecField::kAlibiSlopes: return "alibi_slopes";
    case SpecField::kSoftcap: return "softcap";
    case SpecField::kDropout: return "dropout";
  }
  return "?";
}

void check_window(int64_t window, const std::string& who, SpecNamer namer) {
  if (window < 0)
    refuse(SpecField::kWindow, who, str(namer(SpecField::kWindow), " (", window, ") must be positive (or 0 for none)"));
}

void check_softcap(double softcap, const std::string& who, SpecNamer namer) {
  if (!(std::isfinite(softcap) && softcap >= 0.0 && softcap <= kMaxSoftcap))
    refuse(SpecField::kSoftcap, who,
           str(namer(SpecField::kSoftcap), " (", softcap, ") must be positive and at most 1e+30 (or 0 for none)"));
}

void check_dropout(double p, const std::string& who, SpecNamer namer) {
  if (!(p >= 0.0 && p < 1.0))
    refuse(SpecField::kDropout, who, str(namer(SpecField::kDropout), " (", p, ") must be in [0, 1)"));
}

void check_alibi_slopes(const float* slopes, int64_t heads, const std::string& who, SpecNamer namer) {
  for (int64_t h = 0; slopes && h < heads; ++h)
    if (!std::isfinite(slopes[h]))
      refuse(SpecField::kAlibiSlopes, who,
             str(namer(SpecField::kAlibiSlopes), "[", h, "] (", slopes[h], ") must be finite"));
}

void validate_attention_spec(const AttentionSpec& s, const std::string& who, SpecNamer namer) {
  const auto name = [namer](SpecField f) { return namer(f); };
  if (s.heads < 1) refuse(SpecField::kHeads, who, str(name(SpecField::kHeads), " (", s.heads, ") must be at least 1"));
  if (s.kv_heads < 0 || s.kv_heads > s.heads || (s.kv_heads > 0 && s.heads % s.kv_heads != 0))
    refuse(SpecField::kKvHeads, who,
           str(name(SpecField::kKvHeads), " (", s.kv_heads, ") must divide ", name(SpecField::kHeads), " (", s.heads,
               ") (or be 0 for as many as ", name(SpecField::kHeads), ")"));
  if (s.head_dim < 1)
    refuse(SpecField::kHeadDim, who, str(name(SpecField::kHeadDim), " (", s.head_dim, ") must be at least 1"));
  if (s.rope != RopeLayout::kNone && s.rope_dim == 0) {  // (a partial rotation needs only rope_dim even)
    if (s.head_dim % 2 != 0)
      refuse(SpecField::kRope, who,
             str(name(SpecField::kRope), " (", rope_layout_name(s.rope), ") needs an even ", name(SpecField::kHeadDim),
                 ", got ", s.head_dim));
  }
  if (s.rope_dim != 0 && (s.rope == RopeLayout::kNone || s.rope_dim < 2 || s.rope_dim % 2 != 0 || s.rope_dim > s.head_dim))
    refuse(SpecField::kRopeDim, who,
           s.rope == RopeLayout::kNone
               ? str(name(SpecField::kRopeDim), " (", s.rope_dim, ") says how much of a head RoPE rotates: it needs ",
                     name(SpecField::kRope))
               : str(name(SpecField::kRopeDim), " (", s.rope_dim, ") must be even, at least 2 and at most ",
                     name(SpecField::kHeadDim), " (", s.head_dim, "), or 0 for all of it"));
  if (!(std::isfinite(s.rope_base) && s.rope_base > 0.0))
    refuse(SpecField::kRopeBase, who,
           str(name(SpecField::kRopeBase), " (", s.rope_base, ") must be a positive finite number"));
  if (s.rope_scaling.on()) {
    if (s.rope == RopeLayout::kNone)
      refuse(SpecField::kRopeScaling, who, str(name(SpecField::kRopeScaling), " scales RoPE's frequencies: it needs ",
                                               name(SpecField::kRope)));
    try {
      rope_frequency(0, std::max<int64_t>(s.rotary_dim(), 2), s.rope_base, s.rope_scaling);  // its ranges
    } catch (const Error& e) {
      refuse(SpecField::kRopeScaling, who, str(name(SpecField::kRopeScaling), ": ", e.what()));
    }
  }
  if (s.qk_norm && !(std::isfinite(s.qk_norm_eps) && s.qk_norm_eps > 0.0))
    refuse(SpecField::kQkNorm, who,
           str(name(SpecField::kQkNorm), " (", s.qk_norm_eps, ") must be a positive finite number"));
  check_window(s.window, who, namer);
  if (!s.alibi_slopes.empty()) {
    if (static_cast<int64_t>(s.alibi_slopes.size()) != s.heads)
      refuse(SpecField::kAlibiSlopes, who,
             str(name(SpecField::kAlibiSlopes), " has ", s.alibi_slopes.size(), " slopes for ",
                 name(SpecField::kHeads), " (", s.heads, ")"));
    check_alibi_slopes(s.alibi_slopes.data(), s.heads, who, namer);
  }
  check_softcap(s.softcap, who, namer);
  check_dropout(s.dropout, who, namer);
}

std::vector<float> spec_alibi_slopes(const AttentionSpec& spec) {
  if (!spec.alibi_slopes.empty()) return spec.alibi_slopes;
  if (!spec.alibi) return {};
  std::vector<float> slopes(static_cast<size_t>(spec.heads));
  alibi_default_slopes(spec.heads, slopes.data());
  return slopes;
}

AttentionOptions kernel_options(const AttentionSpec& spec, const std::vector<float>& slopes) {
  AttentionOptions o;
  o.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_dim)));
  o.mask = spec.causal ? AttentionMask::causal() : AttentionMask::none();
  o.dropout_p = static_cast<float>(spec.dropout);
  o.window = spec.window;
  o.softcap = static_cast<float>(spec.softcap);
  o.alibi_slopes = slopes.empty() ? nullptr : slopes.data();
  return o;
}

}  // namespace qkv::kernels
