// The bf16 fused attention's front door (qkv/kernels/attention_bf16.h): the fp32 entry points'
// checks (make_forward_problem, make_backward_problem in attention.cc, so the same messages),
// then the bf16 kernels of flash_attention_bf16.cc.
#include "qkv/kernels/attention_bf16.h"

#include <cstdint>
#include <vector>

#include "kernels/attention_problem.h"
#include "qkv/core/bf16.h"

namespace qkv::kernels {
namespace {

// x (B, heads, N, dim) widened to a contiguous float32 array in storage (grown if need be), head
// by head on the pool.
ConstHeads widen(ConstHeadsBF16 x, std::vector<float>& storage, ThreadPool& pool) {
  const int64_t per_head = x.tokens * x.dim;
  const auto n = static_cast<size_t>(x.batch * x.heads * per_head);
  if (storage.size() < n) storage.resize(n);
  MutableHeads out = MutableHeads::contiguous(storage.data(), x.batch, x.heads, x.tokens, x.dim);
  pool.parallel_for(x.batch * x.heads, [&](int64_t bh, int) {
    const int64_t b = bh / x.heads, h = bh % x.heads;
    for (int64_t t = 0; t < x.tokens; ++t) {
      const uint16_t* src = x.row(b, h, t);
      float* dst = out.row(b, h, t);
      for (int64_t d = 0; d < x.dim; ++d) dst[d] = bf16_to_float(src[d * x.stride_d]);
    }
  });
  return out;
}

}  // namespace

void attention_forward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, MutableHeads o, float* lse,
                            const AttentionOptions& options) {
  const AttentionProblem p = make_forward_problem("attention_forward_bf16", q, k, v, o, lse, options);
  if (p.B * p.H * p.T == 0) return;
  flash_attention_forward_bf16(p, q, k, v, o, lse);
}

// The backward widens q, k and v to float32 (exact) and runs the fp32 kernel: the same
// gradients as attention_backward on the widened inputs (P, dS and d_o are not rounded to bf16:
// there is no bf16-product backward yet), at the cost of one float32 copy of the three. The
// copies live in buffers kept by the calling thread and reused (grown, never shrunk): fresh
// memory for them at every call cost more in page faults than the copy itself (T = 4096,
// 12 heads: 37 MB, +40% on the backward measured).
void attention_backward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, ConstHeads o, ConstHeads d_o,
                             const float* lse, MutableHeads dq, MutableHeads dk, MutableHeads dv,
                             const AttentionOptions& options) {
  AttentionProblem p =
      make_backward_problem("attention_backward_bf16", q, k, v, o, d_o, lse, dq, dk, dv, options);
  if (p.B * p.H == 0) return;
  thread_local std::vector<float> qf, kf, vf;
  p.q = widen(q, qf, *p.pool);
  p.k = widen(k, kf, *p.pool);
  p.v = widen(v, vf, *p.pool);
  flash_attention_backward(p, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels
