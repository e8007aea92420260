// qkv/kernels/mha.h - the fast multi-head attention pipeline on raw weights: what the book's
// MultiHeadAttention (and, with one head and no output projection, CausalAttention) computes,
// as three steps with no transposes and nothing (T, T)-sized:
//
//   qkv = x W_qkv^T + b_qkv        (B*T, (H + 2G) D)  GEMMs over chunks of rows; W_qkv = [W_query; W_key; W_value]
//   heads = split(qkv)             q (B, H, T, D), k and v (B, G, T, D), contiguous, each chunk
//                                             copied as it is made (the whole QKV matrix never exists)
//   q, k = rope(q), rope(k)        in place, at positions offset + t (only with a RoPE layout)
//   ctx = attention(q, k, v)       (B*T, C)   the fused kernel reads the heads and writes head h
//                                             of ctx at column offset h*D: the book's view /
//                                             transpose / merge costs one copy in all
//   y   = ctx W_out^T + b_out      (B*T, C)   skipped (y = ctx) when w_out is null
//
// Legend: B batch, T tokens, C_in = d_in, C = d_out, H query heads, G key/value heads (dividing
// H; query head h reads kv head h / (H / G)), D = C / H, Q = (H + 2G) D the QKV product's width
// (3C when G = H). The backward rotates dq and dk back (R^T, rope.h) before the QKV GEMMs.
// Forward and backward share an MhaWorkspace: the forward leaves heads, ctx and lse in it, the
// backward reads them (so call mha_backward after the mha_forward whose gradients it computes).
#pragma once

#include <cstdint>
#include <memory>

#include "qkv/core/bf16.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/attention_bf16.h"
#include "qkv/kernels/decode.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/kernels/rope.h"

namespace qkv::kernels {

struct MhaShape {
  int64_t batch = 0, tokens = 0, d_in = 0, d_out = 0, heads = 1;
  int64_t kv_heads = 0;  // G; 0 means G = H (multi-head attention)
  RopeOptions rope = {};  // RoPE on q and k after the split (layout kNone: none)
  // kBF16 (bf16 mode): the projections multiply in bf16 (x, ctx, dy and the weights rounded, or
  // the weights' bf16 copies read), q, k and v are kept in bf16 and the attention is
  // attention_forward_bf16 / _backward_bf16; every sum, the softmax state, ctx, y and every
  // gradient stay float32. The cached forward runs its projections in bf16 (its cache has its own
  // dtype).
  Dtype dtype = Dtype::kF32;
  int64_t head_dim() const { return d_out / heads; }
  int64_t groups() const { return kv_heads > 0 ? kv_heads : heads; }     // G
  int64_t qkv_width() const { return (heads + 2 * groups()) * head_dim(); }  // Q = (H + 2G) D
};

struct MhaWeights {
  const float* w_qkv = nullptr;  // (Q, C_in): rows [0, C) W_query, [C, C + GD) W_key, [C + GD, Q) W_value
  const float* b_qkv = nullptr;  // (Q) or null (qkv_bias=False, the book's default)
  const float* w_out = nullptr;  // (C, C) or null: no output projection (CausalAttention)
  const float* b_out = nullptr;  // (C) or null
  // bf16 mode only, optional: the weights already in bf16 (same shapes), read instead of rounding
  // w_qkv and w_out at every product (bf16_weights below makes them).
  const uint16_t* w_qkv16 = nullptr;  // (Q, C_in)
  const uint16_t* w_out16 = nullptr;  // (C, C)
};

struct MhaGradients {             // null members are skipped
  float* dw_qkv = nullptr;        // (Q, C_in)
  float* db_qkv = nullptr;        // (Q)
  float* dw_out = nullptr;        // (C, C)
  float* db_out = nullptr;        // (C)
  bool accumulate = false;        // add into them (PyTorch's .grad) instead of writing them
};

// Buffers reused across calls; they grow on demand (never inside a hot loop) and are freed with
// the workspace.
class MhaWorkspace {
 public:
  float* qkv() { return qkv_.get(); }      // (rows, Q): staging for a chunk of the QKV product
  float* heads() { return heads_.get(); }  // q (B, H, T, D), then k, v (B, G, T, D): contiguous heads
  uint16_t* heads16() { return heads16_.get(); }  // the same in bf16 (bf16 mode)
  float* ctx() { return ctx_.get(); }  // (B*T, C)
  float* lse() { return lse_.get(); }  // (B, H, T)
  float* dctx() { return dctx_.get(); }
  float* dqkv() { return dqkv_.get(); }
  // float_heads: keep float heads in bf16 mode too (the cached forward's, which decodes from them)
  void reserve_forward(const MhaShape& s, bool float_heads = false);
  void reserve_backward(const MhaShape& s);
  size_t bytes() const;
  DecodeWorkspace& decode() { return decode_; }  // mha_forward_cached's decode_attention scratch

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t size = 0;
    float* get() { return data.get(); }
    void reserve(size_t n);
  };
  struct Buffer16 {
    std::unique_ptr<uint16_t[]> data;
    size_t size = 0;
    uint16_t* get() { return data.get(); }
    void reserve(size_t n);
  };
  Buffer qkv_, heads_, ctx_, lse_, dctx_, dqkv_;
  Buffer16 heads16_;
  DecodeWorkspace decode_;
};

// y (B*T, C) from x (B*T, C_in). options: the attention's (mask: causal for the book's classes;
// scale: 1/sqrt(D); dropout; window, ALiBi slopes (H), softcap; pool, also used by the GEMMs).
void mha_forward(const MhaShape& s, const MhaWeights& w, const float* x, float* y, MhaWorkspace& ws,
                 const AttentionOptions& options);
// dx (B*T, C_in) and the weight gradients from dy (B*T, C), after mha_forward(s, w, x, ..., ws).
void mha_backward(const MhaShape& s, const MhaWeights& w, const float* x, const float* dy, float* dx,
                  const MhaGradients& grads, MhaWorkspace& ws, const AttentionOptions& options);

// Inference with a KV cache (eval: no dropout, no backward): x (B*Tn, C_in) holds Tn new tokens
// per sequence, at absolute positions P .. P + Tn - 1 with P = cache.length() (the positions
// before them are in the cache). y (B*Tn, C).
//
//   qkv = x W_qkv^T + b_qkv; q (B, H, Tn, D), k, v (B, G, Tn, D)    the new rows only
//   q, k = rope(q), rope(k)            at positions P + t (s.rope.position_offset is ignored)
//   cache.append(layer, k, v)          layer now holds P + Tn positions
//   ctx = attention(q, cache keys, cache values), query_offset = P
//   y = ctx W_out^T + b_out
//
// The attention is decode_attention (any Tn, every variant, fp32 or bf16 caches); a prefill on an
// empty fp32 cache (P = 0, Tn >= 64) without variants runs the fused attention_forward over the
// cache's keys() / values() instead (the same formula; the flash kernel is faster on many
// queries). options: the scale, the causal mask (required: a cache only makes sense causally),
// window, ALiBi slopes, softcap and pool; dropout must be 0 and query_offset 0 (it is set here).
// s.tokens = Tn. The cache must match (B, G, D, Dv = D) and `layer` must not have appended in the
// step in progress; overflowing the capacity is the cache's error. Workspace buffers grow to the
// largest Tn seen: a steady-state decode step (Tn = 1, no RoPE) allocates nothing; with RoPE the
// (Tn, D/2) rotation table of the step's positions is built each step.
void mha_forward_cached(const MhaShape& s, const MhaWeights& w, const float* x, float* y, KvCache& cache,
                        int64_t layer, MhaWorkspace& ws, const AttentionOptions& options);

// The split parts of the workspace's heads (mha_queries16 and the others: bf16 mode's heads16): q (B, H, T, D), k and v (B, G, T, D), contiguous.
ConstHeads mha_queries(const MhaShape& s, const float* heads);
ConstHeads mha_keys(const MhaShape& s, const float* heads);
ConstHeads mha_values(const MhaShape& s, const float* heads);
ConstHeadsBF16 mha_queries(const MhaShape& s, const uint16_t* heads16);
ConstHeadsBF16 mha_keys(const MhaShape& s, const uint16_t* heads16);
ConstHeadsBF16 mha_values(const MhaShape& s, const uint16_t* heads16);

// For tests: run the naive references (attention_forward_reference / _backward_reference) in
// place of the fused kernel inside mha_forward / mha_backward, process-wide, e.g. to test the
// pipeline's variants (grouped-query heads, RoPE, windows, ALiBi, softcap) on their own. Off by
// default; returns the previous setting.
bool mha_use_reference_attention(bool on);

// FLOPs: projections (2 B T C_in Q + 2 B T C C) plus the attention's (visible pairs only: causal
// and window; RoPE's O(T D) rotations are not counted).
double mha_forward_flops(const MhaShape& s, bool has_out_proj, bool causal, int64_t window = 0);
double mha_backward_flops(const MhaShape& s, bool has_out_proj, bool causal, int64_t window = 0);

}  // namespace qkv::kernels
