// The fast multi-head attention pipeline: fused QKV GEMM, fused attention, output GEMM, and the
// same three steps backwards. See include/qkv/kernels/mha.h.
#include "qkv/kernels/mha.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/linear.h"

namespace qkv::kernels {
namespace {

void check(const MhaShape& s, const MhaWeights& w) {
  QKV_CHECK(s.batch >= 0 && s.tokens >= 0 && s.d_in >= 1 && s.d_out >= 1 && s.heads >= 1,
            "mha: bad shape (batch ", s.batch, ", tokens ", s.tokens, ", d_in ", s.d_in, ", d_out ", s.d_out,
            ", heads ", s.heads, ")");
  QKV_CHECK(s.d_out % s.heads == 0, "mha: d_out (", s.d_out, ") must be divisible by num_heads (", s.heads, ")");
  QKV_CHECK(w.w_qkv != nullptr, "mha: w_qkv is null");
}

// Head `which` (0 q, 1 k, 2 v) of the split copy: contiguous (B, H, T, D).
template <typename F>
Heads<F> split_part(const MhaShape& s, F* heads, int64_t which) {
  return Heads<F>::contiguous(heads + which * s.batch * s.tokens * s.d_out, s.batch, s.heads, s.tokens, s.head_dim());
}

// Rows of the token dimension per copy task: the source rows are read whole and in order (which
// the hardware prefetchers follow), the destinations written as 3H sequential streams.
constexpr int64_t kCopyRows = 32;

// heads (3, B, H, T, D) <- rows [first, first + count) of qkv (B*T, 3C), given as `rows`
// ((count, 3C), row 0 = global row `first`). In the (B*T, 3C) layout consecutive tokens of a head
// are 3C floats apart (9 KB at GPT-2's size): a kernel reading a head there crosses a page every
// row, and measured 20-40% slower than on contiguous heads.
void split_heads(const MhaShape& s, const float* rows, int64_t first, int64_t count, float* heads,
                 ThreadPool& pool) {
  const int64_t T = s.tokens, C = s.d_out, H = s.heads, D = s.head_dim();
  const size_t bytes = static_cast<size_t>(D) * sizeof(float);
  pool.parallel_for((count + kCopyRows - 1) / kCopyRows, [&](int64_t task, int) {
    const int64_t r0 = task * kCopyRows, r1 = std::min(count, r0 + kCopyRows);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = (first + r) / T, t = (first + r) % T;
      const float* row = rows + r * 3 * C;
      for (int64_t part = 0; part < 3 * H; ++part) {  // part = which * H + h, at column part * D
        const int64_t which = part / H, h = part % H;
        std::memcpy(heads + (((which * s.batch + b) * H + h) * T + t) * D, row + part * D, bytes);
      }
    }
  });
}

// Rows of x projected per QKV product. The product's output (rows, 3C) is only a staging area
// for the split into heads, so past 256 MB it is made in equal chunks of rows and the whole
// (B*T, 3C) matrix never exists (at T = 65,536 and C = 768 it would be 600 MB). Below that it is
// one product: each chunk re-packs W_qkv for every panel, and five 16 MB chunks at B = 8, T = 1024
// measured 6% slower than one product (bench/ab.sh, the MHA forward).
int64_t qkv_chunk_rows(const MhaShape& s) {
  const int64_t rows = s.batch * s.tokens;
  const int64_t budget_rows = std::max<int64_t>(512, (int64_t{64} << 20) / (3 * s.d_out));  // 256 MB of floats
  const int64_t chunks = (rows + budget_rows - 1) / budget_rows;
  return chunks <= 1 ? rows : (rows + chunks - 1) / chunks;
}

}  // namespace

void MhaWorkspace::Buffer::reserve(size_t n) {
  if (size >= n) return;
  data.reset(new float[n]);
  size = n;
}

void MhaWorkspace::reserve_forward(const MhaShape& s) {
  const auto rows = static_cast<size_t>(s.batch * s.tokens), C = static_cast<size_t>(s.d_out);
  qkv_.reserve(static_cast<size_t>(qkv_chunk_rows(s)) * 3 * C);
  heads_.reserve(rows * 3 * C);
  ctx_.reserve(rows * C);
  lse_.reserve(static_cast<size_t>(s.batch * s.heads * s.tokens));
}

void MhaWorkspace::reserve_backward(const MhaShape& s) {
  const auto rows = static_cast<size_t>(s.batch * s.tokens), C = static_cast<size_t>(s.d_out);
  dctx_.reserve(rows * C);
  dqkv_.reserve(rows * 3 * C);
}

size_t MhaWorkspace::bytes() const {
  return (qkv_.size + heads_.size + ctx_.size + lse_.size + dctx_.size + dqkv_.size) * sizeof(float);
}

void mha_forward(const MhaShape& s, const MhaWeights& w, const float* x, float* y, MhaWorkspace& ws,
                 const AttentionOptions& options) {
  check(s, w);
  const int64_t rows = s.batch * s.tokens, C = s.d_out, D = s.head_dim();
  if (rows == 0) return;
  ws.reserve_forward(s);
  ThreadPool* pool = options.pool;
  // qkv = x W_qkv^T + b_qkv                                    (B*T, 3C), a chunk of rows at a time
  // heads = split(qkv): q, k, v (B, H, T, D) each, contiguous  (3, B, H, T, D)
  const int64_t chunk = qkv_chunk_rows(s);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    linear(x + r0 * s.d_in, n, s.d_in, w.w_qkv, w.b_qkv, 3 * C, ws.qkv(), pool);
    split_heads(s, ws.qkv(), r0, n, ws.heads(), pool ? *pool : default_pool());
  }
  // ctx[:, h*D:(h+1)*D] = attention(q_h, k_h, v_h)             (B*T, C)
  // (kept in the workspace even without an output projection: the backward needs it)
  const float* heads = ws.heads();
  attention_forward(split_part(s, heads, 0), split_part(s, heads, 1), split_part(s, heads, 2),
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
    linear_backward(ws.ctx(), dy, rows, C, w.w_out, C, ws.dctx(), grads.dw_out, grads.db_out, pool,
                    grads.accumulate);
    dctx = ws.dctx();
  }
  // ctx = attention(q, k, v)  ->  dq, dk, dv, written into their columns of dqkv
  // (reading the split heads the forward made; dq, dk, dv are written once per row, straight
  // into their columns of dqkv)
  const float* heads = ws.heads();
  auto dpart = [&](int64_t which) {
    return MutableHeads::interleaved(ws.dqkv() + which * C, s.batch, s.heads, s.tokens, D, 3 * C);
  };
  attention_backward(split_part(s, heads, 0), split_part(s, heads, 1), split_part(s, heads, 2),
                     ConstHeads::interleaved(ws.ctx(), s.batch, s.heads, s.tokens, D, C),
                     ConstHeads::interleaved(dctx, s.batch, s.heads, s.tokens, D, C), ws.lse(), dpart(0), dpart(1),
                     dpart(2), options);
  // qkv = x W_qkv^T + b_qkv  ->  dW_qkv, db_qkv, dx
  linear_backward(x, ws.dqkv(), rows, s.d_in, w.w_qkv, 3 * C, dx, grads.dw_qkv, grads.db_qkv, pool,
                  grads.accumulate);
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
