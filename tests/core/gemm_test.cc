// The projections' matrix product: sgemm (qkv's packed product on every SIMD target, and OpenBLAS;
// split over the pool) against its naive reference, every transpose combination, odd sizes,
// leading dimensions wider than the matrices, alpha/beta.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "core/gemm_packed.h"
#include "qkv/core/gemm.h"
#include "qkv/kernels/simd.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::normal_vector;

// How the operands reach the product: float32, float32 multiplied in bf16 (rounded as packed), or
// bf16 bits (A16, B16).
enum class Operands { kF32, kF32InBF16, kBF16 };

// How many of `got` are farther from the reference's `want` than float32 sums of depth K allow.
int off_reference(const std::vector<float>& got, const std::vector<float>& want, int64_t K) {
  int off = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 * (1 + std::fabs(want[i])) * std::sqrt(static_cast<double>(K) + 1.0))) ++off;
  return off;
}

// Every shape below through sgemm as configured now; returns how many (shape, transpose, beta) it checked.
int check_every_shape(const std::string& label, Operands operands = Operands::kF32) {
  std::mt19937 rng(1);
  ThreadPool pool(2);
  int checked = 0;
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 1, 33}, {64, 64, 64}, {130, 70, 65}, {257, 96, 40}, {5, 300, 9},
                              {0, 4, 4}, {4, 0, 4}, {4, 4, 0},
                              // one row (a decoding step): the matrix-vector path, op(A)'s row strided when transposed
                              {1, 300, 64}, {1, 7, 130}, {1, 1, 5},
                              // weight-gradient shapes: split into the two halves of K
                              {40, 33, 2500}, {33, 40, 4099},
                              // several K blocks, row blocks and column panels, with edges in each
                              {300, 70, 450}, {29, 200, 1000}};
  for (auto [M, N, K] : sizes)
    for (int t = 0; t < 4; ++t)
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        GemmArgs g;
        g.trans_a = t & 1;
        g.trans_b = t & 2;
        g.M = M;
        g.N = N;
        g.K = K;
        g.alpha = beta == 0.5f ? -2.0f : 1.0f;
        g.beta = beta;
        g.lda = (g.trans_a ? M : K) + 3;
        g.ldb = (g.trans_b ? K : N) + 1;
        g.ldc = N + 2;
        const auto a = normal_vector(static_cast<size_t>((g.trans_a ? K : M) * g.lda + 1), rng);
        const auto b = normal_vector(static_cast<size_t>((g.trans_b ? N : K) * g.ldb + 1), rng);
        auto c = normal_vector(static_cast<size_t>(M * g.ldc + 1), rng);
        auto c_ref = c;
        if (beta == 0.0f && N > 0)
          for (int64_t m = 0; m < M; ++m) c[static_cast<size_t>(m * g.ldc)] = std::nanf("");  // never read
        g.A = a.data();
        g.B = b.data();
        std::vector<uint16_t> a16(a.size()), b16(b.size());
        if (operands != Operands::kF32) g.precision = Dtype::kBF16;
        if (operands == Operands::kBF16) {
          floats_to_bf16(a.data(), a16.data(), a.size());
          floats_to_bf16(b.data(), b16.data(), b.size());
          g.A = nullptr;
          g.B = nullptr;
          g.A16 = a16.data();
          g.B16 = b16.data();
        }
        // a bias on every other case (the epilogue of qkv's product; added first elsewhere)
        const auto bias = normal_vector(static_cast<size_t>(N + 1), rng);
        if ((t + (beta == 0.5f)) % 2 == 1) g.bias = bias.data();
        g.C = c.data();
        sgemm(g, &pool);
        g.C = c_ref.data();
        sgemm_reference(g);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < g.ldc; ++n) {
            const float got = c[static_cast<size_t>(m * g.ldc + n)], want = c_ref[static_cast<size_t>(m * g.ldc + n)];
            if (n >= N) {
              EXPECT_EQ(got, want) << "padding column " << n << " was touched";
            } else {
              EXPECT_NEAR(got, want, 1e-5 * (1 + std::fabs(want)) * std::sqrt(static_cast<double>(K + 1)))
                  << label << ": " << M << "x" << N << "x" << K << " t" << t << " beta " << beta << " at " << m << ", " << n;
            }
          }
        ++checked;
      }
  return checked;
}

TEST(Gemm, MatchesTheReferenceForEveryShapeAndTranspose) {
  const GemmBackend before = gemm_backend();
  set_gemm_backend(GemmBackend::kQkv);
  for (int64_t target : kernels::available_simd_targets()) {
    kernels::force_simd_target(target);
    EXPECT_EQ(check_every_shape("qkv " + kernels::simd_target_name(target)), 17 * 4 * 3);
  }
  kernels::force_simd_target(0);
  EXPECT_GE(kernels::available_simd_targets().size(), 2u) << "the portable target and at least one other";
  if (!blas_core().empty()) {  // a build with OpenBLAS
    set_gemm_backend(GemmBackend::kOpenBlas);
    EXPECT_EQ(check_every_shape("openblas"), 17 * 4 * 3);
  }
  set_gemm_backend(before);
}

// bf16 precision: the operands rounded to bf16 (or given as bf16), products accumulated in
// float32, against the reference on the same rounded operands (products of two bf16 values are
// exact in float32, so the tolerance is the float32 one). Every SIMD target widened, and the dot
// product where a target uses it (allowing it elsewhere changes no instruction: asserted, not
// rerun); with OpenBLAS selected, bf16 still runs qkv's own product.
TEST(Gemm, Bf16PrecisionMatchesTheReferenceOnRoundedOperands) {
  const GemmBackend before = gemm_backend();
  set_gemm_backend(GemmBackend::kQkv);
  for (int64_t target : kernels::available_simd_targets()) {
    kernels::force_simd_target(target);
    for (bool dot : {false, true}) {
      const bool was = set_bf16_dot_allowed(dot);
      const bool uses_dot = dot && cpu_has_bf16_dot() && kernels::simd_target() == "AVX3";
      EXPECT_EQ(gemm_bf16_dot(), uses_dot) << gemm_bf16_description();
      if (!dot || uses_dot) {
        const std::string label = "qkv " + kernels::simd_target_name(target) + (dot ? " dot" : " widened");
        EXPECT_EQ(check_every_shape(label + " f32 rounded", Operands::kF32InBF16), 17 * 4 * 3);
        EXPECT_EQ(check_every_shape(label + " bf16", Operands::kBF16), 17 * 4 * 3);
      }
      set_bf16_dot_allowed(was);
    }
  }
  kernels::force_simd_target(0);
  if (!blas_core().empty()) {
    set_gemm_backend(GemmBackend::kOpenBlas);
    EXPECT_EQ(check_every_shape("openblas bf16", Operands::kBF16), 17 * 4 * 3);
  }
  set_gemm_backend(before);
}

TEST(Gemm, Bf16OperandsNeedBf16Precision) {
  const std::vector<float> c(4);
  const std::vector<uint16_t> a16(4, 0x3f80), b16(4, 0x3f80);  // bf16 ones
  std::vector<float> out(4);
  GemmArgs g = gemm_args(false, false, 2, 2, 2, nullptr, 2, nullptr, 2, out.data(), 2);
  g.A16 = a16.data();
  g.B16 = b16.data();
  try {
    sgemm(g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sgemm: a bf16 operand (A16 or B16) needs precision kBF16");
  }
  g.precision = Dtype::kBF16;
  sgemm(g);
  EXPECT_EQ(out, std::vector<float>(4, 2.0f));
}

TEST(Gemm, BackendsAreNamedAndAnUnknownNameIsRefused) {
  EXPECT_EQ(parse_gemm_backend("qkv"), GemmBackend::kQkv);
  EXPECT_EQ(parse_gemm_backend("openblas"), GemmBackend::kOpenBlas);
  EXPECT_STREQ(gemm_backend_name(GemmBackend::kOpenBlas), "openblas");
  try {
    parse_gemm_backend("mkl");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown matrix product 'mkl': expected qkv or openblas");
  }
  const GemmBackend before = gemm_backend();
  set_gemm_backend(GemmBackend::kQkv);
  EXPECT_NE(gemm_description().find("qkv packed GEMM"), std::string::npos) << gemm_description();
  EXPECT_EQ(gemm_vector_bits(), kernels::simd_vector_bits());
  if (!blas_core().empty()) {
    set_gemm_backend(GemmBackend::kOpenBlas);
    EXPECT_NE(gemm_description().find("OpenBLAS"), std::string::npos) << gemm_description();
  }
  set_gemm_backend(before);
}

TEST(Gemm, LargeProductsSplitOverThePoolGiveTheSameResult) {
  std::mt19937 rng(2);
  const int64_t M = 300, N = 200, K = 150;
  const auto a = normal_vector(static_cast<size_t>(M * K), rng), b = normal_vector(static_cast<size_t>(N * K), rng);
  std::vector<float> c1(static_cast<size_t>(M * N)), c3(c1.size());
  GemmArgs g = gemm_args(false, true, M, N, K, a.data(), K, b.data(), K, nullptr, N);
  ThreadPool one(1), three(3);
  g.C = c1.data();
  sgemm(g, &one);
  g.C = c3.data();
  sgemm(g, &three);
  EXPECT_EQ(c1, c3);
  // A weight gradient's shape (dW = dy^T x, K = rows of the batch), split along K.
  const int64_t R = 4100, O = 48, I = 40;
  const auto dy = normal_vector(static_cast<size_t>(R * O), rng), x = normal_vector(static_cast<size_t>(R * I), rng);
  std::vector<float> w1(static_cast<size_t>(O * I)), w3(w1.size());
  GemmArgs d = gemm_args(true, false, O, I, R, dy.data(), O, x.data(), I, w1.data(), I);
  sgemm(d, &one);
  d.C = w3.data();
  sgemm(d, &three);
  EXPECT_EQ(w1, w3);
}

// The packed product packs the next K block's B~ while the current block's tasks run, into a second
// buffer: a product of many K blocks (not split along K: N is wide) whose tasks do not share out
// evenly (one row block, 8 chunks of columns over 3 threads: a thread that ran two turns to packing
// while another runs its third), on every target, many times, equals the reference. With one
// buffer for both blocks this fails, by a few hundred to a few thousand sums per target.
TEST(Gemm, PackingTheNextKBlockLeavesTheCurrentOneAlone) {
  const GemmBackend before = gemm_backend();
  set_gemm_backend(GemmBackend::kQkv);
  std::mt19937 rng(5);
  const int64_t M = 4, N = 3000, K = 2900;
  const auto a = normal_vector(static_cast<size_t>(M * K), rng), b = normal_vector(static_cast<size_t>(K * N), rng);
  std::vector<float> want(static_cast<size_t>(M * N)), got(want.size());
  sgemm_reference(gemm_args(false, false, M, N, K, a.data(), K, b.data(), N, want.data(), N));
  ThreadPool pool(3);
  for (int64_t target : kernels::available_simd_targets()) {
    kernels::force_simd_target(target);
    int mismatches = 0;
    for (int rep = 0; rep < 10; ++rep) {
      std::fill(got.begin(), got.end(), std::nanf(""));
      sgemm(gemm_args(false, false, M, N, K, a.data(), K, b.data(), N, got.data(), N), &pool);
      mismatches += off_reference(got, want, K);
    }
    EXPECT_EQ(mismatches, 0) << kernels::simd_target_name(target);
  }
  kernels::force_simd_target(0);
  set_gemm_backend(before);
}

// Two weight-gradient products (split along K, each with its own scratch, under OpenBLAS and under
// qkv's product on a 512-bit target; whole, with each thread's packing buffers, elsewhere) at once
// from two threads, on their own pools and on one shared pool, many times over, under each backend:
// each matches the reference.
TEST(Gemm, ConcurrentKSplitProductsDoNotShareScratch) {
  const GemmBackend before = gemm_backend();
  std::vector<GemmBackend> backends = {GemmBackend::kQkv};
  if (!blas_core().empty()) backends.push_back(GemmBackend::kOpenBlas);
  struct Product {
    int64_t O, I, R;
    std::vector<float> dy, x, want;
  };
  std::mt19937 rng(4);
  std::vector<Product> products = {{48, 40, 4100, {}, {}, {}}, {33, 56, 3000, {}, {}, {}}};
  for (Product& p : products) {
    p.dy = normal_vector(static_cast<size_t>(p.R * p.O), rng);
    p.x = normal_vector(static_cast<size_t>(p.R * p.I), rng);
    p.want.resize(static_cast<size_t>(p.O * p.I));
    sgemm_reference(gemm_args(true, false, p.O, p.I, p.R, p.dy.data(), p.O, p.x.data(), p.I, p.want.data(), p.I));
  }
  ThreadPool shared(2), own0(2), own1(2);
  for (GemmBackend backend : backends)
  for (bool share : {false, true}) {
    set_gemm_backend(backend);
    std::atomic<int> mismatches[2] = {0, 0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        const Product& p = products[static_cast<size_t>(t)];
        ThreadPool* pool = share ? &shared : t == 0 ? &own0 : &own1;
        std::vector<float> got(p.want.size());
        for (int rep = 0; rep < 30; ++rep) {
          std::fill(got.begin(), got.end(), std::nanf(""));
          sgemm(gemm_args(true, false, p.O, p.I, p.R, p.dy.data(), p.O, p.x.data(), p.I, got.data(), p.I), pool);
          mismatches[t].fetch_add(off_reference(got, p.want, p.R));
        }
      });
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(mismatches[0].load(), 0) << "product 0, " << (share ? "shared pool" : "own pools");
    EXPECT_EQ(mismatches[1].load(), 0) << "product 1, " << (share ? "shared pool" : "own pools");
  }
  set_gemm_backend(before);
}

// The tile benchmark's hook (qkv_bench BM_GemmTile) times the product's own tile on every target
// and refuses a tile no target builds, before any timing.
TEST(Gemm, TileBenchmarkTimesTheProductsTileAndRefusesOthers) {
  for (int64_t target : kernels::available_simd_targets()) {
    kernels::force_simd_target(target);
    const PackedGemmShape shape = packed_gemm_shape();
    const int nv = shape.nr / (shape.vector_bits / 32);
    EXPECT_GT(packed_tile_seconds(shape.mr, nv, 64, 2, 3, 3), 0.0) << shape.target << " " << shape.mr << "x" << nv;
    EXPECT_EQ(packed_tile_seconds(5, 7, 64, 2, 3, 3), -1.0) << shape.target;
  }
  kernels::force_simd_target(0);
}

TEST(Gemm, TensorOpsEntryMatchesTheReference) {
  std::mt19937 rng(3);
  const auto a = normal_vector(6 * 4, rng), b = normal_vector(4 * 5, rng);
  std::vector<float> c(30), c_ref(30);
  gemm(false, false, 6, 5, 4, a.data(), 4, b.data(), 5, c.data(), 5);
  gemm_reference(false, false, 6, 5, 4, a.data(), 4, b.data(), 5, c_ref.data(), 5);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], c_ref[i], 1e-5);
}

TEST(Gemm, BiasHelpers) {
  ThreadPool pool(2);
  const std::vector<float> bias = {1, 2, 3};
  std::vector<float> y(1000 * 4, -1.0f);
  GemmArgs fill = gemm_args(false, false, 1000, 3, 0, nullptr, 1, nullptr, 3, y.data(), 4);  // K = 0: C = bias
  fill.bias = bias.data();
  sgemm(fill, &pool);
  for (int m = 0; m < 1000; ++m) {
    EXPECT_EQ(y[static_cast<size_t>(m * 4 + 2)], 3.0f);
    EXPECT_EQ(y[static_cast<size_t>(m * 4 + 3)], -1.0f);
  }
  std::vector<float> sums(3);
  sum_rows(y.data(), 1000, 3, 4, sums.data(), &pool);
  EXPECT_EQ(sums, (std::vector<float>{1000, 2000, 3000}));
  // 1 and then 4096 rows of 2^-24: a float accumulator stays at 1 (1 + 2^-24 rounds to 1 each time);
  // the sum is 1 + 2^-12, which a float holds.
  std::vector<float> column(4097, 0x1p-24f);
  column[0] = 1.0f;
  float total = 0.0f;
  sum_rows(column.data(), 4097, 1, 1, &total, &pool);
  EXPECT_EQ(total, 1.0f + 0x1p-12f);
}

TEST(Gemm, BadLeadingDimensionsSayWhatIsWrong) {
  GemmArgs g;
  g.M = 2;
  g.N = 3;
  g.K = 4;
  g.lda = 3;
  g.ldb = 3;
  g.ldc = 3;
  try {
    sgemm_reference(g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sgemm: lda (3) < the columns of A (4)");
  }
}

}  // namespace
}  // namespace qkv
