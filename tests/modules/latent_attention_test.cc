// MultiHeadLatentAttention (modules/latent_attention.h): the fused path against the textbook one,
// forward and backward, on random shapes; the state dict the book class has; the config errors.
// The textbook path (and the seeded weights) against the PyTorch class: tests/pytorch's
// forward and backward differentials (module mla).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/modules/latent_attention.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::error_of;
using testing_support::relative_error;

struct MlaRun {
  Tensor y, dx;
  std::vector<Tensor> grads;
};

MlaRun run_mla(AttentionConfig c, AttentionPath path, int64_t B, int64_t T, uint64_t seed) {
  c.path = path;
  Generator gen(seed);
  MultiHeadLatentAttention m(c, gen);
  Generator data(seed + 1);
  const Tensor x = randn({B, T, c.d_in}, data), dy = randn({B, T, c.d_out()}, data);
  MlaRun r;
  r.y = m.forward(x);
  r.dx = m.backward(dy);
  for (const StateEntry& e : m.state_dict()) r.grads.push_back(e.grad->clone());
  return r;
}

TEST(LatentAttention, TheFusedPathAgreesWithTheTextbookForwardAndBackward) {
  std::mt19937 rng(31);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int i = 0; i < 40; ++i) {
    const int64_t H = pick(1, 4), D = i % 8 == 7 ? 64 : pick(1, 9), T = pick(1, 40), B = pick(1, 3);
    AttentionConfig c = attention_config("mla", pick(1, 12), H * D, T + pick(0, 3), 0.0, H, pick(0, 1) == 1);
    if (i % 2 == 1) c.latent_dim = pick(1, 12);
    const std::string what = "case " + std::to_string(i) + " H=" + std::to_string(H) + " D=" + std::to_string(D) +
                             " T=" + std::to_string(T) + " L=" + std::to_string(c.latent_dim);
    const MlaRun fused = run_mla(c, AttentionPath::kFused, B, T, 100 + i);
    const MlaRun textbook = run_mla(c, AttentionPath::kTextbook, B, T, 100 + i);
    EXPECT_LE(relative_error(fused.y, textbook.y), 1e-5) << what;
    EXPECT_LE(relative_error(fused.dx, textbook.dx), 1e-4) << what;
    ASSERT_EQ(fused.grads.size(), textbook.grads.size());
    for (size_t g = 0; g < fused.grads.size(); ++g) EXPECT_LE(relative_error(fused.grads[g], textbook.grads[g]), 1e-4) << what;
  }
}

TEST(LatentAttention, ItsStateIsTheBookClasssAndItsLatentIsNarrow) {
  AttentionConfig c = attention_config("mla", 10, 64, 8, 0.0, 4, true);
  EXPECT_EQ(c.latent_dim, 16);  // max(16, 64 / 8)
  EXPECT_EQ(attention_config("mla", 10, 256, 8, 0.0, 4).latent_dim, 32);
  c.latent_dim = 6;
  Generator gen(123);
  MultiHeadLatentAttention m(c, gen);
  std::vector<std::string> names;
  for (const StateEntry& e : m.state_dict()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"W_query.weight", "W_query.bias", "W_DKV.weight", "W_DKV.bias",
                                             "W_UK.weight", "W_UK.bias", "W_UV.weight", "W_UV.bias",
                                             "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m.W_DKV.weight.shape(), (Shape{6, 10}));
  EXPECT_EQ(m.W_UK.weight.shape(), (Shape{64, 6}));
  EXPECT_EQ(m.W_UV.weight.shape(), (Shape{64, 6}));
}

TEST(LatentAttention, BadConfigsAreRefusedNamingTheValue) {
  Generator gen(1);
  AttentionConfig c = attention_config("mla", 4, 8, 6, 0.0, 2);
  c.latent_dim = -3;
  EXPECT_NE(error_of([&] { make_attention_module("mla", c, gen); }).find("latent_dim (-3) must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([&] { attention_config("mla", 4, 10, 6, 0.0, 4); }).find("d_out (10) must be divisible by "
                                                                              "num_heads (4)"),
            std::string::npos);
  AttentionConfig rope = attention_config("mla", 4, 8, 6, 0.0, 2);
  rope.attention.rope = kernels::RopeLayout::kHalf;
  EXPECT_NE(error_of([&] { make_attention_module("mla", rope, gen); }).find("takes no variants"), std::string::npos);
  AttentionConfig mha = attention_config("mha", 4, 8, 6, 0.0, 2);
  mha.latent_dim = 4;
  EXPECT_NE(error_of([&] { make_attention_module("mha", mha, gen); }).find("latent_dim is mla's"), std::string::npos);
  Generator g2(2);
  MultiHeadLatentAttention m(attention_config("mla", 4, 8, 6, 0.0, 2), g2);
  EXPECT_NE(error_of([&] { m.forward(randn({1, 7, 4}, g2)); }).find("context_length is 6"), std::string::npos);
  EXPECT_NE(error_of([&] { m.backward(randn({1, 3, 8}, g2)); }).find("backward before forward"), std::string::npos);
}

// Absorbed decoding: a prompt in pieces, then token by token, through the latent cache gives the
// rows of one forward over the whole sequence, with and without biases, on both paths' forward;
// the cache keeps L numbers per token where keys and values would be 2 d_out.
TEST(LatentAttention, AbsorbedDecodingFromTheLatentCacheEqualsTheForward) {
  Generator gen(21);
  for (const bool bias : {false, true}) {
    AttentionConfig c = attention_config("mla", 7, 12, 16, 0.0, 3, bias);
    c.latent_dim = 5;
    MultiHeadLatentAttention m(c, gen);
    if (bias)  // biases far from zero, so that dropping one would show
      for (Linear* l : {&m.W_query, &m.W_DKV, &m.W_UK, &m.W_UV})
        for (int64_t i = 0; i < l->bias.numel(); ++i) l->bias.data()[i] += 1.0f;
    m.train(false);
    Generator data(22);
    const Tensor x = randn({2, 9, 7}, data);
    const Tensor whole = m.forward(x).clone();
    LatentCache cache = m.new_cache(2, 12);
    EXPECT_EQ(cache.bytes(), 2 * 12 * 5 * 4);  // MultiHeadAttention's: 2 * 12 * 2 * 12 * 4
    int64_t t = 0;
    for (const int64_t n : {3, 1, 4, 1}) {
      const Tensor part = m.forward_cached(x.slice(1, t, t + n).contiguous(), cache);
      EXPECT_LE(max_abs_diff(part, whole.slice(1, t, t + n)), 2e-6) << "bias " << bias << " tokens " << t;
      t += n;
    }
    EXPECT_EQ(cache.length, 9);
    EXPECT_NE(error_of([&] { m.forward_cached(x.slice(1, 0, 4).contiguous(), cache); })
                  .find("4 new tokens after 9 exceed the cache's capacity of 12"),
              std::string::npos);
    EXPECT_NE(error_of([&] { m.backward(randn({2, 1, 12}, data)); }).find("backward before forward"), std::string::npos);
  }
}

TEST(LatentAttention, TheLatentCacheRefusesTrainingAndCachesOfAnotherShape) {
  Generator gen(23);
  MultiHeadLatentAttention m(attention_config("mla", 4, 8, 6, 0.5, 2), gen);
  LatentCache cache = m.new_cache(1, 4);
  m.train(true);
  EXPECT_NE(error_of([&] { m.forward_cached(randn({1, 1, 4}, gen), cache); }).find("call train(false) first"),
            std::string::npos);
  m.train(false);
  EXPECT_NE(error_of([&] { m.forward_cached(randn({2, 1, 4}, gen), cache); }).find("takes (1, T, 4)"), std::string::npos);
  AttentionConfig wide = attention_config("mla", 4, 8, 6, 0.0, 2);
  wide.latent_dim = 3;
  LatentCache other = MultiHeadLatentAttention(wide, gen).new_cache(1, 4);
  EXPECT_NE(error_of([&] { m.forward_cached(randn({1, 1, 4}, gen), other); }).find("latents of 3 numbers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m.new_cache(1, 0); }).find("at least 1, got 1 and 0"), std::string::npos);
  EXPECT_NE(error_of([&] { m.forward_token_by_token(randn({1, 2, 5}, gen)); }).find("d_in = 4), got tensor (1, 2, 5)"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
