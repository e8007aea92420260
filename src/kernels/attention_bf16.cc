// The bf16 fused attention's front door (qkv/kernels/attention_bf16.h): the fp32 entry points'
// checks (make_forward_problem, make_backward_problem in attention.cc, so the same messages),
// then the bf16 kernels of flash_attention_bf16.cc.
#include "qkv/kernels/attention_bf16.h"

#include "kernels/attention_problem.h"
#include "qkv/core/bf16.h"

namespace qkv::kernels {

void attention_forward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, MutableHeads o, float* lse,
                            const AttentionOptions& options) {
  const AttentionProblem p = make_forward_problem("attention_forward_bf16", q, k, v, o, lse, options);
  if (p.B * p.H * p.T == 0) return;
  flash_attention_forward_bf16(p, q, k, v, o, lse);
}

// The backward rounds d_o, the weights P z and dS to bf16 for its products, as the forward rounds
// P (flash_attention_bf16.cc).
void attention_backward_bf16(ConstHeadsBF16 q, ConstHeadsBF16 k, ConstHeadsBF16 v, ConstHeads o, ConstHeads d_o,
                             const float* lse, MutableHeads dq, MutableHeads dk, MutableHeads dv,
                             const AttentionOptions& options) {
  const AttentionProblem p =
      make_backward_problem("attention_backward_bf16", q, k, v, o, d_o, lse, dq, dk, dv, options);
  if (p.B * p.H == 0) return;
  flash_attention_backward_bf16(p, q, k, v, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels
