// kernels/delta_rule_step.h: the one-pass step against the definition's naive form, on every SIMD
// target, over widths that leave columns past the last block and past the last whole vector, beta per head and per channel,
// on a state of doubles and of floats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/delta_rule_step.h"
#include "qkv/kernels/simd.h"

namespace qkv::kernels {
namespace {

std::vector<float> uniform(int64_t n, float lo, float hi, Generator& gen) {
  const Tensor t = rand({n}, gen);
  std::vector<float> out(t.data(), t.data() + n);
  for (float& x : out) x = lo + (hi - lo) * x;
  return out;
}

// What float arithmetic allows a step on a state of floats, each number's bound from the state
// the token starts from (Higham's, first order: u = 2^-24, gamma_n = n u / (1 - n u) for a sum of
// n products in order, fused or not). m_j = sum_i S_ij k_i is off by at most gamma_Dk M_j, M_j =
// sum_i |S_ij k_i|; delta_j = (v_j - alpha m_j) beta_j by alpha times that and a rounding each for
// alpha m_j (where the target's multiply-add is not fused: Highway's EMU128), the difference and
// the product; S'_ij = alpha S_ij + k_i delta_j by |k_i| times delta's error and a rounding each for
// alpha S_ij, k_i delta_j (unfused) and the sum, and the reference's own rounding to float; y_j =
// sum_i S'_ij q_i by the S' errors through q and gamma_Dk of its terms, and the reference's
// rounding. alpha is a float (the kernel rounds a double one to float: exact here). The reference
// is the definition in double (its error ~1e-16 is no part of the bound), so a wrong lane, column,
// decay or beta is off by orders of magnitude more.
struct FloatStepBound {
  std::vector<double> state, y;  // (Dk, Dv), (Dv)
};
FloatStepBound float_step_bound(const std::vector<float>& S, const float* q, const float* k, const float* v,
                                double alpha, const float* beta, int64_t bw, int64_t Dk, int64_t Dv) {
  const double u = 0x1p-24, g = static_cast<double>(Dk) * u / (1 - static_cast<double>(Dk) * u);
  FloatStepBound out{std::vector<double>(S.size()), std::vector<double>(static_cast<size_t>(Dv))};
  for (int64_t j = 0; j < Dv; ++j) {
    double m = 0, M = 0;
    for (int64_t i = 0; i < Dk; ++i) {
      m += static_cast<double>(S[i * Dv + j]) * k[i];
      M += std::fabs(static_cast<double>(S[i * Dv + j]) * k[i]);
    }
    const double b = std::fabs(static_cast<double>(beta[bw == 1 ? 0 : j]));
    const double t = static_cast<double>(v[j]) - alpha * m;
    const double e_t = alpha * g * M * (1 + u) + u * alpha * M * (1 + g) + u * std::fabs(t);
    const double delta = t * beta[bw == 1 ? 0 : j], e_delta = b * e_t * (1 + u) + u * std::fabs(delta);
    double e_y = 0, terms = 0, y = 0;
    for (int64_t i = 0; i < Dk; ++i) {
      const double as = std::fabs(alpha * S[i * Dv + j]), s = alpha * S[i * Dv + j] + k[i] * delta;
      const double e_s = std::fabs(k[i]) * e_delta * (1 + u) + u * as * (1 + u) +
                         u * std::fabs(k[i]) * (std::fabs(delta) + e_delta) + u * std::fabs(s);
      out.state[static_cast<size_t>(i * Dv + j)] = (e_s + u * std::fabs(s)) * 1.001;  // + the reference's rounding
      e_y += std::fabs(q[i]) * e_s;
      terms += (std::fabs(s) + e_s) * std::fabs(q[i]);
      y += s * q[i];
    }
    out.y[static_cast<size_t>(j)] = (e_y + g * terms + u * std::fabs(y)) * 1.001;
  }
  return out;
}

// Several tokens of one head from a random state, by the kernel and by the reference. On a state of
// doubles (the training forward's, stepped in double): the states within 1e-13 of their scale (the
// sums differ only by where alpha is applied), each output within one float rounding of the
// reference's (the doubles it rounds differ by a few ulps) plus 1e-13 of the outputs' scale. On a
// state of floats (a decoding cache's, stepped in float): each token from the reference's state,
// each number and output within float_step_bound of the definition's.
template <typename State>
void check_tokens(int64_t Dk, int64_t Dv, bool per_channel, uint64_t seed) {
  constexpr bool kFloat = std::is_same_v<State, float>;
  SCOPED_TRACE(testing::Message() << "Dk " << Dk << " Dv " << Dv << (per_channel ? " beta per channel" : ""));
  Generator gen(seed);
  const int64_t tokens = 4, bw = per_channel ? Dv : 1;
  const std::vector<float> q = uniform(tokens * Dk, -1, 1, gen), k = uniform(tokens * Dk, -1, 1, gen),
                           v = uniform(tokens * Dv, -2, 2, gen), beta = uniform(tokens * bw, 0.05f, 0.95f, gen),
                           alpha = uniform(tokens, 0.5f, 1.0f, gen), s0 = uniform(Dk * Dv, -1, 1, gen);
  std::vector<State> fast(s0.begin(), s0.end()), ref = fast;
  std::vector<float> y_fast(static_cast<size_t>(Dv)), y_ref(y_fast.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const float *qt = &q[t * Dk], *kt = &k[t * Dk], *vt = &v[t * Dv], *bt = &beta[t * bw];
    FloatStepBound bound;
    if constexpr (kFloat) {
      fast = ref;
      bound = float_step_bound(ref, qt, kt, vt, alpha[t], bt, bw, Dk, Dv);
    }
    delta_rule_step(qt, kt, vt, alpha[t], bt, bw, Dk, Dv, fast.data(), y_fast.data());
    delta_rule_step_reference(qt, kt, vt, alpha[t], bt, bw, Dk, Dv, ref.data(), y_ref.data());
    double s_scale = 0, y_scale = 0;
    for (State x : ref) s_scale = std::max(s_scale, std::fabs(static_cast<double>(x)));
    for (float x : y_ref) y_scale = std::max(y_scale, static_cast<double>(std::fabs(x)));
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_LE(std::fabs(static_cast<double>(fast[i]) - static_cast<double>(ref[i])),
                kFloat ? bound.state[i] : 1e-13 * s_scale)
          << "token " << t << " state " << i;
    for (int64_t j = 0; j < Dv; ++j)
      ASSERT_LE(std::fabs(y_fast[j] - y_ref[j]),
                kFloat ? bound.y[static_cast<size_t>(j)] : 1.2e-7 * std::fabs(y_ref[j]) + 1e-13 * y_scale)
          << "token " << t << " y[" << j << "]: " << y_fast[j] << " vs " << y_ref[j];
  }
}

TEST(DeltaRuleStep, EverySimdTargetMatchesTheDefinition) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    uint64_t seed = 1;
    for (int64_t Dk : {1, 3, 64, 128})
      for (int64_t Dv : {1, 5, 16, 17, 40, 72, 128, 130, 200})
        for (bool per_channel : {false, true}) {
          check_tokens<double>(Dk, Dv, per_channel, seed);
          check_tokens<float>(Dk, Dv, per_channel, seed++);
        }
  }
  force_simd_target(0);
}

// The recurrence forgets: alpha = 0 leaves only the token's own update, S = k (v beta)^T, so
// y = (q . k) beta v whatever the state held (a check against a closed form, not the reference).
TEST(DeltaRuleStep, AlphaZeroForgetsTheState) {
  const int64_t Dk = 8, Dv = 36;
  Generator gen(5);
  const std::vector<float> q = uniform(Dk, -1, 1, gen), k = uniform(Dk, -1, 1, gen), v = uniform(Dv, -1, 1, gen);
  const float beta = 0.75f;
  std::vector<double> S(static_cast<size_t>(Dk * Dv), 1e3);
  std::vector<float> y(static_cast<size_t>(Dv));
  delta_rule_step(q.data(), k.data(), v.data(), 0.0, &beta, 1, Dk, Dv, S.data(), y.data());
  double qk = 0;
  for (int64_t i = 0; i < Dk; ++i) qk += static_cast<double>(q[i]) * k[i];
  for (int64_t j = 0; j < Dv; ++j) {
    for (int64_t i = 0; i < Dk; ++i) EXPECT_DOUBLE_EQ(S[i * Dv + j], static_cast<double>(k[i]) * (v[j] * 0.75));
    EXPECT_NEAR(y[j], qk * 0.75 * v[j], 1e-6);
  }
}

}  // namespace
}  // namespace qkv::kernels
