// The decoding step's product (core/gemv.h) against the naive reference (sgemm_reference, double
// sums): every row count it takes, sizes with and without a vector tail, bias or none, float and
// bf16 weights; the same bits whatever the thread count; linear() taking it for a few rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/gemv.h"
#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/linear.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_pool.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::normal_vector;

// y_ref = x W^T + bias by the reference (bf16: both operands rounded, as bf16 mode defines), and
// the bound a float32 dot product of K terms may stray from it: K ulps of the sum of |terms|.
struct Expected {
  std::vector<float> y, bound;
};
Expected reference(const std::vector<float>& x, int64_t M, int64_t K, const std::vector<float>& W, const float* bias,
                   int64_t N, bool bf16) {
  Expected e;
  e.y.assign(static_cast<size_t>(M * N), 0.0f);
  GemmArgs g = gemm_args(false, true, M, N, K, x.data(), K, W.data(), K, e.y.data(), N);
  g.precision = bf16 ? Dtype::kBF16 : Dtype::kF32;
  sgemm_reference(g);
  e.bound.resize(e.y.size());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double abs_sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        float a = x[static_cast<size_t>(m * K + k)], b = W[static_cast<size_t>(n * K + k)];
        if (bf16) a = bf16_to_float(float_to_bf16(a)), b = bf16_to_float(float_to_bf16(b));
        abs_sum += std::fabs(static_cast<double>(a) * b);
      }
      const size_t i = static_cast<size_t>(m * N + n);
      if (bias) e.y[i] += bias[n], abs_sum += std::fabs(bias[n]);
      e.bound[i] = static_cast<float>(static_cast<double>(K + 1) * 0x1p-24 * abs_sum + 1e-30);
    }
  return e;
}

// bf16 weights run AVX512_BF16's dot product where the CPU has it, and the widening path where it
// does not (or it is forced off): both are checked here, on this CPU.
class GemvPaths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { previous_ = set_bf16_dot_allowed(GetParam() && cpu_has_bf16_dot()); }
  void TearDown() override { set_bf16_dot_allowed(previous_); }
  bool previous_ = false;
};
INSTANTIATE_TEST_SUITE_P(DotProduct, GemvPaths, ::testing::Values(false, true));

TEST_P(GemvPaths, EveryRowCountAndSizeMatchesTheReferenceInFloatAndBf16Weights) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  int checked = 0;
  for (int64_t M = 1; M <= kGemvMaxRows; ++M)
    for (int64_t K : {1, 7, 16, 33, 160, 768})
      for (int64_t N : {1, 5, 37, 300})
        for (bool with_bias : {false, true})
          for (bool bf16 : {false, true}) {
            const auto x = normal_vector(static_cast<size_t>(M * K), rng);
            const auto W = normal_vector(static_cast<size_t>(N * K), rng);
            const auto b = normal_vector(static_cast<size_t>(N), rng);
            std::vector<uint16_t> W16(W.size());
            floats_to_bf16(W.data(), W16.data(), W.size());
            std::vector<float> y(static_cast<size_t>(M * N), NAN);  // overwritten, never read
            const float* bias = with_bias ? b.data() : nullptr;
            gemv_rows(x.data(), M, K, bf16 ? nullptr : W.data(), bf16 ? W16.data() : nullptr, bias, N, y.data(), &pool);
            const Expected e = reference(x, M, K, W, bias, N, bf16);
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_LE(std::fabs(y[i] - e.y[i]), e.bound[i])
                  << "M " << M << " K " << K << " N " << N << " bias " << with_bias << " bf16 " << bf16 << " at " << i;
            ++checked;
          }
  EXPECT_EQ(checked, kGemvMaxRows * 6 * 4 * 2 * 2);
}

TEST_P(GemvPaths, Bf16WeightsAreNotTheFloatProduct) {
  // The bf16 path rounds: on values with low mantissa bits its result differs from float32's by
  // far more than float32's own error (a path that ignored W16's rounding would pass the test above
  // only if the reference were wrong too; this pins the difference down).
  const int64_t K = 64, N = 3;
  std::vector<float> x(K, 1.0f), W(static_cast<size_t>(N * K), 1.0f + 0x1p-12f);
  std::vector<uint16_t> W16(W.size());
  floats_to_bf16(W.data(), W16.data(), W.size());
  std::vector<float> y32(N), y16(N);
  gemv_rows(x.data(), 1, K, W.data(), nullptr, nullptr, N, y32.data());
  gemv_rows(x.data(), 1, K, nullptr, W16.data(), nullptr, N, y16.data());
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_FLOAT_EQ(y32[static_cast<size_t>(n)], 64.0f * (1.0f + 0x1p-12f));
    EXPECT_EQ(y16[static_cast<size_t>(n)], 64.0f);  // 1 + 2^-12 rounds to 1 in bf16
  }
}

TEST(Gemv, TheThreadCountDoesNotChangeABit) {
  std::mt19937 rng(3);
  const int64_t M = 5, K = 777, N = 2049;
  const auto x = normal_vector(static_cast<size_t>(M * K), rng), W = normal_vector(static_cast<size_t>(N * K), rng);
  const auto b = normal_vector(static_cast<size_t>(N), rng);
  std::vector<float> one(static_cast<size_t>(M * N)), three(one.size());
  ThreadPool p1(1), p3(3);
  gemv_rows(x.data(), M, K, W.data(), nullptr, b.data(), N, one.data(), &p1);
  gemv_rows(x.data(), M, K, W.data(), nullptr, b.data(), N, three.data(), &p3);
  EXPECT_EQ(one, three);
}

// Where the weights' lines are asked for (core/machine.h: into L1, with a second stream into L2
// under kL1AndL2) changes no bit, float and bf16 weights, one row of x and several.
TEST(Gemv, WhereTheLinesAreAskedForChangesNoBit) {
  std::mt19937 rng(4);
  const int64_t K = 1000, N = 300;
  const auto x = normal_vector(static_cast<size_t>(5 * K), rng), W = normal_vector(static_cast<size_t>(N * K), rng);
  std::vector<uint16_t> W16(W.size());
  floats_to_bf16(W.data(), W16.data(), W.size());
  ThreadPool pool(2);
  for (int64_t M : {1, 5})
    for (bool bf16 : {false, true}) {
      std::vector<float> want(static_cast<size_t>(M * N));
      const BurstPrefetch was = set_burst_prefetch(BurstPrefetch::kL1);
      gemv_rows(x.data(), M, K, bf16 ? nullptr : W.data(), bf16 ? W16.data() : nullptr, nullptr, N, want.data(), &pool);
      for (const BurstPrefetch b : {BurstPrefetch::kL1Streamed, BurstPrefetch::kL2, BurstPrefetch::kL1AndL2}) {
        set_burst_prefetch(b);
        std::vector<float> got(want.size(), -1.0f);
        gemv_rows(x.data(), M, K, bf16 ? nullptr : W.data(), bf16 ? W16.data() : nullptr, nullptr, N, got.data(), &pool);
        EXPECT_EQ(got, want) << "M " << M << " bf16 " << bf16 << " " << burst_prefetch_name(b);
      }
      set_burst_prefetch(was);
    }
}

TEST(Gemv, LinearTakesItForAFewRowsWithTheBiasAndBf16Weights) {
  std::mt19937 rng(5);
  const int64_t M = 2, K = 40, N = 24;
  const auto x = normal_vector(static_cast<size_t>(M * K), rng), W = normal_vector(static_cast<size_t>(N * K), rng);
  const auto b = normal_vector(static_cast<size_t>(N), rng);
  std::vector<uint16_t> W16(W.size());
  floats_to_bf16(W.data(), W16.data(), W.size());
  for (bool bf16 : {false, true}) {
    std::vector<float> via_linear(static_cast<size_t>(M * N)), via_gemv(via_linear.size());
    linear(x.data(), M, K, W.data(), b.data(), N, via_linear.data(), nullptr, bf16 ? Dtype::kBF16 : Dtype::kF32,
           bf16 ? W16.data() : nullptr);
    gemv_rows(x.data(), M, K, bf16 ? nullptr : W.data(), bf16 ? W16.data() : nullptr, b.data(), N, via_gemv.data());
    if (gemm_backend() == GemmBackend::kQkv) {
      EXPECT_EQ(via_linear, via_gemv) << "bf16 " << bf16;
    }
    const Expected e = reference(x, M, K, W, b.data(), N, bf16);
    for (size_t i = 0; i < via_linear.size(); ++i) ASSERT_LE(std::fabs(via_linear[i] - e.y[i]), e.bound[i]);
  }
}

TEST(Gemv, BadArgumentsAreErrors) {
  std::vector<float> x(200, 1.0f), W(90, 1.0f), y(200);
  std::vector<uint16_t> W16(90);
  EXPECT_THROW(gemv_rows(x.data(), 0, 10, W.data(), nullptr, nullptr, 9, y.data()), Error);
  EXPECT_THROW(gemv_rows(x.data(), kGemvMaxRows + 1, 10, W.data(), nullptr, nullptr, 9, y.data()), Error);
  EXPECT_THROW(gemv_rows(x.data(), 1, 10, W.data(), W16.data(), nullptr, 9, y.data()), Error);
  EXPECT_THROW(gemv_rows(x.data(), 1, 10, nullptr, nullptr, nullptr, 9, y.data()), Error);
  try {
    gemv_rows(x.data(), 17, 10, W.data(), nullptr, nullptr, 9, y.data());
    ADD_FAILURE() << "M = 17 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("M must be in [1, 16]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
