// A page's computed attention weights (ExploreWeights::kComputed, qkv/explore/explore.h): what the
// page computes from float16 queries and keys, with the cells qkv stores, reads every weight within
// kExploreComputedTolerance of the weights it was made from; the stored cells are the ones that need it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/explore/explore.h"
#include "qkv/explore/page_encoding.h"

namespace qkv {
namespace {

// Softmax of the scores written out here, in double from the float32 queries and keys: the
// weights a module would give (the reference the page's numbers are held to).
Tensor reference_weights(const ExploreLayer& l, bool causal) {
  const int64_t H = l.queries.size(0), T = l.queries.size(1), D = l.queries.size(2);
  Tensor w = Tensor::zeros({H, T, T});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(static_cast<size_t>(T), -std::numeric_limits<double>::infinity());
      double hi = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < T; ++j) {
        if ((causal && j > i) || (l.window > 0 && j <= i - l.window)) continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(l.queries.at({h, i, d})) * double(l.keys.at({h, j, d}));
        double x = dot / l.scale;
        if (l.softcap > 0) x = l.softcap * std::tanh(x / l.softcap);
        if (!l.alibi.empty()) x -= l.alibi[static_cast<size_t>(h)] * double(i - j);
        s[static_cast<size_t>(j)] = x;
        hi = std::max(hi, x);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - hi));
      for (int64_t j = 0; j < T; ++j) w.at({h, i, j}) = static_cast<float>(s[static_cast<size_t>(j)] / sum);
    }
  return w;
}

ExploreLayer random_layer(int64_t H, int64_t T, int64_t D, float spread, uint64_t seed) {
  Generator g(seed);
  ExploreLayer l;
  l.queries = Tensor::empty({H, T, D});
  l.keys = Tensor::empty({H, T, D});
  g.normal(l.queries.data(), l.queries.numel());
  g.normal(l.keys.data(), l.keys.numel());
  for (Tensor* t : {&l.queries, &l.keys})
    for (int64_t n = 0; n < t->numel(); ++n) t->data()[n] *= spread;
  l.scale = std::sqrt(static_cast<float>(D));
  return l;
}

// The page's weights: explore_page_weights per row, then the stored cells.
double largest_page_error(const ExploreLayer& l, bool causal, const ExploreCorrections& c) {
  const int64_t H = l.weights.size(0), T = l.weights.size(1);
  const int64_t per = causal ? T * (T + 1) / 2 : T * T;
  std::vector<float> q(l.queries.data(), l.queries.data() + l.queries.numel());
  std::vector<float> k(l.keys.data(), l.keys.data() + l.keys.numel());
  if (fits_half(q.data(), q.size()))
    for (float& x : q) x = half_to_float(float_to_half(x));
  if (fits_half(k.data(), k.size()))
    for (float& x : k) x = half_to_float(float_to_half(x));
  std::vector<float> page(static_cast<size_t>(H * per));
  std::vector<float> row(static_cast<size_t>(T));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      explore_page_weights(l, causal, q, k, h, i, row.data());
      const int64_t jn = causal ? i + 1 : T, base = h * per + (causal ? i * (i + 1) / 2 : i * T);
      for (int64_t j = 0; j < jn; ++j) page[static_cast<size_t>(base + j)] = row[static_cast<size_t>(j)];
    }
  EXPECT_EQ(c.head_start.size(), static_cast<size_t>(H + 1));
  EXPECT_EQ(c.index.size(), c.value.size());
  for (size_t n = 0; n < c.index.size(); ++n) page[static_cast<size_t>(c.index[n])] = c.value[n];
  double worst = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < (causal ? i + 1 : T); ++j) {
        const int64_t at = h * per + (causal ? i * (i + 1) / 2 : i * T) + j;
        worst = std::max(worst, std::fabs(double(page[static_cast<size_t>(at)]) - l.weights.at({h, i, j})));
      }
  return worst;
}

TEST(ExploreComputed, PeakedHeadsNeedStoredCellsAndThenReadWithinTheTolerance) {
  // Scores of several units: float16's 3 significant digits move the larger weights by ~1e-3.
  ExploreLayer l = random_layer(3, 40, 16, 1.5f, 7);
  l.weights = reference_weights(l, true);
  const ExploreCorrections c = explore_corrections(l, true, kExploreComputedTolerance);
  EXPECT_GT(c.index.size(), 100u);
  EXPECT_LT(c.index.size(), 3u * 40 * 41 / 2);  // not every cell: the small weights move less than the tolerance
  EXPECT_LE(c.largest_uncorrected, kExploreComputedTolerance);
  EXPECT_LE(largest_page_error(l, true, c), kExploreComputedTolerance);
  for (size_t h = 0; h + 1 < c.head_start.size(); ++h) {  // head h's cells are head h's
    EXPECT_LE(c.head_start[h], c.head_start[h + 1]);
    for (int64_t n = c.head_start[h]; n < c.head_start[h + 1]; ++n)
      EXPECT_EQ(c.index[static_cast<size_t>(n)] / (40 * 41 / 2), static_cast<int32_t>(h));
  }
  // Without the stored cells the page would be off by more than the tolerance.
  EXPECT_GT(largest_page_error(l, true, ExploreCorrections{{}, {}, c.head_start, 0}), 10 * kExploreComputedTolerance);
}

TEST(ExploreComputed, VariantsAreComputedAsTheModuleComputesThem) {
  ExploreLayer l = random_layer(2, 24, 8, 1.0f, 11);
  l.softcap = 2.0f;
  l.alibi = {0.5f, 0.125f};
  l.window = 5;
  for (bool causal : {true, false}) {
    if (!causal) l.window = 0;  // a sliding window is causal
    l.weights = reference_weights(l, causal);
    const ExploreCorrections c = explore_corrections(l, causal, kExploreComputedTolerance);
    EXPECT_LE(largest_page_error(l, causal, c), kExploreComputedTolerance) << causal;
  }
}

TEST(ExploreComputed, QueriesAndKeysBeyondFloat16AreKeptAsFloat32AndNeedNoCells) {
  ExploreLayer l = random_layer(1, 16, 4, 1.0f, 3);
  l.queries.data()[5] = 1e5f;  // beyond 65504: the page holds them as float32 (as float16: inf)
  l.keys.data()[9] = -7e4f;
  l.scale = 1e5f;
  l.weights = reference_weights(l, true);
  const ExploreCorrections c = explore_corrections(l, true, kExploreComputedTolerance);
  EXPECT_EQ(c.index.size(), 0u);  // float32 products in double, as the reference: the same weights
  EXPECT_LE(largest_page_error(l, true, c), kExploreComputedTolerance);
}

TEST(ExploreComputed, WeightsThatAreNotTheScoresSoftmaxAreStoredWhereTheyDiffer) {
  // A layer whose weights are not softmax of its scores (as after a bug): the page must not show
  // its own numbers there; every differing cell is stored.
  ExploreLayer l = random_layer(1, 8, 4, 0.5f, 5);
  l.weights = reference_weights(l, true);
  l.weights.at({0, 6, 2}) += 0.25f;
  const ExploreCorrections c = explore_corrections(l, true, kExploreComputedTolerance);
  bool found = false;
  for (size_t n = 0; n < c.index.size(); ++n)
    if (c.index[n] == 6 * 7 / 2 + 2) found = c.value[n] == l.weights.at({0, 6, 2});
  EXPECT_TRUE(found);
  EXPECT_LE(largest_page_error(l, true, c), kExploreComputedTolerance);
}

TEST(ExploreComputed, ALayerOfTheWrongShapesIsRefused) {
  ExploreLayer l = random_layer(2, 8, 4, 1.0f, 1);
  l.weights = Tensor::zeros({2, 8, 7});
  EXPECT_THROW(explore_corrections(l, true, kExploreComputedTolerance), Error);
}

}  // namespace
}  // namespace qkv
