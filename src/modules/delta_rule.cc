// The gated delta rule token by token. See include/qkv/modules/delta_rule.h.
#include "qkv/modules/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/core/pointwise.h"
#include "qkv/core/thread_pool.h"
#include "qkv/core/torch_math.h"
#include "qkv/kernels/delta_rule_step.h"

namespace qkv {

namespace {

// Token `row` (b, t, h) on its head's state S (Dk x Dv), in place, as the definition reads
// (kernels/delta_rule_step.h): the reference the training forward keeps its states from.
void update(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t row, double* S, float* y) {
  const int64_t Dk = s.key_dim, Dv = s.value_dim, bw = s.beta_width();
  kernels::delta_rule_step_reference(in.q + row * Dk, in.k + row * Dk, in.v + row * Dv, in.alpha[row],
                                     in.beta + row * bw, bw, Dk, Dv, S, y + row * Dv);
}

}  // namespace

void delta_rule_forward(const DeltaRuleShape& s, const DeltaRuleInputs& in, std::vector<double>& states, float* y) {
  const int64_t T = s.tokens, H = s.heads, KV = s.key_dim * s.value_dim;
  states.assign(static_cast<size_t>(s.batch * H * T * KV), 0.0);
  default_pool().parallel_for(s.batch * H, [&](int64_t bh, int) {  // sequences and heads are independent
    const int64_t b = bh / H, h = bh % H;
    for (int64_t t = 0; t < T; ++t) {
      double* S = &states[(bh * T + t) * KV];
      if (t > 0) std::copy(S - KV, S, S);  // from the previous token's state
      update(s, in, (b * T + t) * H + h, S, y);
    }
  });
}

void delta_rule_run(const DeltaRuleShape& s, const DeltaRuleInputs& in, std::vector<double>& state, float* y) {
  const int64_t H = s.heads, KV = s.key_dim * s.value_dim;
  QKV_CHECK(static_cast<int64_t>(state.size()) == s.batch * H * KV, "delta_rule_run: the state holds ", state.size(),
            " numbers; expected batch x heads x key width x value width = ", s.batch * H * KV);
  delta_rule_run(s, in, state.data(), y);
}

namespace {
// Each thread takes a contiguous run of (sequence, head) states, equal shares (a step's work is
// the same for every head), so that while it steps one state it can ask the memory for the next.
template <typename State>
void run_steps(const DeltaRuleShape& s, const DeltaRuleInputs& in, State* state, float* y) {
  const int64_t T = s.tokens, H = s.heads, KV = s.key_dim * s.value_dim, BH = s.batch * H;
  ThreadPool& pool = default_pool();
  const int64_t shares = std::min<int64_t>(BH, pool.num_threads());
  pool.parallel_for(shares, [&](int64_t share, int) {
    const int64_t Dk = s.key_dim, Dv = s.value_dim, bw = s.beta_width();
    const int64_t first = BH * share / shares, end = BH * (share + 1) / shares;
    const int64_t block = std::is_same_v<State, float> ? kDeltaStateColumns : Dv;
    for (int64_t bh = first; bh < end; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      for (int64_t t = 0; t < T; ++t) {  // one pass over the state a token (kernels/delta_rule_step.h)
        const int64_t row = (b * T + t) * H + h;
        const State* next_head = t + 1 == T && bh + 1 < end ? &state[(bh + 1) * KV] : nullptr;
        // a state of floats in column blocks (delta_state_index), each stepped as its own (Dk, w)
        // state: a column's step needs only its column, so the sums are the whole state's; a state
        // of doubles in rows, one block of Dv
        for (int64_t j0 = 0; j0 < Dv; j0 += block) {
          const int64_t w = std::min(block, Dv - j0);
          const State* next = j0 + w < Dv ? &state[bh * KV + (j0 + w) * Dk] : next_head;
          kernels::delta_rule_step(in.q + row * Dk, in.k + row * Dk, in.v + row * Dv + j0, in.alpha[row],
                                   in.beta + row * bw + (bw == 1 ? 0 : j0), bw == 1 ? 1 : w, Dk, w,
                                   &state[bh * KV + j0 * Dk], y + row * Dv + j0, next);
        }
      }
    }
  });
}
}  // namespace

void delta_rule_run(const DeltaRuleShape& s, const DeltaRuleInputs& in, double* state, float* y) {
  run_steps(s, in, state, y);
}
void delta_rule_run(const DeltaRuleShape& s, const DeltaRuleInputs& in, float* state, float* y) {
  run_steps(s, in, state, y);
}

void delta_rule_backward(const DeltaRuleShape& s, const DeltaRuleInputs& in, const std::vector<double>& states,
                         const float* dy, const DeltaRuleGrads& grad) {
  const int64_t T = s.tokens, H = s.heads, Dk = s.key_dim, Dv = s.value_dim, KV = Dk * Dv, bw = s.beta_width();
  default_pool().parallel_for(s.batch * H, [&](int64_t bh, int) {
    const int64_t b = bh / H, h = bh % H;
    std::vector<double> G(KV, 0.0), mem(Dv), delta(Dv), ddelta(Dv), dmem(Dv);  // G = dL/dS_t
    {
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t row = (b * T + t) * H + h;
        const float* k = in.k + row * Dk;
        const float* q = in.q + row * Dk;
        const float* v = in.v + row * Dv;
        const float* be = in.beta + row * bw;
        const double a = in.alpha[row];
        const double* S = &states[((b * H + h) * T + t) * KV];
        const double* prev = t > 0 ? S - KV : nullptr;
        const float* g_y = dy + row * Dv;
        // y = S^T q: dq = S dy; G += q dy^T
        for (int64_t i = 0; i < Dk; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < Dv; ++j) {
            acc += S[i * Dv + j] * g_y[j];
            G[i * Dv + j] += static_cast<double>(q[i]) * g_y[j];
          }
          grad.q[row * Dk + i] = static_cast<float>(acc);
        }
        // recompute S' = alpha prev, mem = S'^T k and delta
        std::fill(mem.begin(), mem.end(), 0.0);
        if (prev)
          for (int64_t i = 0; i < Dk; ++i)
            for (int64_t j = 0; j < Dv; ++j) mem[j] += prev[i * Dv + j] * a * k[i];
        for (int64_t j = 0; j < Dv; ++j) delta[j] = (v[j] - mem[j]) * be[bw == 1 ? 0 : j];
        // S = S' + k delta^T, delta = (v - mem) beta: dk = G delta; ddelta = G^T k
        float* dk = grad.k + row * Dk;
        std::fill(ddelta.begin(), ddelta.end(), 0.0);
        for (int64_t i = 0; i < Dk; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < Dv; ++j) {
            acc += G[i * Dv + j] * delta[j];
            ddelta[j] += G[i * Dv + j] * k[i];
          }
          dk[i] = static_cast<float>(acc);
        }
        double dbeta_head = 0;
        for (int64_t j = 0; j < Dv; ++j) {
          const double beta = be[bw == 1 ? 0 : j];
          grad.v[row * Dv + j] = static_cast<float>(ddelta[j] * beta);
          const double db = ddelta[j] * (v[j] - mem[j]);
          if (bw == 1)
            dbeta_head += db;
          else
            grad.beta[row * bw + j] = static_cast<float>(db);
          dmem[j] = -ddelta[j] * beta;
        }
        if (bw == 1) grad.beta[row] = static_cast<float>(dbeta_head);
        // mem = S'^T k: dS' = G + k dmem^T; dk += S' dmem
        for (int64_t i = 0; i < Dk; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < Dv; ++j) {
            G[i * Dv + j] += k[i] * dmem[j];
            if (prev) acc += prev[i * Dv + j] * a * dmem[j];
          }
          dk[i] += static_cast<float>(acc);
        }
        // S' = alpha prev: dalpha = <dS', prev>; dL/dS_{t-1} = alpha dS'
        double da = 0;
        if (prev)
          for (int64_t i = 0; i < KV; ++i) da += G[i] * prev[i];
        grad.alpha[row] = static_cast<float>(da);
        for (int64_t i = 0; i < KV; ++i) G[i] *= a;
      }
    }
  });
}

void delta_rule_forward_chunked(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t chunk, float* y,
                                std::vector<double>* final_state) {
  QKV_CHECK(!s.beta_per_channel, "delta_rule_forward_chunked: beta per head only (this shape has beta per channel)");
  QKV_CHECK(chunk >= 1, "delta_rule_forward_chunked: chunk must be at least 1, got ", chunk);
  const int64_t T = s.tokens, H = s.heads, Dk = s.key_dim, Dv = s.value_dim, KV = Dk * Dv;
  if (final_state) final_state->assign(static_cast<size_t>(s.batch * H * KV), 0.0);
  // per chunk: decay[t][r] = alpha_{r+1} ... alpha_t (t >= r), lead[t] = alpha_0 ... alpha_t,
  // kk = K K^T, qk = Q K^T (C x C), ks = K S_0, qs = Q S_0 (C x Dv), U (C x Dv)
  std::vector<double> S(KV), decay(chunk * chunk), lead(chunk), kk(chunk * chunk), qk(chunk * chunk),
      ks(chunk * Dv), qs(chunk * Dv), U(chunk * Dv);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::fill(S.begin(), S.end(), 0.0);
      for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t C = std::min(chunk, T - t0);
        auto row = [&](int64_t i) { return (b * T + t0 + i) * H + h; };
        auto key = [&](int64_t i) { return in.k + row(i) * Dk; };
        auto query = [&](int64_t i) { return in.q + row(i) * Dk; };
        for (int64_t t = 0; t < C; ++t) {
          const double a = in.alpha[row(t)];
          lead[t] = t == 0 ? a : lead[t - 1] * a;
          decay[t * chunk + t] = 1.0;
          for (int64_t r = 0; r < t; ++r) decay[t * chunk + r] = decay[(t - 1) * chunk + r] * a;
          for (int64_t r = 0; r <= t; ++r) {
            double dk = 0, dq = 0;
            for (int64_t i = 0; i < Dk; ++i) {
              dk += static_cast<double>(key(t)[i]) * key(r)[i];
              dq += static_cast<double>(query(t)[i]) * key(r)[i];
            }
            kk[t * chunk + r] = dk;
            qk[t * chunk + r] = dq;
          }
          for (int64_t j = 0; j < Dv; ++j) {
            double sk = 0, sq = 0;
            for (int64_t i = 0; i < Dk; ++i) {
              sk += static_cast<double>(key(t)[i]) * S[i * Dv + j];
              sq += static_cast<double>(query(t)[i]) * S[i * Dv + j];
            }
            ks[t * Dv + j] = sk;
            qs[t * Dv + j] = sq;
          }
        }
        // (I + L) U = diag(beta) (V - diag(lead) K S_0), L_tr = beta_t decay_tr kk_tr (r < t), by substitution
        for (int64_t t = 0; t < C; ++t) {
          const double beta = in.beta[row(t)];
          const float* v = in.v + row(t) * Dv;
          for (int64_t j = 0; j < Dv; ++j) {
            double acc = v[j] - lead[t] * ks[t * Dv + j];
            for (int64_t r = 0; r < t; ++r) acc -= decay[t * chunk + r] * kk[t * chunk + r] * U[r * Dv + j];
            U[t * Dv + j] = beta * acc;
          }
        }
        // Y = diag(lead) Q S_0 + (Q K^T o decay, lower with the diagonal) U
        for (int64_t t = 0; t < C; ++t) {
          float* yt = y + row(t) * Dv;
          for (int64_t j = 0; j < Dv; ++j) {
            double acc = lead[t] * qs[t * Dv + j];
            for (int64_t r = 0; r <= t; ++r) acc += decay[t * chunk + r] * qk[t * chunk + r] * U[r * Dv + j];
            yt[j] = static_cast<float>(acc);
          }
        }
        // S_C = lead_C S_0 + K^T diag(decay_{C-1, r}) U
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) {
            double acc = lead[C - 1] * S[i * Dv + j];
            for (int64_t r = 0; r < C; ++r) acc += key(r)[i] * decay[(C - 1) * chunk + r] * U[r * Dv + j];
            S[i * Dv + j] = acc;
          }
      }
      if (final_state) std::copy(S.begin(), S.end(), final_state->begin() + (b * H + h) * KV);
    }
}

Tensor delta_rule_map(const DeltaRuleShape& s, const DeltaRuleInputs& in) {
  const int64_t B = s.batch, T = s.tokens, H = s.heads, Dk = s.key_dim, W = s.beta_width();
  Tensor A = Tensor::zeros({B, H, W, T, T});
  default_pool().parallel_for(B * H * W, [&](int64_t m, int) {  // map m = (b, h, w)
    const int64_t b = m / (H * W), h = m / W % H, c = m % W;
    float* a = A.data() + m * T * T;
    auto row = [&](int64_t t) { return (b * T + t) * H + h; };  // (B, T, H) row
    auto beta = [&](int64_t t) { return static_cast<double>(in.beta[row(t) * W + c]); };
    std::vector<double> w(static_cast<size_t>(Dk));
    for (int64_t r = 0; r < T; ++r) {  // v_r's column: w = beta_r k_r, then w = M_t w for t > r
      const float* kr = in.k + row(r) * Dk;
      for (int64_t d = 0; d < Dk; ++d) w[static_cast<size_t>(d)] = beta(r) * kr[d];
      for (int64_t t = r; t < T; ++t) {
        if (t > r) {
          const float* kt = in.k + row(t) * Dk;
          double kw = 0;
          for (int64_t d = 0; d < Dk; ++d) kw += kt[d] * w[static_cast<size_t>(d)];
          const double bt = beta(t), at = in.alpha[row(t)];
          for (int64_t d = 0; d < Dk; ++d) w[static_cast<size_t>(d)] = at * (w[static_cast<size_t>(d)] - bt * kt[d] * kw);
        }
        const float* qt = in.q + row(t) * Dk;
        double y = 0;
        for (int64_t d = 0; d < Dk; ++d) y += qt[d] * w[static_cast<size_t>(d)];
        a[t * T + r] = static_cast<float>(y);
      }
    }
  });
  return A;
}

void l2norm_rows(const float* u, int64_t rows, int64_t width, float eps, float scale, float* out, float* r) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* x = u + row * width;
    float sum = 0;
    for (int64_t d = 0; d < width; ++d) sum += x[d] * x[d];
    r[row] = 1.0f / std::sqrt(sum + eps);
    for (int64_t d = 0; d < width; ++d) out[row * width + d] = x[d] * r[row] * scale;
  }
}

void l2norm_rows_backward(const float* u, const float* r, const float* dout, int64_t rows, int64_t width, float eps,
                          float scale, float* du) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* x = u + row * width;
    const float* dn = dout + row * width;
    float* dx = du + row * width;
    double sum = 0;
    for (int64_t d = 0; d < width; ++d) sum += static_cast<double>(x[d]) * x[d];
    if (sum == 0) {
      for (int64_t d = 0; d < width; ++d) dx[d] = r[row] * dn[d] * scale;
      continue;
    }
    const double inv_len = 1.0 / std::sqrt(sum), rr = r[row];
    double p = 0;  // <h, dout>
    for (int64_t d = 0; d < width; ++d) p += x[d] * inv_len * dn[d];
    const double along = p * eps * rr * rr;
    for (int64_t d = 0; d < width; ++d) {
      const double h = x[d] * inv_len;
      dx[d] = static_cast<float>(rr * ((dn[d] - h * p) + h * along) * scale);
    }
  }
}

namespace {
double softplus_double(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }  // threshold 20, as PyTorch's
}  // namespace

float softplus_value(float x) { return static_cast<float>(softplus_double(x)); }

void decay_forward(float* a, const float* dt_bias, const float* A_log, int64_t n, int64_t H, float* alpha,
                   float* log_alpha) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t h = i % H;
    a[i] += dt_bias[h];
    const float g = -std::exp(A_log[h]) * softplus_value(a[i]);
    alpha[i] = std::exp(g);
    if (log_alpha) log_alpha[i] = g;
  }
}

void decay_backward(const float* a, const float* alpha, const float* dalpha, const float* A_log, int64_t n, int64_t H,
                    float* da, float* ddt_bias, float* dA_log) {
  std::vector<float> dlog(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) dlog[i] = dalpha[i] * alpha[i];  // d(alpha) / d(log alpha) = alpha
  decay_log_backward(a, dlog.data(), A_log, n, H, da, ddt_bias, dA_log);
}

void decay_log_backward(const float* a, const float* dlog_alpha, const float* A_log, int64_t n, int64_t H, float* da,
                        float* ddt_bias, float* dA_log) {
  // Each token's terms in double, rounded once; dA_log and ddt_bias sum a head's B T terms in
  // double and add the sums once (a float sum rounds at the sum's size at every token).
  std::vector<double> sum_a(static_cast<size_t>(H), 0.0), sum_bias(static_cast<size_t>(H), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const auto h = static_cast<size_t>(i % H);
    const double x = a[i], scaled = -static_cast<double>(dlog_alpha[i]) * std::exp(static_cast<double>(A_log[h]));
    const double dai = scaled * sigmoid_double(x);
    da[i] = static_cast<float>(dai);
    sum_a[h] += scaled * softplus_double(x);
    sum_bias[h] += dai;
  }
  for (size_t h = 0; h < static_cast<size_t>(H); ++h) {
    dA_log[h] += static_cast<float>(sum_a[h]);
    ddt_bias[h] += static_cast<float>(sum_bias[h]);
  }
}

Tensor drawn_a_log(int64_t H, Generator& gen) {
  Tensor a = Tensor::zeros({H});
  if (gen.init_draws()) {
    gen.uniform(a.data(), H, 0.0, 16.0);
    torch_log(a.data(), a.data(), H);  // torch.log's float32 results
  }
  return a;
}

void gated_rms_norm_rows(const float* y, const float* z, const float* w, int64_t rows, int64_t width, double eps,
                         float* out) {
  constexpr int64_t kRowsPerTask = 64;  // rows are independent: split over the pool
  default_pool().parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task, int) {
    for (int64_t row = task * kRowsPerTask; row < std::min(rows, (task + 1) * kRowsPerTask); ++row) {
      const float* u = y + row * width;
      float* o = out + row * width;
      float sum = 0;
      for (int64_t d = 0; d < width; ++d) sum += u[d] * u[d];
      const float r = 1.0f / std::sqrt(sum / static_cast<float>(width) + static_cast<float>(eps));
      silu(z + row * width, o, width);
      for (int64_t d = 0; d < width; ++d) o[d] = u[d] * r * w[d] * o[d];
    }
  });
}

void gated_rms_norm_rows_backward(const float* y, const float* z, const float* w, const float* dout, int64_t rows,
                                  int64_t width, double eps, float* dy, float* dz, float* dw) {
  std::vector<double> g(width);
  for (int64_t row = 0; row < rows; ++row) {
    const float* u = y + row * width;
    const float* zr = z + row * width;
    const float* dn = dout + row * width;
    double sum = 0;
    for (int64_t d = 0; d < width; ++d) sum += static_cast<double>(u[d]) * u[d];
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(width) + eps);
    for (int64_t d = 0; d < width; ++d) {
      const double s = sigmoid_double(zr[d]), silu = zr[d] * s, n = u[d] * inv;
      dw[d] += static_cast<float>(dn[d] * n * silu);
      dz[row * width + d] = static_cast<float>(dn[d] * n * w[d] * s * (1.0 + zr[d] * (1.0 - s)));
      g[d] = static_cast<double>(dn[d]) * w[d] * silu;
    }
    const double inv_len = sum > 0 ? 1.0 / std::sqrt(sum) : 0.0;
    double p = 0;  // <h, g>
    for (int64_t d = 0; d < width; ++d) p += u[d] * inv_len * g[d];
    const double along = p * eps * inv * inv;
    for (int64_t d = 0; d < width; ++d) {
      const double h = u[d] * inv_len;
      dy[row * width + d] = static_cast<float>(inv * ((g[d] - h * p) + h * along));
    }
  }
}

}  // namespace qkv
