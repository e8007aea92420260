// explore_model (qkv/explore/explore.h) on the book's GPT model. The page watches one forward (to
// show norm1, the attention, the feed-forward and the residual stream), so each layer's weights
// must be those the model's forward makes for that layer, and the last block's residual stream
// through final_norm and out_head must give the forward's logits. The head-patterns
// statistics are their formulas over the forward's weights, the induction score's over a forward of
// the documented repeated sequence, and the logit lens is each residual stream through the head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/explore/explore.h"
#include "qkv/models/attention_lm.h"
#include "qkv/models/gpt.h"
#include "model_support.h"

namespace qkv {
namespace {

TEST(ExploreGpt, EveryLayersWeightsAndTheResidualStreamAreTheForwards) {
  Generator gen(9);
  DecoderModel model = tiny_gpt(41, 12, 16, 4, 3, gen, 0.1);  // dropout drawn in training only: the page is eval mode
  for (DecoderBlock& b : model.blocks) {  // LayerNorms off their identity, so their order matters
    for (int64_t i = 0; i < 16; ++i) {
      b.norm1.layer_norm().scale.data()[i] = 1.0f + 0.1f * static_cast<float>(i % 5);
      b.norm2.layer_norm().shift.data()[i] = 0.05f * static_cast<float>(i % 3);
    }
  }
  const std::vector<int64_t> ids = {3, 17, 40, 0, 9, 9, 22, 5};
  const int64_t T = static_cast<int64_t>(ids.size());
  std::vector<std::string> labels(ids.size(), "t");
  const ExplorePage page = explore_model(model, ids, labels, "tiny GPT");
  ASSERT_EQ(page.layers.size(), 3u);
  EXPECT_EQ(page.tokens.size(), ids.size());

  const std::vector<Tensor> w = forward_weights(model, ids);
  const Tensor logits = model.forward(ids, 1, T);  // (1, T, V)
  for (size_t l = 0; l < 3; ++l) EXPECT_LE(max_abs_diff(page.layers[l].weights, w[l]), 1e-6) << "layer " << l;
  const ExploreStep* last = nullptr;
  for (const ExploreStep& s : page.pipeline)
    if (s.name == "trf_blocks.2.output") last = &s;
  ASSERT_NE(last, nullptr);
  const Tensor x = last->value.unsqueeze(0);  // (1, T, E)
  const Tensor got = model.head.forward(model.final_norm.forward(x));
  EXPECT_LE(max_abs_diff(got, logits), 1e-5);
  // each block shows its input, norm1, q, k, v, weights, context, attention, ff and output
  int steps = 0;
  for (const ExploreStep& s : page.pipeline) steps += s.name.rfind("trf_blocks.1.", 0) == 0;
  EXPECT_EQ(steps, 10);
}

DecoderModel small_gpt(int64_t layers, uint64_t seed) {
  Generator gen(seed);  // (no dropout: nothing draws from it after the weights)
  return tiny_gpt(41, 16, 16, 4, layers, gen);
}

TEST(ExploreGpt, HeadPatternsAreTheirFormulasOverTheForwardsWeights) {
  DecoderModel model = small_gpt(2, 5);
  const std::vector<int64_t> ids = {3, 17, 40, 0, 9, 9, 22, 5, 17, 40};
  const int64_t T = static_cast<int64_t>(ids.size()), n = 6;
  const double Td = static_cast<double>(T), nd = static_cast<double>(n);
  ExploreModelOptions o;
  o.induction_tokens = n;
  o.induction_seed = 77;
  const ExplorePage page = explore_model(model, ids, std::vector<std::string>(ids.size(), "t"), "tiny", o);
  const std::vector<Tensor> w = forward_weights(model, ids);
  // the documented sequence: SplitMix64 from the seed, each value mod the vocabulary, n ids twice
  std::vector<int64_t> rep(2 * n);
  uint64_t state = 77;
  for (int64_t t = 0; t < n; ++t) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    rep[t] = rep[t + n] = static_cast<int64_t>(z % 41);
  }
  const std::vector<Tensor> wr = forward_weights(model, rep);
  for (size_t l = 0; l < 2; ++l) {
    ASSERT_EQ(page.layers[l].stats.size(), 4u);
    for (int64_t h = 0; h < 4; ++h) {
      auto a = [&](int64_t i, int64_t j) { return static_cast<double>(w[l].at({h, i, j})); };
      double entropy = 0, distance = 0, first = 0, previous = 0, induction = 0;
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t j = 0; j <= i; ++j) {
          entropy -= a(i, j) * std::log(a(i, j));
          distance += a(i, j) * static_cast<double>(i - j);
        }
        if (i > 0) {
          first += a(i, 0);
          previous += a(i, i - 1);
        }
      }
      for (int64_t i = n; i < 2 * n; ++i) induction += wr[l].at({h, i, i - n + 1});
      const ExploreHeadStats& s = page.layers[l].stats[h];
      EXPECT_NEAR(s.entropy, entropy / Td, 1e-6) << l << " " << h;
      EXPECT_NEAR(s.distance, distance / Td, 1e-5) << l << " " << h;
      EXPECT_NEAR(s.first, first / (Td - 1), 1e-6) << l << " " << h;
      EXPECT_NEAR(s.previous, previous / (Td - 1), 1e-6) << l << " " << h;
      EXPECT_NEAR(s.induction, induction / nd, 1e-6) << l << " " << h;
      // within their ranges: an untrained head spreads its weight (entropy above 0, below uniform's)
      EXPECT_GT(s.entropy, 0.1);
      EXPECT_LT(s.entropy, std::log(static_cast<double>(T)));
    }
  }
  // not measured: NaN, which the page shows as a dash
  const ExplorePage plain = explore_model(model, ids, std::vector<std::string>(ids.size(), "t"), "tiny");
  EXPECT_TRUE(std::isnan(plain.layers[0].stats[0].induction));
  EXPECT_TRUE(plain.lens.rows.empty());
  // a repeated sequence beyond the context is refused
  o.induction_tokens = 9;  // 18 > 16
  EXPECT_THROW(explore_model(model, ids, std::vector<std::string>(ids.size(), "t"), "tiny", o), Error);
}

// The top k of softmax(z) over V logits: (id, probability), the first id on ties.
std::vector<std::pair<int64_t, double>> top_k(const float* z, int64_t V, int64_t k) {
  double hi = -INFINITY, total = 0;
  for (int64_t v = 0; v < V; ++v) hi = std::max(hi, static_cast<double>(z[v]));
  for (int64_t v = 0; v < V; ++v) total += std::exp(z[v] - hi);
  std::vector<std::pair<int64_t, double>> all;
  for (int64_t v = 0; v < V; ++v) all.push_back({v, std::exp(z[v] - hi) / total});
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  all.resize(static_cast<size_t>(k));
  return all;
}

TEST(ExploreGpt, TheLogitLensIsEachResidualStreamThroughTheHead) {
  DecoderModel model = small_gpt(3, 11);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7};
  const int64_t T = 7, V = 41, k = 3;
  ExploreModelOptions o;
  o.lens_top = k;
  o.generated_from = 4;
  const ExplorePage page = explore_model(model, ids, std::vector<std::string>(ids.size(), "t"), "tiny", o);
  EXPECT_EQ(page.generated_from, 4);
  EXPECT_EQ(page.ids, ids);
  ASSERT_EQ(page.lens.rows, (std::vector<std::string>{"embeddings", "block 0", "block 1", "block 2"}));
  ASSERT_EQ(page.lens.ids.size(), static_cast<size_t>(4 * T * k));
  // each row's residual stream, from the page's own steps (checked against the forward above)
  auto stream = [&](const std::string& name) {
    for (const ExploreStep& s : page.pipeline)
      if (s.name == name) return s.value;
    ADD_FAILURE() << "no step " << name;
    return Tensor();
  };
  model.eval();
  const Tensor logits = model.forward(ids, 1, T).select(0, 0).contiguous();  // the model's own, (T, V)
  const std::vector<Tensor> rows = {
      model.head.forward(model.final_norm.forward(stream("trf_blocks.0.input").unsqueeze(0))).select(0, 0).contiguous(),
      model.head.forward(model.final_norm.forward(stream("trf_blocks.0.output").unsqueeze(0))).select(0, 0).contiguous(),
      model.head.forward(model.final_norm.forward(stream("trf_blocks.1.output").unsqueeze(0))).select(0, 0).contiguous(),
      logits};
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t t = 0; t < T; ++t) {
      const auto want = top_k(rows[r].data() + t * V, V, k);
      for (int64_t q = 0; q < k; ++q) {
        const size_t at = (r * T + t) * k + q;
        EXPECT_EQ(page.lens.ids[at], want[q].first) << "row " << r << " position " << t << " rank " << q;
        EXPECT_NEAR(page.lens.probs[at], want[q].second, 1e-6) << "row " << r << " position " << t << " rank " << q;
      }
    }
  // without a tokenizer, the words are the ids
  EXPECT_EQ(page.lens.words.at(page.lens.ids[0]), std::to_string(page.lens.ids[0]));
}

// An attention LM whose width equals its token count: the page must still tell the weights (whose
// rows are output features) from the activations (whose rows are the tokens), for the row labels.
TEST(ExploreGpt, ParameterStepsAreMarkedApartFromTokenRows) {
  Generator gen(2);
  LMConfig cfg;
  cfg.vocab_size = 9;
  cfg.context_length = 8;
  cfg.d_model = 4;  // = T below
  cfg.attention.heads = 2;
  cfg.num_layers = 1;
  set_head_dim(cfg);
  DecoderModel lm(lm_spec(cfg), gen);
  const ExplorePage page = explore_model(lm, {1, 2, 3, 4}, {"a", "b", "c", "d"}, "lm");
  int parameters = 0;
  for (const ExploreStep& s : page.pipeline) {
    const bool weight = s.name.size() > 7 && s.name.compare(s.name.size() - 7, 7, ".weight") == 0;
    EXPECT_EQ(s.parameter, weight) << s.name;
    parameters += s.parameter;
  }
  EXPECT_EQ(parameters, 4);  // W_query, W_key, W_value, out_proj
  const std::string html = explore_html(page, {ExplorePrecision::kF32});
  EXPECT_NE(html.find("\"name\":\"blocks.0.W_query.weight\",\"parameter\":true"), std::string::npos);
}

TEST(ExploreGpt, AModelWithoutBlocksIsRefused) {
  Generator gen(1);
  DecoderModel model = tiny_gpt(5, 4, 4, 2, 0, gen);
  try {
    explore_model(model, {1, 2}, {"a", "b"}, "t");
    ADD_FAILURE() << "a page of no blocks was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no blocks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
