// Qwen3's QK-norm and Llama's bias-free, narrower o_proj through MultiHeadAttention: the textbook
// path normalises each head's queries and keys by RMS with the q_norm / k_norm weights before RoPE
// (checked against the formula written here), the fused path and cached decoding give the
// textbook's numbers (forward, every gradient including q_norm's and k_norm's), bf16 mode stays
// within bf16's rounding of f32, and a bad epsilon is refused naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/kernels/rope.h"
#include "qkv/modules/multi_head_attention.h"
#include "test_support.h"

namespace qkv {
namespace {

using kernels::RopeLayout;

double max_abs(const Tensor& t) { return max_abs_diff(t, Tensor::zeros(t.shape())); }

// Qwen3's shape in small: 4 query heads, 2 key/value heads, D 8 (H D = 32) on a width of 12 that
// o_proj maps back to (no bias), RoPE "half" with Llama 3's scaling, QK-norm eps 1e-6.
AttentionConfig qwen_like(AttentionPath path, bool qk_norm = true) {
  AttentionConfig c = attention_config("mha", 12, 32, 16, 0.0, 4, false);
  c.attention.kv_heads = 2;
  c.attention.rope = RopeLayout::kHalf;
  c.attention.rope_base = 1000.0;
  c.attention.rope_scaling = kernels::RopeScaling{8.0, 1.0, 4.0, 8};
  c.attention.qk_norm = qk_norm;
  c.out_dim = 12;
  c.out_bias = false;
  c.path = path;
  return c;
}

// Weights off their initial ones (q_norm, k_norm are ones when built): a weight taken for the other shows.
void perturb(MultiHeadAttention& m, uint64_t seed) {
  Generator g(seed);
  m.q_norm.weight.copy_from(add(mul(randn({8}, g), 0.5f), 1.0f));
  m.k_norm.weight.copy_from(add(mul(randn({8}, g), 0.5f), 1.0f));
}

TEST(QkNormMha, StateHasTheNormsAndAnOutProjWithoutBias) {
  Generator gen(1);
  MultiHeadAttention m(qwen_like(AttentionPath::kAuto), gen);
  std::vector<std::string> names;
  for (const StateEntry& e : m.state_dict()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mask", "W_query.weight", "W_key.weight", "W_value.weight",
                                             "out_proj.weight", "q_norm.weight", "k_norm.weight"}));
  EXPECT_EQ(m.out_proj.weight.shape(), (Shape{12, 32}));
  MultiHeadAttention plain(qwen_like(AttentionPath::kAuto, false), gen);
  EXPECT_EQ(plain.state_dict().size(), 5u);  // no norms without QK-norm
}

TEST(QkNormMha, TextbookQueriesAreNormalisedThenRotated) {
  const AttentionConfig c = qwen_like(AttentionPath::kTextbook);
  Generator gen(3), data(4);
  MultiHeadAttention m(c, gen);
  perturb(m, 9);
  const int64_t T = 10, H = 4, G = 2, D = 8;
  const Tensor x = randn({1, T, 12}, data);
  AttentionTrace trace;
  m.forward(x, &trace);
  const kernels::RopeTable table(T, D, 1000.0, 0, c.attention.rope_scaling);
  // rope(w * v / sqrt(mean(v^2) + eps)) for one head's row v, against the trace's
  auto worst_of = [&](const Tensor& projected, const Tensor& w, const Tensor& traced, int64_t heads) {
    double worst = 0;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* v = projected.data() + t * heads * D + h * D;
        double ms = 0;
        for (int64_t i = 0; i < D; ++i) ms += double(v[i]) * v[i];
        const double inv = 1.0 / std::sqrt(ms / D + 1e-6);
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = w.data()[i] * v[i] * inv, b = w.data()[i + D / 2] * v[i + D / 2] * inv;
          const double cs = table.cos_row(t)[i], sn = table.sin_row(t)[i];
          worst = std::max(worst, std::fabs(traced.at({0, h, t, i}) - (a * cs - b * sn)));
          worst = std::max(worst, std::fabs(traced.at({0, h, t, i + D / 2}) - (b * cs + a * sn)));
        }
      }
    return worst;
  };
  EXPECT_LE(worst_of(m.W_query.forward(x).contiguous(), m.q_norm.weight, trace.queries, H), 1e-5);
  EXPECT_LE(worst_of(m.W_key.forward(x).contiguous(), m.k_norm.weight, trace.keys, G), 1e-5);
}

TEST(QkNormMha, FusedAndCachedPathsGiveTheTextbooksNumbers) {
  const int64_t B = 2, T = 12;
  Generator data(7);
  const Tensor x = randn({B, T, 12}, data), dy = randn({B, T, 12}, data);
  struct Run {
    Tensor y, dx, dq_norm, dk_norm, dw_query, dw_key, dout;
  };
  auto run = [&](AttentionPath path, bool qk_norm) {
    Generator gen(5);
    MultiHeadAttention m(qwen_like(path, qk_norm), gen);
    perturb(m, 11);
    Run r;
    r.y = m.forward(x);
    r.dx = m.backward(dy);
    r.dq_norm = m.q_norm.dweight.clone();
    r.dk_norm = m.k_norm.dweight.clone();
    r.dw_query = m.W_query.dweight.clone();
    r.dw_key = m.W_key.dweight.clone();
    r.dout = m.out_proj.dweight.clone();
    return r;
  };
  const Run fused = run(AttentionPath::kFused, true), textbook = run(AttentionPath::kTextbook, true);
  const Run plain = run(AttentionPath::kFused, false);
  auto rel = [](const Tensor& a, const Tensor& b) { return max_abs_diff(a, b) / std::max(1e-30, max_abs(b)); };
  EXPECT_EQ(fused.y.shape(), (Shape{B, T, 12}));
  EXPECT_LE(rel(fused.y, textbook.y), 1e-5);
  EXPECT_LE(rel(fused.dx, textbook.dx), 1e-5);
  EXPECT_LE(rel(fused.dq_norm, textbook.dq_norm), 1e-5);
  EXPECT_LE(rel(fused.dk_norm, textbook.dk_norm), 1e-5);
  EXPECT_LE(rel(fused.dw_query, textbook.dw_query), 1e-5);
  EXPECT_LE(rel(fused.dw_key, textbook.dw_key), 1e-5);
  EXPECT_LE(rel(fused.dout, textbook.dout), 1e-5);
  EXPECT_GT(max_abs(textbook.dq_norm), 1e-3);      // the norms' weights do get gradients
  EXPECT_GT(max_abs_diff(fused.y, plain.y), 1e-3);  // the norm is applied, not dropped
  // one token at a time through a KV cache: the rows of the whole forward
  Generator gen(5);
  MultiHeadAttention m(qwen_like(AttentionPath::kFused), gen);
  perturb(m, 11);
  m.eval();
  kernels::KvCache cache(1, B, 2, T, 8, 8, kernels::CacheDtype::kF32);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const Tensor step = m.forward_cached(x.slice(1, t, t + 1).contiguous(), cache, 0);
    cache.commit();
    worst = std::max(worst, max_abs_diff(step, fused.y.slice(1, t, t + 1)));
  }
  EXPECT_LE(worst / max_abs(fused.y), 1e-5);
}

TEST(QkNormMha, Bf16StaysWithinBf16RoundingOfF32) {
  Generator data(8);
  const Tensor x = randn({2, 12, 12}, data), dy = randn({2, 12, 12}, data);
  auto run = [&](Dtype dtype, Tensor* dq_norm) {
    Generator gen(5);
    AttentionConfig c = qwen_like(AttentionPath::kFused);
    c.attention.dtype = dtype;
    MultiHeadAttention m(c, gen);
    perturb(m, 11);
    Tensor y = m.forward(x);
    m.backward(dy);
    *dq_norm = m.q_norm.dweight.clone();
    return y;
  };
  Tensor g32, g16;
  const Tensor f32 = run(Dtype::kF32, &g32), bf16 = run(Dtype::kBF16, &g16);
  // operands rounded to 8 bits of mantissa (relative 2^-9 each) through two products and the norm
  const double y_rel = max_abs_diff(bf16, f32) / max_abs(f32), g_rel = max_abs_diff(g16, g32) / max_abs(g32);
  EXPECT_LE(y_rel, 2e-2);
  EXPECT_GT(y_rel, 0.0);  // bf16 mode did round
  EXPECT_LE(g_rel, 5e-2);
}

TEST(QkNormMha, ABadEpsilonIsRefusedNamingIt) {
  AttentionConfig c = qwen_like(AttentionPath::kAuto);
  c.attention.qk_norm_eps = 0.0;
  Generator gen(1);
  const std::string e = testing_support::error_of([&] { MultiHeadAttention m(c, gen); });
  EXPECT_NE(e.find("qk_norm_eps (0) must be a positive finite number"), std::string::npos) << e;
  c = qwen_like(AttentionPath::kAuto);
  c.out_dim = -1;
  const std::string o = testing_support::error_of([&] { MultiHeadAttention m(c, gen); });
  EXPECT_NE(o.find("out_dim (-1) must be positive"), std::string::npos) << o;
}

}  // namespace
}  // namespace qkv
