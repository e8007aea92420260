// qkv/modules/norm.h - a decoder block's normalisation, by kind: LayerNorm (the book's GPT),
// RMSNorm (Llama, Qwen3), or none at all (the attention-only LM).
//
//   kNone       y = x; no state
//   kLayerNorm  layer_norm.h's LayerNorm: state scale, shift
//   kRMSNorm    layer_norm.h's RMSNorm: state weight (scaling by 1 + weight with unit_offset: Qwen3.5)
//
// x (..., E) -> y (..., E). rows() is the same on raw rows for cached steps (no state kept).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "qkv/modules/layer_norm.h"
#include "qkv/modules/module.h"

namespace qkv {

enum class NormKind { kNone, kLayerNorm, kRMSNorm };
const char* norm_kind_name(NormKind k);  // "none" | "layernorm" | "rmsnorm"

class Norm : public Module {
 public:
  Norm(NormKind kind, int64_t emb_dim, double eps, bool unit_offset = false);  // unit_offset: kRMSNorm's
  const char* type_name() const override { return "Norm"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x);         // (..., E) -> (..., E)
  Tensor backward(const Tensor& doutput);  // dL/dy -> dL/dx, adding into the weights' gradients
  // y (N, E) = norm(x (N, E)); y may be x. Records nothing.
  void rows(const float* x, int64_t N, float* y) const;
  NormKind kind() const;
  bool on() const { return kind() != NormKind::kNone; }
  // The module itself (qkv::Error when the kind differs).
  LayerNorm& layer_norm();
  RMSNorm& rms_norm();

 private:
  std::variant<std::monostate, LayerNorm, RMSNorm> n_;
};

}  // namespace qkv
