// kernels/delta_chunk.h: a chunk's decay matrix and triangles bit for bit against their references,
// and the unit lower inverse within float32's rounding of its double-precision reference (and of
// the identity it defines), on every SIMD target, for chunk lengths with and without columns past
// the last whole vector, rows wider than the chunk, and what is above the diagonal never read; the
// backward's row gradients the same bits on every target, and the definitions'.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/delta_chunk.h"
#include "qkv/kernels/simd.h"

namespace qkv::kernels {
namespace delta_chunk_tests {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> uniform(int64_t n, float lo, float hi, Generator& gen) {
  const Tensor t = rand({n}, gen);
  std::vector<float> out(t.data(), t.data() + n);
  for (float& x : out) x = lo + (hi - lo) * x;
  return out;
}

// The bits of two floats agree (NaN included).
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

const int64_t kLengths[] = {1, 3, 8, 15, 16, 17, 31, 48, 63, 64};

TEST(DeltaChunk, DecayMatrixIsItsReferenceOnEveryTarget) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    for (int64_t C : kLengths)
      for (int64_t ld : {C, C + 5, int64_t{64}}) {
        if (ld < C) continue;
        SCOPED_TRACE(testing::Message() << "C " << C << " ld " << ld);
        Generator gen(static_cast<uint64_t>(C * 100 + ld));
        const std::vector<float> lead = uniform(C, 0.01f, 1.0f, gen), back = uniform(C, 1.0f, 90.0f, gen);
        std::vector<float> E(static_cast<size_t>(C * ld), kNaN), want = E;
        decay_matrix(C, lead.data(), back.data(), E.data(), ld);
        decay_matrix_reference(C, lead.data(), back.data(), want.data(), ld);
        for (int64_t t = 0; t < C; ++t)
          for (int64_t c = 0; c < ld; ++c)  // past C: left as it was (NaN)
            ASSERT_TRUE(same_bits(E[t * ld + c], want[t * ld + c])) << "E[" << t << "][" << c << "]";
        EXPECT_EQ(E[(C - 1) * ld + C - 1], 1.0f);
        if (C > 1) {
          EXPECT_EQ(E[ld + 0], lead[1] * back[0]);
          EXPECT_EQ(E[1], 0.0f);
        }
      }
  }
  force_simd_target(0);
}

TEST(DeltaChunk, TrianglesAreTheirReferenceAndNeverReadAboveTheDiagonal) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    for (int64_t C : kLengths)
      for (int64_t ld : {C, C + 3, int64_t{64}}) {
        if (ld < C) continue;
        SCOPED_TRACE(testing::Message() << "C " << C << " ld " << ld);
        Generator gen(static_cast<uint64_t>(C * 7 + ld));
        const int64_t n = C * ld, stride = 3;
        const std::vector<float> beta = uniform(C * stride, 0.05f, 0.95f, gen);
        std::vector<float> E = uniform(n, 0.0f, 1.0f, gen), kk = uniform(n, -1.0f, 1.0f, gen);
        std::vector<float> qk = uniform(n, -1.0f, 1.0f, gen), a(static_cast<size_t>(n), kNaN);
        for (int64_t t = 0; t < C; ++t)  // above the diagonal: NaN, which must not reach the outputs
          for (int64_t c = t + 1; c < C; ++c) kk[t * ld + c] = qk[t * ld + c] = E[t * ld + c] = kNaN;
        std::vector<float> kk2 = kk, qk2 = qk, a2 = a;
        chunk_triangles(C, beta.data(), stride, E.data(), kk.data(), a.data(), qk.data(), ld);
        chunk_triangles_reference(C, beta.data(), stride, E.data(), kk2.data(), a2.data(), qk2.data(), ld);
        for (int64_t t = 0; t < C; ++t)
          for (int64_t c = 0; c < ld; ++c) {
            const int64_t i = t * ld + c;
            ASSERT_TRUE(same_bits(kk[i], kk2[i]) && same_bits(a[i], a2[i]) && same_bits(qk[i], qk2[i]))
                << "(" << t << ", " << c << "): kk " << kk[i] << " / " << kk2[i] << ", a " << a[i] << " / " << a2[i]
                << ", qk " << qk[i] << " / " << qk2[i];
            if (c < C && c > t) {
              ASSERT_EQ(qk[i], 0.0f);
            }
            if (c < C && c >= t) {
              ASSERT_EQ(a[i], 0.0f);
            }
          }
        if (C > 1) {
          EXPECT_EQ(a[ld], beta[stride] * kk2[ld] * E[ld]);
        }
      }
  }
  force_simd_target(0);
}

// T = (I + A)^-1 against the double reference, each element within 4 C roundings of the magnitude
// its recurrence carries (|T|'s recurrence on |A|: the error a row inherits from those above it);
// and (I + A) T = I to the same scale.
void check_inverse(int64_t C, int64_t ld, float scale, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "C " << C << " ld " << ld << " scale " << scale);
  Generator gen(seed);
  std::vector<float> A = uniform(C * ld, -scale, scale, gen);
  for (int64_t t = 0; t < C; ++t)  // the diagonal and above: NaN, never read
    for (int64_t c = t; c < ld; ++c) A[t * ld + c] = kNaN;
  std::vector<float> T(static_cast<size_t>(C * ld), kNaN), want = T;
  unit_lower_inverse(C, A.data(), T.data(), ld);
  unit_lower_inverse_reference(C, A.data(), want.data(), ld);
  std::vector<double> mag(static_cast<size_t>(C * C), 0.0);  // |T|'s recurrence on |A|
  for (int64_t t = 0; t < C; ++t)
    for (int64_t j = 0; j <= t; ++j) {
      double m = j == t ? 1.0 : 0.0;
      for (int64_t c = j; c < t; ++c) m += std::fabs(static_cast<double>(A[t * ld + c])) * mag[c * C + j];
      mag[t * C + j] = m;
    }
  const double u = 6e-8;
  for (int64_t t = 0; t < C; ++t)
    for (int64_t j = 0; j < ld; ++j) {
      const float got = T[t * ld + j];
      if (j >= C) {
        ASSERT_TRUE(std::isnan(got)) << "T[" << t << "][" << j << "] past C was written";
        continue;
      }
      if (j >= t) {
        ASSERT_EQ(got, j == t ? 1.0f : 0.0f) << "T[" << t << "][" << j << "]";
        continue;
      }
      const double tol = 4.0 * static_cast<double>(C) * u * mag[t * C + j];
      ASSERT_LE(std::fabs(static_cast<double>(got) - want[t * ld + j]), tol) << "T[" << t << "][" << j << "]";
    }
  for (int64_t t = 0; t < C; ++t)  // (I + A) T = I
    for (int64_t j = 0; j < t; ++j) {
      double sum = T[t * ld + j], size = std::fabs(static_cast<double>(T[t * ld + j]));
      for (int64_t c = j; c < t; ++c) {
        sum += static_cast<double>(A[t * ld + c]) * T[c * ld + j];
        size += std::fabs(static_cast<double>(A[t * ld + c])) * mag[c * C + j];
      }
      ASSERT_LE(std::fabs(sum), 8.0 * static_cast<double>(C) * u * size) << "((I + A) T)[" << t << "][" << j << "]";
    }
}

TEST(DeltaChunk, UnitLowerInverseWithinRoundingOfTheDoubleReference) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    uint64_t seed = 1;
    for (int64_t C : kLengths)
      for (int64_t ld : {C, C + 5, int64_t{64}}) {
        if (ld < C) continue;
        for (float scale : {0.05f, 0.5f}) check_inverse(C, ld, scale, seed++);
      }
  }
  force_simd_target(0);
}

// One chunk's inputs and outputs for delta_chunk_rows, drawn from a seed; dq and dA are inputs the
// kernel rewrites, so each run starts from a fresh copy.
struct RowsCase {
  int64_t C, Dk, Dv, ld, ldv, lddv, ldg;
  std::vector<float> beta, gamma, tail, k, q, m0, dkt, dq, dk, v, dr, dy, dv, G, dA, dP, E, kk, a, p, sym, dQK, dbeta;
  std::vector<double> dgamma, dtail, dg;
  RowsCase(int64_t C_, int64_t Dk_, int64_t Dv_, uint64_t seed) : C(C_), Dk(Dk_), Dv(Dv_) {
    Generator gen(seed);
    ld = 64;
    ldv = 3 * Dv + 1;  // v's and dv's rows spread as (B, T, H, Dv) spreads them
    lddv = 2 * Dv + 3;
    ldg = Dv + 5;
    beta = uniform(C * 2, 0.05f, 0.95f, gen);  // stride 2
    gamma = uniform(C, 0.1f, 1.0f, gen);
    tail = uniform(C, 0.1f, 1.0f, gen);
    for (auto* x : {&k, &q, &m0, &dkt, &dq}) *x = uniform(C * Dk, -1, 1, gen);
    v = uniform(C * ldv, -1, 1, gen);
    for (auto* x : {&dr, &dy}) *x = uniform(C * Dv, -1, 1, gen);
    for (auto* x : {&dA, &dP, &E, &kk, &a, &p}) *x = uniform(C * ld, -1, 1, gen);
    dk.assign(static_cast<size_t>(C * Dk), kNaN);
    dv.assign(static_cast<size_t>(C * lddv), kNaN);
    G.assign(static_cast<size_t>(2 * C * ldg), kNaN);
    sym.assign(static_cast<size_t>(C * ld), kNaN);
    dQK = sym;
    dbeta.assign(static_cast<size_t>(C), kNaN);
    dgamma.assign(static_cast<size_t>(C), 0.0);
    dtail = dgamma;
    dg = dgamma;
  }
  DeltaChunkRows args() {
    return {.C = C, .Dk = Dk, .Dv = Dv, .ld = ld, .beta = beta.data(), .beta_stride = 2, .gamma = gamma.data(),
            .tail = tail.data(), .k = k.data(), .q = q.data(), .m0 = m0.data(), .dkt = dkt.data(), .dq = dq.data(),
            .dk = dk.data(), .v = v.data(), .dr = dr.data(), .dy = dy.data(), .ldv = ldv, .dv = dv.data(),
            .lddv = lddv, .G = G.data(), .ldg = ldg, .dA = dA.data(), .dP = dP.data(), .E = E.data(),
            .kk = kk.data(), .a = a.data(), .p = p.data(), .sym = sym.data(), .dQK = dQK.data(),
            .dgamma = dgamma.data(), .dtail = dtail.data(), .dg = dg.data(), .dbeta = dbeta.data()};
  }
};

double dot(const float* x, const float* y, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

// Every target gives the first target's bits, and those are the definitions': the elementwise
// outputs exactly (one float product or two, in the definitions' order), the dot products and sums
// within float32's rounding of double sums (|a| |b| summed, n + 2 roundings).
TEST(DeltaChunk, RowGradientsAreTheDefinitionsOnEveryTarget) {
  uint64_t seed = 40;
  for (int64_t C : {1, 5, 17, 64})
    for (int64_t D : {8, 19, 128}) {
      SCOPED_TRACE(testing::Message() << "C " << C << " D " << D);
      const RowsCase input(C, D, D + 3, seed++);
      RowsCase first = input;
      bool have_first = false;
      for (int64_t target : available_simd_targets()) {
        SCOPED_TRACE(simd_target_name(target));
        force_simd_target(target);
        RowsCase out = input;
        delta_chunk_rows(out.args());
        if (!have_first) {
          first = out;
          have_first = true;
        }
        const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
          return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
        };
        EXPECT_TRUE(same(out.dq, first.dq) && same(out.dk, first.dk) && same(out.dv, first.dv) &&
                    same(out.G, first.G) && same(out.dA, first.dA) && same(out.sym, first.sym) &&
                    same(out.dQK, first.dQK) && same(out.dbeta, first.dbeta) && out.dg == first.dg &&
                    out.dgamma == first.dgamma && out.dtail == first.dtail)
            << "not the first target's bits";
      }
      force_simd_target(0);
      const RowsCase& o = first;
      const int64_t Dk = D, Dv = D + 3, ld = o.ld;
      const auto near = [](double got, double want, double magnitude, int64_t n) {
        return std::fabs(got - want) <= 6e-8 * static_cast<double>(n + 2) * magnitude + 1e-30;
      };
      std::vector<double> dg(static_cast<size_t>(C), 0.0);
      for (int64_t t = 0; t < C; ++t) {
        const float beta = input.beta[t * 2], gam = input.gamma[t], tail = input.tail[t];
        for (int64_t i = 0; i < Dk; ++i) {
          ASSERT_TRUE(same_bits(o.dq[t * Dk + i], input.dq[t * Dk + i] * gam)) << "dq " << t << " " << i;
          ASSERT_TRUE(same_bits(o.dk[t * Dk + i], -beta * gam * input.m0[t * Dk + i] + tail * input.dkt[t * Dk + i]))
              << "dk " << t << " " << i;
        }
        for (int64_t j = 0; j < Dv; ++j) {
          ASSERT_TRUE(same_bits(o.dv[t * o.lddv + j], beta * input.dr[t * Dv + j])) << "dv " << t << " " << j;
          ASSERT_TRUE(same_bits(o.G[t * o.ldg + j], -beta * gam * input.dr[t * Dv + j])) << "G " << t << " " << j;
          ASSERT_TRUE(same_bits(o.G[(C + t) * o.ldg + j], gam * input.dy[t * Dv + j])) << "G " << C + t << " " << j;
        }
        const float *k = &input.k[t * Dk], *m0 = &input.m0[t * Dk];
        const double qy = dot(&input.dq[t * Dk], &input.q[t * Dk], Dk), km = dot(m0, k, Dk);
        EXPECT_TRUE(near(o.dtail[t], dot(&input.dkt[t * Dk], k, Dk), static_cast<double>(Dk), Dk)) << "dtail " << t;
        EXPECT_TRUE(near(o.dgamma[t], qy - beta * km, 2.0 * static_cast<double>(Dk), Dk)) << "dgamma " << t;
        // -dA in: dA_tc = -(input) below the diagonal, 0 on and above it
        double db = dot(&input.dr[t * Dv], &input.v[t * o.ldv], Dv) - gam * km, f_sum = 0;
        for (int64_t c = 0; c < C; ++c) {
          const float da = c < t ? -input.dA[t * ld + c] : 0.0f, e = input.E[t * ld + c];
          db += static_cast<double>(da) * (input.kk[t * ld + c] * e);
          ASSERT_TRUE(same_bits(o.dQK[t * ld + c], input.dP[t * ld + c] * e)) << "dQK " << t << " " << c;
          const float f = c == t ? 0.0f : da * input.a[t * ld + c] + input.dP[t * ld + c] * input.p[t * ld + c];
          ASSERT_TRUE(same_bits(o.dA[t * ld + c], f)) << "F " << t << " " << c;
          f_sum += f;
          dg[static_cast<size_t>(c)] -= f;
        }
        dg[static_cast<size_t>(t)] += f_sum;
        EXPECT_TRUE(near(o.dbeta[t], db, 2.0 * static_cast<double>(Dv + Dk + C), Dv + Dk + C)) << "dbeta " << t;
        for (int64_t c = 0; c < C; ++c) {  // dKK + dKK^T, dKK_tc = beta_t dA_tc E_tc
          const float mine = (c < t ? -input.dA[t * ld + c] : 0.0f) * beta * input.E[t * ld + c];
          const float theirs = (t < c ? -input.dA[c * ld + t] : 0.0f) * input.beta[c * 2] * input.E[c * ld + t];
          const float want = c == t ? 0.0f : (c < t ? mine + theirs : theirs + mine);
          ASSERT_TRUE(same_bits(o.sym[t * ld + c], want)) << "sym " << t << " " << c;
        }
      }
      for (int64_t c = 0; c < C; ++c) EXPECT_TRUE(near(o.dg[c], dg[static_cast<size_t>(c)], 4.0 * static_cast<double>(C), 2 * C)) << "dg " << c;
    }
}

}  // namespace delta_chunk_tests
}  // namespace qkv::kernels
