// qkv/modules/layer_norm.h - the book's LayerNorm (chapter 4): normalise each row over its last
// dimension, then scale and shift; and RMSNorm (Llama, Qwen3), which neither centres nor shifts.
//
//   mean = x.mean(-1), var = x.var(-1, unbiased=False)             x (..., E)
//   norm = (x - mean) / sqrt(var + eps)                             eps = 1e-5
//   y    = scale * norm + shift                                     scale, shift (E)
//
// State names: scale (ones), shift (zeros); nothing is drawn from a generator. The statistics are
// accumulated in double; y and the gradients are float32 (the rows: kernels/norm_rows.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/modules/module.h"

namespace qkv {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t emb_dim, double eps = 1e-5);
  const char* type_name() const override { return "LayerNorm"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x);         // (..., E) -> (..., E)
  // dL/dy of the last forward -> dL/dx; adds into dscale and dshift.
  //   dnorm = dy * scale;  dx = (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) / sqrt(var + eps)
  Tensor backward(const Tensor& doutput);

  Tensor scale, shift;    // (E)
  Tensor dscale, dshift;  // (E)
  double eps;

 private:
  Tensor norm_;                 // (N, E) the last forward's normalised rows
  std::vector<float> inv_std_;  // (N) 1 / sqrt(var + eps) per row
  Shape shape_;                 // the last forward's input shape
};

// Llama's and Qwen3's RMSNorm (Zhang & Sennrich 2019), as Hugging Face's LlamaRMSNorm and the book's
// bonus chapters compute it:
//   rms = sqrt(x.pow(2).mean(-1) + eps),  y = weight * x / rms              x (..., E), weight (E)
// State name: weight (ones). Backward:
//   dnorm = dy * weight;  dx = (dnorm - norm * mean(dnorm * norm)) / rms;  dweight += sum dy * norm
// With unit_offset (Qwen3.5's, Gemma's): y = (1 + weight) * x / rms, weight zero-initialised; the
// scale 1 + weight is rounded to float32 as PyTorch's `1.0 + self.weight.float()` rounds it, and
// dweight is the scale's gradient.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t emb_dim, double eps = 1e-6, bool unit_offset = false);
  const char* type_name() const override { return "RMSNorm"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x);  // (..., E) -> (..., E)
  Tensor backward(const Tensor& doutput);

  // What multiplies the normalised rows (E): weight, or 1 + weight with unit_offset (worked out at
  // each call from the weight as it is then).
  const float* scale() const;

  Tensor weight;   // (E)
  Tensor dweight;  // (E)
  double eps;
  bool unit_offset;

 private:
  mutable std::vector<float> offset_scale_;  // (E) 1 + weight, with unit_offset
  Tensor norm_;                 // (N, E) x / rms of the last forward
  std::vector<float> inv_rms_;  // (N)
  Shape shape_;
};

}  // namespace qkv
