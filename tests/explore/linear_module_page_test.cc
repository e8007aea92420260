// explore_module (qkv/explore/explore.h) on a linear recurrence: the book's GatedDeltaNet and
// Qwen3.5's linear-attention layer. There are no softmax weights; in their place the page's layer
// holds the exact map A the delta rule applies to the values (modules/delta_rule.h's
// delta_rule_map), computed apart from the recurrence: A @ values must give the context the
// recurrence computed, A must be lower-triangular, and the book's class (beta per value channel)
// has one map per (head, channel), named so.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/explore/explore.h"
#include "qkv/modules/attention_module.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::normal_vector;

struct LinearPage {
  ExplorePage page;
  Tensor values, context;  // the pipeline's, batch item 0: (H, T, Dv)
};

// The module `name` of config c on a random batch of 2 sequences of T tokens, as `qkv explore` pages it.
LinearPage page_of(const std::string& name, const AttentionConfig& c, int64_t T) {
  Generator gen(123);
  std::unique_ptr<AttentionModule> m = make_attention_module(name, c, gen);
  std::mt19937 rng(11);
  const Tensor x = Tensor::from({2, T, c.d_in}, normal_vector(static_cast<size_t>(2 * T * c.d_in), rng));
  AttentionTrace trace;
  const Tensor y = m->forward(x, &trace);
  LinearPage p{explore_module(*m, attention_module_info(name), c, x.select(0, 0).contiguous(), trace, y,
                              std::vector<std::string>(static_cast<size_t>(T), "t"), name),
               Tensor(), Tensor()};
  for (const ExploreStep& s : p.page.pipeline) {
    if (s.name == "values") p.values = s.value;
    if (s.name == "context") p.context = s.value;
  }
  return p;
}

// Above the diagonal every map is exactly 0; on and below it, not all of it is.
void expect_lower_triangular(const Tensor& A) {
  const int64_t maps = A.size(0), T = A.size(1);
  double below = 0;
  for (int64_t m = 0; m < maps; ++m)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < T; ++s) {
        const float a = A.data()[(m * T + t) * T + s];
        if (s > t) ASSERT_EQ(a, 0.0f) << "map " << m << " (" << t << ", " << s << ")";
        else below = std::max(below, static_cast<double>(std::abs(a)));
      }
  EXPECT_GT(below, 1e-3);
}

TEST(ExploreLinearModule, TheBooksGatedDeltaNetHasAMapPerHeadAndValueChannelThatGivesTheContext) {
  const int64_t T = 9, H = 2, D = 4;
  const LinearPage p = page_of("deltanet", attention_config("deltanet", 6, H * D, 16, 0.0, H), T);
  ASSERT_EQ(p.page.layers.size(), 1u);
  const ExploreLayer& layer = p.page.layers[0];
  EXPECT_TRUE(layer.linear);
  ASSERT_EQ(layer.weights.shape(), (Shape{H * D, T, T}));
  ASSERT_EQ(layer.queries.shape(), (Shape{H * D, T, D}));  // map m reads head m / D's queries
  EXPECT_EQ(layer.queries.select(0, D).to_vector(), layer.queries.select(0, 2 * D - 1).to_vector());
  EXPECT_NE(layer.queries.select(0, D - 1).to_vector(), layer.queries.select(0, D).to_vector());
  ASSERT_EQ(layer.head_names.size(), static_cast<size_t>(H * D));
  EXPECT_EQ(layer.head_names[6], "head 1 ch 2");
  expect_lower_triangular(layer.weights);
  ASSERT_TRUE(p.values.defined() && p.context.defined());
  ASSERT_EQ(p.context.shape(), (Shape{H, T, D}));
  // context[h][:, c] = A[h D + c] @ values[h][:, c]
  double scale = 0, worst = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t c = 0; c < D; ++c)
      for (int64_t t = 0; t < T; ++t) {
        double sum = 0;
        for (int64_t s = 0; s < T; ++s)
          sum += static_cast<double>(layer.weights.data()[((h * D + c) * T + t) * T + s]) *
                 p.values.data()[(h * T + s) * D + c];
        const double want = p.context.data()[(h * T + t) * D + c];
        scale = std::max(scale, std::abs(want));
        worst = std::max(worst, std::abs(sum - want));
      }
  EXPECT_GT(scale, 1e-3);
  EXPECT_LE(worst, 1e-5 * scale) << "scale " << scale;
}

TEST(ExploreLinearModule, Qwen3_5sLayerHasAMapPerValueHeadThatGivesTheContext) {
  // 4 value heads on 2 key heads, keys of 3, values of 5, a kernel of 3, over 70 tokens (past a
  // chunk of 64: the context is the chunked form's, A the recurrence's map)
  const int64_t T = 70, Hv = 4;
  const LinearPage p = page_of("gated-deltanet", gated_deltanet_config(6, Hv, 2, 3, 5, 3, 128), T);
  ASSERT_EQ(p.page.layers.size(), 1u);
  const ExploreLayer& layer = p.page.layers[0];
  EXPECT_TRUE(layer.linear);
  EXPECT_TRUE(layer.head_names.empty());  // "head h"
  // A is no distribution: the head patterns show no entropy or mean distance, its first column's cells
  ASSERT_EQ(layer.stats.size(), static_cast<size_t>(Hv));
  EXPECT_TRUE(std::isnan(layer.stats[0].entropy) && std::isnan(layer.stats[0].distance));
  EXPECT_FALSE(std::isnan(layer.stats[0].first));
  ASSERT_EQ(layer.weights.shape(), (Shape{Hv, T, T}));
  expect_lower_triangular(layer.weights);
  ASSERT_TRUE(p.values.defined() && p.context.defined());
  ASSERT_EQ(p.values.shape(), (Shape{Hv, T, 5}));
  const Tensor want = p.context, got = matmul(layer.weights, p.values);  // (Hv, T, T) @ (Hv, T, 5)
  double scale = 0;
  for (float v : want.to_vector()) scale = std::max(scale, static_cast<double>(std::abs(v)));
  EXPECT_GT(scale, 1e-3);
  EXPECT_LE(max_abs_diff(got, want), 1e-5 * scale) << "scale " << scale;
}

}  // namespace
}  // namespace qkv
