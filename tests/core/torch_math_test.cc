// torch_exp and torch_softmax (core/torch_math.h). torch_softmax against the rule its header states,
// written here element by element (tests/pytorch/test_torch_softmax.py checks the same rule against
// torch.softmax): rows of every length to 40 and the vocabularies' lengths, spreads from flat to
// saturated, -inf entries; the same bits. The order of the sum is what makes them PyTorch's: the
// same row summed in plain order differs, and the test checks that it does somewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qkv/core/torch_math.h"

namespace qkv {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float exp_of(float x) {
  float y = 0.0f;
  torch_exp(&x, &y, 1);
  return y;
}

// The header's rule, one element at a time: (sequential = true) the sum in plain order instead.
std::vector<float> rule(const std::vector<float>& x, bool sequential = false) {
  const size_t n = x.size();
  float m = -kInf;
  for (float v : x) m = v > m ? v : m;
  std::vector<float> e(n);
  for (size_t i = 0; i < n; ++i) e[i] = exp_of(x[i] - m);
  float s = 0.0f;
  if (n < 8 || sequential) {
    s = e[0];
    for (size_t i = 1; i < n; ++i) s += e[i];
  } else {
    float lane[8];
    for (size_t l = 0; l < 8; ++l) lane[l] = e[l];
    const size_t whole = n / 8 * 8;
    for (size_t i = 8; i < whole; ++i) lane[i % 8] += e[i];
    for (size_t i = whole; i < n; ++i) lane[i - whole] += e[i];
    s = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  }
  const float inv = 1.0f / s;
  for (float& v : e) v *= inv;
  return e;
}

TEST(TorchSoftmax, FollowsPyTorchsOrderToTheBit) {
  std::mt19937 rng(11);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  for (int64_t n : {1000, 50257, 128256, 151936, 151937}) lengths.push_back(n);
  int cases = 0, order_matters = 0;
  for (int64_t n : lengths) {
    for (float spread : {0.0f, 0.5f, 4.0f, 30.0f, 200.0f}) {
      std::uniform_real_distribution<float> u(-spread, spread);
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = u(rng);
      if (n > 3) x[static_cast<size_t>(n / 3)] = -kInf;  // a token never drawn: weight 0
      std::vector<float> got = x;
      torch_softmax(got.data(), n);
      const std::vector<float> want = rule(x);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "n " << n << " spread " << spread;
      if (n > 3) {
        EXPECT_EQ(got[static_cast<size_t>(n / 3)], 0.0f);
      }
      order_matters += rule(x, true) != want;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 45 * 5);
  EXPECT_GT(order_matters, 10) << "the cases tell PyTorch's order from a plain one";
}

TEST(TorchSoftmax, ANaNOrAnInfiniteLargestValueMakesTheRowNaN) {
  const float nan = std::nanf("");
  for (const std::vector<float>& x : {std::vector<float>{1.0f, nan, 2.0f}, std::vector<float>{-kInf, -kInf},
                                      std::vector<float>{0.0f, kInf, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f}}) {
    std::vector<float> y = x;
    torch_softmax(y.data(), static_cast<int64_t>(y.size()));
    for (float v : y) {
      EXPECT_TRUE(std::isnan(v));
    }
  }
}

// An exp: 1 at 0, 0 at -inf, and within 1 ulp of the double exponential over the range sampling
// meets (a SLEEF u10 function; not correctly rounded).
TEST(TorchExp, IsTheExponentialWithinAnUlp) {
  EXPECT_EQ(exp_of(0.0f), 1.0f);
  EXPECT_EQ(exp_of(-kInf), 0.0f);
  std::vector<float> x, y;
  for (float v = -100.0f; v <= 80.0f; v += 0.00731f) x.push_back(v);
  y.resize(x.size());
  torch_exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double ulp = std::nextafter(static_cast<float>(want), kInf) - static_cast<float>(want);
    ASSERT_LE(std::fabs(y[i] - want), ulp) << "exp(" << x[i] << ")";
  }
}

}  // namespace
}  // namespace qkv
