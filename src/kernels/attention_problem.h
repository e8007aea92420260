// The validated description of one attention call, shared by the public entry points
// (attention.cc), the SIMD kernels (flash_attention.cc) and the references. Not installed.
#pragma once

#include <cstdint>

#include "qkv/kernels/attention.h"

namespace qkv::kernels {

struct AttentionProblem {
  ConstHeads q, k, v;            // (B, H, T, D), (B, G, S, D), (B, G, S, Dv)
  int64_t B = 0, H = 0, G = 0, T = 0, S = 0, D = 0, Dv = 0;
  float scale = 1.0f;
  AttentionMask mask;
  bool dropout = false;          // p > 0
  uint64_t seed = 0;
  uint32_t threshold = 0;        // dropout_threshold(p)
  float keep_scale = 1.0f;       // 1 / (1 - p)
  ThreadPool* pool = nullptr;    // never null here
  int64_t query_offset = 0;      // query i is at position query_offset + i
  int64_t key_offset = 0;        // key j is at position key_offset + j
  int64_t head_offset = 0;       // query head h is head head_offset + h (dropout's key)
  int64_t batch_offset = 0;      // sequence b is sequence batch_offset + b (dropout's key)
  int64_t window = 0;            // 0: none
  const float* alibi = nullptr;  // (H) slopes or null
  float softcap = 0.0f;          // 0: none
  float* lse_low = nullptr;      // AttentionOptions::lse_low: forward writes it, backward reads it
  bool partial_keys = false;     // AttentionOptions::partial_keys: D_i = d_o . o for every row

  bool causal() const { return mask.kind == AttentionMask::Kind::kCausal; }
  // The key/value head query head h reads.
  int64_t kv_head(int64_t h) const { return h / (H / G); }
  int64_t pos(int64_t i) const { return query_offset + i; }
  int64_t key_pos(int64_t j) const { return key_offset + j; }
  // Keys [visible_begin(i), visible_end(i)) are the ones the causal mask and the window leave
  // visible to query i (other masks may hide more of them); empty when begin >= end.
  int64_t visible_end(int64_t i) const { return causal() ? clamp_key(pos(i) - key_offset + 1) : S; }
  int64_t visible_begin(int64_t i) const { return window <= 0 ? 0 : clamp_key(pos(i) - window + 1 - key_offset); }
  int64_t clamp_key(int64_t j) const { return j < 0 ? 0 : (j < S ? j : S); }
  // Whether any of the variants beyond the book's attention is on.
  bool has_variants() const {
    return G != H || query_offset != 0 || key_offset != 0 || head_offset != 0 || window > 0 || alibi ||
           softcap > 0.0f;
  }
};

// The scores of query i of head (b, h) against every key, in double, as attention.h defines
// them: x = scale q_i . k_j, capped, plus the additive mask, minus ALiBi's bias, -inf where
// hidden (outside [visible_begin(i), visible_end(i)); boolean mask: mask[i, j] != 0). s has p.S
// entries. With dcap, also dcap[j] = ds/dx (1 - tanh^2(x / cap) with a softcap, else 1). The one
// definition of a score row: the references and attention_weights use it (attention_reference.cc).
void score_row(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, double* s, double* dcap = nullptr);

// Checks shapes, strides and options (qkv::Error naming what is wrong) and fills the problem.
// T = float, or uint16_t for bf16 inputs: then p.q, p.k, p.v carry their shapes and strides but
// no data (the bf16 kernel reads the bf16 views it is given).
template <typename T>
AttentionProblem make_problem(const char* what, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                              const AttentionOptions& options);
// The forward's and the backward's checks (make_problem's and their outputs' shapes; lse not
// null unless there is nothing to compute), shared by the fp32 and bf16 entry points.
template <typename T>
AttentionProblem make_forward_problem(const char* what, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                      ConstHeads o, const float* lse, const AttentionOptions& options);
template <typename T>
AttentionProblem make_backward_problem(const char* what, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                       ConstHeads o, ConstHeads d_o, const float* lse, ConstHeads dq,
                                       ConstHeads dk, ConstHeads dv, const AttentionOptions& options);

// The SIMD kernels (run-time dispatched), on a validated problem.
void flash_attention_forward(const AttentionProblem& p, MutableHeads o, float* lse);
void flash_attention_backward(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse,
                              MutableHeads dq, MutableHeads dk, MutableHeads dv);
// The bf16 forward (flash_attention_bf16.cc): q, k, v are the bf16 data of p's shapes.
void flash_attention_forward_bf16(const AttentionProblem& p, Heads<const uint16_t> q, Heads<const uint16_t> k,
                                  Heads<const uint16_t> v, MutableHeads o, float* lse);
// The bf16 backward (flash_attention_bf16.cc): d_o, P z and dS rounded to bf16 for the products.
void flash_attention_backward_bf16(const AttentionProblem& p, Heads<const uint16_t> q, Heads<const uint16_t> k,
                                   Heads<const uint16_t> v, ConstHeads o, ConstHeads d_o, const float* lse,
                                   MutableHeads dq, MutableHeads dk, MutableHeads dv);

}  // namespace qkv::kernels
