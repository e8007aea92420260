// A chunk's elementwise and triangular steps of the gated delta rule. See
// include/qkv/kernels/delta_chunk.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/delta_chunk.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <vector>

#include "hwy/highway.h"
#include "qkv/core/error.h"
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

// Plain loops from here: the compiler vectorizes them with this target's instructions.
constexpr int kLanes = 16;
double LaneDot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  double sum = 0;
  for (; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return sum;
}
double LaneSum(const float* HWY_RESTRICT a, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l];
  double sum = 0;
  for (; i < n; ++i) sum += a[i];
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return sum;
}

void DeltaChunkRowsOf(const DeltaChunkRows& r) {
  const int64_t C = r.C, Dk = r.Dk, Dv = r.Dv, ld = r.ld;
  float ke[256];  // one row of kk o E (C <= 256: the module's chunk is 64)
  for (int64_t t = 0; t < C; ++t) {
    const float beta = r.beta[t * r.beta_stride], gam = r.gamma[t], tail = r.tail[t];
    float* HWY_RESTRICT dq = r.dq + t * Dk;
    float* HWY_RESTRICT dk = r.dk + t * Dk;
    const float *m0 = r.m0 + t * Dk, *dkt = r.dkt + t * Dk, *kt = r.k + t * Dk;
    const float *dr = r.dr + t * Dv, *dyt = r.dy + t * Dv;
    const double qy = LaneDot(dq, r.q + t * Dk, Dk), km = LaneDot(m0, kt, Dk);
    r.dtail[t] = LaneDot(dkt, kt, Dk);
    for (int64_t i = 0; i < Dk; ++i) {
      dq[i] *= gam;
      dk[i] = -beta * gam * m0[i] + tail * dkt[i];
    }
    float* HWY_RESTRICT dv = r.dv + t * r.lddv;
    float* HWY_RESTRICT g0 = r.G + t * r.ldg;
    float* HWY_RESTRICT g1 = r.G + (C + t) * r.ldg;
    for (int64_t j = 0; j < Dv; ++j) {
      dv[j] = beta * dr[j];
      g0[j] = -beta * gam * dr[j];
      g1[j] = gam * dyt[j];
    }
    r.dgamma[t] = qy - beta * km;
    double db = LaneDot(dr, r.v + t * r.ldv, Dv) - gam * km;
    // A_tc = beta_t (K K^T)_tc E_tc (c < t), P_tc = (Q K^T)_tc E_tc (c <= t); F = dE o E into dg.
    // dA past the diagonal is not A's (A is strictly lower); E, A and P are 0 past it.
    float* HWY_RESTRICT da = r.dA + t * ld;
    const float *dp = r.dP + t * ld, *e = r.E + t * ld, *kk = r.kk + t * ld, *a = r.a + t * ld, *p = r.p + t * ld;
    float* HWY_RESTRICT sym = r.sym + t * ld;
    float* HWY_RESTRICT dqk = r.dQK + t * ld;
    for (int64_t col = 0; col < t; ++col) da[col] = -da[col];
    for (int64_t col = t; col < C; ++col) da[col] = 0.0f;
    for (int64_t col = 0; col < C; ++col) {
      ke[col] = kk[col] * e[col];
      sym[col] = da[col] * beta * e[col];  // dKK, made symmetric below
      dqk[col] = dp[col] * e[col];
    }
    db += LaneDot(da, ke, C);
    for (int64_t col = 0; col < C; ++col) da[col] = da[col] * a[col] + dp[col] * p[col];  // dA now holds F
    da[t] = 0.0f;  // E's diagonal is e^0: no gradient (its row and column terms would cancel)
    r.dbeta[t] = static_cast<float>(db);
    r.dg[t] = LaneSum(da, C);
  }
  for (int64_t t = 0; t < C; ++t)  // E_tc = e^{g_t - g_c}: F's column sums leave g_c
    for (int64_t col = 0; col < C; ++col) r.dg[col] -= r.dA[t * ld + col];
  for (int64_t t = 0; t < C; ++t)
    for (int64_t col = 0; col < t; ++col) {
      const float both = r.sym[t * ld + col] + r.sym[col * ld + t];
      r.sym[t * ld + col] = r.sym[col * ld + t] = both;
    }
  for (int64_t t = 0; t < C; ++t) r.sym[t * ld + t] = 0.0f;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(DecayMatrix);
HWY_EXPORT(ChunkTriangles);
HWY_EXPORT(UnitLowerInverse);
HWY_EXPORT(DeltaChunkRowsOf);
HWY_EXPORT(LaneDot);

void delta_chunk_rows(const DeltaChunkRows& r) {
  QKV_CHECK(r.C >= 0 && r.C <= 256 && r.C <= r.ld, "delta_chunk_rows: C (", r.C, ") must be in [0, min(256, ld = ",
            r.ld, ")]");
  HWY_DYNAMIC_DISPATCH(DeltaChunkRowsOf)(r);
}

double lane_dot16(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(LaneDot)(a, b, n); }

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
