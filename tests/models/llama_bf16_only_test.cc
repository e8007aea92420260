// A Llama / Qwen3 model loaded with its weights in bf16 only (LlamaModel::load_bf16_only through
// llama_model_from): the same numbers as the float-loaded model with bf16 copies kept
// (keep_bf16_weights) - bit for bit on the cached path, forward() as its last position - and every
// use that needs the float weights refused with a message saying how to load them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/models/llama_weights.h"
#include "test_support.h"

namespace qkv {
namespace {

LlamaConfig small(LlamaFamily family, bool tied) {
  LlamaConfig c;
  c.family = family;
  c.vocab_size = 40;
  c.hidden_size = 24;
  c.intermediate_size = 36;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = tied;
  c.dtype = Dtype::kBF16;
  return c;
}

class LlamaBf16Only : public ::testing::TestWithParam<std::tuple<LlamaFamily, bool>> {};

TEST_P(LlamaBf16Only, SameNumbersAsTheFloatModelWithBf16Copies) {
  const auto [family, tied] = GetParam();
  const std::string dir = testing_support::temp_dir("qkv-llama-bf16-");
  {
    Generator gen(5);
    LlamaModel m(small(family, tied), gen);
    save_llama_directory(m, dir, /*bf16=*/true);  // a BF16 checkpoint, as the families ship
  }
  const LlamaWeights w = read_llama_weights(dir);
  EXPECT_EQ(w.stored_dtype, "BF16");
  Generator g1, g2;
  auto only = llama_model_from(w, Dtype::kBF16, AttentionPath::kFused, g1, /*bf16_only=*/true);
  auto full = llama_model_from(w, Dtype::kBF16, AttentionPath::kFused, g2, /*bf16_only=*/false);
  full->keep_bf16_weights();
  ASSERT_TRUE(only->bf16_only());
  const std::vector<int64_t> ids = {3, 17, 5, 39, 0, 22, 8};
  const int64_t T = static_cast<int64_t>(ids.size());
  // cached: a prefill of 4 then one token at a time, bit for bit
  kernels::KvCache c1 = only->make_cache(1), c2 = full->make_cache(1);
  std::vector<int64_t> head(ids.begin(), ids.begin() + 4);
  EXPECT_EQ(only->forward_cached(head, 1, 4, c1).to_vector(), full->forward_cached(head, 1, 4, c2).to_vector());
  for (int64_t t = 4; t < T; ++t)
    EXPECT_EQ(only->forward_cached({ids[t]}, 1, 1, c1).to_vector(), full->forward_cached({ids[t]}, 1, 1, c2).to_vector())
        << "at position " << t;
  // forward(): every position's logits by the cached computation; its last row is the cached prefill's
  const Tensor all = only->forward(ids, 1, T);
  ASSERT_EQ(all.shape(), (Shape{1, T, 40}));
  kernels::KvCache c3 = full->make_cache(1);
  const Tensor last = full->forward_cached(ids, 1, T, c3);
  EXPECT_EQ(all.select(1, T - 1).contiguous().to_vector(), last.select(0, 0).contiguous().to_vector());
  // and every row within bf16's bound of the float model's full forward in bf16 mode
  const Tensor ref = full->forward(ids, 1, T);
  EXPECT_LE(max_abs_diff(all, ref), 2e-2 * max_abs_diff(ref, Tensor::zeros(ref.shape())));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, LlamaBf16Only,
                         ::testing::Combine(::testing::Values(LlamaFamily::kLlama, LlamaFamily::kQwen3),
                                            ::testing::Bool()));

TEST(LlamaBf16OnlyRefusals, WhatNeedsTheFloatWeightsSaysHowToLoadThem) {
  const std::string dir = testing_support::temp_dir("qkv-llama-bf16-");
  {
    Generator gen(6);
    LlamaModel m(small(LlamaFamily::kQwen3, true), gen);
    save_llama_directory(m, dir, true);
  }
  Generator g;
  auto m = llama_model_from(read_llama_weights(dir), Dtype::kBF16, AttentionPath::kFused, g, true);
  const std::string how = "load it with f32 products";
  for (const std::string& e : {testing_support::error_of([&] { m->state_dict(); }),
                               testing_support::error_of([&] { m->train(true); }),
                               testing_support::error_of([&] { m->keep_bf16_weights(false); }),
                               testing_support::error_of([&] {
                                 m->forward({1, 2}, 1, 2);
                                 m->backward(Tensor::zeros({1, 2, 40}));
                               })})
    EXPECT_NE(e.find(how), std::string::npos) << e;
  m->record_traces(true);
  const std::string t = testing_support::error_of([&] { m->forward({1, 2}, 1, 2); });
  EXPECT_NE(t.find("load it with f32 products"), std::string::npos) << t;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qkv
