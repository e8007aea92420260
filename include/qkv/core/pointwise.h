// qkv/core/pointwise.h - the model's element-by-element passes, vectorised and split over the pool:
// GELU (the tanh approximation) and its gradient, SwiGLU's gate (Llama's, Qwen3's) and its
// gradient, SiLU (Qwen3.5's linear layers), AdamW's update of one parameter tensor, and the scan of
// a decoding step's logits (the checks and greedy choice before the next token).
//
//   gelu(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2 / pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t)(1 + t) sqrt(2 / pi) (1 + 3 0.044715 x^2),  t = tanh(u)
//
// Each fast pass keeps its naive reference beside it (the *_reference functions, scalar; GELU's in
// double) and is tested against it (tests/core/pointwise_test.cc):
//   - GELU in float32 SIMD, written through the logistic function (0.5 (1 + tanh(u)) = 1 / (1 + e^-2u),
//     no cancellation for negative x), Highway's exp: a few float32 ulps of the double formula;
//   - AdamW: the same float32 operations in the same order as PyTorch's (mul, add, sqrt, div; no
//     fused multiply-add), so the fast pass equals the reference bit for bit.
// Work is split into fixed chunks of elements over the pool (null: the default pool), so no result
// depends on the thread count.
#pragma once

#include <cstdint>

#include "qkv/core/thread_pool.h"

namespace qkv {

// y[i] = gelu(x[i]) for i in [0, n); y may be x.
void gelu_tanh(const float* x, float* y, int64_t n, ThreadPool* pool = nullptr);
// dx[i] = dy[i] gelu'(x[i]); dx may be dy.
void gelu_tanh_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool* pool = nullptr);

// The references: scalar, in double, rounded once to float.
void gelu_tanh_reference(const float* x, float* y, int64_t n);
void gelu_tanh_backward_reference(const float* x, const float* dy, float* dx, int64_t n);

// SwiGLU: h[i] = silu(g[i]) u[i] = g[i] sigmoid(g[i]) u[i] (h may be g or u), and its gradient
// with s = sigmoid(g): dg = dh u s (1 + g (1 - s)), du = dh g s (dg may be g, du may be u).
// float32 SIMD through Highway's exp, a few ulps of the references (scalar, double).
void swiglu(const float* g, const float* u, float* h, int64_t n, ThreadPool* pool = nullptr);
void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                     ThreadPool* pool = nullptr);
void swiglu_reference(const float* g, const float* u, float* h, int64_t n);
void swiglu_backward_reference(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n);

// y[i] = silu(x[i]) = x[i] sigmoid(x[i]) for i in [0, n) (y may be x), on the calling thread: for
// callers that split rows over the pool themselves. float32 SIMD through Highway's exp, as SwiGLU's
// gate; the reference in double, rounded once.
void silu(const float* x, float* y, int64_t n);
void silu_reference(const float* x, float* y, int64_t n);

// AdamW's step on one tensor, PyTorch's single-tensor update (torch.optim.AdamW, amsgrad off), its
// scalars computed by the caller (in double, then float32, as torch does):
//   w = w decay;  m = m b1 + a1 g;  v = v b2 + (a2 g) g;  w = w + neg_step_size (m / (sqrt(v) / bc2_sqrt + eps))
struct AdamWScalars {
  float decay = 1.0f;          // 1 - lr weight_decay
  float b1 = 0.9f, a1 = 0.1f;  // beta1, 1 - beta1
  float b2 = 0.999f, a2 = 0.001f;
  float bc2_sqrt = 1.0f;       // sqrt(1 - beta2^step)
  float eps = 1e-8f;
  float neg_step_size = 0.0f;  // -lr / (1 - beta1^step)
};
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s,
                  ThreadPool* pool = nullptr);
void adamw_update_reference(float* w, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s);

// One pass over n logits (1 <= n < 2^31): whether any is NaN or +inf, whether any is above -inf,
// and the first index of the largest (torch.argmax's choice; -0 and +0 equal; 0 when none is above
// -inf; meaningless when `bad`). On the calling thread: a decoding step's last work before the next
// token, while the pool waits. SIMD lanes keep their largest and its first index; the reference is
// the plain loop, and both give the same answer on every input.
struct LogitsScan {
  bool bad = false;         // a NaN or a +inf
  bool any_finite = false;  // an entry above -inf
  int64_t argmax = 0;
};
LogitsScan scan_logits(const float* v, int64_t n);
LogitsScan scan_logits_reference(const float* v, int64_t n);

}  // namespace qkv
