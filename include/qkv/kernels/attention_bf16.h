// qkv/kernels/attention_bf16.h - the fused attention (attention.h) on bf16 queries, keys and
// values: bf16 mode's kernel.
//
// Legend as in attention.h: B batch, H query heads, G key/value heads, T queries, S keys, D
// query/key dim, Dv value dim.
//
//   q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv) in bf16  ->  o (B, H, T, Dv), lse (B, H, T) float32
//
// The math, the options (scale, masks, dropout and its Philox mask, offsets, window, ALiBi,
// softcap, G < H), the shape checks and their messages are attention_forward's and
// attention_backward's, computed as if the inputs were their bf16 values widened to float32 -
// with these rounding points only:
//   - products of bf16 operands are accumulated in float32 (q . k, P v; in the backward also
//     d_o v^T, P^T d_o, dS k, dS^T q);
//   - the scores, softmax, log-sum-exp and the online softmax's state (running max, sum,
//     rescaling) are float32;
//   - the probabilities P, and in the backward P z, dS * scale and d_o, are rounded to bf16 (nearest, ties to
//     even) just before they enter a product; o, lse and every gradient are float32.
// So o differs from attention_forward on the widened inputs by about 2^-9 (bf16's half ulp)
// relative to max |v| at most, much less on average (tests/kernels/attention_bf16_test.cc
// states the measured figures).
//
// Where the CPU has AVX512_BF16 and qkv::bf16_dot_allowed() (qkv/core/bf16.h) the products are
// vdpbf16ps (two bf16 products per float32 lane, twice the fp32 FMA's work per instruction);
// elsewhere the bf16 values are widened (exactly) and multiplied with float32 FMAs, rounding P,
// dS and d_o at the same points: the two paths agree up to the order of float32 additions.
#pragma once

#include <cstdint>

#include "qkv/kernels/attention.h"

namespace qkv::kernels {

// bf16 values as their uint16_t bits (qkv/core/bf16.h); strides as for Heads<float>, in elements.
using ConstHeadsBF16 = Heads<const uint16_t>;
using MutableHeadsBF16 = Heads<uint16_t>;

// o (B, H, T, Dv) and lse (B, H, T, contiguous) written whole, as attention_forward.
void attention_forward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, MutableHeads o, float* lse,
                            const AttentionOptions& options);

// Given the forward's o, lse and d_o = dLoss/do (float32): dq (B, H, T, D), dk (B, G, S, D),
// dv (B, G, S, Dv) float32, overwritten, as attention_backward.
void attention_backward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, ConstHeads o, ConstHeads d_o,
                             const float* lse, MutableHeads dq, MutableHeads dk, MutableHeads dv,
                             const AttentionOptions& options);

}  // namespace qkv::kernels
