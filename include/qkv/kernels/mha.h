// qkv/kernels/mha.h - the fast multi-head attention pipeline on raw weights: what the book's
// MultiHeadAttention (and, with one head and no output projection, CausalAttention) computes,
// as three steps with no transposes and nothing (T, T)-sized:
//
//   qkv = x W_qkv^T + b_qkv        (B*T, 3C)  GEMMs over chunks of rows; W_qkv = [W_query; W_key; W_value]
//   heads = split(qkv)             (3, B, H, T, D) each chunk copied into contiguous heads as it is
//                                             made (the whole (B*T, 3C) matrix never exists)
//   ctx = attention(q, k, v)       (B*T, C)   the fused kernel reads the heads and writes head h
//                                             of ctx at column offset h*D: the book's view /
//                                             transpose / merge costs one copy in all
//   y   = ctx W_out^T + b_out      (B*T, C)   skipped (y = ctx) when w_out is null
//
// Legend: B batch, T tokens, C_in = d_in, C = d_out, H heads, D = C / H.
// Forward and backward share an MhaWorkspace: the forward leaves heads, ctx and lse in it, the
// backward reads them (so call mha_backward after the mha_forward whose gradients it computes).
#pragma once

#include <cstdint>
#include <memory>

#include "qkv/kernels/attention.h"

namespace qkv::kernels {

struct MhaShape {
  int64_t batch = 0, tokens = 0, d_in = 0, d_out = 0, heads = 1;
  int64_t head_dim() const { return d_out / heads; }
};

struct MhaWeights {
  const float* w_qkv = nullptr;  // (3 C, C_in): rows [0, C) W_query, [C, 2C) W_key, [2C, 3C) W_value
  const float* b_qkv = nullptr;  // (3 C) or null (qkv_bias=False, the book's default)
  const float* w_out = nullptr;  // (C, C) or null: no output projection (CausalAttention)
  const float* b_out = nullptr;  // (C) or null
};

struct MhaGradients {             // null members are skipped
  float* dw_qkv = nullptr;        // (3 C, C_in)
  float* db_qkv = nullptr;        // (3 C)
  float* dw_out = nullptr;        // (C, C)
  float* db_out = nullptr;        // (C)
  bool accumulate = false;        // add into them (PyTorch's .grad) instead of writing them
};

// Buffers reused across calls; they grow on demand (never inside a hot loop) and are freed with
// the workspace.
class MhaWorkspace {
 public:
  float* qkv() { return qkv_.get(); }      // (rows, 3C): staging for a chunk of the QKV product
  float* heads() { return heads_.get(); }  // (3, B, H, T, D): q, k, v split into contiguous heads
  float* ctx() { return ctx_.get(); }  // (B*T, C)
  float* lse() { return lse_.get(); }  // (B, H, T)
  float* dctx() { return dctx_.get(); }
  float* dqkv() { return dqkv_.get(); }
  void reserve_forward(const MhaShape& s);
  void reserve_backward(const MhaShape& s);
  size_t bytes() const;

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t size = 0;
    float* get() { return data.get(); }
    void reserve(size_t n);
  };
  Buffer qkv_, heads_, ctx_, lse_, dctx_, dqkv_;
};

// y (B*T, C) from x (B*T, C_in). options: the attention's (mask: causal for the book's classes;
// scale: 1/sqrt(D); dropout; pool, also used by the GEMMs).
void mha_forward(const MhaShape& s, const MhaWeights& w, const float* x, float* y, MhaWorkspace& ws,
                 const AttentionOptions& options);
// dx (B*T, C_in) and the weight gradients from dy (B*T, C), after mha_forward(s, w, x, ..., ws).
void mha_backward(const MhaShape& s, const MhaWeights& w, const float* x, const float* dy, float* dx,
                  const MhaGradients& grads, MhaWorkspace& ws, const AttentionOptions& options);

// FLOPs: projections (2 B T C_in 3C + 2 B T C C) plus the attention's (causal pairs only).
double mha_forward_flops(const MhaShape& s, bool has_out_proj, bool causal);
double mha_backward_flops(const MhaShape& s, bool has_out_proj, bool causal);

}  // namespace qkv::kernels
