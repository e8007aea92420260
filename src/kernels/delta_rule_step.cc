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


HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The step's arithmetic is the state's own type: a state of doubles (the training forward's) in
// double, a state of floats (a decoding cache's) in float, whose step must not cost more than
// moving the state (in double each number would be widened, and rounded back, at half the lanes).
template <typename State>
using DS = hn::ScalableTag<State>;

// Columns a block: kBlock vectors, 128 bytes of each row (32 floats: 2 vectors on AVX-512, 4 on
// AVX2, 8 on NEON; at most 8 vectors). The block's sums stay in registers through the Dk rows, and
// the block's part of the rows (16 KiB at 128 rows) stays in L1 between the two passes over it.
// A decoding cache keeps each head's state in column blocks of 64 (delta_state_index,
// modules/delta_rule.h), so a step reads two such blocks of each 256-byte row in turn. On an Intel
// Xeon (AVX-512, 18 layers of 16 heads of 128, after a flush) 2 vectors a block took 0.78-0.86 ms
// a step against 4's 0.85-1.13 (five alternating rounds); with the cache's blocks of 32 columns
// too, AVX-512 was no faster and AVX2 (4 vectors either way) 1.07x slower. A state of doubles
// takes half as many columns a block, the same bytes.
constexpr int kBlock = HWY_MAX_BYTES >= 128 ? 1 : (128 / HWY_MAX_BYTES > 8 ? 8 : 128 / HWY_MAX_BYTES);

// Lanes [0, n) of a vector from p, the rest zero, and back (n < lanes: the columns past the last
// whole vector, copied through a buffer so that nothing past them is read or written).
template <bool kPart, typename State>
HWY_INLINE hn::Vec<DS<State>> LoadCols(DS<State> d, const State* HWY_RESTRICT p, int64_t n) {
  if constexpr (!kPart) {
    return hn::LoadU(d, p);
  } else {
    HWY_ALIGN State buf[HWY_MAX_BYTES / sizeof(State)] = {};
    std::copy(p, p + n, buf);
    return hn::Load(d, buf);
  }
}
template <bool kPart, typename State>
HWY_INLINE void StoreCols(DS<State> d, hn::Vec<DS<State>> x, State* HWY_RESTRICT p, int64_t n) {
  if constexpr (!kPart) {
    hn::StoreU(x, d, p);
  } else {
    HWY_ALIGN State buf[HWY_MAX_BYTES / sizeof(State)];
    hn::Store(x, d, buf);
    std::copy(buf, buf + n, p);
  }
}

// Columns [j0, j0 + NV lanes) of the step (kPart: one vector of which the first n lanes are
// columns). m = S^T k (each column's sum over i in order), delta = (v - alpha m) beta, then S =
// alpha S + k delta^T and y = S^T q over the same rows again (now in L1), each number written once.
// Every column takes the same operations whichever lane it is in, so its bits do not depend on
// where its block starts. While it updates row i, it asks for row i of the next block's columns
// (`next`, null for none), which the memory then delivers during this block's arithmetic, into L2
// or L1 (`to_l2`: prefetch_bursts_to_l2(), core/machine.h). Into L1 a step was 8-20% slower on Zen
// 4 (`qkv bench --module gated-deltanet --new-tokens 50`, 1.14-1.57 -> 1.05-1.22 ms in three
// alternating pairs); into L2 it was 1.12x as long on Zen 5 (AVX2 1.09x). It also asks for row i
// of the block after that (`later`) into L2: one block's update was too short for the next
// block's 32 KiB (64 columns then) to arrive from memory, and a block's lead that way is the L2's
// (Zen 5, 18 layers of 16 heads of 128: 0.86-1.02x the time, median 0.925, in eight alternating
// pairs; AVX2 0.80-1.12x). Those were 64-column blocks stepped in double. With float steps on 32
// columns (the Xeon, AVX-512, five alternating rounds) these two held: 0.74-0.90 ms a step, against
// 0.86-0.92 without `later`, 0.85-1.0 with `next` into L2, 0.85-0.98 with `later` a block further,
// 0.93-1.08 with both a block further. On Zen 5 the float step's variants (`next` with prefetchnta
// or into L2, no `later`, `later` a block further, 64 columns a block; switched at run time in one
// binary, five rounds) stayed within the noise (0.50-0.70 ms).
template <int NV, bool kPart, typename State>
HWY_INLINE void StepBlock(DS<State> d, const float* HWY_RESTRICT q, const float* HWY_RESTRICT k,
                          const float* HWY_RESTRICT v, State alpha, const float* HWY_RESTRICT beta,
                          int64_t beta_width, int64_t Dk, int64_t Dv, int64_t j0, int64_t n, State* HWY_RESTRICT S,
                          const State* next, const State* later, bool to_l2, float* HWY_RESTRICT y) {
  static_assert(!kPart || NV == 1, "a part of a vector is the last one");
  using V = hn::Vec<DS<State>>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const V va = hn::Set(d, alpha);
  V m[NV];
  for (int c = 0; c < NV; ++c) m[c] = hn::Zero(d);
  for (int64_t i = 0; i < Dk; ++i) {
    const State* r = S + i * Dv + j0;
    const V ki = hn::Set(d, static_cast<State>(k[i]));
    for (int c = 0; c < NV; ++c) m[c] = hn::MulAdd(LoadCols<kPart>(d, r + c * lanes, n), ki, m[c]);
  }
  HWY_ALIGN State buf[2 * HWY_MAX_BYTES / sizeof(State)] = {};
  V delta[NV], acc[NV];
  for (int c = 0; c < NV; ++c) {
    const int64_t j = j0 + c * lanes;
    for (int64_t l = 0; l < (kPart ? n : lanes); ++l) {
      buf[l] = static_cast<State>(v[j + l]);
      buf[lanes + l] = static_cast<State>(beta[beta_width == 1 ? 0 : j + l]);
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
    const V ki = hn::Set(d, static_cast<State>(k[i])), qi = hn::Set(d, static_cast<State>(q[i]));
    for (int c = 0; c < NV; ++c) {
      const V s = hn::MulAdd(ki, delta[c], hn::Mul(va, LoadCols<kPart>(d, r + c * lanes, n)));
      StoreCols<kPart>(d, s, r + c * lanes, n);
      acc[c] = hn::MulAdd(s, qi, acc[c]);
    }
  }
  for (int c = 0; c < NV; ++c) {
    if constexpr (std::is_same_v<State, float>) {
      StoreCols<kPart>(d, acc[c], y + j0 + c * lanes, n);
    } else {
      const hn::Rebind<float, DS<State>> df;
      HWY_ALIGN float out[HWY_MAX_BYTES / sizeof(State)];
      hn::Store(hn::DemoteTo(df, acc[c]), df, out);
      std::copy(out, out + (kPart ? n : lanes), y + j0 + c * lanes);
    }
  }
}

template <typename State>
void Step(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, double alpha,
          const float* HWY_RESTRICT beta, int64_t beta_width, int64_t Dk, int64_t Dv, State* HWY_RESTRICT S,
          float* HWY_RESTRICT y, const State* next_state) {
  const DS<State> d;
  constexpr int NV = kBlock;
  const State a = static_cast<State>(alpha);
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
    StepBlock<NV, false, State>(d, q, k, v, a, beta, beta_width, Dk, Dv, j, lanes, S, block_ahead(1), block_ahead(2),
                                to_l2, y);
  for (; j < whole; j += lanes)
    StepBlock<1, false, State>(d, q, k, v, a, beta, beta_width, Dk, Dv, j, lanes, S, nullptr, nullptr, to_l2, y);
  if (j < Dv) StepBlock<1, true, State>(d, q, k, v, a, beta, beta_width, Dk, Dv, j, Dv - j, S, nullptr, nullptr, to_l2, y);
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
