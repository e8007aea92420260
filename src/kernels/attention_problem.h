// The validated description of one attention call, shared by the public entry points
// (attention.cc), the SIMD kernels (flash_attention.cc) and the references. Not installed.
#pragma once

#include <cstdint>

#include "qkv/kernels/attention.h"

namespace qkv::kernels {

struct AttentionProblem {
  ConstHeads q, k, v;            // (B, H, T, D), (B, H, S, D), (B, H, S, Dv)
  int64_t B = 0, H = 0, T = 0, S = 0, D = 0, Dv = 0;
  float scale = 1.0f;
  AttentionMask mask;
  bool dropout = false;          // p > 0
  uint64_t seed = 0;
  uint32_t threshold = 0;        // dropout_threshold(p)
  float keep_scale = 1.0f;       // 1 / (1 - p)
  ThreadPool* pool = nullptr;    // never null here

  bool causal() const { return mask.kind == AttentionMask::Kind::kCausal; }
  // The first key a causal mask hides for query i (keys [0, visible_end(i)) are visible).
  int64_t visible_end(int64_t i) const { return causal() ? (i + 1 < S ? i + 1 : S) : S; }
};

// The scores of query i of head (b, h) against every key, in double, masked: s[j] = scale q_i . k_j
// (+ mask[i, j] for an additive mask), -inf where blocked (causal: j >= visible_end(i); boolean
// mask: mask[i, j] != 0). s has p.S entries. The one definition of a score row: the references
// and attention_weights use it (defined in attention_reference.cc).
void score_row(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, double* s);

// Checks shapes, strides and options (qkv::Error naming what is wrong) and fills the problem.
AttentionProblem make_problem(const char* what, ConstHeads q, ConstHeads k, ConstHeads v,
                              const AttentionOptions& options);

// The SIMD kernels (run-time dispatched), on a validated problem.
void flash_attention_forward(const AttentionProblem& p, MutableHeads o, float* lse);
void flash_attention_backward(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse,
                              MutableHeads dq, MutableHeads dk, MutableHeads dv);

}  // namespace qkv::kernels
