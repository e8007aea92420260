// qkv/modules/fused_attention.h - the fast path behind CausalAttention and MultiHeadAttention:
// their three projections (and out_proj) run as kernels/mha.h's pipeline, forward and backward,
// on the modules' own Linear layers.
//
//   x (B, T, d_in) -> qkv = x [W_query; W_key; W_value]^T (+ bias)   (B*T, 3 d_out), one GEMM
//                  -> fused causal attention per head                 (B*T, d_out), no (T, T)
//                  -> out_proj (MultiHeadAttention only)              (B, T, d_out)
//
// The three projections' weights have one owner, QkvWeights (llm.c's qkvw): a (3 d_out, d_in)
// weight whose row blocks W_query, W_key and W_value view, so the product reads them in place and
// the backward adds its gradient straight into theirs. The mask is the module's MaskBuffer: causal
// (the kernel skips the blocks above the diagonal, nothing (T, T) exists) or, when a state dict
// loaded another mask, that mask applied as given (non-zero blocks). A trace, when asked for, is
// filled from this computation: queries, keys and values from the fused product, scores and
// masked scores from q k^T, and the weights (and dropped weights) recomputed exactly from q, k
// and the kernel's saved log-sum-exp.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/kernels/mha.h"
#include "qkv/modules/attention_core.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/attention_variants.h"
#include "qkv/modules/mask_buffer.h"

namespace qkv {

class Dropout;
class Linear;
class RMSNorm;

// One owner for W_query, W_key and W_value and their gradients. Legend: C = d_out, G key/value
// heads of D = C / H (G D = C without grouped-query attention), Q = C + 2 G D.
struct QkvWeights {
  Tensor weight;   // (Q, d_in): rows [0, C) W_query, [C, C + GD) W_key, [C + GD, Q) W_value
  Tensor bias;     // (Q), or empty without qkv_bias
  Tensor dweight;  // (Q, d_in), viewed likewise by the Linears' dweight
  Tensor dbias;    // (Q), or empty
  bool has_bias = false;

  // Takes the three Linears' values (drawn in PyTorch's order by their constructors) into one
  // (Q, d_in) tensor and makes each Linear's weight, bias, dweight and dbias a view of its rows.
  // copy_values false: the weight's values are left undefined (a model about to load them).
  void bind(Linear& query, Linear& key, Linear& value, bool copy_values = true);
  // Whether the Linears still view these tensors (they do unless a caller replaced a member).
  bool views(const Linear& query, const Linear& key, const Linear& value) const;
};

// Inference in bf16 mode: the projections' weights already rounded to bf16 (same shapes as
// QkvWeights::weight and out's weight), read instead of the float weights. Null: none.
struct FusedWeights16 {
  const uint16_t* qkv = nullptr;  // (Q, d_in)
  const uint16_t* out = nullptr;  // (d_out, d_out)
  QuantView qkv_q = {}, out_q = {};  // the same in a ggml type instead (read whatever the dtype)
  const uint16_t* gate = nullptr;    // the output gate's W_gate (d_out, d_in), with one
  QuantView gate_q = {};
};

// What a cached forward works in: the step's heads, context and log-sum-exp, the QKV product's
// staging rows and the decode scratch. A FusedAttention keeps one of its own; a model whose blocks
// run one after another passes one to them all (DecoderModel), so that a long prompt's rows are
// held once rather than once per layer (28 x 45 MB for Qwen3-0.6B's 1,000-token prompt).
struct CachedScratch {
  kernels::MhaSaved saved;
  kernels::MhaWorkspace ws;
  std::vector<float> gate_context, gate_rows;  // an output-gated step's context and gated rows (B Tn, d_out)
  size_t bytes() const { return saved.bytes() + ws.bytes() + (gate_context.size() + gate_rows.size()) * sizeof(float); }
};

struct FusedProjections {
  QkvWeights* qkv;              // the owner of the three below
  Linear *query, *key, *value;  // weight (d_out, d_in) each, views of qkv's rows
  Linear* out = nullptr;        // (out_dim, d_out), with or without bias, or null (CausalAttention)
  RMSNorm *q_norm = nullptr, *k_norm = nullptr;  // QK-norm's (weight (D) each), with spec.qk_norm
};

// Whether a forward with this path and dropout runs fused (see AttentionPath).
bool runs_fused(AttentionPath path, const Dropout& dropout);
// QK-norm's weights (p.q_norm, p.k_norm) into w when `spec` asks for it; throws when they are missing.
void set_qk_norm(kernels::MhaWeights& w, const FusedProjections& p, const kernels::AttentionSpec& spec);
// Throws when config.attention.dtype is bf16 but the module runs its textbook path (f32 only) this call.
void check_runs_in_dtype(const char* who, const AttentionConfig& config, bool fused);

class FusedAttention {
 public:
  // x (B, T, d_in) -> (B, T, H D) (out_dim wide with an output projection), T <= mask.size(), for the attention `spec` (heads, head_dim,
  // the variants, dropout, dtype: the module's config.attention) with `slopes` its ALiBi slopes
  // ((H) or empty). With `per_head_trace` the trace holds (B, H, T, D) / (B, H, T, T) tensors
  // (MultiHeadAttention), else (B, T, D) / (B, T, T) (CausalAttention, one head); keys and values
  // have G heads.
  Tensor forward(const Tensor& x, const FusedProjections& p, const kernels::AttentionSpec& spec,
                 const std::vector<float>& slopes, const MaskBuffer& mask, Dropout& dropout, AttentionTrace* trace,
                 bool per_head_trace);
  // Inference with a KV cache (kernels::mha_forward_cached): x (B, Tn, d_in) contiguous, the new
  // tokens at positions cache.length() .. + Tn - 1 -> y (B, Tn, H D), which must not overlap x;
  // appends their keys and values to `layer` of the cache. Needs the causal mask and
  // cache.length() + Tn <= mask.size(); works in `scratch` (or buffers of its own when null), so
  // the last forward's state (for backward) is kept, and allocates nothing once they have grown to
  // the step's size (decoding).
  void forward_cached(const float* x, int64_t B, int64_t Tn, int64_t d_in, float* y, const FusedProjections& p,
                      const kernels::AttentionSpec& spec, const std::vector<float>& slopes, const MaskBuffer& mask,
                      kernels::KvCache& cache, int64_t layer, FusedWeights16 w16 = {},
                      CachedScratch* scratch = nullptr);
  // dL/dx (B, T, d_in) from dL/dy (B, T, H D) for the last forward; adds every parameter's
  // gradient into its Linear's dweight / dbias.
  Tensor backward(const Tensor& dy, const FusedProjections& p);
  // The bytes of the scratch of its own that forward_cached has grown (0 when it was always given one).
  size_t own_cached_bytes() const { return cached_.bytes(); }

 private:
  void fill_trace(AttentionTrace& trace, const MaskBuffer& mask, bool dropped, bool per_head);

  kernels::MhaShape shape_;         // the last forward's
  kernels::MhaCall call_;           // the last forward's (mask_ and slopes_ below are what it points at)
  kernels::MhaSaved saved_;         // heads, ctx, lse of the last forward
  uint64_t forward_id_ = 0;         // saved_.id() right after that forward
  kernels::MhaWorkspace ws_;        // scratch, reused across calls
  CachedScratch cached_;            // forward_cached's when not given one, reused across decoding steps
  Tensor x_;                        // (B, T, d_in) contiguous, the last forward's input
  Tensor mask_;                     // (T, T) contiguous when the mask is not causal
  kernels::AttentionMask mask_view_;  // the kernel's view of mask_
  std::vector<float> slopes_;       // (H) the last forward's ALiBi slopes, or empty
  bool has_bias_ = false;           // whether the last forward's projections had biases
};

}  // namespace qkv
