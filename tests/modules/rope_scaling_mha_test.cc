// Llama 3's RoPE frequency scaling through MultiHeadAttention (config.attention.rope_scaling): the
// textbook path rotates queries and keys by the scaled table (checked against a rotation written
// here from kernels::RopeTable), the fused path and cached decoding give the textbook's numbers, and
// the scaling changes them (it is not ignored anywhere). The table itself is checked against
// PyTorch by tests/kernels/rope_scaling_test.cc.
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
using kernels::RopeScaling;

// GQA (4 query heads, 2 key/value heads, D 8), RoPE "half", base 10,000, context 16; scaled with a
// short original context (L 8) so that the 4 frequencies fall in all three of Llama 3's regimes.
AttentionConfig scaled_config(bool scaled, AttentionPath path) {
  AttentionConfig c = attention_config("mha", 6, 32, 16, 0.0, 4, false);
  c.attention.kv_heads = 2;
  c.attention.rope = RopeLayout::kHalf;
  if (scaled) c.attention.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 8};
  c.path = path;
  return c;
}

TEST(RopeScalingMha, TextbookQueriesAreRotatedByTheScaledTable) {
  const AttentionConfig c = scaled_config(true, AttentionPath::kTextbook);
  Generator gen(3), data(4);
  MultiHeadAttention m(c, gen);
  const int64_t B = 1, T = 12, H = 4, D = 8;
  const Tensor x = randn({B, T, 6}, data);
  AttentionTrace trace;
  m.forward(x, &trace);
  const Tensor q = m.W_query.forward(x).contiguous();  // (B, T, H D) before RoPE
  const kernels::RopeTable table(T, D, 10000.0, 0, c.attention.rope_scaling);
  double worst = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D / 2; ++i) {
        const float a = q.data()[t * H * D + h * D + i], b = q.data()[t * H * D + h * D + i + D / 2];
        const float cs = table.cos_row(t)[i], sn = table.sin_row(t)[i];
        const double lo = std::fabs(trace.queries.at({0, h, t, i}) - (a * cs - b * sn));
        const double hi = std::fabs(trace.queries.at({0, h, t, i + D / 2}) - (b * cs + a * sn));
        worst = std::max(worst, std::max(lo, hi));
      }
  EXPECT_LE(worst, 1e-5);
  EXPECT_LT(kernels::rope_frequency(3, D, 10000.0, c.attention.rope_scaling),
            kernels::rope_frequency(3, D, 10000.0));  // the lowest frequency is scaled down
}

TEST(RopeScalingMha, FusedAndCachedPathsGiveTheTextbooksNumbers) {
  const int64_t B = 2, T = 12;
  Generator data(7);
  const Tensor x = randn({B, T, 6}, data), dy = randn({B, T, 32}, data);
  auto run = [&](bool scaled, AttentionPath path, Tensor* dx) {
    Generator gen(5);
    MultiHeadAttention m(scaled_config(scaled, path), gen);
    const Tensor y = m.forward(x);
    if (dx) *dx = m.backward(dy);
    return y;
  };
  Tensor dx_fused, dx_textbook;
  const Tensor fused = run(true, AttentionPath::kFused, &dx_fused);
  const Tensor textbook = run(true, AttentionPath::kTextbook, &dx_textbook);
  const Tensor unscaled = run(false, AttentionPath::kFused, nullptr);
  EXPECT_LE(max_abs_diff(fused, textbook), 1e-5);
  EXPECT_LE(max_abs_diff(dx_fused, dx_textbook), 1e-4);
  EXPECT_GT(max_abs_diff(fused, unscaled), 1e-3);  // the scaling is applied, not dropped
  // one token at a time through a KV cache: the rows of the whole forward
  Generator gen(5);
  MultiHeadAttention m(scaled_config(true, AttentionPath::kFused), gen);
  m.eval();
  kernels::KvCache cache(1, B, 2, T, 8, 8, kernels::CacheDtype::kF32);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const Tensor step = m.forward_cached(x.slice(1, t, t + 1).contiguous(), cache, 0);
    cache.commit();
    worst = std::max(worst, max_abs_diff(step, fused.slice(1, t, t + 1)));
  }
  EXPECT_LE(worst, 1e-5);
}

TEST(RopeScalingMha, ScalingWithoutRopeOrOutOfRangeIsRefused) {
  AttentionConfig c = scaled_config(true, AttentionPath::kAuto);
  c.attention.rope = RopeLayout::kNone;
  Generator gen(1);
  EXPECT_NE(testing_support::error_of([&] { MultiHeadAttention m(c, gen); }).find("rope_scaling scales RoPE's frequencies: it needs rope"),
            std::string::npos)
      << testing_support::error_of([&] { MultiHeadAttention m(c, gen); });
  c = scaled_config(true, AttentionPath::kAuto);
  c.attention.rope_scaling.factor = 0.5;
  EXPECT_NE(testing_support::error_of([&] { MultiHeadAttention m(c, gen); }).find("rope_scaling: RoPE scaling: factor (0.5)"),
            std::string::npos)
      << testing_support::error_of([&] { MultiHeadAttention m(c, gen); });
}

}  // namespace
}  // namespace qkv
