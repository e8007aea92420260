// qkv/modules/feed_forward.h - the book's GELU and FeedForward (chapter 4), and the SwiGLU
// feed-forward of Llama and Qwen3.
//
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))     (the tanh approximation)
//   FeedForward: x (..., E) -> layers.0 = Linear(E, 4E) -> GELU -> layers.2 = Linear(4E, E)
//
// State names as nn.Sequential numbers them: layers.0.weight, layers.0.bias, layers.2.weight,
// layers.2.bias (the GELU at index 1 has none). Built from a generator it draws layers.0's weight
// and bias, then layers.2's, as the book's constructor does.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/module.h"

namespace qkv {

// Elementwise over the default pool, float32 SIMD (qkv/core/pointwise.h: within a few float32 ulps
// of the formula in double).
Tensor gelu(const Tensor& x);
// dL/dx given x and dL/dy: dy * gelu'(x).
Tensor gelu_backward(const Tensor& x, const Tensor& dy);

class FeedForward : public Module {
 public:
  FeedForward(int64_t emb_dim, int64_t hidden_dim, Generator& gen);  // hidden_dim: 4 E in the book
  const char* type_name() const override { return "FeedForward"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x);  // (..., E) -> (..., E)
  Tensor backward(const Tensor& doutput);

  Linear fc;    // layers.0: (4E, E) and (4E)
  Linear proj;  // layers.2: (E, 4E) and (E)

 private:
  Tensor hidden_;  // (..., 4E) fc's output, gelu's input
};

// Llama's and Qwen3's feed-forward (Shazeer 2020's SwiGLU), as Hugging Face's LlamaMLP:
//   y = down_proj(silu(gate_proj(x)) * up_proj(x))     x (..., E), hidden (..., F), no biases
// State names gate_proj.weight (F, E), up_proj.weight (F, E), down_proj.weight (E, F); drawn from
// a generator in that order, as nn.Linear(bias=False) each. silu(g) u and its gradient are
// core/pointwise.h's swiglu passes. Backward, with g = gate(x), u = up(x),
// s = sigmoid(g):  dh = down^T dy;  du = dh silu(g);  dg = dh u s (1 + g (1 - s));
//                  dx = gate^T dg + up^T du.
class SwiGLUFeedForward : public Module {
 public:
  SwiGLUFeedForward(int64_t emb_dim, int64_t hidden_dim, Generator& gen);
  const char* type_name() const override { return "SwiGLUFeedForward"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x);  // (..., E) -> (..., E)
  Tensor backward(const Tensor& doutput);

  Linear gate_proj, up_proj, down_proj;

 private:
  Tensor gate_, up_;  // (..., F) the last forward's gate_proj(x) and up_proj(x)
};

// A decoder block's feed-forward, by kind: the book's GELU FeedForward (hidden width F), Llama's
// SwiGLU, or none (the attention-only LM: y = x would be wrong, so a block without one skips it;
// forward and backward refuse). State as the module's own.
enum class FeedForwardKind { kNone, kGelu, kSwiGLU };
const char* feed_forward_kind_name(FeedForwardKind k);  // "none" | "gelu" | "swiglu"

class FeedForwardNet : public Module {
 public:
  FeedForwardNet(FeedForwardKind kind, int64_t emb_dim, int64_t hidden_dim, Generator& gen);
  const char* type_name() const override { return "FeedForwardNet"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x);  // (..., E) -> (..., E)
  Tensor backward(const Tensor& doutput);
  FeedForwardKind kind() const;
  bool on() const { return kind() != FeedForwardKind::kNone; }
  // Its linears in state order: fc, proj (GELU) or gate_proj, up_proj, down_proj (SwiGLU).
  std::vector<Linear*> linears();
  std::vector<const Linear*> linears() const;
  // The module itself (qkv::Error when the kind differs).
  FeedForward& gelu_net();
  SwiGLUFeedForward& swiglu_net();
  const FeedForward& gelu_net() const;
  const SwiGLUFeedForward& swiglu_net() const;

 private:
  std::variant<std::monostate, FeedForward, SwiGLUFeedForward> f_;
};

}  // namespace qkv
