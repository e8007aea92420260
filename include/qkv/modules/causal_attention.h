// qkv/modules/causal_attention.h - the book's CausalAttention: batched, masked, with dropout.
//
//   x (B, T, d_in) -> context (B, T, d_out)
//   scores = queries keys^T, masked_fill(mask[:T, :T] != 0, -inf), softmax(/ sqrt(d_out)),
//   dropout, @ values.
// `mask` is the registered buffer triu(ones(context_length, context_length), 1), held as the flag
// it is (mask_buffer.h); a different mask loaded from a state dict is used as loaded. W_query,
// W_key and W_value are views of one (3 d_out, d_in) weight (fused_attention.h's QkvWeights). config.path chooses the fused or the textbook computation
// (see AttentionPath); backward follows the path the last forward took. T may not exceed context_length (PyTorch fails there
// with a shape error; qkv says why).
#pragma once

#include "qkv/core/generator.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/fused_attention.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/module.h"

namespace qkv {

class CausalAttention : public AttentionModule {
 public:
  CausalAttention(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "CausalAttention"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;  // (B, T, d_in) -> (B, T, d_out)
  Tensor backward(const Tensor& doutput) override;  // (B, T, d_out) -> (B, T, d_in)

  AttentionConfig config;
  Linear W_query, W_key, W_value;  // weight (d_out, d_in)
  Dropout dropout;
  MaskBuffer mask;                 // the (context_length, context_length) buffer, causal unless loaded otherwise

 private:
  FusedProjections projections() { return {&qkv_, &W_query, &W_key, &W_value, nullptr}; }
  QkvWeights qkv_;        // owns W_query, W_key and W_value (they view its rows)
  AttentionSaved saved_;  // the textbook path's
  FusedAttention fused_;  // the fused path's
  bool fused_last_ = false;
};

// Checks a causal class's config: d_in and context_length positive, the attention spec
// (validate_attention_spec, fields named as the config names them), causal, and bf16 only on the
// fused path; returns c. Errors start with `who`.
const AttentionConfig& validate(const AttentionConfig& c, const char* who);
// The same for one causal head (CausalAttention, each of the wrapper's heads): num_heads 1, no variants.
const AttentionConfig& validate_one_head(const AttentionConfig& c, const char* who);

// Checks x is (B, T, d_in) with T <= context_length, for a module named `who`.
void check_batch_input(const char* who, const Tensor& x, int64_t d_in, int64_t context_length);

}  // namespace qkv
