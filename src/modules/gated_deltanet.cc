// GatedDeltaNet. See include/qkv/modules/gated_deltanet.h.
#include "qkv/modules/gated_deltanet.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/delta_rule.h"

namespace qkv {
namespace {

constexpr const char* kDeltaNet = "GatedDeltaNet";
constexpr float kL2Eps = 1e-6f;

const AttentionConfig& deltanet_config(const AttentionConfig& c) {
  validate(c, kDeltaNet);
  QKV_CHECK(!c.attention.has_variants(), kDeltaNet, " takes no variants (num_kv_heads, rope, window, alibi, softcap)");
  QKV_CHECK(c.attention.dtype == Dtype::kF32, kDeltaNet, " computes in f32 only");
  QKV_CHECK(c.path != AttentionPath::kFused, kDeltaNet,
            " runs its token-by-token recurrence only (--attention auto or textbook); the chunked form is not built");
  return c;
}

std::vector<float> values_of(const Tensor& t) { return t.contiguous().to_vector(); }

}  // namespace

DeltaRuleShape GatedDeltaNet::rule_shape(int64_t B, int64_t T) const {
  const int64_t D = config.attention.head_dim;
  return {B, T, config.attention.heads, D, D, /*beta_per_channel=*/true};
}

GatedDeltaNet::GatedDeltaNet(const AttentionConfig& c, Generator& gen)
    : config(deltanet_config(c)),
      W_query(c.d_in, c.d_out(), c.qkv_bias, gen),
      W_key(c.d_in, c.d_out(), c.qkv_bias, gen),
      W_value(c.d_in, c.d_out(), c.qkv_bias, gen),
      W_gate(c.d_in, c.d_out(), false, gen),
      W_beta(c.d_in, c.d_out(), false, gen),
      W_alpha(c.d_in, c.attention.heads, false, gen),
      dt_bias(Tensor::ones({c.attention.heads})),
      ddt_bias(Tensor::zeros({c.attention.heads})),
      A_log(drawn_a_log(c.attention.heads, gen)),
      dA_log(Tensor::zeros({c.attention.heads})),
      norm(c.attention.head_dim, 1e-6),
      out_proj(c.d_out(), c.d_out(), true, gen),
      dropout(c.attention.dropout, gen) {}

void GatedDeltaNet::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "dt_bias", &dt_bias, true, &ddt_bias});
  out.push_back({prefix + "A_log", &A_log, true, &dA_log});
  W_query.collect_state(prefix + "W_query.", out);
  W_key.collect_state(prefix + "W_key.", out);
  W_value.collect_state(prefix + "W_value.", out);
  W_gate.collect_state(prefix + "W_gate.", out);
  W_beta.collect_state(prefix + "W_beta.", out);
  W_alpha.collect_state(prefix + "W_alpha.", out);
  norm.collect_state(prefix + "norm.", out);
  out_proj.collect_state(prefix + "out_proj.", out);
}

void GatedDeltaNet::train(bool on) {
  Module::train(on);
  dropout.train(on);
}

Tensor GatedDeltaNet::forward(const Tensor& x, AttentionTrace* trace) {
  check_batch_input(kDeltaNet, x, config.d_in, config.context_length);
  x_shape_ = x.shape();
  const int64_t B = x.size(0), T = x.size(1), H = config.attention.heads, D = config.attention.head_dim;
  const int64_t C = H * D;
  xq_ = values_of(W_query.forward(x));
  xk_ = values_of(W_key.forward(x));
  v_ = values_of(W_value.forward(x));
  xg_ = values_of(W_gate.forward(x));
  beta_ = values_of(W_beta.forward(x));
  z_ = values_of(W_alpha.forward(x));  // (B, T, H)
  for (float& b : beta_) b = sigmoid_value(b);
  alpha_.resize(z_.size());
  decay_forward(z_.data(), dt_bias.data(), A_log.data(), static_cast<int64_t>(z_.size()), H, alpha_.data());
  // q, k = l2norm(q) / sqrt(D), l2norm(k), per (b, t, h)
  qn_.resize(xq_.size());
  kn_.resize(xk_.size());
  rq_.resize(static_cast<size_t>(B * T * H));
  rk_.resize(rq_.size());
  l2norm_rows(xq_.data(), B * T * H, D, kL2Eps, 1.0f / std::sqrt(static_cast<float>(D)), qn_.data(), rq_.data());
  l2norm_rows(xk_.data(), B * T * H, D, kL2Eps, 1.0f, kn_.data(), rk_.data());
  Tensor y = Tensor::empty({B, T, H, D});
  delta_rule_forward(rule_shape(B, T), {qn_.data(), kn_.data(), v_.data(), beta_.data(), alpha_.data()}, states_,
                     y.data());
  // out = out_proj(dropout(rmsnorm(y) * silu(gate)))
  const Tensor normed = norm.forward(y).contiguous();  // (B, T, H, D)
  ctx_ = y.to_vector();
  Tensor gated = Tensor::empty({B, T, C});
  for (int64_t i = 0; i < B * T * C; ++i) {
    const float g = xg_[i];
    gated.data()[i] = normed.data()[i] * (g * sigmoid_value(g));
  }
  if (trace) {
    auto heads = [&](const std::vector<float>& v) {  // (B, T, H, D) -> (B, H, T, D)
      return Tensor::from({B, T, H, D}, v).transpose(1, 2).contiguous();
    };
    trace->queries = heads(qn_);
    trace->keys = heads(kn_);
    trace->values = heads(v_);
    trace->context = y.transpose(1, 2).contiguous();
    trace->weights = delta_rule_map(rule_shape(B, T), {qn_.data(), kn_.data(), v_.data(), beta_.data(), alpha_.data()})
                         .reshape({B, H * D, T, T});  // map h D + c: head h's value channel c
  }
  return out_proj.forward(dropout.forward(gated));
}

Tensor GatedDeltaNet::backward(const Tensor& doutput) {
  QKV_CHECK(x_shape_.size() == 3, kDeltaNet, ": backward before forward");
  const int64_t B = x_shape_[0], T = x_shape_[1], H = config.attention.heads, D = config.attention.head_dim;
  const int64_t C = H * D;
  const Tensor dgated = dropout.backward(out_proj.backward(doutput)).contiguous();  // (B, T, C)
  // gated = rmsnorm(y) w silu(g)
  std::vector<float> dy(ctx_.size()), dxg(static_cast<size_t>(B * T * C));
  gated_rms_norm_rows_backward(ctx_.data(), xg_.data(), norm.weight.data(), dgated.data(), B * T * H, D, norm.eps,
                               dy.data(), dxg.data(), norm.dweight.data());
  // the recurrence backward, then q, k normalised: qn = l2norm(xq) / sqrt(D), kn = l2norm(xk)
  std::vector<float> dqn(qn_.size()), dkn(kn_.size()), dv(v_.size()), dbeta(beta_.size()), dalpha(alpha_.size());
  delta_rule_backward(rule_shape(B, T), {qn_.data(), kn_.data(), v_.data(), beta_.data(), alpha_.data()}, states_,
                      dy.data(), {dqn.data(), dkn.data(), dv.data(), dbeta.data(), dalpha.data()});
  std::vector<float> dxq(xq_.size()), dxk(xk_.size());
  l2norm_rows_backward(xq_.data(), rq_.data(), dqn.data(), B * T * H, D, kL2Eps,
                       1.0f / std::sqrt(static_cast<float>(D)), dxq.data());
  l2norm_rows_backward(xk_.data(), rk_.data(), dkn.data(), B * T * H, D, kL2Eps, 1.0f, dxk.data());
  // beta = sigmoid(xb); alpha = exp(-exp(A_log) softplus(z)), z = W_alpha(x) + dt_bias
  std::vector<float> dxb(beta_.size()), dz(z_.size());
  for (size_t i = 0; i < beta_.size(); ++i) dxb[i] = dbeta[i] * beta_[i] * (1.0f - beta_[i]);
  decay_backward(z_.data(), alpha_.data(), dalpha.data(), A_log.data(), static_cast<int64_t>(z_.size()), H, dz.data(),
                 ddt_bias.data(), dA_log.data());
  auto tensor = [&](const std::vector<float>& v, int64_t width) { return Tensor::from({B, T, width}, v); };
  Tensor dx = W_query.backward(tensor(dxq, C));
  dx = add(dx, W_key.backward(tensor(dxk, C)));
  dx = add(dx, W_value.backward(tensor(dv, C)));
  dx = add(dx, W_gate.backward(tensor(dxg, C)));
  dx = add(dx, W_beta.backward(tensor(dxb, C)));
  return add(dx, W_alpha.backward(tensor(dz, H)));  // (B, T, d_in)
}

}  // namespace qkv
