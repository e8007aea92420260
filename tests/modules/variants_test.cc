// MultiHeadAttention's variants (attention_variants.h): the fused pipeline (kernels/mha.h, with
// the naive reference attention until the fused kernel runs the variants; then the kernel itself)
// against the textbook path, grouped-query heads against repeated weights, and the config errors.
// The textbook path is checked against PyTorch by tests/pytorch/variants.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/mha.h"
#include "kernels/mha_testing.h"
#include "qkv/modules/multi_head_attention.h"
#include "test_support.h"

namespace qkv {
namespace {

using kernels::RopeLayout;
using testing_support::error_of;
using testing_support::relative_error;

struct Outcome {
  Tensor y, dx;
  std::vector<Tensor> grads;  // W_query, W_key, W_value, out_proj (, W_gate): weight then bias
};

Outcome run(AttentionConfig c, AttentionPath path, int64_t B, int64_t T, uint64_t seed = 5) {
  c.path = path;
  Generator gen(seed);
  MultiHeadAttention m(c, gen);
  Generator data(seed + 1);
  const Tensor x = randn({B, T, c.d_in}, data), dy = randn({B, T, c.d_out()}, data);
  Outcome r;
  r.y = m.forward(x);
  r.dx = m.backward(dy);
  std::vector<Linear*> linears = {&m.W_query, &m.W_key, &m.W_value, &m.out_proj};
  if (m.W_gate) linears.push_back(&*m.W_gate);
  for (Linear* l : linears) {
    r.grads.push_back(l->dweight.clone());
    if (l->has_bias) r.grads.push_back(l->dbias.clone());
  }
  return r;
}

void expect_close(const Outcome& fused, const Outcome& textbook, const std::string& what) {
  EXPECT_LE(relative_error(fused.y, textbook.y), 1e-5) << what << ": output";
  EXPECT_LE(relative_error(fused.dx, textbook.dx), 1e-4) << what << ": dx";
  ASSERT_EQ(fused.grads.size(), textbook.grads.size());
  for (size_t i = 0; i < fused.grads.size(); ++i)
    EXPECT_LE(relative_error(fused.grads[i], textbook.grads[i]), 1e-4) << what << ": parameter gradient " << i;
}

struct Variant {
  const char* name;
  int64_t heads, kv_heads, d_out;
  RopeLayout rope;
  int64_t window;
  bool alibi;
  float softcap;
};

const Variant kVariants[] = {
    {"gqa", 4, 2, 16, RopeLayout::kNone, 0, false, 0.0f},
    {"mqa", 3, 1, 12, RopeLayout::kNone, 0, false, 0.0f},
    {"rope-half", 2, 2, 12, RopeLayout::kHalf, 0, false, 0.0f},
    {"rope-interleaved", 2, 2, 8, RopeLayout::kInterleaved, 0, false, 0.0f},
    {"window", 2, 2, 6, RopeLayout::kNone, 3, false, 0.0f},
    {"alibi", 3, 3, 9, RopeLayout::kNone, 0, true, 0.0f},
    {"softcap", 2, 2, 8, RopeLayout::kNone, 0, false, 0.7f},
    {"everything", 4, 2, 16, RopeLayout::kInterleaved, 4, true, 2.0f},
    {"gqa-rope-half-window", 6, 3, 24, RopeLayout::kHalf, 1, false, 0.0f},
};

// module: mha, or gated-mha (GatedMultiHeadAttention's output gate on the same attention).
AttentionConfig config_of(const Variant& v, const std::string& module = "mha") {
  AttentionConfig c = attention_config(module, 5, v.d_out, 13, 0.0, v.heads, true);
  c.attention.kv_heads = v.kv_heads;
  c.attention.rope = v.rope;
  c.attention.window = v.window;
  c.attention.alibi = v.alibi;
  c.attention.softcap = v.softcap;
  return c;
}

TEST(MhaVariants, FusedPipelineWithReferenceAttentionMatchesTextbook) {
  const bool was = kernels::mha_use_reference_attention(true);
  for (const Variant& v : kVariants)
    for (int64_t T : {1, 7, 13}) {
      const AttentionConfig c = config_of(v);
      expect_close(run(c, AttentionPath::kFused, 2, T), run(c, AttentionPath::kTextbook, 2, T),
                   std::string(v.name) + " T=" + std::to_string(T));
    }
  kernels::mha_use_reference_attention(was);
}

TEST(MhaVariants, FusedKernelMatchesTextbook) {
  for (const char* module : {"mha", "gated-mha"})
    for (const Variant& v : kVariants) {
      const AttentionConfig c = config_of(v, module);
      Outcome fused;
      ASSERT_EQ(error_of([&] { fused = run(c, AttentionPath::kFused, 2, 11); }), "(no error)") << v.name;
      expect_close(fused, run(c, AttentionPath::kTextbook, 2, 11), std::string(module) + " " + v.name);
    }
}

TEST(MhaVariants, TheOutputGateChangesTheOutputAndItsGradientIsTheGatesShare) {
  // gated-mha draws W_gate between W_query and W_key: its W_key differs from mha's under one seed,
  // and its output is out_proj(context * sigmoid(W_gate x)), not mha's; with W_gate's rows zero the
  // gate is 1/2 everywhere, so its output is mha's with out_proj's weight halved (same W_key: loaded).
  const Variant& v = kVariants[0];
  Generator g1(5), g2(5);
  MultiHeadAttention plain(config_of(v), g1), gated(config_of(v, "gated-mha"), g2);
  ASSERT_TRUE(gated.W_gate.has_value());
  ASSERT_FALSE(plain.W_gate.has_value());
  EXPECT_GT(max_abs_diff(plain.W_key.weight, gated.W_key.weight), 0.0);
  for (Linear* l : {&gated.W_query, &gated.W_key, &gated.W_value}) {
    Linear& p = l == &gated.W_query ? plain.W_query : l == &gated.W_key ? plain.W_key : plain.W_value;
    l->weight.copy_from(p.weight);
    l->bias.copy_from(p.bias);
  }
  gated.out_proj.weight.copy_from(mul(plain.out_proj.weight, 2.0f));
  gated.out_proj.bias.copy_from(plain.out_proj.bias);
  gated.W_gate->weight.copy_from(Tensor::zeros(gated.W_gate->weight.shape()));
  gated.W_gate->bias.copy_from(Tensor::zeros(gated.W_gate->bias.shape()));
  Generator data(9);
  const Tensor x = randn({2, 7, 5}, data);
  EXPECT_LE(relative_error(gated.forward(x), plain.forward(x)), 1e-6);
}

// The gated module decodes through a KV cache (Qwen3.5's full-attention layers do): a prompt of 4
// tokens, then one token at a time, gives the whole forward's rows on every variant.
TEST(MhaVariants, GatedCachedDecodingEqualsTheWholeForward) {
  for (const Variant& v : kVariants) {
    Generator gen(5), data(8);
    MultiHeadAttention m(config_of(v, "gated-mha"), gen);
    m.eval();
    const int64_t B = 2, T = 9;
    const Tensor x = randn({B, T, 5}, data);
    const Tensor whole = m.forward(x);
    kernels::KvCache cache(1, B, v.kv_heads, T, v.d_out / v.heads, v.d_out / v.heads, kernels::CacheDtype::kF32);
    double worst = 0;
    for (int64_t t = 0; t < T; t += t == 0 ? 4 : 1) {
      const int64_t n = t == 0 ? 4 : 1;
      const Tensor step = m.forward_cached(x.slice(1, t, t + n).contiguous(), cache, 0);
      cache.commit();
      worst = std::max(worst, max_abs_diff(step, whole.slice(1, t, t + n)));
    }
    EXPECT_LE(worst, 1e-5) << v.name;
  }
}

// Grouped-query attention is multi-head attention whose key/value heads repeat: a G-head module
// equals an H-head one whose W_key / W_value rows are the G heads' rows, each repeated H / G times.
TEST(MhaVariants, GroupedQueryEqualsRepeatedKeyValueWeights) {
  for (AttentionPath path : {AttentionPath::kTextbook, AttentionPath::kFused}) {
    AttentionConfig gqa = attention_config("mha", 4, 12, 6, 0.0, 6);
    gqa.attention.kv_heads = 2;
    gqa.path = path;
    AttentionConfig mha = gqa;
    mha.attention.kv_heads = 0;
    Generator g1(9), g2(9);
    MultiHeadAttention a(gqa, g1), b(mha, g2);
    ASSERT_EQ(a.W_key.weight.shape(), Shape({4, 4}));  // (G D, d_in)
    ASSERT_EQ(b.W_key.weight.shape(), Shape({12, 4}));
    const int64_t D = 2;
    for (int64_t h = 0; h < 6; ++h)  // query head h reads kv head h / 3
      for (Linear* pair : {&a.W_key, &a.W_value}) {
        Linear& dst = pair == &a.W_key ? b.W_key : b.W_value;
        for (int64_t r = 0; r < D; ++r)
          for (int64_t c = 0; c < 4; ++c)
            dst.weight.at({h * D + r, c}) = pair->weight.at({(h / 3) * D + r, c});
      }
    for (int64_t i = 0; i < a.W_query.weight.numel(); ++i) b.W_query.weight.data()[i] = a.W_query.weight.data()[i];
    for (int64_t i = 0; i < a.out_proj.weight.numel(); ++i) b.out_proj.weight.data()[i] = a.out_proj.weight.data()[i];
    for (int64_t i = 0; i < a.out_proj.bias.numel(); ++i) b.out_proj.bias.data()[i] = a.out_proj.bias.data()[i];
    Generator data(4);
    const Tensor x = randn({2, 6, 4}, data);
    EXPECT_LE(relative_error(a.forward(x), b.forward(x)), 1e-5) << attention_path_name(path);
  }
}

TEST(MhaVariants, StateDictKeepsTheBookNamesWithGroupedShapes) {
  AttentionConfig c = config_of(kVariants[1]);  // H 3, G 1, D 4
  Generator gen(1);
  MultiHeadAttention m(c, gen);
  std::vector<std::string> names;
  for (const StateEntry& e : m.state_dict()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mask", "W_query.weight", "W_query.bias", "W_key.weight", "W_key.bias",
                                             "W_value.weight", "W_value.bias", "out_proj.weight",
                                             "out_proj.bias"}));  // PyTorch's order: the module's buffer, then its children
  EXPECT_EQ(m.W_value.weight.shape(), Shape({4, 5}));
  EXPECT_EQ(m.num_kv_heads(), 1);
}

TEST(MhaVariants, ConfigErrorsNameTheValue) {
  auto error = [](auto edit) {
    AttentionConfig c = attention_config("mha", 4, 12, 4, 0.0, 4);
    edit(c);
    Generator gen(1);
    return error_of([&] { MultiHeadAttention m(c, gen); });
  };
  EXPECT_NE(error([](AttentionConfig& c) { c.attention.kv_heads = 3; }).find("num_kv_heads (3) must divide num_heads (4)"),
            std::string::npos);
  EXPECT_NE(error([](AttentionConfig& c) { c.attention.window = -2; }).find("window (-2) must be positive"),
            std::string::npos);
  EXPECT_NE(error([](AttentionConfig& c) { c.attention.softcap = -1.0; }).find("softcap (-1) must be positive"),
            std::string::npos);
  EXPECT_NE(error([](AttentionConfig& c) { c.attention.rope = RopeLayout::kHalf; })
                .find("rope (half) needs an even head_dim, got 3"),
            std::string::npos);
  EXPECT_NE(error([](AttentionConfig& c) { c.attention.alibi_slopes = {1.0f}; })
                .find("alibi_slopes has 1 slopes for num_heads (4)"),
            std::string::npos);
  AttentionConfig causal = attention_config("causal-attention", 2, 2, 2);
  causal.attention.window = 2;
  Generator gen(1);
  EXPECT_NE(error_of([&] { make_attention_module("causal-attention", causal, gen); }).find("takes no variants"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
