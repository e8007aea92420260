// The element-by-element passes (qkv/core/pointwise.h) against their naive references: GELU and its
// gradient in float32 SIMD within a few ulps of the double formula, over the range a model's
// activations take and past it (tanh saturating, the cancellation in 1 + t for negative x, signed
// zeros, infinities, NaN); AdamW bit for bit; the same bits on one thread or three; every length's
// vector tail; the scan of a step's logits equal to the plain loop's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qkv/core/pointwise.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/simd.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::normal_vector;

// Inputs: a dense sweep of [-12, 12] (tanh saturates near |u| = 9), normal draws at three scales,
// and the edges.
std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (int i = -120000; i <= 120000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);
  std::mt19937 rng(7);
  for (float scale : {0.01f, 1.0f, 30.0f})
    for (float v : normal_vector(20001, rng)) x.push_back(v * scale);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 1e6f, -1e6f, 3e38f, -3e38f}) x.push_back(v);
  return x;
}

// |z| = |2 sqrt(2 / pi) (x + 0.044715 x^3)|, in double.
double z_of(double x) { return std::fabs(2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)); }

// The fast pass computes x / (1 + e^-z), z = 2u, a few float32 ulps of its own size times (1 + |z|):
// z itself is rounded to float32, and e^z turns z's absolute error (an ulp of |z|) into a relative
// one (2^-20 is 16 ulps). The double reference computes 0.5 x (1 + tanh(u)), whose 1 + tanh(u) cancels to
// within a double ulp of 1: the 2^-40 |x| term is that reference's own reach (it gives 0 where the
// value is below 1e-17 |x|, e.g. at x = -10, where the fast pass gives -1.6e-37).
TEST(Pointwise, GeluWithinUlpsOfTheDoubleFormula) {
  const std::vector<float> x = gelu_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> fast(x.size()), ref(x.size());
  gelu_tanh(x.data(), fast.data(), n);
  gelu_tanh_reference(x.data(), ref.data(), n);
  int64_t beyond = 0;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double bound = 0x1p-20 * std::fabs(ref[i]) * (1.0 + z_of(x[i])) + 0x1p-40 * std::fabs(x[i]) + 1e-37;
    const double err = std::fabs(static_cast<double>(fast[i]) - ref[i]);
    worst = std::max(worst, err / bound);
    if (!(err <= bound)) {
      if (++beyond <= 5) ADD_FAILURE() << "gelu(" << x[i] << ") = " << fast[i] << ", reference " << ref[i];
    }
  }
  EXPECT_EQ(beyond, 0) << "worst error " << worst << " of the bound";
  // The function's landmarks, exactly: gelu(0) = 0 with its sign, gelu(x) = x far right, 0 far left.
  float edges[] = {0.0f, -0.0f, 50.0f, -50.0f};
  float out[4];
  gelu_tanh(edges, out, 4);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[2], 50.0f);
  EXPECT_EQ(std::fabs(out[3]), 0.0f);
}

TEST(Pointwise, GeluGradientWithinUlpsOfTheDoubleFormula) {
  const std::vector<float> x = gelu_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::mt19937 rng(8);
  std::vector<float> dy = normal_vector(x.size(), rng);
  std::vector<float> fast(x.size()), ref(x.size());
  gelu_tanh_backward(x.data(), dy.data(), fast.data(), n);
  gelu_tanh_backward_reference(x.data(), dy.data(), ref.data(), n);
  int64_t beyond = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    // The slope is the sum of 0.5 (1 + t) and 0.5 x (1 - t^2) k (1 + 3 c x^2), which cancel near
    // x = -0.75 (where the slope is zero): the bound is 16 ulps of the terms' sizes, plus the double
    // reference's own reach (1 + t and 1 - t^2 to a double ulp, times the terms' coefficients), the
// terms scaled by 1 + |z| as gelu's value is.
    const double v = x[i];
    const double t = std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
    const double terms = std::fabs(0.5 * (1.0 + t)) +
                         std::fabs(0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * v * v));
    const double reach = 0x1p-40 * (1.0 + std::fabs(v) * (1.0 + 0.14 * v * v));
    const double bound = std::fabs(dy[i]) * (0x1p-20 * terms * (1.0 + z_of(v)) + reach) + 1e-37;
    const double err = std::fabs(static_cast<double>(fast[i]) - ref[i]);
    if (!(err <= bound) && !(std::isnan(ref[i]) && std::isnan(fast[i]))) {
      if (++beyond <= 5)
        ADD_FAILURE() << "gelu'(" << x[i] << ") dy " << dy[i] << " = " << fast[i] << ", reference " << ref[i];
    }
  }
  EXPECT_EQ(beyond, 0);
}

// NaN in gives NaN out, in both directions (a diverged activation is not hidden).
TEST(Pointwise, GeluKeepsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float x[3] = {nan, 1.0f, nan}, y[3], d[3] = {1.0f, nan, 1.0f}, dx[3];
  gelu_tanh(x, y, 3);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[2]));
  EXPECT_FALSE(std::isnan(y[1]));
  gelu_tanh_backward(x, d, dx, 3);
  EXPECT_TRUE(std::isnan(dx[0]) && std::isnan(dx[1]) && std::isnan(dx[2]));
}

// Every length up to a few vectors (the tail), in place (y = x), and lengths over several chunks.
TEST(Pointwise, GeluTailsInPlaceAndChunksAgree) {
  std::mt19937 rng(9);
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 16384, 16385, 50001}) {
    const std::vector<float> x = normal_vector(static_cast<size_t>(n), rng);
    std::vector<float> y(x.size()), inplace = x, dx(x.size()), ref(x.size());
    gelu_tanh(x.data(), y.data(), n);
    gelu_tanh(inplace.data(), inplace.data(), n);
    EXPECT_EQ(std::memcmp(y.data(), inplace.data(), y.size() * sizeof(float)), 0) << n;
    gelu_tanh_reference(x.data(), ref.data(), n);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(y[i], ref[i], 0x1p-20 * std::fabs(ref[i]) * (1.0 + z_of(x[i])) + 0x1p-40 * std::fabs(x[i]) + 1e-37)
          << "n " << n << " i " << i;
    std::vector<float> g = normal_vector(x.size(), rng), dref(x.size());
    gelu_tanh_backward(x.data(), g.data(), dx.data(), n);
    gelu_tanh_backward_reference(x.data(), g.data(), dref.data(), n);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(dx[i], dref[i], 0x1p-19 * std::fabs(g[i])) << "n " << n << " i " << i;  // |terms| < 2 for normal x
  }
}

TEST(Pointwise, SameBitsOnOneThreadOrThree) {
  std::mt19937 rng(10);
  const int64_t n = 100003;
  const std::vector<float> x = normal_vector(static_cast<size_t>(n), rng), g = normal_vector(static_cast<size_t>(n), rng);
  ThreadPool one(1), three(3);
  std::vector<float> y1(x.size()), y3(x.size()), d1(x.size()), d3(x.size());
  gelu_tanh(x.data(), y1.data(), n, &one);
  gelu_tanh(x.data(), y3.data(), n, &three);
  gelu_tanh_backward(x.data(), g.data(), d1.data(), n, &one);
  gelu_tanh_backward(x.data(), g.data(), d3.data(), n, &three);
  EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(d1.data(), d3.data(), d1.size() * sizeof(float)), 0);
}

// AdamW: the vector pass runs the reference's float32 operations in the reference's order, so the
// three tensors it writes are the reference's bit for bit, over several steps (the state carries),
// for lengths with and without a tail, on one thread or three.
// SwiGLU's gate silu(g) u and its gradient against the double references, over a sweep of g
// past exp's range on both sides (sigmoid saturating to 0 and 1) and normal draws of u and dh, at
// lengths with every vector tail: relative 2^-19 of the larger of the value and |g u| (resp.
// |dh u|, |dh g|) scales, a few float32 ulps of the terms the formula multiplies.
TEST(Pointwise, SwigluAndItsGradientWithinUlpsOfTheDoubleFormula) {
  std::vector<float> g;
  for (int i = -20000; i <= 20000; ++i) g.push_back(static_cast<float>(i) * 5e-3f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 200.0f, -200.0f}) g.push_back(v);
  std::mt19937 rng(11);
  const std::vector<float> u = normal_vector(g.size(), rng), dh = normal_vector(g.size(), rng);
  for (int64_t n : {static_cast<int64_t>(g.size()), int64_t{1}, int64_t{17}, int64_t{40003}}) {
    std::vector<float> h(n), hr(n), dg(n), du(n), dgr(n), dur(n);
    swiglu(g.data(), u.data(), h.data(), n);
    swiglu_reference(g.data(), u.data(), hr.data(), n);
    swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
    swiglu_backward_reference(g.data(), u.data(), dh.data(), dgr.data(), dur.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double scale = std::fabs(double(g[i]) * u[i]) + 1e-37;
      ASSERT_LE(std::fabs(h[i] - double(hr[i])), 0x1p-19 * scale) << "swiglu at g " << g[i] << " u " << u[i];
      const double dscale = std::fabs(double(dh[i]) * u[i]) * (1.0 + std::fabs(g[i])) + 1e-37;
      ASSERT_LE(std::fabs(dg[i] - double(dgr[i])), 0x1p-19 * dscale) << "dgate at g " << g[i];
      ASSERT_LE(std::fabs(du[i] - double(dur[i])), 0x1p-19 * std::fabs(double(dh[i]) * g[i]) + 1e-37)
          << "dup at g " << g[i];
    }
  }
  // silu(-200) underflows to -0 times u, silu(200) is 200 u: no NaN from e^200
  const float big[2] = {200.0f, -200.0f}, one[2] = {1.0f, 1.0f};
  float out[2];
  swiglu(big, one, out, 2);
  EXPECT_EQ(out[0], 200.0f);
  EXPECT_EQ(out[1], 0.0f);
}

// SiLU alone (Qwen3.5's linear layers): the same sweep, within 2^-19 of |x| (a few float32 ulps of
// the value for x > 0, where silu(x) ~ x; below, silu(x) is x s with s small, held to the same
// scale), in place too; the saturated ends exact; on every SIMD target this CPU runs.
TEST(Pointwise, SiluWithinUlpsOfTheDoubleFormula) {
  std::vector<float> x;
  for (int i = -20000; i <= 20000; ++i) x.push_back(static_cast<float>(i) * 5e-3f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 200.0f, -200.0f}) x.push_back(v);
  for (int64_t target : kernels::available_simd_targets()) {
    SCOPED_TRACE(kernels::simd_target_name(target));
    kernels::force_simd_target(target);
    for (int64_t n : {static_cast<int64_t>(x.size()), int64_t{1}, int64_t{17}, int64_t{40003}}) {
      std::vector<float> y(n), yr(n), inplace(x.begin(), x.begin() + n);
      silu(x.data(), y.data(), n);
      silu_reference(x.data(), yr.data(), n);
      silu(inplace.data(), inplace.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(y[i] - double(yr[i])), 0x1p-19 * (std::fabs(double(x[i])) + 1e-37)) << "silu at " << x[i];
        ASSERT_EQ(inplace[i], y[i]) << i;
      }
    }
    const float ends[2] = {200.0f, -200.0f};
    float out[2];
    silu(ends, out, 2);
    EXPECT_EQ(out[0], 200.0f);
    EXPECT_EQ(out[1], 0.0f);
  }
  kernels::force_simd_target(0);
}

// The scan of a step's logits (NaN / +inf, above -inf, the first largest) against the plain loop on
// every SIMD target: lengths around every vector width and the tails, the largest placed anywhere,
// tied at a later index in every lane (and as -0 beside +0), rows of -inf, a NaN or +inf anywhere.
TEST(Pointwise, TheLogitsScanIsThePlainLoopsOnEveryTarget) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> level(0, 7);
  int64_t cases = 0, bad = 0, tied = 0;
  for (int64_t target : kernels::available_simd_targets()) {
    SCOPED_TRACE(kernels::simd_target_name(target));
    kernels::force_simd_target(target);
    for (int64_t n : {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 1001}) {
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<float> z(static_cast<size_t>(n));
        // few distinct values: ties between lanes and within them are common
        for (float& x : z) x = static_cast<float>(level(rng)) * 0.25f - 1.0f;
        const int64_t at = static_cast<int64_t>(rng() % n);
        switch (trial % 8) {
          case 1: z[at] = 5.0f; if (at + 16 < n) z[at + 16] = 5.0f; if (at + 5 < n) z[at + 5] = 5.0f; break;
          case 2: for (float& x : z) x = -inf; break;
          case 3: for (float& x : z) x = -inf; z[at] = -3.0f; break;
          case 4: z[at] = nan; break;
          case 5: z[at] = inf; break;
          case 6: z[at] = 0.0f; for (float& x : z) x = x > 0.0f ? -x : x; if (at + 1 < n) z[at + 1] = -0.0f; break;
          case 7: z[at] = -0.0f; for (float& x : z) x = x > 0.0f ? -x : x; if (at + 7 < n) z[at + 7] = 0.0f; break;
          default: break;
        }
        const LogitsScan fast = scan_logits(z.data(), n), plain = scan_logits_reference(z.data(), n);
        ASSERT_EQ(fast.bad, plain.bad) << "n " << n << " trial " << trial;
        ASSERT_EQ(fast.any_finite, plain.any_finite) << "n " << n << " trial " << trial;
        if (!plain.bad) {
          ASSERT_EQ(fast.argmax, plain.argmax) << "n " << n << " trial " << trial;
        }
        ++cases;
        bad += plain.bad;
        int64_t equal = 0;
        for (float x : z) equal += x == z[plain.argmax];
        tied += equal > 1;
      }
    }
  }
  kernels::force_simd_target(0);
  // the cases are what they say: refusals and ties among them, most with a choice to make
  EXPECT_GT(bad, cases / 8);
  EXPECT_GT(tied, cases / 2);
  // the reference itself, by hand
  const std::vector<float> z = {-inf, 2.0f, 1.0f, 2.0f, nan};
  const LogitsScan r = scan_logits_reference(z.data(), 4);
  EXPECT_FALSE(r.bad);
  EXPECT_TRUE(r.any_finite);
  EXPECT_EQ(r.argmax, 1);
  EXPECT_TRUE(scan_logits_reference(z.data(), 5).bad);
  EXPECT_THAT(testing_support::error_of([&] { scan_logits(z.data(), 0); }), testing::HasSubstr("n (0) must be in [1, 2^31 - 1]"));
}

TEST(Pointwise, AdamWEqualsTheReferenceBitForBit) {
  std::mt19937 rng(11);
  ThreadPool one(1), three(3);
  for (int64_t n : {1, 5, 8, 13, 16384, 40001}) {
    const size_t sz = static_cast<size_t>(n);
    std::vector<float> w = normal_vector(sz, rng), m(sz, 0.0f), v(sz, 0.0f);
    const std::vector<float> w0 = w;
    std::vector<float> w1 = w, m1 = m, v1 = v, w3 = w, m3 = m, v3 = v;
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g = normal_vector(sz, rng);
      if (step == 2) g[0] = 0.0f;  // a zero gradient: m and v decay, w still moves by m / denom
      AdamWScalars s;
      const double lr = 4e-4, wd = 0.1;
      s.neg_step_size = static_cast<float>(-(lr / (1.0 - std::pow(0.9, step))));
      s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(0.999, step)));
      s.decay = static_cast<float>(1.0 - lr * wd);
      adamw_update_reference(w.data(), g.data(), m.data(), v.data(), n, s);
      adamw_update(w1.data(), g.data(), m1.data(), v1.data(), n, s, &one);
      adamw_update(w3.data(), g.data(), m3.data(), v3.data(), n, s, &three);
      for (const auto* got : {&w1, &w3}) ASSERT_EQ(std::memcmp(got->data(), w.data(), sz * 4), 0) << n << " step " << step;
      for (const auto* got : {&m1, &m3}) ASSERT_EQ(std::memcmp(got->data(), m.data(), sz * 4), 0) << n << " step " << step;
      for (const auto* got : {&v1, &v3}) ASSERT_EQ(std::memcmp(got->data(), v.data(), sz * 4), 0) << n << " step " << step;
      // The first step moves every weight by about lr (so equal bits mean the pass wrote them).
      if (step == 1) {
        for (size_t i = 0; i < sz; ++i) ASSERT_NE(w[i], w0[i]) << n << " i " << i;
      }
    }
  }
}

}  // namespace
}  // namespace qkv
