// nn.Linear in bf16 mode (Linear::dtype = kBF16): each product takes its operands rounded to bf16
// (to nearest even) and sums in float32; the bias and its gradient stay float32. Checked against
// the same roundings done here and summed in double, and against the float32 product (the rounding
// must be there). A GPT model in bf16 mode runs its feed-forward and head this way
// (tests/models/gpt_bf16_weights_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/modules/layers.h"

namespace qkv {
namespace {

float r(float x) { return bf16_to_float(float_to_bf16(x)); }

// |a - b| / |b| over all elements (norm-wise).
double relative(const Tensor& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a.data()[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

Tensor random_bf16_case_tensor(Shape shape, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  gen.uniform(t.data(), t.numel(), -1.0, 1.0);
  return t;
}

TEST(LinearBf16, ForwardAndBackwardAreTheRoundedOperandsProducts) {
  const int64_t M = 37, K = 70, N = 29;  // odd sizes: the tiles' edges
  Generator gen(3);
  Linear f32(K, N, true, gen);
  Linear b16 = f32;  // the same weights; gradients of its own (a copy shares the tensors' storage)
  b16.dtype = Dtype::kBF16;
  b16.dweight = Tensor::zeros(f32.weight.shape());
  b16.dbias = Tensor::zeros(f32.bias.shape());
  const Tensor x = random_bf16_case_tensor({M, K}, gen), dy = random_bf16_case_tensor({M, N}, gen);
  std::vector<double> y(M * N), dx(M * K), dw(N * K), db(N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = f32.bias.data()[n];
      for (int64_t k = 0; k < K; ++k) s += double(r(x.data()[m * K + k])) * r(f32.weight.data()[n * K + k]);
      y[m * N + n] = s;
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += double(r(dy.data()[m * N + n])) * r(f32.weight.data()[n * K + k]);
      dx[m * K + k] = s;
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t m = 0; m < M; ++m) s += double(r(dy.data()[m * N + n])) * r(x.data()[m * K + k]);
      dw[n * K + k] = s;
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) db[n] += dy.data()[m * N + n];  // the bias gradient: float32, unrounded

  const Tensor yb = b16.forward(x);
  const Tensor dxb = b16.backward(dy);
  // float32 sums of exact products (a bf16 x bf16 product fits float32): within 1e-6
  EXPECT_LT(relative(yb, y), 1e-6);
  EXPECT_LT(relative(dxb, dx), 1e-6);
  EXPECT_LT(relative(b16.dweight, dw), 1e-6);
  EXPECT_LT(relative(b16.dbias, db), 1e-6);
  // and the rounding is there: the float32 products are 2^-12 and more away (bf16 keeps 8 bits)
  const Tensor yf = f32.forward(x);
  const Tensor dxf = f32.backward(dy);
  EXPECT_GT(relative(yf, y), 1.0 / 4096);
  EXPECT_GT(relative(dxf, dx), 1.0 / 4096);
  EXPECT_GT(relative(f32.dweight, dw), 1.0 / 4096);
}

}  // namespace
}  // namespace qkv
