// qkv/kernels/mha.h - the fast multi-head attention pipeline on raw weights: what the book's
// MultiHeadAttention (and, with one head and no output projection, CausalAttention) computes,
// as three steps with no transposes and nothing (T, T)-sized:
//
//   qkv = x W_qkv^T + b_qkv        (B*T, (H + 2G) D)  GEMMs over chunks of rows; W_qkv = [W_query; W_key; W_value]
//   heads = split(qkv)             q (B, H, T, D), k and v (B, G, T, D), contiguous, each chunk
//                                             copied as it is made (the whole QKV matrix never exists)
//   q, k = norm(q), norm(k)        QK-norm (spec.qk_norm): RMSNorm of each head's D by q_norm, k_norm
//   q, k = rope(q), rope(k)        in place, at positions offset + t (only with a RoPE layout)
//   ctx = attention(q, k, v)       (B*T, C)   the fused kernel reads the heads and writes head h
//                                             of ctx at column offset h*D: the book's view /
//                                             transpose / merge costs one copy in all
//   y   = ctx W_out^T + b_out      (B*T, C_o) skipped (y = ctx) when w_out is null
//
// Legend: B batch, T tokens, C_in = d_in, C = d_out = H D, C_o the output projection's width
// (out_dim: C unless set; Qwen3's o_proj maps H D = 2,048 back to 1,024), H query heads, G key/value heads (dividing
// H; query head h reads kv head h / (H / G)), D = C / H, Q = (H + 2G) D the QKV product's width
// (3C when G = H). The backward rotates dq and dk back (R^T, rope.h), then through QK-norm's
// backward, before the QKV GEMMs.
// The forward leaves the heads, ctx and lse in an MhaSaved, which the backward is given
// explicitly (with the forward's id); scratch lives in an MhaWorkspace, reused across calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "qkv/core/bf16.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/attention_bf16.h"
#include "qkv/kernels/attention_spec.h"
#include "qkv/kernels/decode.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/kernels/rope.h"

namespace qkv::kernels {

// The pipeline's shape: the call's sizes and the layer's attention spec (attention_spec.h), of
// which the pipeline reads the heads H, key/value heads G, head dim D, RoPE and dtype here, and
// the score fields (causal, window, ALiBi, softcap, dropout) through mha_options().
//   kBF16 (bf16 mode): the projections multiply in bf16 (x, ctx, dy and the weights rounded, or
//   the weights' bf16 copies read), q, k and v are kept in bf16 and the attention is
//   attention_forward_bf16 / _backward_bf16; every sum, the softmax state, ctx, y and every
//   gradient stay float32. The cached forward runs its projections in bf16 (its cache has its own
//   dtype).
struct MhaShape {
  int64_t batch = 0, tokens = 0, d_in = 0;  // B, T, C_in
  AttentionSpec attention;                  // H, G, D, RoPE, dtype; the score fields
  int64_t position_offset = 0;              // RoPE: token t at position offset + t (not the cached forward's)
  int64_t out_dim = 0;                      // C_o, the output projection's rows; 0: C (y's width with w_out)
  int64_t d_out() const { return attention.width(); }                        // C = H D
  int64_t out_width() const { return out_dim > 0 ? out_dim : d_out(); }      // C_o
  int64_t heads() const { return attention.heads; }                          // H
  int64_t head_dim() const { return attention.head_dim; }                    // D
  int64_t groups() const { return attention.groups(); }                      // G
  int64_t qkv_width() const { return (heads() + 2 * groups()) * head_dim(); }  // Q = (H + 2G) D
  Dtype dtype() const { return attention.dtype; }
};

// What one call adds to the shape's spec for the attention kernel.
struct MhaCall {
  ThreadPool* pool = nullptr;             // null: default_pool(); the GEMMs use it too
  bool dropout = false;                   // training: the spec's dropout applies (eval: none)
  uint64_t dropout_seed = 0;              // Philox key of the dropout mask
  int64_t batch_offset = 0;               // the dropout mask's key for a slice of a batch
  const float* alibi_slopes = nullptr;    // (H), when the spec asks for ALiBi (spec_alibi_slopes)
  const AttentionMask* mask = nullptr;    // a (T, T) mask in place of the spec's causal one, or null
};

// The kernel's options for a call: kernel_options(s.attention) with the call's pool, dropout,
// slopes and mask.
AttentionOptions mha_options(const MhaShape& s, const MhaCall& call);

struct MhaWeights {
  const float* w_qkv = nullptr;  // (Q, C_in): rows [0, C) W_query, [C, C + GD) W_key, [C + GD, Q) W_value
  const float* b_qkv = nullptr;  // (Q) or null (qkv_bias=False, the book's default)
  const float* w_out = nullptr;  // (C_o, C) or null: no output projection (CausalAttention)
  const float* b_out = nullptr;  // (C_o) or null
  const float* q_norm = nullptr; // (D) QK-norm's weights, with spec.qk_norm (required then)
  const float* k_norm = nullptr; // (D)
  // bf16 mode only, optional: the weights already in bf16 (same shapes), read instead of rounding
  // w_qkv and w_out at every product (bf16_weights below makes them).
  const uint16_t* w_qkv16 = nullptr;  // (Q, C_in)
  const uint16_t* w_out16 = nullptr;  // (C_o, C)
  // Cached steps only, optional: the weights in a ggml type (a GGUF file's), read instead of the
  // others (core/linear.h: x quantized per block, integer dot products).
  QuantView w_qkv_q = {};             // (Q, C_in)
  QuantView w_out_q = {};             // (C_o, C)
};

struct MhaGradients {             // null members are skipped
  float* dw_qkv = nullptr;        // (Q, C_in)
  float* db_qkv = nullptr;        // (Q)
  float* dw_out = nullptr;        // (C_o, C)
  float* db_out = nullptr;        // (C_o)
  float* dq_norm = nullptr;       // (D) QK-norm's weights' gradients
  float* dk_norm = nullptr;       // (D)
  bool accumulate = false;        // add into them (PyTorch's .grad) instead of writing them
};

namespace mha_detail {
template <typename T>
struct Buffer {  // grows on demand (never inside a hot loop); freed with its owner
  std::unique_ptr<T[]> data;
  size_t size = 0;
  T* get() const { return data.get(); }
  void reserve(size_t n);
};
}  // namespace mha_detail

// What a forward leaves for its backward: the split heads (after RoPE), the context and the
// log-sum-exp, with the shape they were made for and an id unique to that forward (so a backward
// given another forward's state - or a state a later forward overwrote - is refused, not wrong).
class MhaSaved {
 public:
  const float* heads() const { return heads_.get(); }       // q (B, H, T, D), then k, v (B, G, T, D)
  const uint16_t* heads16() const { return heads16_.get(); }  // the same in bf16 (bf16 mode)
  const float* ctx() const { return ctx_.get(); }           // (B*T, C)
  const float* lse() const { return lse_.get(); }           // (B, H, T)
  // (B, H, T): the part of each lse a float dropped (AttentionOptions::lse_low), after lse
  const float* lse_low() const { return lse_.get() + shape_.batch * shape_.heads() * shape_.tokens; }
  // QK-norm: q and k divided by their RMS (before the weights and RoPE), (B, H + G, T, D) as the
  // heads' first two parts, and 1 / RMS per row (B, H + G, T); null without it.
  const float* qk_norm() const { return qk_norm_.get(); }
  const float* qk_inv_rms() const { return qk_inv_rms_.get(); }
  uint64_t id() const { return id_; }  // 0: no forward yet; else the forward that filled it
  const MhaShape& shape() const { return shape_; }
  size_t bytes() const;

 private:
  friend struct MhaSavedWriter;  // mha.cc: the forwards fill it
  mha_detail::Buffer<float> heads_, ctx_, lse_, qk_norm_, qk_inv_rms_;
  mha_detail::Buffer<uint16_t> heads16_;
  MhaShape shape_;
  uint64_t id_ = 0;
};

// Scratch reused across calls: the QKV product's staging rows, the backward's gradients of the
// context and the QKV product, and the cached forward's decode scratch.
class MhaWorkspace {
 public:
  float* qkv() { return qkv_.get(); }    // (rows, Q): a chunk of the QKV product
  float* dctx() { return dctx_.get(); }  // (B*T, C)
  float* dqkv() { return dqkv_.get(); }  // (B*T, Q)
  float* dqk() { return dqk_.get(); }    // (B, H + G, T, D): QK-norm's backward
  DecodeWorkspace& decode() { return decode_; }
  // RoPE's table for these arguments: the last one built, when it is the same (every layer of a
  // decoding step rotates at the same positions), else built anew.
  const RopeTable& rope_table(int64_t positions, int64_t rotary_dim, double base, int64_t position_offset,
                              const RopeScaling& scaling);
  void reserve_forward(const MhaShape& s);
  void reserve_backward(const MhaShape& s);
  size_t bytes() const;

 private:
  mha_detail::Buffer<float> qkv_, dctx_, dqkv_, dqk_;
  DecodeWorkspace decode_;
  std::optional<RopeTable> rope_;
};

// y (B*T, C_o) from x (B*T, C_in); fills `saved` (a new id) for the backward.
void mha_forward(const MhaShape& s, const MhaWeights& w, const float* x, float* y, MhaSaved& saved,
                 MhaWorkspace& ws, const MhaCall& call);
// dx (B*T, C_in) and the weight gradients from dy (B*T, C_o), for the forward that filled `saved`
// with id `forward_id` (its saved.id() right after it ran) on the same x and weights. Throws
// qkv::Error when saved holds another forward (another id, or another shape).
void mha_backward(const MhaShape& s, const MhaWeights& w, const float* x, const float* dy, float* dx,
                  const MhaGradients& grads, const MhaSaved& saved, uint64_t forward_id, MhaWorkspace& ws,
                  const MhaCall& call);

// Inference with a KV cache (eval: no dropout, no backward): x (B*Tn, C_in) holds Tn new tokens
// per sequence, at absolute positions P .. P + Tn - 1 with P = cache.length() (the positions
// before them are in the cache). y (B*Tn, C_o).
//
//   qkv = x W_qkv^T + b_qkv; q (B, H, Tn, D), k, v (B, G, Tn, D)    the new rows only
//   q, k = norm(q), norm(k)            QK-norm, with spec.qk_norm
//   q, k = rope(q), rope(k)            at positions P + t (s.position_offset is ignored)
//   cache.append(layer, k, v)          layer now holds P + Tn positions
//   ctx = attention(q, cache keys, cache values), query_offset = P
//   y = ctx W_out^T + b_out
//
// The attention is decode_attention (any Tn, every variant, fp32 or bf16 caches); a prefill on an
// empty fp32 cache (P = 0, Tn >= 64) without variants runs the fused attention_forward over the
// cache's keys() / values() instead (the same formula; the flash kernel is faster on many
// queries). The spec must be causal (a cache only makes sense causally) and call.dropout false;
// call.mask must be null. s.tokens = Tn. `scratch` holds the step's heads, context and log-sum-exp
// (it is not a forward's state for a backward). The cache must match (B, G, D, Dv = D) and `layer`
// must not have appended in the step in progress; overflowing the capacity is the cache's error.
// Buffers grow to the largest Tn seen: a steady-state decode step (Tn = 1, no RoPE) allocates
// nothing; with RoPE the (Tn, D/2) rotation table of the step's positions is built each step.
void mha_forward_cached(const MhaShape& s, const MhaWeights& w, const float* x, float* y, KvCache& cache,
                        int64_t layer, MhaSaved& scratch, MhaWorkspace& ws, const MhaCall& call);

// The split parts of saved heads (the uint16_t overloads: bf16 mode's heads16): q (B, H, T, D), k and v
// (B, G, T, D), contiguous.
ConstHeads mha_queries(const MhaShape& s, const float* heads);
ConstHeads mha_keys(const MhaShape& s, const float* heads);
ConstHeads mha_values(const MhaShape& s, const float* heads);
ConstHeadsBF16 mha_queries(const MhaShape& s, const uint16_t* heads16);
ConstHeadsBF16 mha_keys(const MhaShape& s, const uint16_t* heads16);
ConstHeadsBF16 mha_values(const MhaShape& s, const uint16_t* heads16);

// FLOPs: projections (2 B T C_in Q + 2 B T C C_o) plus the attention's (visible pairs only: causal
// and window; RoPE's O(T D) rotations are not counted).
// (causal and window from s.attention)
double mha_forward_flops(const MhaShape& s, bool has_out_proj);
double mha_backward_flops(const MhaShape& s, bool has_out_proj);

}  // namespace qkv::kernels
