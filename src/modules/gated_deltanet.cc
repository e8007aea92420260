// GatedDeltaNet. See include/qkv/modules/gated_deltanet.h.
#include "qkv/modules/gated_deltanet.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/core/torch_math.h"
#include "qkv/modules/causal_attention.h"

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

// A_log = log(torch.empty(H).uniform_(0, 16)), drawn when the generator draws.
Tensor drawn_a_log(int64_t H, Generator& gen) {
  Tensor a = Tensor::zeros({H});
  if (gen.init_draws()) {
    gen.uniform(a.data(), H, 0.0, 16.0);
    torch_log(a.data(), a.data(), H);  // torch.log's float32 results
  }
  return a;
}

float sigmoid1(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }
// torch.nn.functional.softplus (beta 1, threshold 20)
float softplus1(float x) { return x > 20.0f ? x : static_cast<float>(std::log1p(std::exp(static_cast<double>(x)))); }

std::vector<float> values_of(const Tensor& t) { return t.contiguous().to_vector(); }

}  // namespace

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
  for (float& b : beta_) b = sigmoid1(b);
  alpha_.resize(z_.size());
  for (size_t i = 0; i < z_.size(); ++i) {
    const int64_t h = static_cast<int64_t>(i) % H;
    z_[i] += dt_bias.data()[h];
    alpha_[i] = std::exp(-std::exp(A_log.data()[h]) * softplus1(z_[i]));
  }
  // q, k = l2norm(q) / sqrt(D), l2norm(k), per (b, t, h)
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(D));
  qn_.resize(xq_.size());
  kn_.resize(xk_.size());
  rq_.resize(static_cast<size_t>(B * T * H));
  rk_.resize(rq_.size());
  for (int64_t r = 0; r < B * T * H; ++r) {
    float sq = 0, sk = 0;
    for (int64_t d = 0; d < D; ++d) {
      sq += xq_[r * D + d] * xq_[r * D + d];
      sk += xk_[r * D + d] * xk_[r * D + d];
    }
    rq_[r] = 1.0f / std::sqrt(sq + kL2Eps);
    rk_[r] = 1.0f / std::sqrt(sk + kL2Eps);
    for (int64_t d = 0; d < D; ++d) {
      qn_[r * D + d] = xq_[r * D + d] * rq_[r] * inv_sqrt_d;
      kn_[r * D + d] = xk_[r * D + d] * rk_[r];
    }
  }
  // the recurrence, per (b, h); the state after each token kept for the backward
  const int64_t DD = D * D;
  states_.assign(static_cast<size_t>(B * H * T * DD), 0.0f);
  Tensor y = Tensor::empty({B, T, H, D});
  std::vector<float> mem(D), delta(D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* prev = nullptr;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = (b * T + t) * H + h;  // (b, t, h)
        const float* k = &kn_[row * D];
        const float* q = &qn_[row * D];
        const float* v = &v_[row * D];
        const float* be = &beta_[row * D];
        const float a = alpha_[row];
        float* S = &states_[((b * H + h) * T + t) * DD];
        for (int64_t i = 0; i < DD; ++i) S[i] = prev ? prev[i] * a : 0.0f;  // S = alpha S
        for (int64_t j = 0; j < D; ++j) mem[j] = 0;
        for (int64_t i = 0; i < D; ++i)  // mem = S^T k
          for (int64_t j = 0; j < D; ++j) mem[j] += S[i * D + j] * k[i];
        for (int64_t j = 0; j < D; ++j) delta[j] = (v[j] - mem[j]) * be[j];
        for (int64_t i = 0; i < D; ++i)  // S += k delta^T
          for (int64_t j = 0; j < D; ++j) S[i * D + j] += k[i] * delta[j];
        float* yt = y.data() + row * D;  // y = S^T q
        for (int64_t j = 0; j < D; ++j) yt[j] = 0;
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < D; ++j) yt[j] += S[i * D + j] * q[i];
        prev = S;
      }
    }
  // out = out_proj(dropout(rmsnorm(y) * silu(gate)))
  normed_ = norm.forward(y).contiguous();  // (B, T, H, D)
  Tensor gated = Tensor::empty({B, T, C});
  for (int64_t i = 0; i < B * T * C; ++i) {
    const float g = xg_[i];
    gated.data()[i] = normed_.data()[i] * (g * sigmoid1(g));
  }
  if (trace) {
    auto heads = [&](const std::vector<float>& v) {  // (B, T, H, D) -> (B, H, T, D)
      return Tensor::from({B, T, H, D}, v).transpose(1, 2).contiguous();
    };
    trace->queries = heads(qn_);
    trace->keys = heads(kn_);
    trace->values = heads(v_);
    trace->context = y.transpose(1, 2).contiguous();
  }
  return out_proj.forward(dropout.forward(gated));
}

Tensor GatedDeltaNet::backward(const Tensor& doutput) {
  QKV_CHECK(x_shape_.size() == 3, kDeltaNet, ": backward before forward");
  const int64_t B = x_shape_[0], T = x_shape_[1], H = config.attention.heads, D = config.attention.head_dim;
  const int64_t C = H * D, DD = D * D;
  const Tensor dgated = dropout.backward(out_proj.backward(doutput)).contiguous();  // (B, T, C)
  // gated = normed * silu(g): dnormed = dgated silu(g); dg = dgated normed s (1 + g (1 - s))
  Tensor dnormed = Tensor::empty({B, T, H, D});
  std::vector<float> dxg(static_cast<size_t>(B * T * C));
  for (int64_t i = 0; i < B * T * C; ++i) {
    const float g = xg_[i], s = sigmoid1(g), dv = dgated.data()[i];
    dnormed.data()[i] = dv * g * s;
    dxg[i] = dv * normed_.data()[i] * s * (1.0f + g * (1.0f - s));
  }
  const std::vector<float> dy = values_of(norm.backward(dnormed));  // (B, T, H, D)
  // the recurrence backward, per (b, h), from the last token: G = dL/dS_t
  std::vector<float> dqn(qn_.size(), 0.0f), dkn(kn_.size(), 0.0f), dv(v_.size(), 0.0f), dbeta(beta_.size(), 0.0f);
  std::vector<float> dalpha(alpha_.size(), 0.0f);
  std::vector<float> G(DD), mem(D), delta(D), ddelta(D), dmem(D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::fill(G.begin(), G.end(), 0.0f);
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t row = (b * T + t) * H + h;
        const float* k = &kn_[row * D];
        const float* q = &qn_[row * D];
        const float* v = &v_[row * D];
        const float* be = &beta_[row * D];
        const float a = alpha_[row];
        const float* S = &states_[((b * H + h) * T + t) * DD];
        const float* prev = t > 0 ? S - DD : nullptr;
        const float* g_y = &dy[row * D];
        // y = S^T q: dq = S dy; G += q dy^T
        for (int64_t i = 0; i < D; ++i) {
          float acc = 0;
          for (int64_t j = 0; j < D; ++j) {
            acc += S[i * D + j] * g_y[j];
            G[i * D + j] += q[i] * g_y[j];
          }
          dqn[row * D + i] = acc;
        }
        // recompute S' = alpha prev, mem = S'^T k, delta = (v - mem) beta
        for (int64_t j = 0; j < D; ++j) mem[j] = 0;
        if (prev)
          for (int64_t i = 0; i < D; ++i)
            for (int64_t j = 0; j < D; ++j) mem[j] += prev[i * D + j] * a * k[i];
        for (int64_t j = 0; j < D; ++j) delta[j] = (v[j] - mem[j]) * be[j];
        // S = S' + k delta^T: dS' = G; dk += G delta; ddelta = G^T k
        float* dk = &dkn[row * D];
        for (int64_t j = 0; j < D; ++j) ddelta[j] = 0;
        for (int64_t i = 0; i < D; ++i) {
          float acc = 0;
          for (int64_t j = 0; j < D; ++j) {
            acc += G[i * D + j] * delta[j];
            ddelta[j] += G[i * D + j] * k[i];
          }
          dk[i] += acc;
        }
        // delta = (v - mem) beta
        for (int64_t j = 0; j < D; ++j) {
          dv[row * D + j] = ddelta[j] * be[j];
          dbeta[row * D + j] = ddelta[j] * (v[j] - mem[j]);
          dmem[j] = -ddelta[j] * be[j];
        }
        // mem = S'^T k: dS' += k dmem^T; dk += S' dmem
        for (int64_t i = 0; i < D; ++i) {
          float acc = 0;
          for (int64_t j = 0; j < D; ++j) {
            G[i * D + j] += k[i] * dmem[j];
            if (prev) acc += prev[i * D + j] * a * dmem[j];
          }
          dk[i] += acc;
        }
        // S' = alpha prev: dalpha = <dS', prev>; G_{t-1} = alpha dS'
        float da = 0;
        if (prev)
          for (int64_t i = 0; i < DD; ++i) da += G[i] * prev[i];
        dalpha[row] = da;
        for (int64_t i = 0; i < DD; ++i) G[i] *= a;
      }
    }
  // q, k normalised: qn = l2norm(xq) / sqrt(D), kn = l2norm(xk), l2norm(u) = u r, r = 1 / sqrt(|u|^2 + eps).
  // du = r (dn - n <n, dn>), written as r (dn - h <h, dn>) + r h <h, dn> eps r^2 with h = u / |u|
  // (1 - |n|^2 = eps r^2 exactly): the part along u is tiny when |u|^2 >> eps, and this way it is not
  // the difference of two nearly equal numbers (with D = 1 it is all there is).
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> dxq(xq_.size()), dxk(xk_.size());
  auto l2norm_backward = [&](const float* u, float r, const float* dn, float scale, float* du) {
    double sum = 0;
    for (int64_t d = 0; d < D; ++d) sum += static_cast<double>(u[d]) * u[d];
    if (sum == 0) {
      for (int64_t d = 0; d < D; ++d) du[d] = r * dn[d] * scale;
      return;
    }
    const double inv_len = 1.0 / std::sqrt(sum);
    double p = 0;  // <h, dn>
    for (int64_t d = 0; d < D; ++d) p += u[d] * inv_len * dn[d];
    const double along = p * kL2Eps * static_cast<double>(r) * r;
    for (int64_t d = 0; d < D; ++d) {
      const double h = u[d] * inv_len;
      du[d] = static_cast<float>(r * ((dn[d] - h * p) + h * along) * scale);
    }
  };
  for (int64_t r = 0; r < B * T * H; ++r) {
    l2norm_backward(&xq_[r * D], rq_[r], &dqn[r * D], inv_sqrt_d, &dxq[r * D]);
    l2norm_backward(&xk_[r * D], rk_[r], &dkn[r * D], 1.0f, &dxk[r * D]);
  }
  // beta = sigmoid(xb); alpha = exp(-exp(A_log) softplus(z)), z = W_alpha(x) + dt_bias
  std::vector<float> dxb(beta_.size()), dz(z_.size());
  for (size_t i = 0; i < beta_.size(); ++i) dxb[i] = dbeta[i] * beta_[i] * (1.0f - beta_[i]);
  for (size_t i = 0; i < z_.size(); ++i) {
    const int64_t h = static_cast<int64_t>(i) % H;
    const float e = std::exp(A_log.data()[h]);
    const float dlog = dalpha[i] * alpha_[i];  // d(alpha) / d(log alpha) = alpha
    dz[i] = -dlog * e * sigmoid1(z_[i]);
    dA_log.data()[h] += -dlog * e * softplus1(z_[i]);
    ddt_bias.data()[h] += dz[i];
  }
  auto tensor = [&](const std::vector<float>& v, int64_t width) { return Tensor::from({B, T, width}, v); };
  Tensor dx = W_query.backward(tensor(dxq, C));
  dx = add(dx, W_key.backward(tensor(dxk, C)));
  dx = add(dx, W_value.backward(tensor(dv, C)));
  dx = add(dx, W_gate.backward(tensor(dxg, C)));
  dx = add(dx, W_beta.backward(tensor(dxb, C)));
  return add(dx, W_alpha.backward(tensor(dz, H)));  // (B, T, d_in)
}

}  // namespace qkv
