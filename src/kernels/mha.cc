// The fast multi-head attention pipeline: fused QKV GEMM, fused attention, output GEMM, and the
// same three steps backwards. See include/qkv/kernels/mha.h.
#include "qkv/kernels/mha.h"

#include <algorithm>

#include "qkv/core/error.h"
#include "qkv/core/gemm.h"

namespace qkv::kernels {
namespace {

void check(const MhaShape& s, const MhaWeights& w) {
  QKV_CHECK(s.batch >= 0 && s.tokens >= 0 && s.d_in >= 1 && s.d_out >= 1 && s.heads >= 1,
            "mha: bad shape (batch ", s.batch, ", tokens ", s.tokens, ", d_in ", s.d_in, ", d_out ", s.d_out,
            ", heads ", s.heads, ")");
  QKV_CHECK(s.d_out % s.heads == 0, "mha: d_out (", s.d_out, ") must be divisible by num_heads (", s.heads, ")");
  QKV_CHECK(w.w_qkv != nullptr, "mha: w_qkv is null");
}

// q, k, v (B, H, T, D) as views of the qkv rows; part 0, 1, 2.
ConstHeads part(const MhaShape& s, const float* qkv, int64_t which) {
  return ConstHeads::interleaved(qkv + which * s.d_out, s.batch, s.heads, s.tokens, s.head_dim(), 3 * s.d_out);
}
MutableHeads mutable_part(const MhaShape& s, float* qkv, int64_t which) {
  return MutableHeads::interleaved(qkv + which * s.d_out, s.batch, s.heads, s.tokens, s.head_dim(), 3 * s.d_out);
}

// y (M, N) = x (M, K) W^T (W (N, K)) + bias
void linear(const float* x, int64_t M, int64_t K, const float* W, const float* bias, int64_t N, float* y,
            ThreadPool* pool) {
  if (bias) fill_rows(y, M, N, N, bias, pool);
  GemmArgs g;
  g.trans_b = true;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = x;
  g.lda = K;
  g.B = W;
  g.ldb = K;
  g.beta = bias ? 1.0f : 0.0f;
  g.C = y;
  g.ldc = N;
  sgemm(g, pool);
}

// Backward of y = x W^T + b: dW = dy^T x, db = column sums of dy, dx = dy W.
void linear_backward(const float* x, const float* dy, int64_t M, int64_t K, const float* W, int64_t N,
                     float* dx, float* dW, float* db, ThreadPool* pool) {
  if (dW) {
    GemmArgs g;
    g.trans_a = true;
    g.M = N;
    g.N = K;
    g.K = M;
    g.A = dy;
    g.lda = N;
    g.B = x;
    g.ldb = K;
    g.C = dW;
    g.ldc = K;
    sgemm(g, pool);
  }
  if (db) sum_rows(dy, M, N, N, db, pool);
  if (dx) {
    GemmArgs g;
    g.M = M;
    g.N = K;
    g.K = N;
    g.A = dy;
    g.lda = N;
    g.B = W;
    g.ldb = K;
    g.C = dx;
    g.ldc = K;
    sgemm(g, pool);
  }
}

}  // namespace

void MhaWorkspace::Buffer::reserve(size_t n) {
  if (size >= n) return;
  data.reset(new float[n]);
  size = n;
}

void MhaWorkspace::reserve_forward(const MhaShape& s) {
  const auto rows = static_cast<size_t>(s.batch * s.tokens), C = static_cast<size_t>(s.d_out);
  qkv_.reserve(rows * 3 * C);
  ctx_.reserve(rows * C);
  lse_.reserve(static_cast<size_t>(s.batch * s.heads * s.tokens));
}

void MhaWorkspace::reserve_backward(const MhaShape& s) {
  const auto rows = static_cast<size_t>(s.batch * s.tokens), C = static_cast<size_t>(s.d_out);
  dctx_.reserve(rows * C);
  dqkv_.reserve(rows * 3 * C);
}

size_t MhaWorkspace::bytes() const {
  return (qkv_.size + ctx_.size + lse_.size + dctx_.size + dqkv_.size) * sizeof(float);
}

void mha_forward(const MhaShape& s, const MhaWeights& w, const float* x, float* y, MhaWorkspace& ws,
                 const AttentionOptions& options) {
  check(s, w);
  const int64_t rows = s.batch * s.tokens, C = s.d_out, D = s.head_dim();
  if (rows == 0) return;
  ws.reserve_forward(s);
  ThreadPool* pool = options.pool;
  // qkv = x W_qkv^T + b_qkv                                    (B*T, 3C)
  linear(x, rows, s.d_in, w.w_qkv, w.b_qkv, 3 * C, ws.qkv(), pool);
  // ctx[:, h*D:(h+1)*D] = attention(q_h, k_h, v_h)             (B*T, C)
  // (kept in the workspace even without an output projection: the backward needs it)
  attention_forward(part(s, ws.qkv(), 0), part(s, ws.qkv(), 1), part(s, ws.qkv(), 2),
                    MutableHeads::interleaved(ws.ctx(), s.batch, s.heads, s.tokens, D, C), ws.lse(), options);
  // y = ctx W_out^T + b_out                                    (B*T, C)
  if (w.w_out) {
    linear(ws.ctx(), rows, C, w.w_out, w.b_out, C, y, pool);
  } else {
    std::copy(ws.ctx(), ws.ctx() + rows * C, y);
  }
}

void mha_backward(const MhaShape& s, const MhaWeights& w, const float* x, const float* dy, float* dx,
                  const MhaGradients& grads, MhaWorkspace& ws, const AttentionOptions& options) {
  check(s, w);
  const int64_t rows = s.batch * s.tokens, C = s.d_out, D = s.head_dim();
  if (rows == 0) return;
  ws.reserve_backward(s);
  ThreadPool* pool = options.pool;
  // y = ctx W_out^T + b_out  ->  dW_out, db_out, dctx
  const float* dctx = dy;
  if (w.w_out) {
    linear_backward(ws.ctx(), dy, rows, C, w.w_out, C, ws.dctx(), grads.dw_out, grads.db_out, pool);
    dctx = ws.dctx();
  }
  // ctx = attention(q, k, v)  ->  dq, dk, dv, written into their columns of dqkv
  attention_backward(part(s, ws.qkv(), 0), part(s, ws.qkv(), 1), part(s, ws.qkv(), 2),
                     ConstHeads::interleaved(ws.ctx(), s.batch, s.heads, s.tokens, D, C),
                     ConstHeads::interleaved(dctx, s.batch, s.heads, s.tokens, D, C), ws.lse(),
                     mutable_part(s, ws.dqkv(), 0), mutable_part(s, ws.dqkv(), 1), mutable_part(s, ws.dqkv(), 2),
                     options);
  // qkv = x W_qkv^T + b_qkv  ->  dW_qkv, db_qkv, dx
  linear_backward(x, ws.dqkv(), rows, s.d_in, w.w_qkv, 3 * C, dx, grads.dw_qkv, grads.db_qkv, pool);
}

double mha_forward_flops(const MhaShape& s, bool has_out_proj, bool causal) {
  const int64_t rows = s.batch * s.tokens, C = s.d_out, D = s.head_dim();
  double f = gemm_flops(rows, 3 * C, s.d_in) +
             attention_forward_flops(s.batch, s.heads, s.tokens, s.tokens, D, D, causal);
  if (has_out_proj) f += gemm_flops(rows, C, C);
  return f;
}

double mha_backward_flops(const MhaShape& s, bool has_out_proj, bool causal) {
  const int64_t rows = s.batch * s.tokens, C = s.d_out, D = s.head_dim();
  double f = 2.0 * gemm_flops(rows, 3 * C, s.d_in) +
             attention_backward_flops(s.batch, s.heads, s.tokens, s.tokens, D, D, causal);
  if (has_out_proj) f += 2.0 * gemm_flops(rows, C, C);
  return f;
}

}  // namespace qkv::kernels
