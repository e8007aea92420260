// qkv/modules/gated_deltanet.h - the book's bonus GatedDeltaNet (ch04/08_deltanet; the linear
// attention of Qwen3-Next and Qwen3.5, without their convolution): a fixed-size state per head
// updated token by token by the gated delta rule, instead of softmax attention over every key.
//
// Legend: B batch, T tokens, H heads, D = d_out / H; per head a state S (D x D), S_0 = 0.
//   q, k, v   = W_query(x), W_key(x), W_value(x)          (B, T, H, D) each
//   beta      = sigmoid(W_beta(x))                         (B, T, H, D): per channel
//   alpha     = exp(-exp(A_log) * softplus(W_alpha(x) + dt_bias))   (B, T, H): the decay
//   q, k      = l2norm(q) / sqrt(D), l2norm(k)              l2norm(u) = u / sqrt(sum u^2 + 1e-6)
//   per token t:  S = alpha_t S;  delta = (v_t - S^T k_t) * beta_t;  S = S + k_t delta^T;  y_t = S^T q_t
//   out       = out_proj(dropout(rmsnorm(y) * silu(W_gate(x))))   rmsnorm over each head's D, eps 1e-6
// The state dict is the class's: dt_bias, A_log (its own parameters first, as PyTorch orders
// them), W_query, W_key, W_value (bias with qkv_bias), W_gate, W_beta, W_alpha (no bias),
// norm.weight, out_proj (with bias); drawn in that order (A_log's uniform_(0, 16) after W_alpha),
// so a generator seeded as torch.manual_seed(S) gives the class's weights.
// One computation: the token-by-token recurrence above (modules/delta_rule.h: the reference form,
// its state and sums in double; it keeps every step's state for the backward, B H T D^2 doubles). config.context_length is qkv's limit on T only.
// The book's snippet multiplies the context (B, T, H, D) by a gate it transposed to (B, H, T, D),
// which fails unless T == H (and then pairs the wrong elements); qkv gates each token's head with
// its own gate, as the official implementation does.
#pragma once

#include <vector>

#include "qkv/modules/attention_module.h"
#include "qkv/modules/delta_rule.h"
#include "qkv/modules/layer_norm.h"
#include "qkv/modules/layers.h"

namespace qkv {

class GatedDeltaNet : public AttentionModule {
 public:
  GatedDeltaNet(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "GatedDeltaNet"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  // (B, T, d_in) -> (B, T, d_out); a trace keeps the (normalised) queries and keys, the values and
  // the context y, per head (B, H, T, D), and as `weights` the exact linear map the recurrence applies
  // to the values, one per head and value channel (beta corrects each channel by its own amount):
  // y[:, h, c] = A[h D + c] @ v[:, h, c], A (B, H D, T, T) lower-triangular (delta_rule_map; not
  // softmax weights).
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;
  Tensor backward(const Tensor& doutput) override;  // (B, T, d_out) -> (B, T, d_in)

  // (declared in the class's draw order: the members are built, and draw, in this order)
  AttentionConfig config;
  Linear W_query, W_key, W_value;  // (d_out, d_in)
  Linear W_gate, W_beta;           // (d_out, d_in), no bias
  Linear W_alpha;                  // (H, d_in), no bias
  Tensor dt_bias, ddt_bias;        // (H), ones
  Tensor A_log, dA_log;            // (H), log(uniform(0, 16))
  RMSNorm norm;                    // weight (D)
  Linear out_proj;                 // (d_out, d_out), with bias
  Dropout dropout;

 private:
  DeltaRuleShape rule_shape(int64_t B, int64_t T) const;
  Shape x_shape_;
  // The last forward's values, (B, T, H, D) unless said: the projections, the normalised q and k
  // and their 1 / norms (B, T, H), beta, alpha (B, T, H), z = W_alpha(x) + dt_bias (B, T, H), the
  // states after each token (B, H, T, D, D) and the gate's input.
  std::vector<float> xq_, xk_, v_, xg_, beta_, alpha_, z_, qn_, kn_, rq_, rk_;
  std::vector<double> states_;  // the recurrence in double: the reference form, its sums exact enough
                                // that float32 rounding of the inputs is all that differs from float64
  std::vector<float> ctx_;  // y, the context before the norm (B, T, H, D)
};

}  // namespace qkv
