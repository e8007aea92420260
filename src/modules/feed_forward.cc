// GELU and FeedForward. See include/qkv/modules/feed_forward.h.
#include "qkv/modules/feed_forward.h"

#include <cmath>

#include "qkv/core/error.h"

namespace qkv {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;

}  // namespace

Tensor gelu(const Tensor& x) {
  const Tensor c = x.contiguous();
  Tensor y = Tensor::empty(c.shape());
  const float* in = c.data();
  float* out = y.data();
  for (int64_t i = 0, n = c.numel(); i < n; ++i) {
    const double v = in[i];
    out[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v))));
  }
  return y;
}

Tensor gelu_backward(const Tensor& x, const Tensor& dy) {
  QKV_CHECK(x.shape() == dy.shape(), "gelu_backward: x ", x.describe(), " and dy ", dy.describe(), " differ");
  const Tensor xc = x.contiguous(), dc = dy.contiguous();
  Tensor dx = Tensor::empty(xc.shape());
  const float *in = xc.data(), *d = dc.data();
  float* out = dx.data();
  for (int64_t i = 0, n = xc.numel(); i < n; ++i) {
    // y = 0.5 v (1 + t), t = tanh(u), u = k (v + c v^3):  dy/dv = 0.5 (1 + t) + 0.5 v (1 - t^2) k (1 + 3 c v^2)
    const double v = in[i];
    const double t = std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    const double slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kCubic * v * v);
    out[i] = static_cast<float>(d[i] * slope);
  }
  return dx;
}

FeedForward::FeedForward(int64_t emb_dim, int64_t hidden_dim, Generator& gen)
    : fc(emb_dim, hidden_dim, true, gen), proj(hidden_dim, emb_dim, true, gen) {}

void FeedForward::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  fc.collect_state(prefix + "layers.0.", out);
  proj.collect_state(prefix + "layers.2.", out);
}

Tensor FeedForward::forward(const Tensor& x) {
  hidden_ = fc.forward(x);          // (..., 4E)
  return proj.forward(gelu(hidden_));  // (..., E)
}

Tensor FeedForward::backward(const Tensor& doutput) {
  QKV_CHECK(hidden_.defined(), "FeedForward: backward before forward");
  // return proj.forward(gelu(hidden_))
  const Tensor dgelu = proj.backward(doutput);
  // hidden_ = fc.forward(x)
  return fc.backward(gelu_backward(hidden_, dgelu));
}

}  // namespace qkv
