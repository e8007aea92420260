// qkv/kernels/attention_spec.h - what one attention layer computes, declared once.
//
// Legend: H query heads, G key/value heads (G divides H; query head h reads kv head h / (H / G)),
// D head dim (queries, keys and values alike).
//
// Every place that configures attention embeds this struct instead of copying its fields: the
// modules' AttentionConfig, the one description of a decoder (models/decoder_spec.h: every family's
// model, read from config.json or a checkpoint), the MHA pipeline's MhaShape, the benchmarks'
// shapes and ring attention's. It is checked by one function, validate_attention_spec, whose
// errors name the field the way the caller names it (a config.json key, a flag) through a
// SpecNamer, so the command line maps a field to its flag instead of checking again. The kernels'
// per-call AttentionOptions (attention.h) are derived from a spec by kernel_options(); their own
// argument checks reuse the same rules (check_window, check_softcap, ...).
//
//   scores = scale * q k^T                 scale = 1 / sqrt(D)
//            -> softcap * tanh(x / softcap)       softcap > 0
//            -> - slope[h] * (pos_i - pos_j)      alibi (the paper's slopes, or alibi_slopes)
//            -> -inf where j > i (causal), or j <= i - window (window > 0)
//   weights = dropout(softmax(scores))           dropout in [0, 1)
// with QK-norm (qk_norm: Qwen3's RMSNorm over each head's D of q and of k, eps qk_norm_eps, by the
// layer's weights q_norm and k_norm (D), before RoPE), RoPE (rope != kNone, base rope_base) rotating q and k per head
// before the product (the first rope_dim elements of each head only, when set: partial rotary), and
// dtype kBF16 running the products in bf16 (fp32 sums, softmax and outputs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/rope.h"

namespace qkv::kernels {

struct AttentionSpec {
  int64_t heads = 1;      // H query heads, >= 1
  int64_t kv_heads = 0;   // G key/value heads, dividing H; 0: as many as the query heads (G = H)
  int64_t head_dim = 0;   // D, >= 1
  bool causal = true;     // query i sees keys j <= i
  int64_t window = 0;     // > 0: query i sees only keys j > i - window; 0: no window
  RopeLayout rope = RopeLayout::kNone;  // RoPE on queries and keys (an even head_dim)
  double rope_base = 10000.0;           // RoPE's base, > 0 (frequencies base^(-2i / D))
  RopeScaling rope_scaling = {};        // Llama 3's frequency scaling (with rope only), or none
  int64_t rope_dim = 0;                 // RoPE rotates each head's first rope_dim elements (even, <= D;
                                        // Qwen3.5's partial_rotary_factor D / 4), the rest pass; 0: all D
  bool qk_norm = false;                 // RMSNorm on each head's queries and keys (before RoPE)
  double qk_norm_eps = 1e-6;            // its epsilon, > 0
  bool alibi = false;                   // ALiBi bias with the paper's slopes (alibi_default_slopes)
  std::vector<float> alibi_slopes = {}; // (H) given ALiBi slopes (implies alibi), or empty
  double softcap = 0.0;                 // > 0: scaled scores capped as softcap * tanh(x / softcap); 0: none
  double dropout = 0.0;                 // on the attention weights, in [0, 1)
  Dtype dtype = Dtype::kF32;            // kBF16: bf16 products, fp32 sums, softmax and outputs

  int64_t groups() const { return kv_heads > 0 ? kv_heads : heads; }  // G
  int64_t width() const { return heads * head_dim; }                  // H D: queries and outputs
  int64_t kv_width() const { return groups() * head_dim; }            // G D: keys and values
  bool has_alibi() const { return alibi || !alibi_slopes.empty(); }
  int64_t rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }  // R: the elements RoPE rotates
  // Whether anything differs from the book's multi-head attention (G = H, no QK-norm, RoPE,
  // window, ALiBi or softcap).
  bool has_variants() const {
    return groups() != heads || qk_norm || rope != RopeLayout::kNone || window > 0 || has_alibi() || softcap > 0.0;
  }
};

// The fields, for messages and for callers that name them their own way.
enum class SpecField {
  kHeads, kKvHeads, kHeadDim, kWindow, kRope, kRopeBase, kRopeScaling, kRopeDim, kQkNorm, kAlibiSlopes, kSoftcap, kDropout
};

// How a caller names a field in messages: the spec's own names ("kv_heads") by default, a JSON
// key ("num_kv_heads") or a flag ("--num-kv-heads") elsewhere.
using SpecNamer = std::string (*)(SpecField);
std::string spec_field_name(SpecField field);  // heads, kv_heads, head_dim, window, rope, ...

// A spec that breaks a rule: what() is "<who>: <message>", and `field` says which field, so a
// caller can point at the flag or key that set it.
class AttentionSpecError : public Error {
 public:
  AttentionSpecError(SpecField f, const std::string& message) : Error(message), field(f) {}
  SpecField field;
};

// The largest softcap accepted: x / softcap and softcap * tanh(...) stay normal floats for any
// finite score (a cap near FLT_MAX makes them underflow and overflow).
constexpr double kMaxSoftcap = 1e30;

// Checks every field against its rule and the others (heads >= 1; kv_heads in [0, H] dividing H;
// head_dim >= 1, even with RoPE; rope_dim 0 or even within D, with RoPE only; a finite positive rope_base; a finite positive qk_norm_eps; window >= 0; H finite ALiBi slopes
// when given; softcap finite in [0, kMaxSoftcap]; dropout in [0, 1)). Throws AttentionSpecError
// "<who>: <field> (<value>) must ..." with fields named by `namer`.
void validate_attention_spec(const AttentionSpec& spec, const std::string& who, SpecNamer namer = spec_field_name);

// The single rules, for the kernels' argument checks (attention.cc, decode.cc, ring attention),
// which take window, softcap, dropout and slopes per call. Each throws AttentionSpecError.
void check_window(int64_t window, const std::string& who, SpecNamer namer = spec_field_name);
void check_softcap(double softcap, const std::string& who, SpecNamer namer = spec_field_name);
void check_dropout(double p, const std::string& who, SpecNamer namer = spec_field_name);
void check_alibi_slopes(const float* slopes, int64_t heads, const std::string& who, SpecNamer namer = spec_field_name);

// The ALiBi slopes the spec asks for: alibi_slopes when given, the paper's for H heads with
// `alibi`, else none (empty).
std::vector<float> spec_alibi_slopes(const AttentionSpec& spec);

// The kernels' per-call options for a spec: scale 1 / sqrt(D) (as float32, the book's), the
// causal mask when `causal`, window, softcap, dropout p; `slopes` (spec_alibi_slopes, kept alive
// by the caller) or null. Offsets, the dropout seed and the pool are the caller's to set.
AttentionOptions kernel_options(const AttentionSpec& spec, const std::vector<float>& slopes);

}  // namespace qkv::kernels
