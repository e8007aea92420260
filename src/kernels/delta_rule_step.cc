// One token of the gated delta rule in one pass over the state. See
// include/qkv/kernels/delta_rule_step.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/delta_rule_step.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "hwy/cache_control.h"  // hwy::Prefetch
#include "hwy/highway.h"
#include "qkv/kernels/delta_rule_step.h"

#ifndef QKV_KERNELS_DELTA_RULE_STEP_ONCE
#define QKV_KERNELS_DELTA_RULE_STEP_ONCE
namespace qkv::kernels {
namespace {

// Columns [j0, j1) of the step, one at a time (the reference's sums, in the kernel's order; a
// state of floats rounded once when written).
template <typename State>
void StepColumns(const float* q, const float* k, const float* v, double alpha, const float* beta, int64_t beta_width,
                 int64_t Dk, int64_t Dv, int64_t j0, int64_t j1, State* S, float* y) {
  for (int64_t j = j0; j < j1; ++j) {
    double m = 0;
    for (int64_t i = 0; i < Dk; ++i) m += static_cast<double>(S[i * Dv + j]) * static_cast<double>(k[i]);
    const double delta = (static_cast<double>(v[j]) - alpha * m) * static_cast<double>(beta[beta_width == 1 ? 0 : j]);
    double acc = 0;
    for (int64_t i = 0; i < Dk; ++i) {
      const double s = alpha * static_cast<double>(S[i * Dv + j]) + static_cast<double>(k[i]) * delta;
      S[i * Dv + j] = static_cast<State>(s);
      acc += s * static_cast<double>(q[i]);
    }
    y[j] = static_cast<float>(acc);
  }
}

}  // namespace
}  // namespace qkv::kernels
#endif  // QKV_KERNELS_DELTA_RULE_STEP_ONCE

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DD = hn::ScalableTag<double>;
using VD = hn::Vec<DD>;

// Rows a block: each block of rows streams through the Dv sums (held in L1) once.
constexpr int64_t kRows = 4;

// A state's `lanes` numbers from p as doubles, and back (floats widened exactly, rounded once).
template <typename State>
HWY_INLINE VD LoadState(DD d, const State* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<State, double>) {
    return hn::LoadU(d, p);
  } else {
    const hn::Rebind<float, DD> df;
    return hn::PromoteTo(d, hn::LoadU(df, p));
  }
}
template <typename State>
HWY_INLINE void StoreState(DD d, VD x, State* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<State, double>) {
    hn::StoreU(x, d, p);
  } else {
    const hn::Rebind<float, DD> df;
    hn::StoreU(hn::DemoteTo(df, x), df, p);
  }
}

template <typename State>
void Step(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, double alpha,
          const float* HWY_RESTRICT beta, int64_t beta_width, int64_t Dk, int64_t Dv, State* HWY_RESTRICT S,
          float* HWY_RESTRICT y) {
  const DD d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), whole = Dv / lanes * lanes;
  thread_local std::vector<double> scratch;
  if (static_cast<int64_t>(scratch.size()) < 2 * whole) scratch.resize(static_cast<size_t>(2 * whole));
  double* m = scratch.data();  // m (then delta), a vector per `lanes` columns
  double* acc = m + whole;     // the output's sums
  const VD zero = hn::Zero(d), va = hn::Set(d, alpha);
  for (int64_t j = 0; j < whole; j += lanes) {
    hn::StoreU(zero, d, m + j);
    hn::StoreU(zero, d, acc + j);
  }
  // m = S^T k: S's rows in order from memory, kRows at a time through the sums (each column's sum
  // over i in order)
  int64_t i = 0;
  for (; i + kRows <= Dk; i += kRows) {
    const State* r = S + i * Dv;
    const VD k0 = hn::Set(d, k[i]), k1 = hn::Set(d, k[i + 1]), k2 = hn::Set(d, k[i + 2]), k3 = hn::Set(d, k[i + 3]);
    for (int64_t j = 0; j < whole; j += lanes) {
      VD a = hn::MulAdd(LoadState(d, r + j), k0, hn::LoadU(d, m + j));
      a = hn::MulAdd(LoadState(d, r + Dv + j), k1, a);
      a = hn::MulAdd(LoadState(d, r + 2 * Dv + j), k2, a);
      hn::StoreU(hn::MulAdd(LoadState(d, r + 3 * Dv + j), k3, a), d, m + j);
    }
  }
  for (; i < Dk; ++i) {
    const VD ki = hn::Set(d, k[i]);
    for (int64_t j = 0; j < whole; j += lanes)
      hn::StoreU(hn::MulAdd(LoadState(d, S + i * Dv + j), ki, hn::LoadU(d, m + j)), d, m + j);
  }
  // delta = (v - alpha m) beta, in m's place
  HWY_ALIGN double buf[2 * HWY_LANES(double)];
  for (int64_t j = 0; j < whole; j += lanes) {
    for (int64_t l = 0; l < lanes; ++l) {
      buf[l] = static_cast<double>(v[j + l]);
      buf[lanes + l] = static_cast<double>(beta[beta_width == 1 ? 0 : j + l]);
    }
    hn::StoreU(hn::Mul(hn::NegMulAdd(va, hn::LoadU(d, m + j), hn::Load(d, buf)), hn::Load(d, buf + lanes)), d, m + j);
  }
  // S = alpha S + k delta^T and y = S^T q: the same rows again, now from L2 (a head's state of 128 x
  // 128 doubles is 128 KiB), each written once
  for (i = 0; i < Dk; ++i) {
    State* r = S + i * Dv;
    const VD ki = hn::Set(d, k[i]), qi = hn::Set(d, q[i]);
    for (int64_t j = 0; j < whole; j += lanes) {
      const VD s = hn::MulAdd(ki, hn::LoadU(d, m + j), hn::Mul(va, LoadState(d, r + j)));
      StoreState(d, s, r + j);
      hn::StoreU(hn::MulAdd(s, qi, hn::LoadU(d, acc + j)), d, acc + j);
    }
  }
  for (int64_t j = 0; j < whole; ++j) y[j] = static_cast<float>(acc[j]);
  StepColumns(q, k, v, alpha, beta, beta_width, Dk, Dv, whole, Dv, S, y);
}

void DeltaRuleStep(const float* q, const float* k, const float* v, double alpha, const float* beta, int64_t beta_width,
                   int64_t Dk, int64_t Dv, double* S, float* y) {
  Step(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y);
}
void DeltaRuleStepF32(const float* q, const float* k, const float* v, double alpha, const float* beta,
                      int64_t beta_width, int64_t Dk, int64_t Dv, float* S, float* y) {
  Step(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(DeltaRuleStep);
HWY_EXPORT(DeltaRuleStepF32);

void delta_rule_step(const float* q, const float* k, const float* v, double alpha, const float* beta,
                     int64_t beta_width, int64_t Dk, int64_t Dv, double* S, float* y) {
  HWY_DYNAMIC_DISPATCH(DeltaRuleStep)(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y);
}

void delta_rule_step(const float* q, const float* k, const float* v, double alpha, const float* beta,
                     int64_t beta_width, int64_t Dk, int64_t Dv, float* S, float* y) {
  HWY_DYNAMIC_DISPATCH(DeltaRuleStepF32)(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y);
}

void delta_rule_step_reference(const float* q, const float* k, const float* v, double alpha, const float* beta,
                               int64_t beta_width, int64_t Dk, int64_t Dv, float* S, float* y) {
  std::vector<double> wide(S, S + Dk * Dv);
  delta_rule_step_reference(q, k, v, alpha, beta, beta_width, Dk, Dv, wide.data(), y);
  std::copy(wide.begin(), wide.end(), S);  // rounded once
}

void delta_rule_step_reference(const float* q, const float* k, const float* v, double alpha, const float* beta,
                               int64_t beta_width, int64_t Dk, int64_t Dv, double* S, float* y) {
  for (int64_t i = 0; i < Dk * Dv; ++i) S[i] *= alpha;
  for (int64_t j = 0; j < Dv; ++j) {
    double m = 0;  // S^T k
    for (int64_t i = 0; i < Dk; ++i) m += S[i * Dv + j] * static_cast<double>(k[i]);
    const double delta = (static_cast<double>(v[j]) - m) * static_cast<double>(beta[beta_width == 1 ? 0 : j]);
    for (int64_t i = 0; i < Dk; ++i) S[i * Dv + j] += static_cast<double>(k[i]) * delta;
  }
  for (int64_t j = 0; j < Dv; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < Dk; ++i) acc += S[i * Dv + j] * static_cast<double>(q[i]);
    y[j] = static_cast<float>(acc);
  }
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
