// The modules' two computations against each other: CausalAttention, the wrapper and
// MultiHeadAttention built from the same seed, one on the fused path (kernels/mha.h) and one on
// the textbook path (the book's matrices), must agree within 1e-5 relative on the output, the
// gradient of the input and every parameter gradient, and on every tensor of a trace. Random
// configurations: batch and tokens from 0 up, odd sizes, 1 to 4 heads, head sizes 1 to 9 and 64,
// with and without bias, the causal mask and arbitrary loaded masks (rows hiding every key
// included). Then the path rules (AttentionPath) and the fused path's own dropout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/multi_head_attention.h"

namespace qkv {
namespace {

constexpr double kTol = 1e-5;

// max |got - want| relative to the largest |want| (1 when that is below 1): the scale-aware
// relative error the issue asks for.
double rel_error(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) return INFINITY;
  const std::vector<float> a = got.to_vector(), b = want.to_vector();
  double scale = 1.0, worst = 0.0;
  for (float x : b)
    if (std::isfinite(x)) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i]) || std::isnan(b[i])) {
      if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}

double g_worst = 0.0;  // the largest rel_error seen by EXPECT_CLOSE, reported by the tests

#define EXPECT_CLOSE(got, want, what)                                                           \
  do {                                                                                          \
    const double err_ = rel_error(got, want);                                                   \
    g_worst = std::max(g_worst, err_);                                                          \
    EXPECT_LE(err_, kTol) << what << ": " << (got).describe() << " vs " << (want).describe(); \
  } while (0)

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
  return t;
}

struct ModuleCase {
  std::string module;
  AttentionConfig config;
  int64_t B = 0, T = 0;
  bool loaded_mask = false;  // a random (context, context) mask instead of the causal one
};

std::string describe(const ModuleCase& c) {
  return str(c.module, " B=", c.B, " T=", c.T, " d_in=", c.config.d_in, " d_out=", c.config.d_out(),
             " heads=", c.config.attention.heads, " context=", c.config.context_length, c.config.qkv_bias ? " bias" : "",
             c.loaded_mask ? " loaded-mask" : "");
}

std::vector<ModuleCase> random_cases(const std::string& module, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<ModuleCase> cases;
  for (int i = 0; i < n; ++i) {
    ModuleCase c;
    c.module = module;
    c.B = i == 0 ? 0 : pick(1, 3);
    c.T = i == 1 ? 0 : i == 2 ? 1 : pick(1, 19);
    const int64_t heads = module == "causal-attention" ? 1 : pick(1, 4);
    const int64_t D = i % 10 == 9 ? 64 : pick(1, 9);
    const int64_t d_in = pick(1, 12);
    const int64_t context_length = std::max<int64_t>(1, c.T + pick(0, 5));
    const bool qkv_bias = pick(0, 1) == 1;
    c.config = attention_config(module, d_in, module == "mha" ? D * heads : D, context_length, 0.0, heads, qkv_bias);
    c.loaded_mask = i % 4 == 3;
    cases.push_back(c);
  }
  return cases;
}

// A module with the generator it draws from (its Dropout keeps a pointer to it).
struct Built {
  std::unique_ptr<Generator> gen;
  std::unique_ptr<AttentionModule> module;
  AttentionModule* operator->() const { return module.get(); }
};

Built build(const ModuleCase& c, AttentionPath path, const Tensor& mask) {
  AttentionConfig config = c.config;
  config.path = path;
  Built b{std::make_unique<Generator>(1234), nullptr};  // the same weights on both paths
  b.module = make_attention_module(c.module, config, *b.gen);
  if (mask.defined())
    for (StateEntry& e : b->state_dict())
      if (e.name.size() >= 4 && e.name.compare(e.name.size() - 4, 4, "mask") == 0) e.load(mask);
  return b;
}

// Forward, trace and backward on both paths; every tensor compared.
void compare_paths(const ModuleCase& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(seed);
  Tensor mask;
  if (c.loaded_mask) {  // non-zero blocks; about a third blocked, so some rows hide every key
    const int64_t n = c.config.context_length;
    mask = Tensor::empty({n, n});
    for (int64_t i = 0; i < n * n; ++i) mask.data()[i] = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? 1.0f : 0.0f;
  }
  auto fused = build(c, AttentionPath::kFused, mask);
  auto textbook = build(c, AttentionPath::kTextbook, mask);
  const Tensor x = random_tensor({c.B, c.T, c.config.d_in}, rng);
  AttentionTrace tf, tt;
  const Tensor yf = fused->forward(x, &tf), yt = textbook->forward(x, &tt);
  EXPECT_CLOSE(yf, yt, "output");
  EXPECT_CLOSE(tf.queries, tt.queries, "queries");
  EXPECT_CLOSE(tf.keys, tt.keys, "keys");
  EXPECT_CLOSE(tf.values, tt.values, "values");
  EXPECT_CLOSE(tf.scores, tt.scores, "scores");
  EXPECT_CLOSE(tf.masked_scores, tt.masked_scores, "masked scores");
  EXPECT_CLOSE(tf.weights, tt.weights, "weights");
  EXPECT_CLOSE(tf.context, tt.context, "context");
  EXPECT_FALSE(tf.dropped_weights.defined());
  // Without a trace too (the forward a training step runs), then backward.
  const Tensor g = random_tensor(yt.shape(), rng);
  EXPECT_CLOSE(fused->forward(x), yt, "output without trace");
  textbook->forward(x);
  EXPECT_CLOSE(fused->backward(g), textbook->backward(g), "input gradient");
  std::vector<StateEntry> sf = fused->state_dict(), st = textbook->state_dict();
  ASSERT_EQ(sf.size(), st.size());
  for (size_t i = 0; i < sf.size(); ++i)
    if (sf[i].grad) {
      EXPECT_CLOSE(*sf[i].grad, *st[i].grad, "gradient of " + sf[i].name);
    }
}

TEST(FusedModules, CausalAttentionAgreesWithTheTextbookPath) {
  uint32_t seed = 1;
  g_worst = 0.0;
  for (const ModuleCase& c : random_cases("causal-attention", 120, 11)) compare_paths(c, seed++);
  std::printf("causal-attention, 120 configurations: worst relative difference %.2e\n", g_worst);
}

TEST(FusedModules, WrapperAgreesWithTheTextbookPath) {
  uint32_t seed = 1000;
  g_worst = 0.0;
  for (const ModuleCase& c : random_cases("mha-wrapper", 100, 12)) compare_paths(c, seed++);
  std::printf("mha-wrapper, 100 configurations: worst relative difference %.2e\n", g_worst);
}

TEST(FusedModules, MultiHeadAttentionAgreesWithTheTextbookPath) {
  uint32_t seed = 2000;
  g_worst = 0.0;
  for (const ModuleCase& c : random_cases("mha", 120, 13)) compare_paths(c, seed++);
  std::printf("mha, 120 configurations: worst relative difference %.2e\n", g_worst);
}

TEST(FusedModules, GradientsAccumulateAcrossCallsOnTheFusedPath) {
  const ModuleCase c{"mha", attention_config("mha", 5, 8, 7, 0.0, 2, true), 2, 7};
  auto m = build(c, AttentionPath::kFused, Tensor());
  auto once = build(c, AttentionPath::kFused, Tensor());
  std::mt19937 rng(5);
  const Tensor x = random_tensor({2, 7, 5}, rng), g = random_tensor({2, 7, 8}, rng);
  for (int i = 0; i < 2; ++i) {
    m->forward(x);
    m->backward(g);
  }
  once->forward(x);
  once->backward(g);
  std::vector<StateEntry> twice = m->state_dict(), single = once->state_dict();
  for (size_t i = 0; i < twice.size(); ++i)
    if (twice[i].grad) {
      EXPECT_CLOSE(*twice[i].grad, mul(*single[i].grad, 2.0f), "twice " + twice[i].name);
    }
}

TEST(FusedModules, AutoRunsTheTextbookPathUnderDropoutSoTheMasksArePyTorchs) {
  const ModuleCase c{"mha", attention_config("mha", 6, 8, 9, 0.25, 2, false), 2, 9};
  auto automatic = build(c, AttentionPath::kAuto, Tensor());
  auto textbook = build(c, AttentionPath::kTextbook, Tensor());
  automatic->train(true);
  textbook->train(true);
  std::mt19937 rng(8);
  const Tensor x = random_tensor({2, 9, 6}, rng);
  AttentionTrace ta, tt;
  const std::vector<float> ya = automatic->forward(x, &ta).to_vector(), yt = textbook->forward(x, &tt).to_vector();
  EXPECT_EQ(ya, yt);  // bit for bit: the same computation and the same generator draws
  EXPECT_EQ(ta.dropped_weights.to_vector(), tt.dropped_weights.to_vector());
  // In eval mode auto takes the fused path: equal within the tolerance, not necessarily bit for bit.
  automatic->train(false);
  textbook->train(false);
  EXPECT_CLOSE(automatic->forward(x), textbook->forward(x), "eval output");
}

TEST(FusedModules, FusedDropoutIsTheTraceMaskAndItsBackwardUsesIt) {
  for (const char* module : {"causal-attention", "mha"}) {
    SCOPED_TRACE(module);
    ModuleCase c;
    c.module = module;
    c.config = attention_config(module, 5, 6, 11, 0.3, c.module == "causal-attention" ? 1 : 3, true);
    c.B = 2;
    c.T = 11;
    auto m = build(c, AttentionPath::kFused, Tensor());
    m->train(true);
    std::mt19937 rng(9);
    const Tensor x = random_tensor({2, 11, 5}, rng);
    AttentionTrace t;
    const Tensor y = m->forward(x, &t);
    ASSERT_TRUE(t.dropped_weights.defined());
    ASSERT_GT(t.dropped_weights.numel(), 0);
    // Some weights dropped, the rest scaled by 1 / (1 - p).
    int64_t dropped = 0, kept = 0;
    const std::vector<float> w = t.weights.to_vector(), z = t.dropped_weights.to_vector();
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0.0f) continue;
      if (z[i] == 0.0f) {
        ++dropped;
      } else {
        ++kept;
        EXPECT_NEAR(z[i], w[i] / 0.7f, 1e-6 * (1.0 + std::fabs(z[i])));
      }
    }
    EXPECT_GT(dropped, 0);
    EXPECT_GT(kept, dropped);
    // The context is the dropped weights times the values.
    EXPECT_CLOSE(t.context, matmul(t.dropped_weights, t.values), "context = dropped weights @ values");
    // The backward uses the same mask: central differences of the fused forward, whose mask
    // depends only on the seed (a rebuilt module draws the same one), match d(input).
    const Tensor g = random_tensor(y.shape(), rng);
    const Tensor dx = m->backward(g);
    // L(x) = sum(forward(x) * g) with the same mask: rebuild the module so the generator repeats.
    auto loss_at = [&](const Tensor& xx) {
      auto again = build(c, AttentionPath::kFused, Tensor());
      again->train(true);
      return sum_all(mul(again->forward(xx), g));
    };
    const float eps = 1e-2f;
    for (int64_t i : {int64_t{0}, int64_t{7}, int64_t{31}, x.numel() - 1}) {
      Tensor xp = x.clone(), xm = x.clone();
      xp.data()[i] += eps;
      xm.data()[i] -= eps;
      const double fd = (static_cast<double>(loss_at(xp)) - loss_at(xm)) / (2.0 * eps);
      EXPECT_NEAR(dx.data()[i], fd, 2e-2 * (1.0 + std::fabs(fd))) << "d input[" << i << "]";
    }
  }
}

TEST(FusedModules, PathNamesParseAndUnknownNamesAreRefused) {
  EXPECT_EQ(parse_attention_path("auto"), AttentionPath::kAuto);
  EXPECT_EQ(parse_attention_path("fused"), AttentionPath::kFused);
  EXPECT_EQ(parse_attention_path("textbook"), AttentionPath::kTextbook);
  EXPECT_STREQ(attention_path_name(AttentionPath::kFused), "fused");
  try {
    parse_attention_path("flash");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'flash'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("auto, fused, textbook"), std::string::npos) << e.what();
  }
}

TEST(FusedModules, NonFiniteInputsPropagateOnBothPathsWithoutCrashing) {
  const ModuleCase c{"mha", attention_config("mha", 4, 4, 6, 0.0, 2, false), 1, 6};
  auto fused = build(c, AttentionPath::kFused, Tensor());
  auto textbook = build(c, AttentionPath::kTextbook, Tensor());
  std::mt19937 rng(3);
  Tensor x = random_tensor({1, 6, 4}, rng);
  x.data()[3 * 4 + 1] = NAN;  // token 3: NaN reaches every query from 3 on
  const std::vector<float> yf = fused->forward(x).to_vector(), yt = textbook->forward(x).to_vector();
  // Every query from token 3 on sees the NaN key and value: NaN on both paths. (Earlier queries
  // hide token 3 behind the mask; the textbook's 0 * NaN in weights @ values makes them NaN too,
  // the fused kernel may skip the hidden block: attention.h leaves those open.)
  for (int64_t t = 3; t < 6; ++t)
    for (int64_t col = 0; col < 4; ++col) {
      EXPECT_TRUE(std::isnan(yf[static_cast<size_t>(t * 4 + col)])) << "fused token " << t;
      EXPECT_TRUE(std::isnan(yt[static_cast<size_t>(t * 4 + col)])) << "textbook token " << t;
    }
  const Tensor g = Tensor::ones({1, 6, 4});
  const std::vector<float> dxf = fused->backward(g).to_vector();
  EXPECT_TRUE(std::isnan(dxf[3 * 4 + 1]));
}

}  // namespace
}  // namespace qkv
