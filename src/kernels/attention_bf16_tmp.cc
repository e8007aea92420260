// TEMPORARY (until the bf16 kernel lands): widens the heads and runs the float32 kernel.
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/kernels/attention_bf16.h"

namespace qkv::kernels {
namespace {
std::vector<float> widen(ConstHeadsBF16 x, ConstHeads& out) {
  std::vector<float> f(static_cast<size_t>(x.batch * x.heads * x.tokens * x.dim));
  out = ConstHeads::contiguous(f.data(), x.batch, x.heads, x.tokens, x.dim);
  for (int64_t b = 0; b < x.batch; ++b)
    for (int64_t h = 0; h < x.heads; ++h)
      for (int64_t n = 0; n < x.tokens; ++n)
        for (int64_t d = 0; d < x.dim; ++d)
          f[static_cast<size_t>(((b * x.heads + h) * x.tokens + n) * x.dim + d)] = bf16_to_float(x.row(b, h, n)[d * x.stride_d]);
  return f;
}
}  // namespace
void attention_forward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, MutableHeads o, float* lse,
                            const AttentionOptions& options) {
  ConstHeads qf, kf, vf;
  auto a = widen(q, qf), b = widen(k, kf), c = widen(v, vf);
  attention_forward(qf, kf, vf, o, lse, options);
}
void attention_backward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, ConstHeads o, ConstHeads d_o,
                             const float* lse, MutableHeads dq, MutableHeads dk, MutableHeads dv,
                             const AttentionOptions& options) {
  ConstHeads qf, kf, vf;
  auto a = widen(q, qf), b = widen(k, kf), c = widen(v, vf);
  attention_backward(qf, kf, vf, o, d_o, lse, dq, dk, dv, options);
}
}  // namespace qkv::kernels
