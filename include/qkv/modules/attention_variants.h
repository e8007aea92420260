// qkv/modules/attention_variants.h - the attention variants of MultiHeadAttention, written as the
// textbook path computes them (tensor ops, every (T, T) matrix materialised), and their backward.
//
// Legend: B batch, T tokens, H query heads, G key/value heads (G divides H), r = H / G, D head dim.
//
//   q, k          = rope(q), rope(k)                    per head, positions 0 .. T-1 (rope.h)
//   k_rep, v_rep  = repeat_interleave(k, v, r, dim=1)   (B, H, T, D): query head h reads kv head h / r
//   scores        = q @ k_rep^T                         (B, H, T, T) unscaled
//   scaled        = scores / sqrt(D)
//   capped        = softcap * tanh(scaled / softcap)    (with a softcap; else scaled)
//   biased        = capped - slope[h] * (i - j)         (with ALiBi; else capped)
//   masked        = biased with -inf where blocked      blocked = the module's mask (causal) or,
//                                                       with a window w, j <= i - w
//   weights       = softmax(masked, -1); dropped = dropout(weights); context = dropped @ v_rep
//
// This is the formula of qkv/kernels/attention.h (whose fused kernel computes the same in one
// pass) and of the book's bonus code (GroupedQueryAttention's repeat_interleave, Llama's
// rotate_half). The backward sums dk and dv over the r query heads of each group, takes the
// softcap's derivative 1 - tanh^2, and rotates dq and dk back (R^T) in the module.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/kernels/attention_spec.h"
#include "qkv/kernels/rope.h"
#include "qkv/modules/attention_core.h"

namespace qkv {

// x (..., T, D) rotated at positions 0 .. T-1 (R x), or back (R^T x) with inverse:
// x * cos + rotate(x) * sin, rotate = rotate_half (kHalf) or rotate_every_two (kInterleaved);
// with rotary_dim R < D (partial rotary) on x[..., :R] only, x[..., R:] passing (0: all of D).
Tensor rope(const Tensor& x, kernels::RopeLayout layout, double base, bool inverse = false,
            const kernels::RopeScaling& scaling = {}, int64_t rotary_dim = 0);
// (B, G, T, D) -> (B, G r, T, D), each head repeated r times in place (torch.repeat_interleave).
Tensor repeat_kv(const Tensor& x, int64_t r);
// Its backward: (B, G r, T, D) -> (B, G, T, D), the r copies of each head summed.
Tensor sum_kv_groups(const Tensor& dx, int64_t r);
// The (T, T) blocked mask: `blocked` (non-zero: hidden) or, with window > 0, also j <= i - window.
Tensor window_blocked(const Tensor& blocked, int64_t window);

struct VariantSaved {
  Tensor q, k_rep, v_rep;  // (B, H, T, D) after RoPE and the repeat
  Tensor tanh;             // (B, H, T, T) tanh(scaled / softcap), with a softcap
  Tensor blocked;          // (T, T) with the window, or undefined
  Tensor weights, dropped; // (B, H, T, T)
  float scale = 1;         // sqrt(D) as a float32
  int64_t r = 1;           // H / G
};

// q (B, H, T, D), k and v (B, G, T, D), all after RoPE; blocked (T, T) or null -> context
// (B, H, T, D). With `trace`, every intermediate is kept there (keys and values as given, with G
// heads; masked_scores = scores with -inf where blocked, window included).
// spec: the window and softcap (its heads are read from q and k); slopes: (H) ALiBi slopes or empty.
Tensor attend_variants(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* blocked,
                       const kernels::AttentionSpec& spec, const std::vector<float>& slopes, Dropout* dropout,
                       AttentionTrace* trace, VariantSaved* saved);
// dq (B, H, T, D), dk and dv (B, G, T, D) (with respect to the rotated q and k) from dcontext.
AttentionGrads attend_variants_backward(const Tensor& dcontext, const VariantSaved& saved,
                                        const kernels::AttentionSpec& spec, Dropout* dropout);

}  // namespace qkv
