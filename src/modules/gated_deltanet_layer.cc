// Qwen3.5's linear-attention layer. See include/qkv/modules/gated_deltanet_layer.h.
#include "qkv/modules/gated_deltanet_layer.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <type_traits>

#include "qkv/core/error.h"
#include "qkv/core/linear.h"
#include "qkv/core/ops.h"
#include "qkv/core/pointwise.h"
#include "qkv/core/thread_pool.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/delta_rule_chunked.h"

namespace qkv {
namespace {

constexpr const char* kLayer = "Qwen3_5GatedDeltaNet";
constexpr float kEps = 1e-6f;  // l2norm's (the gated RMSNorm's is config.linear.norm_eps: rms_norm_eps)

const AttentionConfig& layer_config(const AttentionConfig& c) {
  const AttentionConfig::LinearSizes& l = c.linear;
  QKV_CHECK(c.d_in > 0 && c.attention.heads > 0 && c.attention.head_dim > 0 && l.key_heads > 0 && l.value_dim > 0 &&
                l.conv_kernel > 0,
            kLayer, ": every size must be positive (d_model ", c.d_in, ", value heads ", c.attention.heads,
            ", key heads ", l.key_heads, ", key width ", c.attention.head_dim, ", value width ", l.value_dim,
            ", conv kernel ", l.conv_kernel, ")");
  QKV_CHECK(c.attention.heads % l.key_heads == 0, kLayer, ": the value heads (", c.attention.heads,
            ") must be a multiple of the key heads (", l.key_heads, ")");
  QKV_CHECK(c.attention.dtype == Dtype::kF32, kLayer, " computes in f32 only");
  QKV_CHECK(c.attention.dropout == 0.0, kLayer, " has no dropout");
  QKV_CHECK(!c.qkv_bias, kLayer, " has no biases (its projections are plain matrices); qkv_bias must be false");
  return c;
}

std::vector<float> flat(const Tensor& t) { return t.contiguous().to_vector(); }

Tensor drawn_conv(int64_t channels, int64_t kernel, Generator& gen) {  // nn.Conv1d(groups = channels, bias=False)
  Tensor w = Tensor::zeros({channels, 1, kernel});
  gen.linear_init(w.data(), nullptr, channels, kernel);  // kaiming_uniform(a = sqrt(5)), fan_in = kernel
  return w;
}

}  // namespace

AttentionConfig gated_deltanet_config(int64_t d_model, int64_t value_heads, int64_t key_heads, int64_t key_dim,
                                      int64_t value_dim, int64_t conv_kernel, int64_t context_length) {
  AttentionConfig c;
  c.d_in = d_model;
  c.context_length = context_length;
  c.attention.heads = value_heads;
  c.attention.kv_heads = value_heads;  // (no grouped-query variant: the key heads are linear.key_heads)
  c.attention.head_dim = key_dim;
  c.attention.causal = true;
  c.out_dim = d_model;
  c.out_bias = false;
  c.linear = {key_heads, value_dim, conv_kernel};
  QKV_CHECK(context_length > 0, kLayer, ": context_length (", context_length, ") must be positive");
  layer_config(c);
  return c;
}

GatedDeltaNetLayer::GatedDeltaNetLayer(const AttentionConfig& c, Generator& gen)
    : config(layer_config(c)),
      conv_weight(drawn_conv(2 * c.linear.key_heads * c.attention.head_dim + c.attention.heads * c.linear.value_dim,
                             c.linear.conv_kernel, gen)),
      dconv_weight(Tensor::zeros(conv_weight.shape())),
      dt_bias(Tensor::ones({c.attention.heads})),
      ddt_bias(Tensor::zeros({c.attention.heads})),
      A_log(drawn_a_log(c.attention.heads, gen)),
      dA_log(Tensor::zeros({c.attention.heads})),
      norm_weight(Tensor::ones({c.linear.value_dim})),
      dnorm_weight(Tensor::zeros({c.linear.value_dim})),
      out_proj(c.attention.heads * c.linear.value_dim, c.d_in, false, gen),
      in_proj_qkv(c.d_in, conv_weight.size(0), false, gen),
      in_proj_z(c.d_in, c.attention.heads * c.linear.value_dim, false, gen),
      in_proj_b(c.d_in, c.attention.heads, false, gen),
      in_proj_a(c.d_in, c.attention.heads, false, gen) {}

int64_t GatedDeltaNetLayer::key_width() const { return config.linear.key_heads * config.attention.head_dim; }
int64_t GatedDeltaNetLayer::value_width() const { return config.attention.heads * config.linear.value_dim; }

DeltaRuleShape GatedDeltaNetLayer::rule_shape(int64_t B, int64_t T) const {
  return {B, T, config.attention.heads, config.attention.head_dim, config.linear.value_dim, /*beta_per_channel=*/false};
}

void GatedDeltaNetLayer::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "dt_bias", &dt_bias, true, &ddt_bias});
  out.push_back({prefix + "A_log", &A_log, true, &dA_log});
  out.push_back({prefix + "conv1d.weight", &conv_weight, true, &dconv_weight});
  out.push_back({prefix + "norm.weight", &norm_weight, true, &dnorm_weight});
  out_proj.collect_state(prefix + "out_proj.", out);
  in_proj_qkv.collect_state(prefix + "in_proj_qkv.", out);
  in_proj_z.collect_state(prefix + "in_proj_z.", out);
  in_proj_b.collect_state(prefix + "in_proj_b.", out);
  in_proj_a.collect_state(prefix + "in_proj_a.", out);
}

namespace {
// x (N, in) @ l.weight^T into y (N, out) from the weight's bf16 copy w16 (bf16 products) or its
// blocks wq (integer products), one of them set.
void stored_product(const Linear& l, const float* x, int64_t N, const uint16_t* w16, QuantView wq, float* y) {
  linear(x, N, l.weight.size(1), l.weight.data(), nullptr, l.weight.size(0), y, nullptr, Dtype::kBF16, w16, wq);
}

// x (..., in) @ l.weight^T into y (flat, its capacity kept): through the Linear, or stored_product.
void product(const Linear& l, const Tensor& x, const uint16_t* w16, QuantView wq, std::vector<float>& y) {
  if (!w16 && !wq) {
    y = flat(l.forward(x));
    return;
  }
  const Tensor c = x.contiguous();
  const int64_t N = c.numel() / l.weight.size(1);
  y.resize(static_cast<size_t>(N * l.weight.size(0)));
  stored_product(l, c.data(), N, w16, wq, y.data());
}
}  // namespace

std::vector<const Linear*> GatedDeltaNetLayer::products() const {
  return {&in_proj_qkv, &in_proj_z, &in_proj_b, &in_proj_a, &out_proj};
}

void GatedDeltaNetLayer::project(const Tensor& x, const float* history, const Weights16* w16) {
  const int64_t B = x.size(0), T = x.size(1), Hv = config.attention.heads, Hk = config.linear.key_heads;
  const int64_t Dk = config.attention.head_dim, K = config.linear.conv_kernel;
  const int64_t Kd = key_width(), Vd = value_width(), C = 2 * Kd + Vd, share = Hv / Hk;
  product(in_proj_qkv, x, w16 ? w16->qkv : nullptr, w16 ? w16->qkv_q : QuantView{}, mixed_);  // (B, T, C)
  // Row by row, over the pool (every row's numbers its own, whatever the threads): the causal
  // depthwise convolution (over history, then x; conv_ keeps it for the backward), silu, the split
  // into q, k, v, q and k normalised per key head, then each value head's copy of its key head's.
  const int64_t rows = B * T;
  conv_.resize(mixed_.size());
  std::vector<float>& q = q_;
  std::vector<float>& k = k_;
  q.resize(static_cast<size_t>(rows * Kd));
  k.resize(q.size());
  v_.resize(static_cast<size_t>(rows * Vd));
  qh_.resize(q.size());
  kh_.resize(k.size());
  rq_.resize(static_cast<size_t>(rows * Hk));
  rk_.resize(rq_.size());
  qn_.resize(static_cast<size_t>(rows * Hv * Dk));
  kn_.resize(qn_.size());
  // the kernel by tap: taps[i C + c] = w[c K + i] (rewritten every call: the weight may have been
  // stepped; into kept capacity: no allocation a decoding step)
  std::vector<float>& taps = taps_;
  taps.resize(static_cast<size_t>(K * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < K; ++i) taps[static_cast<size_t>(i * C + c)] = conv_weight.data()[c * K + i];
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  constexpr int64_t kRowsPerTask = 4;
  default_pool().parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task, int) {
    for (int64_t r = task * kRowsPerTask; r < std::min(rows, (task + 1) * kRowsPerTask); ++r) {
      const int64_t b = r / T, t = r % T;
      float* u = conv_.data() + r * C;
      std::fill(u, u + C, 0.0f);
      for (int64_t i = 0; i < K; ++i) {  // tap i reads position t - K + 1 + i
        const int64_t src = t - K + 1 + i;
        const float* in = src >= 0 ? mixed_.data() + (b * T + src) * C
                          : history ? history + (b * (K - 1) + K - 1 + src) * C
                                    : nullptr;
        if (in == nullptr) continue;
        const float* w = taps.data() + i * C;
        for (int64_t c = 0; c < C; ++c) u[c] += w[c] * in[c];
      }
      silu(u, q.data() + r * Kd, Kd);
      silu(u + Kd, k.data() + r * Kd, Kd);
      silu(u + 2 * Kd, v_.data() + r * Vd, Vd);
      l2norm_rows(q.data() + r * Kd, Hk, Dk, kEps, q_scale, qh_.data() + r * Kd, rq_.data() + r * Hk);
      l2norm_rows(k.data() + r * Kd, Hk, Dk, kEps, 1.0f, kh_.data() + r * Kd, rk_.data() + r * Hk);
      for (int64_t h = 0; h < Hv; ++h) {
        std::copy_n(qh_.data() + (r * Hk + h / share) * Dk, Dk, qn_.data() + (r * Hv + h) * Dk);
        std::copy_n(kh_.data() + (r * Hk + h / share) * Dk, Dk, kn_.data() + (r * Hv + h) * Dk);
      }
    }
  });
  product(in_proj_z, x, w16 ? w16->z : nullptr, w16 ? w16->z_q : QuantView{}, z_);
  product(in_proj_b, x, w16 ? w16->b : nullptr, w16 ? w16->b_q : QuantView{}, beta_);
  for (float& b : beta_) b = sigmoid_value(b);
  product(in_proj_a, x, w16 ? w16->a : nullptr, w16 ? w16->a_q : QuantView{}, a_);
  alpha_.resize(a_.size());
  log_alpha_.resize(a_.size());
  decay_forward(a_.data(), dt_bias.data(), A_log.data(), static_cast<int64_t>(a_.size()), Hv, alpha_.data(),
                log_alpha_.data());
}

Tensor GatedDeltaNetLayer::output(int64_t B, int64_t T, const Weights16* w16) {
  Tensor gated = Tensor::empty({B, T, value_width()});
  gated_rms_norm_rows(y_.data(), z_.data(), norm_weight.data(), B * T * config.attention.heads, config.linear.value_dim,
                      static_cast<float>(config.linear.norm_eps), gated.data());
  if (!w16 || (!w16->out && !w16->out_q)) return out_proj.forward(gated);
  Tensor y = Tensor::empty({B, T, config.d_in});  // from the tensors' kept blocks: no fresh pages a call
  stored_product(out_proj, gated.data(), B * T, w16->out, w16->out_q, y.data());
  return y;
}

Tensor GatedDeltaNetLayer::forward(const Tensor& x, AttentionTrace* trace) {
  check_batch_input(kLayer, x, config.d_in, config.context_length);
  const int64_t B = x.size(0), T = x.size(1), Hv = config.attention.heads;
  const int64_t Dk = config.attention.head_dim, Dv = config.linear.value_dim;
  project(x, nullptr);
  y_.resize(static_cast<size_t>(B * T * value_width()));
  if (chunked())
    delta_rule_chunked_forward(rule_shape(B, T), log_inputs(), y_.data(), nullptr, &chunk_states_);
  else
    delta_rule_forward(rule_shape(B, T), {qn_.data(), kn_.data(), v_.data(), beta_.data(), alpha_.data()}, states_,
                       y_.data());
  if (trace) {
    auto heads = [&](const std::vector<float>& u, int64_t D) {  // (B, T, Hv, D) -> (B, Hv, T, D)
      return Tensor::from({B, T, Hv, D}, u).transpose(1, 2).contiguous();
    };
    trace->queries = heads(qn_, Dk);
    trace->keys = heads(kn_, Dk);
    trace->values = heads(v_, Dv);
    trace->context = heads(y_, Dv);
    trace->weights = delta_rule_map(rule_shape(B, T), {qn_.data(), kn_.data(), v_.data(), beta_.data(), alpha_.data()})
                         .reshape({B, Hv, T, T});
  }
  x_shape_ = x.shape();
  return output(B, T);
}

GatedDeltaNetCache GatedDeltaNetLayer::new_cache(int64_t batch) const {
  QKV_CHECK(batch >= 1, kLayer, ": a cache's batch must be at least 1, got ", batch);
  GatedDeltaNetCache c;
  c.batch = batch;
  c.conv.assign(static_cast<size_t>(batch * (config.linear.conv_kernel - 1) * (2 * key_width() + value_width())), 0.0f);
  c.state.assign(static_cast<size_t>(batch * config.attention.heads * config.attention.head_dim * config.linear.value_dim),
                 0.0);
  return c;
}

Tensor GatedDeltaNetLayer::forward_cached(const Tensor& x, GatedDeltaNetCache& cache) {
  QKV_CHECK(x.dim() == 3 && x.size(0) == cache.batch && x.size(2) == config.d_in, kLayer,
            ": forward_cached takes (", cache.batch, ", T, ", config.d_in, ") for this cache, got ", shape_str(x.shape()));
  const GatedDeltaNetCache fresh = new_cache(cache.batch);
  QKV_CHECK(cache.conv.size() == fresh.conv.size() && cache.state.size() == fresh.state.size(), kLayer,
            ": the cache holds ", cache.conv.size(), " convolution inputs and ", cache.state.size(),
            " state numbers; this layer's take ", fresh.conv.size(), " and ", fresh.state.size());
  return cached_step(x, cache.conv.data(), cache.state.data(), cache.conv.data());
}

Tensor GatedDeltaNetLayer::forward_token_by_token(const Tensor& x) {
  check_token_input(x, config.d_in);
  GatedDeltaNetCache cache = new_cache(x.size(0));
  return each_token(x, [&](const Tensor& row) { return forward_cached(row, cache); });
}

Tensor GatedDeltaNetLayer::cached_step(const Tensor& x, const float* history, float* state, float* next_history,
                                       const Weights16* w16) {
  x_shape_.clear();  // what project() keeps is not a training forward's: no backward after this
  const int64_t B = x.size(0), T = x.size(1), K = config.linear.conv_kernel, C = 2 * key_width() + value_width();
  // the shared working rows moved in for the call, and back (on an error too)
  std::vector<float>* const mine[] = {&mixed_, &conv_, &v_,  &z_,  &beta_, &alpha_, &log_alpha_, &a_, &qn_,
                                      &kn_,    &rq_,   &rk_, &y_,  &q_,    &k_,     &qh_,        &kh_};
  static_assert(std::size(mine) == std::extent_v<decltype(CachedWork::rows)>, "one shared row set per member");
  struct Borrowed {
    std::vector<float>* const* mine;
    CachedWork* work;
    std::unique_lock<std::mutex> held;
    void swap() {
      if (held.owns_lock())
        for (size_t i = 0; i < std::size(work->rows); ++i) std::swap(*mine[i], work->rows[i]);
    }
    ~Borrowed() { swap(); }
  } borrowed{mine,
             cached_work_.get(),
             cached_work_ ? std::unique_lock<std::mutex>(cached_work_->busy, std::try_to_lock)
                          : std::unique_lock<std::mutex>()};
  borrowed.swap();
  project(x, history, w16);
  y_.resize(static_cast<size_t>(B * T * value_width()));
  if (chunked() && T > 1) {  // a prompt: in chunks
    delta_rule_chunked_forward(rule_shape(B, T), log_inputs(), y_.data(), state);
  } else {
    delta_rule_run(rule_shape(B, T), {qn_.data(), kn_.data(), v_.data(), beta_.data(), alpha_.data()}, state,
                   y_.data());
  }
  // the convolution's last K - 1 inputs: of the history, then of x
  std::vector<float> last(static_cast<size_t>(B * (K - 1) * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < K - 1; ++j) {
      const int64_t p = T - (K - 1) + j;  // position in x; negative: in the history
      const float* src = p >= 0 ? &mixed_[(b * T + p) * C] : &history[(b * (K - 1) + K - 1 + p) * C];
      std::copy(src, src + C, &last[(b * (K - 1) + j) * C]);
    }
  std::copy(last.begin(), last.end(), next_history);
  return output(B, T, w16);
}

int64_t gated_deltanet_cache_floats(const AttentionConfig& c, int64_t batch) {
  const int64_t Hv = c.attention.heads, Dk = c.attention.head_dim, Dv = c.linear.value_dim;
  const int64_t K = c.linear.conv_kernel, C = 2 * c.linear.key_heads * Dk + Hv * Dv;
  return batch * (Hv * Dk * Dv + (K - 1) * C);
}

int64_t GatedDeltaNetLayer::cache_floats(int64_t batch) const { return gated_deltanet_cache_floats(config, batch); }

void GatedDeltaNetLayer::forward_cached(const float* x, int64_t B, int64_t T, float* y, float* cache,
                                        const Weights16* w16) {
  QKV_CHECK(B >= 1 && T >= 0, kLayer, ": forward_cached takes (B >= 1, T >= 0) rows, got (", B, ", ", T, ")");
  if (T == 0) return;
  const int64_t M = config.d_in;
  const int64_t S = B * config.attention.heads * config.attention.head_dim * config.linear.value_dim;
  Tensor rows = Tensor::empty({B, T, M});  // from the tensors' kept blocks: no fresh pages a call
  std::copy_n(x, B * T * M, rows.data());
  const Tensor out = cached_step(rows, cache + S, cache, cache + S, w16);
  std::copy_n(out.contiguous().data(), B * T * M, y);
}

Tensor GatedDeltaNetLayer::backward(const Tensor& doutput) {
  QKV_CHECK(x_shape_.size() == 3, kLayer, ": backward before forward");
  const int64_t B = x_shape_[0], T = x_shape_[1], Hv = config.attention.heads, Hk = config.linear.key_heads;
  const int64_t Dk = config.attention.head_dim, Dv = config.linear.value_dim, K = config.linear.conv_kernel;
  const int64_t Kd = key_width(), Vd = value_width(), C = 2 * Kd + Vd, share = Hv / Hk;
  const Tensor dgated = out_proj.backward(doutput).contiguous();  // (B, T, Vd)
  std::vector<float> dy(y_.size()), dz(z_.size());
  gated_rms_norm_rows_backward(y_.data(), z_.data(), norm_weight.data(), dgated.data(), B * T * Hv, Dv,
                               static_cast<float>(config.linear.norm_eps),
                               dy.data(), dz.data(), dnorm_weight.data());
  std::vector<float> dqn(qn_.size()), dkn(kn_.size()), dv(v_.size()), dbeta(beta_.size()), dalpha(alpha_.size());
  if (chunked())  // dalpha holds log alpha's gradient
    delta_rule_chunked_backward(rule_shape(B, T), log_inputs(), chunk_states_, dy.data(),
                                {dqn.data(), dkn.data(), dv.data(), dbeta.data(), dalpha.data()});
  else
    delta_rule_backward(rule_shape(B, T), {qn_.data(), kn_.data(), v_.data(), beta_.data(), alpha_.data()}, states_,
                        dy.data(), {dqn.data(), dkn.data(), dv.data(), dbeta.data(), dalpha.data()});
  // the value heads' copies summed back to their key heads, then l2norm's backward, then silu's
  std::vector<float> dqh(static_cast<size_t>(B * T * Kd), 0.0f), dkh(dqh.size(), 0.0f);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t h = 0; h < Hv; ++h)
      for (int64_t d = 0; d < Dk; ++d) {
        dqh[(r * Hk + h / share) * Dk + d] += dqn[(r * Hv + h) * Dk + d];
        dkh[(r * Hk + h / share) * Dk + d] += dkn[(r * Hv + h) * Dk + d];
      }
  std::vector<float> q(dqh.size()), k(dqh.size()), dq(dqh.size()), dk(dqh.size());
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < Kd; ++c) {
      const float uq = conv_[r * C + c], uk = conv_[r * C + Kd + c];
      q[r * Kd + c] = uq * sigmoid_value(uq);
      k[r * Kd + c] = uk * sigmoid_value(uk);
    }
  l2norm_rows_backward(q.data(), rq_.data(), dqh.data(), B * T * Hk, Dk, kEps, 1.0f / std::sqrt(static_cast<float>(Dk)),
                       dq.data());
  l2norm_rows_backward(k.data(), rk_.data(), dkh.data(), B * T * Hk, Dk, kEps, 1.0f, dk.data());
  std::vector<float> dconv(conv_.size());  // d(conv output): silu'(u) = s (1 + u (1 - s))
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float g = c < Kd ? dq[r * Kd + c] : c < 2 * Kd ? dk[r * Kd + c - Kd] : dv[r * Vd + c - 2 * Kd];
      const float u = conv_[r * C + c], s = sigmoid_value(u);
      dconv[r * C + c] = g * s * (1.0f + u * (1.0f - s));
    }
  // the convolution: dw[c, i] += sum dconv[t, c] mixed[t - K + 1 + i, c]; dmixed[s, c] += w[c, i] dconv[s + K - 1 - i, c]
  std::vector<float> dmixed(mixed_.size(), 0.0f);
  const float* w = conv_weight.data();
  float* dw = dconv_weight.data();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const float g = dconv[(b * T + t) * C + c];
        for (int64_t i = 0; i < K; ++i) {
          const int64_t src = t - K + 1 + i;
          if (src < 0) continue;
          dw[c * K + i] += g * mixed_[(b * T + src) * C + c];
          dmixed[(b * T + src) * C + c] += w[c * K + i] * g;
        }
      }
  // beta = sigmoid(b); alpha = exp(-exp(A_log) softplus(a)), a = in_proj_a(x) + dt_bias
  std::vector<float> db(beta_.size()), da(a_.size());
  for (size_t i = 0; i < beta_.size(); ++i) db[i] = dbeta[i] * beta_[i] * (1.0f - beta_[i]);
  if (chunked())
    decay_log_backward(a_.data(), dalpha.data(), A_log.data(), static_cast<int64_t>(a_.size()), Hv, da.data(),
                       ddt_bias.data(), dA_log.data());
  else
    decay_backward(a_.data(), alpha_.data(), dalpha.data(), A_log.data(), static_cast<int64_t>(a_.size()), Hv,
                   da.data(), ddt_bias.data(), dA_log.data());
  auto tensor = [&](const std::vector<float>& u, int64_t width) { return Tensor::from({B, T, width}, u); };
  Tensor dx = in_proj_qkv.backward(tensor(dmixed, C));
  dx = add(dx, in_proj_z.backward(tensor(dz, Vd)));
  dx = add(dx, in_proj_b.backward(tensor(db, Hv)));
  return add(dx, in_proj_a.backward(tensor(da, Hv)));  // (B, T, d_model)
}

}  // namespace qkv
