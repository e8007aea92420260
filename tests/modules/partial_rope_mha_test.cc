// Partial rotary (config.attention.rope_dim, Qwen3.5's partial_rotary_factor): RoPE rotates each
// head's first R elements at frequencies base^(-2i / R) and passes the rest. The textbook path is
// checked against the rotation written out here (in double, from the definition), the fused path,
// its backward and cached decoding against the textbook, and the setting is shown to matter (not
// the full rotation, not none). Bad values are refused naming rope_dim.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/modules/multi_head_attention.h"
#include "test_support.h"

namespace qkv {
namespace {

using kernels::RopeLayout;

constexpr int64_t kRopeD = 12, kRopeH = 4, kRopeG = 2;

// GQA (4 query heads, 2 key/value heads, D 12), QK-norm, RoPE over the first `rope_dim` of D.
AttentionConfig partial_config(int64_t rope_dim, RopeLayout layout, AttentionPath path) {
  AttentionConfig c = attention_config("mha", 6, kRopeH * kRopeD, 16, 0.0, kRopeH, false);
  c.attention.kv_heads = kRopeG;
  c.attention.rope = layout;
  c.attention.rope_base = 1000.0;
  c.attention.rope_dim = rope_dim;
  c.attention.qk_norm = true;
  c.path = path;
  return c;
}

TEST(PartialRope, TextbookRotatesTheFirstRElementsOnly) {
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    const int64_t R = 4, B = 1, T = 9;
    Generator gen(3), data(4);
    MultiHeadAttention m(partial_config(R, layout, AttentionPath::kTextbook), gen);
    const Tensor x = randn({B, T, 6}, data);
    AttentionTrace trace;
    m.forward(x, &trace);
    // the queries after QK-norm, before RoPE: the module's own norm of W_query(x)'s heads
    const Tensor q = m.q_norm.forward(m.W_query.forward(x).reshape({B, T, kRopeH, kRopeD}).transpose(1, 2)).contiguous();
    double worst = 0;
    for (int64_t h = 0; h < kRopeH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* row = q.data() + (h * T + t) * kRopeD;
        for (int64_t i = 0; i < R / 2; ++i) {
          const int64_t a = layout == RopeLayout::kHalf ? i : 2 * i, b = layout == RopeLayout::kHalf ? i + R / 2 : 2 * i + 1;
          const double theta = static_cast<double>(t) * std::pow(1000.0, -2.0 * static_cast<double>(i) / R);
          const double ya = row[a] * std::cos(theta) - row[b] * std::sin(theta);
          const double yb = row[b] * std::cos(theta) + row[a] * std::sin(theta);
          worst = std::max({worst, std::fabs(trace.queries.at({0, h, t, a}) - ya),
                            std::fabs(trace.queries.at({0, h, t, b}) - yb)});
        }
        for (int64_t e = R; e < kRopeD; ++e)  // passed through unchanged
          worst = std::max(worst, std::fabs(static_cast<double>(trace.queries.at({0, h, t, e})) - row[e]));
      }
    EXPECT_LE(worst, 1e-5) << kernels::rope_layout_name(layout);
  }
}

TEST(PartialRope, FusedBackwardAndCachedPathsGiveTheTextbooksNumbers) {
  const int64_t B = 2, T = 10;
  Generator data(7);
  const Tensor x = randn({B, T, 6}, data), dy = randn({B, T, kRopeH * kRopeD}, data);
  auto run = [&](int64_t rope_dim, RopeLayout layout, AttentionPath path, Tensor* dx) {
    Generator gen(5);
    MultiHeadAttention m(partial_config(rope_dim, layout, path), gen);
    const Tensor y = m.forward(x);
    if (dx) *dx = m.backward(dy);
    return y;
  };
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    Tensor dx_fused, dx_textbook;
    const Tensor fused = run(4, layout, AttentionPath::kFused, &dx_fused);
    const Tensor textbook = run(4, layout, AttentionPath::kTextbook, &dx_textbook);
    EXPECT_LE(max_abs_diff(fused, textbook), 1e-5);
    EXPECT_LE(max_abs_diff(dx_fused, dx_textbook), 1e-4);
    EXPECT_GT(max_abs_diff(fused, run(0, layout, AttentionPath::kFused, nullptr)), 1e-3);  // not all of D
    EXPECT_GT(max_abs_diff(fused, run(0, RopeLayout::kNone, AttentionPath::kFused, nullptr)), 1e-3);  // not none
    // one token at a time through a KV cache: the rows of the whole forward
    Generator gen(5);
    MultiHeadAttention m(partial_config(4, layout, AttentionPath::kFused), gen);
    m.eval();
    kernels::KvCache cache(1, B, kRopeG, T, kRopeD, kRopeD, kernels::CacheDtype::kF32);
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor step = m.forward_cached(x.slice(1, t, t + 1).contiguous(), cache, 0);
      cache.commit();
      worst = std::max(worst, max_abs_diff(step, fused.slice(1, t, t + 1)));
    }
    EXPECT_LE(worst, 1e-5);
  }
}

TEST(PartialRope, BadRopeDimsAreRefusedNamingTheValue) {
  Generator gen(1);
  auto error = [&](int64_t rope_dim, RopeLayout layout) {
    return testing_support::error_of([&] { MultiHeadAttention m(partial_config(rope_dim, layout, AttentionPath::kAuto), gen); });
  };
  EXPECT_NE(error(3, RopeLayout::kHalf).find("rope_dim (3) must be even, at least 2 and at most head_dim (12)"),
            std::string::npos)
      << error(3, RopeLayout::kHalf);
  EXPECT_NE(error(14, RopeLayout::kHalf).find("rope_dim (14) must be even"), std::string::npos) << error(14, RopeLayout::kHalf);
  EXPECT_NE(error(-2, RopeLayout::kHalf).find("rope_dim (-2)"), std::string::npos) << error(-2, RopeLayout::kHalf);
  EXPECT_NE(error(4, RopeLayout::kNone).find("rope_dim (4) says how much of a head RoPE rotates: it needs rope"),
            std::string::npos)
      << error(4, RopeLayout::kNone);
  EXPECT_EQ(error(12, RopeLayout::kHalf), "(no error)");  // all of D, said explicitly
}

}  // namespace
}  // namespace qkv
