// nn.Linear in bf16 mode (Linear::dtype = kBF16): each product takes its operands rounded to bf16
// (to nearest even) and sums in float32; the bias and its gradient stay float32. Checked against
// the same roundings done here and summed in double, and against the float32 product (the rounding
// must be there). A GPT model in bf16 mode runs its feed-forward and head this way.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/models/gpt.h"
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

Tensor random_tensor(Shape shape, Generator& gen) {
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
  const Tensor x = random_tensor({M, K}, gen), dy = random_tensor({M, N}, gen);
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

TEST(LinearBf16, AGptModelInBf16ModeRunsItsFeedForwardAndHeadInIt) {
  GPTConfig c;
  c.vocab_size = 53;
  c.context_length = 16;
  c.emb_dim = 32;
  c.n_layers = 2;
  c.attention.heads = 4;
  c.attention.dropout = 0.0;
  c.attention.dtype = Dtype::kBF16;
  set_head_dim(c);
  Generator g1(8), g2(8);
  GPTModel all(c, g1), attention_only(c, g2);  // the same draws
  for (const GPTModel* m : {&all}) {
    EXPECT_EQ(m->out_head.dtype, Dtype::kBF16);
    for (const TransformerBlock& b : m->blocks) EXPECT_EQ(b.ff.fc.dtype, Dtype::kBF16);
  }
  for (TransformerBlock& b : attention_only.blocks) b.ff.fc.dtype = b.ff.proj.dtype = Dtype::kF32;
  attention_only.out_head.dtype = Dtype::kF32;
  all.eval();
  attention_only.eval();
  const std::vector<int64_t> ids = {1, 5, 9, 52, 0, 7, 7, 30};
  const Tensor a = all.forward(ids, 1, 8), b = attention_only.forward(ids, 1, 8);
  std::vector<double> bd(b.data(), b.data() + b.numel());
  const double d = relative(a, bd);
  EXPECT_GT(d, 1.0 / 4096) << "the feed-forward and head must round in bf16 mode";
  EXPECT_LT(d, 2e-2) << "within bf16's bound";
}

}  // namespace
}  // namespace qkv
