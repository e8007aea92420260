// The fused attention kernels, forward and backward (FlashAttention-2 on the CPU), compiled once
// per SIMD target by Highway and dispatched at run time. See include/qkv/kernels/attention.h for
// the math and attention_tiles-inl.h for the tile layout (one query per SIMD lane). The forward's
// code is in attention_forward-inl.h, the backward's in attention_backward-inl.h (both shared with
// the bf16 kernel, flash_attention_bf16.cc), the helpers both passes use in attention_blocks-inl.h.
//
// Forward, per task = (b, h, group of query blocks of Br queries; one block unless the head's keys
// and values outgrow L2), for each query block:
//   Qt = q_block^T (the book's path; scaled by scale log2(e) with the variants: ScoreUnits) (D, Br)
//   for each block of Bc keys from the window's start to the causal diagonal (each key block
//   visits the group's query blocks in turn):
//     St = k_block Qt                                             (Bc, Br)  scores^T
//     softcap, ALiBi, mask St; m_new = max(m, column max of St)   online softmax, lane-wise
//     Pt = 2^((St - m_new) f); l = l * 2^((m - m_new) f) + column sum of Pt   (f = scale log2(e))
//     Ot = Ot * 2^((m - m_new) f) + v_block^T (Pt * dropout)      (Dv, Br)
//   o = (Ot / l)^T, lse = (m f + log2(l)) ln 2
// Backward, per task = (b, g) - a key/value head - FlashAttention-2's loop order, for each query
// head h of g's group in turn: for each key block j (holding dk_j, dv_j, which the group's
// heads add to in head order), for each query block i that sees it:
//   Pt = exp(mask(k_j Qt_i) - lse_i)          weights^T, recomputed (softcap, ALiBi included)
//   dPt = v_j dOt_i                           (d_o v^T)^T
//   dv_j += (Pt * z) d_o_i                     z = dropout keep / (1 - p)
//   dSt = Pt * (dPt * z - Di),  Di = sum_d d_o[i, d] o[i, d]   (times 1 - tanh^2 with a softcap)
//   dk_j += dSt (q_i * scale);  dq_i += dSt^T k_j   (dq scaled at the end)
// Query i is at position query_offset + i, key j at key_offset + j: the causal mask, the window,
// ALiBi and the dropout mask use positions. The variants' work (softcap, ALiBi, the window's mask) is decided once per
// call or per block, never per element on the book's path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/flash_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "hwy/base.h"
#include "hwy/cache_control.h"  // hwy::Prefetch

#include "hwy/highway.h"
#include "kernels/flush_subnormals.h"
#include "hwy/contrib/math/math-inl.h"  // hn::Tanh (the softcap)
#include "kernels/attention_problem.h"
#include "qkv/core/machine.h"
#include "kernels/attention_tiles-inl.h"
#include "kernels/attention_blocks-inl.h"
#include "kernels/attention_forward-inl.h"
#include "kernels/attention_backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {

// D = Dv = 64 (GPT-2's heads) gets loops of known length on the vector targets; every other
// head dim, and the portable fallback target, take the generic path.
#if HWY_TARGET >= HWY_EMU128  // the portable targets (EMU128, SCALAR): the last bits of the ordering
constexpr bool kSpecialise = false;
#else
constexpr bool kSpecialise = true;
#endif

void ForwardImpl(const AttentionProblem& p, MutableHeads o, float* lse) {
  const WidenedOperands<float> ops(p.q, p.k, p.v);
  if (kSpecialise && p.D == 64 && p.Dv == 64) return Forward<kSpecialise ? 64 : 0>(p, ops, o, lse);
  Forward<0>(p, ops, o, lse);
}

void BackwardImpl(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse, MutableHeads dq,
                  MutableHeads dk, MutableHeads dv) {
  const WidenedBackward<float> ops{p.q, p.k, p.v};
  if (kSpecialise && p.D == 64 && p.Dv == 64) return Backward<kSpecialise ? 64 : 0>(p, ops, o, d_o, lse, dq, dk, dv);
  Backward<0>(p, ops, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(ForwardImpl);
HWY_EXPORT(BackwardImpl);

void flash_attention_forward(const AttentionProblem& p, MutableHeads o, float* lse) {
  HWY_DYNAMIC_DISPATCH(ForwardImpl)(p, o, lse);
}

void flash_attention_backward(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse,
                              MutableHeads dq, MutableHeads dk, MutableHeads dv) {
  HWY_DYNAMIC_DISPATCH(BackwardImpl)(p, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
