// explore_model (qkv/explore/explore.h) on a Llama 3 / Qwen3 model. The page watches one forward
// (to show each norm, the attention and the SwiGLU feed-forward), so each layer's weights must be
// those the model's forward makes for that layer - one (T, T) matrix per query
// head, a grouped-query head's keys those of its group - and the last layer's residual stream
// through the final norm and head must give the forward's logits; the logit lens has a row per layer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/explore/explore.h"
#include "model_support.h"
#include "qkv/models/llama.h"

namespace qkv {
namespace {

class ExploreLlama : public ::testing::TestWithParam<std::string> {};

TEST_P(ExploreLlama, EveryLayersWeightsPerQueryHeadAndTheResidualStreamAreTheForwards) {
  DecoderSpec c = llama_sizes(GetParam(), 37, 20, 28, 2, 4, 2, 6, 16, false, 10000.0, 1e-5);
  if (GetParam() == "llama") c.attention.rope_scaling = kernels::RopeScaling{8.0, 1.0, 4.0, 8};
  Generator gen(4);
  DecoderModel model(c, gen);
  for (DecoderBlock& b : model.blocks)  // norms off 1: their order shows
    for (int64_t i = 0; i < c.width; ++i) b.norm1.rms_norm().weight.data()[i] = 1.0f + 0.1f * float(i % 5);
  const std::vector<int64_t> ids = {3, 17, 36, 0, 9, 9, 22, 5};
  const int64_t T = static_cast<int64_t>(ids.size());
  ExploreModelOptions o;
  o.lens_top = 3;
  o.induction_tokens = 4;
  const ExplorePage page = explore_model(model, ids, std::vector<std::string>(ids.size(), "t"), "tiny", o);
  ASSERT_EQ(page.layers.size(), 2u);
  const std::vector<Tensor> w = forward_weights(model, ids);
  const Tensor logits = model.forward(ids, 1, T);
  for (size_t l = 0; l < 2; ++l) {
    const ExploreLayer& layer = page.layers[l];
    EXPECT_EQ(layer.weights.shape(), (Shape{4, T, T}));  // one per query head
    EXPECT_LE(max_abs_diff(layer.weights, w[l]), 1e-6);
    // query heads 0 and 1 share key head 0, 2 and 3 key head 1
    EXPECT_EQ(layer.keys.select(0, 0).to_vector(), layer.keys.select(0, 1).to_vector());
    EXPECT_NE(layer.keys.select(0, 1).to_vector(), layer.keys.select(0, 2).to_vector());
    EXPECT_FALSE(std::isnan(layer.stats[0].induction));
  }
  const ExploreStep* last = nullptr;
  for (const ExploreStep& s : page.pipeline)
    if (s.name == "model.layers.1.output") last = &s;
  ASSERT_NE(last, nullptr);
  EXPECT_LE(max_abs_diff(model.head.forward(model.final_norm.forward(last->value.unsqueeze(0))), logits), 1e-5);
  EXPECT_EQ(page.lens.rows, (std::vector<std::string>{"embeddings", "layer 0", "layer 1"}));
}

INSTANTIATE_TEST_SUITE_P(Families, ExploreLlama, ::testing::Values("llama", "qwen2", "qwen3"));

}  // namespace
}  // namespace qkv
