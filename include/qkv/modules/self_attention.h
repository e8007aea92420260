// qkv/modules/self_attention.h - the notebooks' SelfAttention_v1 and SelfAttention_v2.
//
// Both map x (T, d_in) -> context (T, d_out) with no mask:
//   queries = x W_q, keys = x W_k, values = x W_v
//   context = softmax(queries keys^T / sqrt(d_out)) values
// v1 holds raw (d_in, d_out) matrices drawn with torch.rand (or torch.randn, as notebook 004
// does); v2 holds nn.Linear layers, whose weights are stored transposed, (d_out, d_in).
#pragma once

#include "qkv/core/generator.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/module.h"

namespace qkv {

enum class MatrixInit { kRand, kRandn };

class SelfAttentionV1 : public AttentionModule {
 public:
  SelfAttentionV1(int64_t d_in, int64_t d_out, Generator& gen, MatrixInit init = MatrixInit::kRand);
  const char* type_name() const override { return "SelfAttentionV1"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;  // (T, d_in) -> (T, d_out)
  Tensor backward(const Tensor& doutput) override;                             // (T, d_out) -> (T, d_in)
  int input_rank() const override { return 2; }

  Tensor W_query, W_key, W_value;     // (d_in, d_out) each, drawn in this order
  Tensor dW_query, dW_key, dW_value;  // (d_in, d_out) each

 private:
  Tensor x_;              // (T, d_in) the last forward's input
  AttentionSaved saved_;  // what attend_backward needs
};

class SelfAttentionV2 : public AttentionModule {
 public:
  SelfAttentionV2(int64_t d_in, int64_t d_out, bool qkv_bias, Generator& gen);
  const char* type_name() const override { return "SelfAttentionV2"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;  // (T, d_in) -> (T, d_out)
  Tensor backward(const Tensor& doutput) override;                             // (T, d_out) -> (T, d_in)
  int input_rank() const override { return 2; }

  Linear W_query, W_key, W_value;  // weight (d_out, d_in) each, built in this order

 private:
  AttentionSaved saved_;
};

// Checks x is (T, d_in) for a module named `who`.
void check_tokens_by_features(const char* who, const Tensor& x, int64_t d_in);

}  // namespace qkv
