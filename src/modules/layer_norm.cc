// LayerNorm. See include/qkv/modules/layer_norm.h.
#include "qkv/modules/layer_norm.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

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
  const float *in = xc.data(), *g = scale.data(), *b = shift.data();
  float *n = norm_.data(), *out = y.data();
  for (int64_t r = 0; r < N; ++r) {
    const float* row = in + r * E;
    double mean = 0;
    for (int64_t i = 0; i < E; ++i) mean += row[i];
    mean /= static_cast<double>(E);
    double var = 0;  // biased: over E, as x.var(unbiased=False)
    for (int64_t i = 0; i < E; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(E);
    const double inv = 1.0 / std::sqrt(var + eps);
    inv_std_[static_cast<size_t>(r)] = static_cast<float>(inv);
    for (int64_t i = 0; i < E; ++i) {
      const float v = static_cast<float>((row[i] - mean) * inv);
      n[r * E + i] = v;
      out[r * E + i] = g[i] * v + b[i];
    }
  }
  return y;
}

Tensor LayerNorm::backward(const Tensor& doutput) {
  QKV_CHECK(doutput.shape() == shape_, "LayerNorm: the gradient ", doutput.describe(), " does not match the last ",
            "forward's output ", shape_str(shape_), " (call forward before backward)");
  const int64_t E = scale.size(0), N = norm_.size(0);
  const Tensor dy = doutput.contiguous();
  Tensor dx = Tensor::empty(shape_);
  const float *d = dy.data(), *n = norm_.data(), *g = scale.data();
  float *dg = dscale.data(), *db = dshift.data(), *out = dx.data();
  std::vector<double> dscale_sum(static_cast<size_t>(E), 0.0), dshift_sum(static_cast<size_t>(E), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const float *dr = d + r * E, *nr = n + r * E;
    // y = scale * norm + shift
    double mean_dn = 0, mean_dn_n = 0;
    for (int64_t i = 0; i < E; ++i) {
      dscale_sum[static_cast<size_t>(i)] += static_cast<double>(dr[i]) * nr[i];
      dshift_sum[static_cast<size_t>(i)] += dr[i];
      const double dn = static_cast<double>(dr[i]) * g[i];
      mean_dn += dn;
      mean_dn_n += dn * nr[i];
    }
    mean_dn /= static_cast<double>(E);
    mean_dn_n /= static_cast<double>(E);
    // norm = (x - mean) / sqrt(var + eps), mean and var of the row: the row's chain rule
    const double inv = inv_std_[static_cast<size_t>(r)];
    for (int64_t i = 0; i < E; ++i)
      out[r * E + i] = static_cast<float>((static_cast<double>(dr[i]) * g[i] - mean_dn - nr[i] * mean_dn_n) * inv);
  }
  for (int64_t i = 0; i < E; ++i) {
    dg[i] += static_cast<float>(dscale_sum[static_cast<size_t>(i)]);
    db[i] += static_cast<float>(dshift_sum[static_cast<size_t>(i)]);
  }
  return dx;
}

}  // namespace qkv
