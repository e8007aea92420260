// explore_gpt (qkv/explore/explore.h): the explorer's page of the book's GPT model. Its blocks are
// run one by one (to show norm1, the attention, the feed-forward and the residual stream), so each
// layer's weights must be those GPTModel::forward records for that layer, and the last block's
// residual stream through final_norm and out_head must give the forward's logits.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/explore/explore.h"
#include "qkv/models/gpt.h"

namespace qkv {
namespace {

TEST(ExploreGpt, EveryLayersWeightsAndTheResidualStreamAreTheForwards) {
  GPTConfig c;
  c.vocab_size = 41;
  c.context_length = 12;
  c.emb_dim = 16;
  c.n_layers = 3;
  c.qkv_bias = true;
  c.attention.heads = 4;
  c.attention.dropout = 0.1;  // drawn in training only: the page is eval mode
  set_head_dim(c);
  Generator gen(9);
  GPTModel model(c, gen);
  for (TransformerBlock& b : model.blocks) {  // LayerNorms off their identity, so their order matters
    for (int64_t i = 0; i < c.emb_dim; ++i) {
      b.norm1.scale.data()[i] = 1.0f + 0.1f * static_cast<float>(i % 5);
      b.norm2.shift.data()[i] = 0.05f * static_cast<float>(i % 3);
    }
  }
  const std::vector<int64_t> ids = {3, 17, 40, 0, 9, 9, 22, 5};
  const int64_t T = static_cast<int64_t>(ids.size());
  std::vector<std::string> labels(ids.size(), "t");
  const ExplorePage page = explore_gpt(model, ids, labels, "tiny GPT");
  ASSERT_EQ(page.layers.size(), 3u);
  EXPECT_EQ(page.tokens.size(), ids.size());

  model.eval();
  model.record_traces(true);
  const Tensor logits = model.forward(ids, 1, T);  // (1, T, V)
  for (size_t l = 0; l < 3; ++l) {
    const Tensor want = model.traces()[l].weights.select(0, 0).contiguous();  // (H, T, T)
    EXPECT_LE(max_abs_diff(page.layers[l].weights, want), 1e-6) << "layer " << l;
  }
  const ExploreStep* last = nullptr;
  for (const ExploreStep& s : page.pipeline)
    if (s.name == "trf_blocks.2.output") last = &s;
  ASSERT_NE(last, nullptr);
  const Tensor x = last->value.unsqueeze(0);  // (1, T, E)
  const Tensor got = model.out_head.forward(model.final_norm.forward(x));
  EXPECT_LE(max_abs_diff(got, logits), 1e-5);
  // each block shows its input, norm1, q, k, v, weights, context, attention, ff and output
  int steps = 0;
  for (const ExploreStep& s : page.pipeline) steps += s.name.rfind("trf_blocks.1.", 0) == 0;
  EXPECT_EQ(steps, 10);
}

TEST(ExploreGpt, AModelWithoutBlocksIsRefused) {
  GPTConfig c;
  c.vocab_size = 5;
  c.context_length = 4;
  c.emb_dim = 4;
  c.n_layers = 0;
  c.attention.heads = 2;
  set_head_dim(c);
  Generator gen(1);
  GPTModel model(c, gen);
  try {
    explore_gpt(model, {1, 2}, {"a", "b"}, "t");
    ADD_FAILURE() << "a page of no blocks was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no blocks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
