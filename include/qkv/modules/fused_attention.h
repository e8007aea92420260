// qkv/modules/fused_attention.h - the fast path behind CausalAttention and MultiHeadAttention:
// their three projections (and out_proj) run as kernels/mha.h's pipeline, forward and backward,
// on the modules' own Linear layers.
//
//   x (B, T, d_in) -> qkv = x [W_query; W_key; W_value]^T (+ bias)   (B*T, 3 d_out), one GEMM
//                  -> fused causal attention per head                 (B*T, d_out), no (T, T)
//                  -> out_proj (MultiHeadAttention only)              (B, T, d_out)
//
// The mask is the module's buffer: when its [:T, :T] corner is the causal triangle (as built, or
// as PyTorch saves it) the kernel skips the blocks above the diagonal; any other mask is applied
// as given (non-zero blocks). A trace, when asked for, is filled from this computation: queries,
// keys and values from the fused product, scores and masked scores from q k^T, and the weights
// (and dropped weights) recomputed exactly from q, k and the kernel's saved log-sum-exp.
#pragma once

#include <cstdint>

#include "qkv/kernels/mha.h"
#include "qkv/modules/attention_core.h"
#include "qkv/modules/attention_module.h"

namespace qkv {

class Dropout;
class Linear;

struct FusedProjections {
  Linear *query, *key, *value;  // weight (d_out, d_in) each; biases all or none
  Linear* out = nullptr;        // (d_out, d_out) with bias, or null (CausalAttention)
};

// Whether a forward with this path and dropout runs fused (see AttentionPath).
bool runs_fused(AttentionPath path, const Dropout& dropout);

class FusedAttention {
 public:
  // x (B, T, d_in) -> (B, T, d_out). `mask` is the (n, n) buffer, n >= T. With `per_head_trace`
  // the trace holds (B, H, T, D) / (B, H, T, T) tensors (MultiHeadAttention), else (B, T, d_out) /
  // (B, T, T) (CausalAttention, one head).
  Tensor forward(const Tensor& x, const FusedProjections& p, int64_t heads, const Tensor& mask, Dropout& dropout,
                 AttentionTrace* trace, bool per_head_trace);
  // dL/dx (B, T, d_in) from dL/dy (B, T, d_out) for the last forward; adds every parameter's
  // gradient into its Linear's dweight / dbias.
  Tensor backward(const Tensor& dy, const FusedProjections& p);

 private:
  void fill_trace(AttentionTrace& trace, const Tensor& mask, bool dropped, bool per_head);

  kernels::MhaShape shape_;
  kernels::AttentionOptions options_;
  kernels::MhaWorkspace ws_;  // qkv, ctx, lse of the last forward; reused across calls
  Tensor x_;                  // (B, T, d_in) contiguous, the last forward's input
  Tensor w_qkv_, b_qkv_;      // (3 d_out, d_in), (3 d_out): the weights that forward used
  Tensor mask_;               // (T, T) contiguous when the mask is not causal
  bool has_forward_ = false;
};

}  // namespace qkv
