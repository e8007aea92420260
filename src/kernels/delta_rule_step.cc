// One token of the gated delta rule in one pass over the state. See
// include/qkv/kernels/delta_rule_step.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/delta_rule_step.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "qkv/core/machine.h"
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

// Columns a block: kBlock vectors of columns (64 on AVX-512 for a state of floats, 32 on AVX2).
// The block's sums stay in registers through the Dk rows, and the block's part of the rows (Dk x
// 64 floats, 32 KiB at 128 rows) stays in L1 between the two passes over it. A state of doubles
// takes half as many columns a block, the same bytes.
template <typename State>
constexpr int kBlock = std::is_same_v<State, double> ? 4 : 8;

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

// Columns [j0, j0 + NV lanes) of the step. m = S^T k (each column's sum over i in order), delta =
// (v - alpha m) beta, then S = alpha S + k delta^T and y = S^T q over the same rows again (now in
// L1), each number written once. While it updates row i, it asks for row i of the next block's
// columns (`next`, null for none), which the memory then delivers during this block's arithmetic,
// into L2 or L1 (`to_l2`: prefetch_bursts_to_l2(), core/machine.h). Into L1 a step was 8-20% slower
// on Zen 4 (`qkv bench --module gated-deltanet --new-tokens 50`, 1.14-1.57 -> 1.05-1.22 ms in three
// alternating pairs); into L2 it was 1.12x as long on Zen 5 (AVX2 1.09x). It also asks for row i of
// the block after that (`later`) into L2: one block's update is too short for the next block's
// 32 KiB to arrive from memory, and a block's lead that way is the L2's (Zen 5, 18 layers of 16
// heads of 128: 0.86-1.02x the time, median 0.925, in eight alternating pairs; AVX2 0.80-1.12x).
template <int NV, typename State>
HWY_INLINE void StepBlock(DD d, const float* HWY_RESTRICT q, const float* HWY_RESTRICT k,
                          const float* HWY_RESTRICT v, double alpha, const float* HWY_RESTRICT beta,
                          int64_t beta_width, int64_t Dk, int64_t Dv, int64_t j0, State* HWY_RESTRICT S,
                          const State* next, const State* later, bool to_l2, float* HWY_RESTRICT y) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VD va = hn::Set(d, alpha);
  VD m[NV];
  for (int c = 0; c < NV; ++c) m[c] = hn::Zero(d);
  for (int64_t i = 0; i < Dk; ++i) {
    const State* r = S + i * Dv + j0;
    const VD ki = hn::Set(d, k[i]);
    for (int c = 0; c < NV; ++c) m[c] = hn::MulAdd(LoadState(d, r + c * lanes), ki, m[c]);
  }
  HWY_ALIGN double buf[2 * HWY_LANES(double)];
  VD delta[NV], acc[NV];
  for (int c = 0; c < NV; ++c) {
    const int64_t j = j0 + c * lanes;
    for (int64_t l = 0; l < lanes; ++l) {
      buf[l] = static_cast<double>(v[j + l]);
      buf[lanes + l] = static_cast<double>(beta[beta_width == 1 ? 0 : j + l]);
    }
    delta[c] = hn::Mul(hn::NegMulAdd(va, m[c], hn::Load(d, buf)), hn::Load(d, buf + lanes));
    acc[c] = hn::Zero(d);
  }
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(State));  // numbers a cache line
  for (int64_t i = 0; i < Dk; ++i) {
    State* r = S + i * Dv + j0;
    if (next != nullptr)
      for (int64_t l = 0; l < NV * lanes; l += kLine) prefetch_line(next + i * Dv + l, to_l2);
    if (later != nullptr)
      for (int64_t l = 0; l < NV * lanes; l += kLine) prefetch_line(later + i * Dv + l, true);
    const VD ki = hn::Set(d, k[i]), qi = hn::Set(d, q[i]);
    for (int c = 0; c < NV; ++c) {
      const VD s = hn::MulAdd(ki, delta[c], hn::Mul(va, LoadState(d, r + c * lanes)));
      StoreState(d, s, r + c * lanes);
      acc[c] = hn::MulAdd(s, qi, acc[c]);
    }
  }
  const hn::Rebind<float, DD> df;
  for (int c = 0; c < NV; ++c) hn::StoreU(hn::DemoteTo(df, acc[c]), df, y + j0 + c * lanes);
}

template <typename State>
void Step(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, double alpha,
          const float* HWY_RESTRICT beta, int64_t beta_width, int64_t Dk, int64_t Dv, State* HWY_RESTRICT S,
          float* HWY_RESTRICT y, const State* next_state) {
  const DD d;
  constexpr int NV = kBlock<State>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), block = NV * lanes;
  const int64_t blocks_end = Dv / block * block, whole = Dv / lanes * lanes;
  const bool to_l2 = prefetch_bursts_to_l2();
  int64_t j = 0;
  // The block `ahead` blocks on: this state's, or past its last block the next state's (the same
  // shape) block of that offset past the end, if it has one.
  auto block_ahead = [&](int64_t ahead) -> const State* {
    const int64_t at = j + ahead * block;
    if (at < blocks_end) return S + at;
    return next_state != nullptr && at - blocks_end < blocks_end ? next_state + (at - blocks_end) : nullptr;
  };
  for (; j < blocks_end; j += block)
    StepBlock<NV, State>(d, q, k, v, alpha, beta, beta_width, Dk, Dv, j, S, block_ahead(1), block_ahead(2), to_l2, y);
  for (; j < whole; j += lanes)
    StepBlock<1, State>(d, q, k, v, alpha, beta, beta_width, Dk, Dv, j, S, nullptr, nullptr, to_l2, y);
  StepColumns(q, k, v, alpha, beta, beta_width, Dk, Dv, whole, Dv, S, y);
}

void DeltaRuleStep(const float* q, const float* k, const float* v, double alpha, const float* beta, int64_t beta_width,
                   int64_t Dk, int64_t Dv, double* S, float* y, const double* next_state) {
  Step(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y, next_state);
}
void DeltaRuleStepF32(const float* q, const float* k, const float* v, double alpha, const float* beta,
                      int64_t beta_width, int64_t Dk, int64_t Dv, float* S, float* y, const float* next_state) {
  Step(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y, next_state);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(DeltaRuleStep);
HWY_EXPORT(DeltaRuleStepF32);

void delta_rule_step(const float* q, const float* k, const float* v, double alpha, const float* beta,
                     int64_t beta_width, int64_t Dk, int64_t Dv, double* S, float* y, const double* next_state) {
  HWY_DYNAMIC_DISPATCH(DeltaRuleStep)(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y, next_state);
}

void delta_rule_step(const float* q, const float* k, const float* v, double alpha, const float* beta,
                     int64_t beta_width, int64_t Dk, int64_t Dv, float* S, float* y, const float* next_state) {
  HWY_DYNAMIC_DISPATCH(DeltaRuleStepF32)(q, k, v, alpha, beta, beta_width, Dk, Dv, S, y, next_state);
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
