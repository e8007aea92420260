// qkv/modules/multi_head_attention.h - the book's two multi-head classes.
//
// MultiHeadAttentionWrapper: num_heads independent CausalAttention heads, outputs concatenated.
//   x (B, T, d_in) -> (B, T, num_heads * d_out). Heads are built (and draw) one after another.
// MultiHeadAttention: one set of projections split into heads, then out_proj.
//   x (B, T, d_in) -> queries (B, T, d_out) -> view (B, T, H, D) -> transpose (B, H, T, D)
//   -> causal attention per head -> (B, T, H, D) -> (B, T, d_out) -> out_proj -> (B, T, d_out)
//   with D = head_dim = d_out / num_heads (d_out must be divisible by num_heads).
// Both take config.path's computation (see AttentionPath); backward follows the last forward's.
// Traces hold per-head tensors: weights (B, H, T, T), queries/keys/values (B, H, T, D).
#pragma once

#include <vector>

#include "qkv/modules/causal_attention.h"

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
  int64_t head_dim() const { return config.d_out / config.num_heads; }

  AttentionConfig config;
  Linear W_query, W_key, W_value;  // weight (d_out, d_in)
  Linear out_proj;                 // weight (d_out, d_out), bias (d_out)
  Dropout dropout;
  MaskBuffer mask;                 // the (context_length, context_length) buffer, causal unless loaded otherwise

 private:
  FusedProjections projections() { return {&qkv_, &W_query, &W_key, &W_value, &out_proj}; }
  QkvWeights qkv_;        // owns W_query, W_key and W_value (they view its rows)
  Shape x_shape_;         // (B, T, d_in) of the last forward
  AttentionSaved saved_;  // textbook path, per head: q, k, v (B, H, T, D), weights (B, H, T, T)
  FusedAttention fused_;  // fused path
  bool fused_last_ = false;
};

}  // namespace qkv
