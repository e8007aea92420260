// qkv/modules/multi_head_attention.h - the book's two multi-head classes.
//
// MultiHeadAttentionWrapper: num_heads independent CausalAttention heads, outputs concatenated.
//   x (B, T, d_in) -> (B, T, num_heads * d_out). Heads are built (and draw) one after another.
// MultiHeadAttention: one set of projections split into heads, then out_proj.
//   x (B, T, d_in) -> queries (B, T, d_out) -> view (B, T, H, D) -> transpose (B, H, T, D)
//   -> causal attention per head -> (B, T, H, D) -> (B, T, d_out) -> out_proj -> (B, T, d_out)
//   with D = head_dim = d_out / num_heads (d_out must be divisible by num_heads).
//   Llama's and Qwen3's attention: out_proj (config.out_dim, d_out), without bias (config.out_bias);
//   QK-norm (config.attention.qk_norm): RMSNorms q_norm and k_norm over each head's D of the queries
//   and keys, before RoPE (state q_norm.weight, k_norm.weight).
//   Variants (config.attention's kv_heads, rope, window, alibi, softcap; attention_variants.h): W_key and
//   W_value become (G D, d_in) (the book's bonus GroupedQueryAttention, same state-dict names),
//   query head h reads key/value head h / (H / G); RoPE rotates queries and keys per head; the
//   scores are capped, biased by ALiBi and hidden outside the window. With none of them this is
//   exactly the book's class.
// Both take config.path's computation (see AttentionPath); backward follows the last forward's.
// Traces hold per-head tensors: weights (B, H, T, T), queries (B, H, T, D), keys/values
// (B, G, T, D), queries and keys after RoPE.
#pragma once

#include <optional>
#include <vector>

#include "qkv/kernels/kv_cache.h"
#include "qkv/modules/attention_variants.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/layer_norm.h"

namespace qkv {

class MultiHeadAttentionWrapper : public AttentionModule {
 public:
  MultiHeadAttentionWrapper(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "MultiHeadAttentionWrapper"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  // (B, T, d_in) -> (B, T, num_heads * d_out); trace tensors stacked along dim 1 (heads)
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;
  Tensor backward(const Tensor& doutput) override;  // (B, T, num_heads * d_out) -> (B, T, d_in)

  AttentionConfig config;
  std::vector<CausalAttention> heads;
};

class MultiHeadAttention : public AttentionModule {
 public:
  MultiHeadAttention(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "MultiHeadAttention"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;  // (B, T, d_in) -> (B, T, d_out)
  Tensor backward(const Tensor& doutput) override;  // (B, T, d_out) -> (B, T, d_in)
  // Inference with a KV cache: x (B, Tn, d_in) holds the new tokens at positions
  // cache.length() .. + Tn - 1 (all earlier positions' keys and values are in the cache) ->
  // (B, Tn, d_out), exactly what forward() gives for those rows of the whole sequence. Appends
  // this block's keys and values to `layer` of the cache; the caller commits the step once every
  // layer has appended (kernels/kv_cache.h). Always runs the fused kernels (kernels/mha.h's
  // mha_forward_cached), whatever config.path: in eval mode the paths compute the same. Throws
  // qkv::Error when dropout is active (call eval()), on a loaded mask that is not causal, a cache
  // whose (batch, kv_heads, head_dim) or layers do not fit, a layer that already appended in the
  // step in progress, or positions past the context length or the cache's capacity. It keeps no
  // state for backward (and leaves the last forward's intact).
  // w16: in bf16 mode, the projections' weights kept in bf16 (FusedWeights16), read instead of
  // rounding the float weights at every step. With the output gate (gated-mha, Qwen3.5): the
  // context times sigmoid(W_gate(x)), then out_proj, as forward() computes them.
  Tensor forward_cached(const Tensor& x, kernels::KvCache& cache, int64_t layer, FusedWeights16 w16 = {});
  // The same on raw rows: x (B, Tn, d_in) contiguous -> y (B, Tn, d_out), not overlapping x;
  // allocates nothing once its buffers have grown (a decoding step).
  // scratch: where the step works (FusedAttention's CachedScratch), or null for the module's own.
  void forward_cached(const float* x, int64_t B, int64_t Tn, float* y, kernels::KvCache& cache, int64_t layer,
                      FusedWeights16 w16 = {}, CachedScratch* scratch = nullptr);
  // x's tokens one at a time through a fresh one-layer f32 KvCache of T positions (a decoding
  // loop's steps, each committed): forward's rows within float rounding.
  Tensor forward_token_by_token(const Tensor& x) override;
  int64_t head_dim() const { return config.attention.head_dim; }
  int64_t num_kv_heads() const { return config.attention.groups(); }
  // (Q, d_in): W_query, W_key and W_value's rows in one tensor (they view it).
  const Tensor& fused_qkv_weight() const { return qkv_.weight; }
  // The bytes of forward_cached's own scratch (FusedAttention::own_cached_bytes).
  size_t own_cached_bytes() const { return fused_.own_cached_bytes(); }

  // With config.gate_in_query: W_query's and W_gate's rows in one parameter, (2 d_out, d_in), head
  // h's D query rows then its D gate rows (and the biases likewise) - the state dict's and the
  // optimizer's. W_query and W_gate are then its unpacked copies: unpack_query_and_gate() before
  // they are read (forward does), pack_gradients() after a backward (backward does).
  void unpack_query_and_gate();
  void pack_gradients();

  AttentionConfig config;
  std::optional<Linear> q_and_gate;  // (declared before W_query: drawn first)
  Linear W_query;                  // weight (d_out, d_in)
  std::optional<Linear> W_gate;    // weight (d_out, d_in), with config.output_gate (GatedMultiHeadAttention)
  Linear W_key, W_value;           // weight (G D, d_in): d_out rows without grouped-query heads
  Linear out_proj;                 // weight (out_width, d_out), bias (out_width) unless config.out_bias is false
  Dropout dropout;
  MaskBuffer mask;                 // the (context_length, context_length) buffer, causal unless loaded otherwise
  RMSNorm q_norm, k_norm;          // QK-norm's weight (D) each: state only with config.attention.qk_norm

 private:
  // The fused path's projections; with the output gate without out_proj (the module gates the
  // context, then projects it).
  FusedProjections projections() {
    return {&qkv_, &W_query, &W_key, &W_value, W_gate ? nullptr : &out_proj, &q_norm, &k_norm};
  }
  // out = out_proj(context * sigmoid(W_gate(x))); keeps what gated_backward needs.
  Tensor gated_out(const Tensor& x, const Tensor& context);
  // dL/dcontext from dL/dout, adding W_gate's and out_proj's gradients; dx_gate: W_gate's share of dL/dx.
  Tensor gated_backward(const Tensor& doutput, Tensor& dx_gate);
  // dL/dx from dL/dmerged ((B, T, d_out), the heads merged) for the last textbook forward.
  Tensor textbook_backward(const Tensor& dmerged);
  std::vector<float> alibi_slopes_;  // (H) the spec's ALiBi slopes (spec_alibi_slopes), or empty
  QkvWeights qkv_;        // owns W_query, W_key and W_value (they view its rows)
  Shape x_shape_;         // (B, T, d_in) of the last forward
  AttentionSaved saved_;  // textbook path, per head: q, k, v (B, H, T, D), weights (B, H, T, T)
  VariantSaved variant_saved_;  // textbook path with variants
  FusedAttention fused_;  // fused path
  bool fused_last_ = false;
  Tensor gate_sigmoid_, gate_context_;  // (B, T, d_out): sigmoid(W_gate(x)) and the context it gated
  CachedScratch gate_scratch_;  // a gated cached step's rows when the caller passes no scratch
};

// GatedMultiHeadAttention (the book's bonus ch04/08_deltanet; Qwen3-Next's and Qwen3.5's full
// attention layers): MultiHeadAttention with a sigmoid output gate.
//   gate = W_gate(x)                                   (B, T, d_out), drawn right after W_query
//   context as MultiHeadAttention's                    (B, T, d_out), heads merged
//   out = out_proj(context * sigmoid(gate))            (B, T, d_out)
// The state dict is the book class's: W_query, W_gate, W_key, W_value, out_proj (its mask buffer
// is registered persistent=False). Variants, paths and dtypes as MultiHeadAttention's; no cached
// forward (the book's class has no KV cache).
class GatedMultiHeadAttention : public MultiHeadAttention {
 public:
  GatedMultiHeadAttention(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "GatedMultiHeadAttention"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
};

}  // namespace qkv
