// LayerNorm and RMSNorm. See include/qkv/modules/layer_norm.h.
#include "qkv/modules/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/kernels/norm_rows.h"

namespace qkv {

LayerNorm::LayerNorm(int64_t emb_dim, double e)
    : scale(Tensor::ones({emb_dim})),
      shift(Tensor::zeros({emb_dim})),
      dscale(Tensor::zeros({emb_dim})),
      dshift(Tensor::zeros({emb_dim})),
      eps(e) {
  QKV_CHECK(emb_dim > 0, "LayerNorm: emb_dim (", emb_dim, ") must be positive");
  QKV_CHECK(std::isfinite(e) && e > 0, "LayerNorm: eps (", e, ") must be positive");
}

void LayerNorm::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "scale", &scale, true, &dscale});
  out.push_back({prefix + "shift", &shift, true, &dshift});
}

Tensor LayerNorm::forward(const Tensor& x) {
  const int64_t E = scale.size(0);
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == E, "LayerNorm: input ", x.describe(), " must end in emb_dim = ", E);
  const Tensor xc = x.contiguous();
  const int64_t N = xc.numel() / E;
  shape_ = x.shape();
  norm_ = Tensor::empty({N, E});
  inv_std_.assign(static_cast<size_t>(N), 0.0f);
  Tensor y = Tensor::empty(x.shape());
  kernels::layer_norm_rows(xc.data(), N, E, scale.data(), shift.data(), eps, y.data(), norm_.data(), inv_std_.data());
  return y;
}

Tensor LayerNorm::backward(const Tensor& doutput) {
  QKV_CHECK(doutput.shape() == shape_, "LayerNorm: the gradient ", doutput.describe(), " does not match the last ",
            "forward's output ", shape_str(shape_), " (call forward before backward)");
  const int64_t E = scale.size(0), N = norm_.size(0);
  const Tensor dy = doutput.contiguous();
  Tensor dx = Tensor::empty(shape_);
  kernels::layer_norm_rows_backward(dy.data(), norm_.data(), inv_std_.data(), N, E, scale.data(), dscale.data(), dshift.data(),
                     dx.data());
  return dx;
}

RMSNorm::RMSNorm(int64_t emb_dim, double e, bool offset)
    : weight(offset ? Tensor::zeros({emb_dim}) : Tensor::ones({emb_dim})),
      dweight(Tensor::zeros({emb_dim})),
      eps(e),
      unit_offset(offset) {
  QKV_CHECK(emb_dim > 0, "RMSNorm: emb_dim (", emb_dim, ") must be positive");
  QKV_CHECK(std::isfinite(e) && e > 0, "RMSNorm: eps (", e, ") must be positive");
}

const float* RMSNorm::scale() const {
  if (!unit_offset) return weight.data();
  const int64_t E = weight.numel();
  offset_scale_.resize(static_cast<size_t>(E));
  for (int64_t i = 0; i < E; ++i) offset_scale_[static_cast<size_t>(i)] = 1.0f + weight.data()[i];
  return offset_scale_.data();
}

void RMSNorm::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "weight", &weight, true, &dweight});
}

Tensor RMSNorm::forward(const Tensor& x) {
  const int64_t E = weight.size(0);
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == E, "RMSNorm: input ", x.describe(), " must end in emb_dim = ", E);
  const Tensor xc = x.contiguous();
  const int64_t N = xc.numel() / E;
  shape_ = x.shape();
  norm_ = Tensor::empty({N, E});
  inv_rms_.assign(static_cast<size_t>(N), 0.0f);
  Tensor y = Tensor::empty(x.shape());
  kernels::rms_norm_rows(xc.data(), N, E, scale(), eps, y.data(), norm_.data(), inv_rms_.data());
  return y;
}

Tensor RMSNorm::backward(const Tensor& doutput) {
  QKV_CHECK(doutput.shape() == shape_, "RMSNorm: the gradient ", doutput.describe(), " does not match the last ",
            "forward's output ", shape_str(shape_), " (call forward before backward)");
  const int64_t E = weight.size(0), N = norm_.size(0);
  const Tensor dy = doutput.contiguous();
  Tensor dx = Tensor::empty(shape_);
  kernels::rms_norm_rows_backward(dy.data(), norm_.data(), inv_rms_.data(), N, E, scale(), dweight.data(),
                     dx.data());
  return dx;
}

}  // namespace qkv
