// kernels/small_gemm.h: the unpacked product against the definition (sums in double), on every
// SIMD target, over shapes that leave rows past the last tile of four, panels of 3, 2 and 1
// vectors, columns past the last whole vector, A transposed or not, strides wider than the
// operands, beta 0 over a C of NaNs (never read) and beta != 0; and the transposed copy.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/simd.h"
#include "qkv/kernels/small_gemm.h"

namespace qkv::kernels {
namespace {

std::vector<float> uniform(int64_t n, Generator& gen) {
  const Tensor t = rand({n}, gen);
  std::vector<float> out(t.data(), t.data() + n);
  for (float& x : out) x = 2 * x - 1;
  return out;
}

// Each element within float32's rounding bound of the double reference: K + 2 roundings of the
// sum of the terms' magnitudes, two of beta C's.
void check_product(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, float beta, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << (trans_a ? "A^T " : "A ") << M << " x " << N << " x " << K << " alpha " << alpha
                                  << " beta " << beta);
  Generator gen(seed);
  const int64_t lda = (trans_a ? M : K) + 3, ldb = N + 5, ldc = N + 2;
  const std::vector<float> A = uniform((trans_a ? K : M) * lda, gen), B = uniform(std::max<int64_t>(K, 1) * ldb, gen);
  std::vector<float> C = uniform(M * ldc, gen);
  if (beta == 0.0f) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> before = C;
  std::vector<float> want = C;
  small_gemm(trans_a, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  small_gemm_reference(trans_a, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double magnitude = 0;
      for (int64_t k = 0; k < K; ++k)
        magnitude += std::fabs(static_cast<double>(trans_a ? A[k * lda + m] : A[m * lda + k]) * B[k * ldb + n]);
      const double old = beta == 0.0f ? 0.0 : std::fabs(beta * before[m * ldc + n]);
      const double tol = 6e-8 * ((static_cast<double>(K) + 2) * std::fabs(alpha) * magnitude + 2 * old) + 1e-30;
      ASSERT_LE(std::fabs(C[m * ldc + n] - want[m * ldc + n]), tol) << "C[" << m << "][" << n << "]";
    }
  for (int64_t m = 0; m < M; ++m)  // the columns between N and ldc are not written
    for (int64_t n = N; n < ldc; ++n)
      if (beta != 0.0f) ASSERT_EQ(C[m * ldc + n], want[m * ldc + n]) << "padding C[" << m << "][" << n << "]";
      else ASSERT_TRUE(std::isnan(C[m * ldc + n])) << "padding C[" << m << "][" << n << "]";
}

TEST(SmallGemm, EverySimdTargetMatchesTheDefinition) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    uint64_t seed = 1;
    for (bool trans_a : {false, true})
      for (int64_t M : {1, 3, 4, 6, 11, 13, 64})
        for (int64_t N : {1, 7, 8, 16, 17, 24, 32, 40, 72, 128, 131})
          for (int64_t K : {0, 1, 5, 64}) {
            check_product(trans_a, M, N, K, seed % 2 ? 1.0f : -0.5f, seed % 3 ? 0.0f : 0.75f, seed);
            ++seed;
          }
    check_product(false, 64, 128, 128, 1.0f, 1.0f, 99);  // a chunk's shapes
    check_product(true, 128, 128, 64, 1.0f, 0.5f, 100);
  }
  force_simd_target(0);
}

// Memory the caller reads next, given as a hint, changes nothing and is never read: the product's
// bits equal the product's without it, on every target, with the hint on a page that cannot be
// read (a load from it would end the test with a fault; a prefetch of it does not fault), over
// shapes with tiles of every kind and more lines than the tiles' k steps.
TEST(SmallGemm, LinesAskedForAheadChangeNothingAndAreNeverRead) {
  const size_t page = 1 << 16;
  void* locked = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(locked, MAP_FAILED);
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    Generator gen(11);
    for (bool trans_a : {false, true})
      for (const auto& [M, N, K] : {std::array<int64_t, 3>{64, 16, 96}, {12, 96, 64}, {13, 131, 5}, {3, 7, 1}})
        for (int64_t bytes : {int64_t{1}, int64_t{24576}, int64_t{page}}) {
          SCOPED_TRACE(testing::Message() << (trans_a ? "A^T " : "A ") << M << " x " << N << " x " << K << ", "
                                          << bytes << " bytes ahead");
          const int64_t lda = trans_a ? M : K;
          const std::vector<float> A = uniform((trans_a ? K : M) * lda, gen), B = uniform(K * N, gen);
          std::vector<float> plain(static_cast<size_t>(M * N)), hinted(plain.size());
          small_gemm(trans_a, M, N, K, 1.0f, A.data(), lda, B.data(), N, 0.0f, plain.data(), N);
          small_gemm(trans_a, M, N, K, 1.0f, A.data(), lda, B.data(), N, 0.0f, hinted.data(), N, locked, bytes);
          ASSERT_EQ(0, std::memcmp(plain.data(), hinted.data(), plain.size() * sizeof(float)));
        }
  }
  force_simd_target(0);
  munmap(locked, page);
}

// The transposed copy is exact: every element of dst (cols, rows) is src's (r, c), bit for bit, on
// every target, for shapes with rows and columns past the last whole 4 x 4 block and strides wider
// than the matrices; what lies between rows and ldd is not written.
TEST(SmallGemm, TransposeCopiesEveryElementOnEveryTarget) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    uint64_t seed = 7;
    for (int64_t rows : {1, 3, 4, 5, 8, 63, 64, 128})
      for (int64_t cols : {1, 2, 4, 7, 16, 64, 131}) {
        SCOPED_TRACE(testing::Message() << rows << " x " << cols);
        Generator gen(seed++);
        const int64_t lds = cols + 3, ldd = rows + 5;
        const std::vector<float> src = uniform(rows * lds, gen);
        constexpr float kUnwritten = 12345.0f;
        std::vector<float> dst(static_cast<size_t>(cols * ldd), kUnwritten), want = dst;
        transpose(rows, cols, src.data(), lds, dst.data(), ldd);
        transpose_reference(rows, cols, src.data(), lds, want.data(), ldd);
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < ldd; ++r) {
            const float expected = r < rows ? src[static_cast<size_t>(r * lds + c)] : kUnwritten;
            ASSERT_EQ(want[static_cast<size_t>(c * ldd + r)], expected) << "reference dst[" << c << "][" << r << "]";
            ASSERT_EQ(dst[static_cast<size_t>(c * ldd + r)], expected) << "dst[" << c << "][" << r << "]";
          }
      }
  }
  force_simd_target(0);
}

}  // namespace
}  // namespace qkv::kernels
