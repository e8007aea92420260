// kernels/delta_chunk.h: a chunk's decay matrix and triangles bit for bit against their references,
// and the unit lower inverse within float32's rounding of its double-precision reference (and of
// the identity it defines), on every SIMD target, for chunk lengths with and without columns past
// the last whole vector, rows wider than the chunk, and what is above the diagonal never read.
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

}  // namespace delta_chunk_tests
}  // namespace qkv::kernels
