// A chunk's elementwise and triangular steps of the gated delta rule. See
// include/qkv/kernels/delta_chunk.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/delta_chunk.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <vector>

#include "hwy/highway.h"
#include "qkv/kernels/delta_chunk.h"

#ifndef QKV_KERNELS_DELTA_CHUNK_ONCE
#define QKV_KERNELS_DELTA_CHUNK_ONCE
namespace qkv::kernels {
namespace {

// Element (t, c) of each step, as the references and the kernels' columns past the last whole
// vector compute it.
inline float DecayAt(int64_t t, int64_t c, const float* lead, const float* back) {
  return c < t ? lead[t] * back[c] : c == t ? 1.0f : 0.0f;
}
inline void TrianglesAt(int64_t t, int64_t c, float beta, const float* E, float* kk, float* a, float* qk, int64_t ld) {
  const int64_t i = t * ld + c;
  const float e = c <= t ? E[i] : 0.0f, kkv = c <= t ? kk[i] : 0.0f;
  kk[i] = kkv;
  a[i] = c < t ? beta * kkv * e : 0.0f;
  qk[i] = c <= t ? qk[i] * e : 0.0f;
}
// T_t's column j (< t) from the rows above it: -sum_{c = j}^{t-1} A_tc T_cj in float, c in order.
inline float InverseAt(int64_t t, int64_t j, const float* A, const float* T, int64_t ld) {
  if (j >= t) return j == t ? 1.0f : 0.0f;
  float sum = 0.0f;
  for (int64_t c = j; c < t; ++c) sum += A[t * ld + c] * T[c * ld + j];
  return -sum;
}

}  // namespace
}  // namespace qkv::kernels
#endif  // QKV_KERNELS_DELTA_CHUNK_ONCE

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Lanes [0, n) of a vector, n clamped to [0, lanes].
HWY_INLINE hn::Mask<DF> Below(DF d, int64_t n, int64_t lanes) {
  return hn::FirstN(d, static_cast<size_t>(std::clamp<int64_t>(n, 0, lanes)));
}

void DecayMatrix(int64_t C, const float* HWY_RESTRICT lead, const float* HWY_RESTRICT back, float* HWY_RESTRICT E,
                 int64_t ld) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d)), whole = C / L * L;
  for (int64_t t = 0; t < C; ++t) {
    float* row = E + t * ld;
    const VF lt = hn::Set(d, lead[t]);
    for (int64_t c0 = 0; c0 < whole; c0 += L)
      hn::StoreU(hn::IfThenElseZero(Below(d, t - c0, L), hn::Mul(lt, hn::LoadU(d, back + c0))), d, row + c0);
    for (int64_t c = whole; c < C; ++c) row[c] = DecayAt(t, c, lead, back);
    row[t] = 1.0f;
  }
}

void ChunkTriangles(int64_t C, const float* HWY_RESTRICT beta, int64_t beta_stride, const float* HWY_RESTRICT E,
                    float* HWY_RESTRICT kk, float* HWY_RESTRICT a, float* HWY_RESTRICT qk, int64_t ld) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d)), whole = C / L * L;
  for (int64_t t = 0; t < C; ++t) {
    const float bt = beta[t * beta_stride];
    const VF b = hn::Set(d, bt);
    for (int64_t c0 = 0; c0 < whole; c0 += L) {
      const int64_t i = t * ld + c0;
      const auto lower = Below(d, t + 1 - c0, L), strict = Below(d, t - c0, L);
      const VF e = hn::IfThenElseZero(lower, hn::LoadU(d, E + i)), kkv = hn::IfThenElseZero(lower, hn::LoadU(d, kk + i));
      hn::StoreU(kkv, d, kk + i);
      hn::StoreU(hn::IfThenElseZero(strict, hn::Mul(hn::Mul(b, kkv), e)), d, a + i);
      hn::StoreU(hn::IfThenElseZero(lower, hn::Mul(hn::LoadU(d, qk + i), e)), d, qk + i);
    }
    for (int64_t c = whole; c < C; ++c) TrianglesAt(t, c, bt, E, kk, a, qk, ld);
  }
}

void UnitLowerInverse(int64_t C, const float* HWY_RESTRICT A, float* HWY_RESTRICT T, int64_t ld) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d)), whole = C / L * L;
  for (int64_t t = 0; t < C; ++t) {
    const float* at = A + t * ld;
    float* row = T + t * ld;
    // columns [j0, j0 + L): rows c < j0 are 0 there, so the sum runs over c in [j0, t)
    for (int64_t j0 = 0; j0 < whole; j0 += L) {
      if (j0 > t) {
        hn::StoreU(hn::Zero(d), d, row + j0);
        continue;
      }
      VF even = hn::Zero(d), odd = hn::Zero(d);
      int64_t c = j0;
      for (; c + 2 <= t; c += 2) {
        even = hn::MulAdd(hn::Set(d, at[c]), hn::LoadU(d, T + c * ld + j0), even);
        odd = hn::MulAdd(hn::Set(d, at[c + 1]), hn::LoadU(d, T + (c + 1) * ld + j0), odd);
      }
      if (c < t) even = hn::MulAdd(hn::Set(d, at[c]), hn::LoadU(d, T + c * ld + j0), even);
      // -sum below the diagonal, 0 on and above it (the diagonal's 1 below)
      hn::StoreU(hn::IfThenElseZero(Below(d, t - j0, L), hn::Neg(hn::Add(even, odd))), d, row + j0);
    }
    if (t < whole) row[t] = 1.0f;
    for (int64_t j = whole; j < C; ++j) row[j] = InverseAt(t, j, A, T, ld);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(DecayMatrix);
HWY_EXPORT(ChunkTriangles);
HWY_EXPORT(UnitLowerInverse);

void decay_matrix(int64_t C, const float* lead, const float* back, float* E, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(DecayMatrix)(C, lead, back, E, ld);
}
void decay_matrix_reference(int64_t C, const float* lead, const float* back, float* E, int64_t ld) {
  for (int64_t t = 0; t < C; ++t)
    for (int64_t c = 0; c < C; ++c) E[t * ld + c] = DecayAt(t, c, lead, back);
}

void chunk_triangles(int64_t C, const float* beta, int64_t beta_stride, const float* E, float* kk, float* a, float* qk,
                     int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ChunkTriangles)(C, beta, beta_stride, E, kk, a, qk, ld);
}
void chunk_triangles_reference(int64_t C, const float* beta, int64_t beta_stride, const float* E, float* kk, float* a,
                               float* qk, int64_t ld) {
  for (int64_t t = 0; t < C; ++t)
    for (int64_t c = 0; c < C; ++c) TrianglesAt(t, c, beta[t * beta_stride], E, kk, a, qk, ld);
}

void unit_lower_inverse(int64_t C, const float* A, float* T, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(UnitLowerInverse)(C, A, T, ld);
}
void unit_lower_inverse_reference(int64_t C, const float* A, float* T, int64_t ld) {
  std::vector<double> rows(static_cast<size_t>(C * C), 0.0);  // (C, C) in double
  for (int64_t t = 0; t < C; ++t)
    for (int64_t j = 0; j < C; ++j) {
      double value = j == t ? 1.0 : 0.0;
      if (j < t) {
        double sum = 0;
        for (int64_t c = j; c < t; ++c) sum += static_cast<double>(A[t * ld + c]) * rows[static_cast<size_t>(c * C + j)];
        value = -sum;
      }
      rows[static_cast<size_t>(t * C + j)] = value;
      T[t * ld + j] = static_cast<float>(value);
    }
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
