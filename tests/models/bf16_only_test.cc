// A model loaded with its weights in bf16 only (DecoderModel::load_bf16_only): the same numbers as
// the float model with bf16 copies kept (keep_bf16_weights) - bit for bit on the cached path,
// forward() as its last position - for every family the decoder has (Llama 3, Qwen2.5, Qwen3 and
// Qwen3.5 from a BF16 Hugging Face folder, as they ship; the book's GPT, whose positions, biases and LayerNorms are read
// as floats beside the bf16 products), and every use that needs the float weights refused with a
// message saying how to load them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "model_support.h"
#include "qkv/models/attention_lm.h"
#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/models/hf_folder.h"
#include "test_support.h"

namespace qkv {
namespace {

// A small Qwen3.5: two Gated DeltaNet layers (4 value heads sharing 2 key heads) and two gated
// attention layers (partial rotary: 4 of 8 dims).
DecoderSpec small_qwen3_5(bool tied) {
  return qwen3_5_sizes(24, 36, 4, 2, 16, {"linear_attention", "full_attention", "linear_attention", "full_attention"},
                       tied);
}

DecoderSpec small(const std::string& family, bool tied) {
  DecoderSpec s = family == "gpt"       ? gpt_spec(40, 16, 24, 4, 2, 0.0, /*qkv_bias=*/true, tied)
                  : family == "qwen3_5" ? small_qwen3_5(tied)
                                        : llama_sizes(family, 40, 24, 36, 2, 4, 2, 8, 16, tied);
  s.attention.dtype = Dtype::kBF16;
  s.path = AttentionPath::kFused;
  return s;
}

// The float model `m` and a bf16-only one holding its weights (rounded to bf16 where the products
// read them), as a BF16 checkpoint of it loads.
std::unique_ptr<DecoderModel> bf16_only_of(LanguageModel& m) {
  std::map<std::string, Tensor> state;
  for (const StateEntry& e : m.state_dict())
    if (e.tensor) state[e.name] = e.tensor->contiguous();
  Generator g;
  std::unique_ptr<DecoderModel> only = build_model_to_load(m.spec(), g);
  only->load_bf16_only(
      [&](const std::string& name, uint16_t* out) {
        const Tensor& t = state.at(name);
        floats_to_bf16(t.data(), out, static_cast<size_t>(t.numel()));
      },
      [&](const std::string& name, float* out) {
        const Tensor& t = state.at(name);
        std::copy(t.data(), t.data() + t.numel(), out);
      });
  return only;
}

void expect_same_numbers(LanguageModel& only, LanguageModel& full) {
  full.keep_bf16_weights();
  ASSERT_TRUE(only.bf16_only());
  const std::vector<int64_t> ids = {3, 17, 5, 39, 0, 22, 8};
  const int64_t T = static_cast<int64_t>(ids.size());
  // cached: a prefill of 4 then one token at a time, bit for bit
  kernels::KvCache c1 = only.make_cache(1, kernels::CacheDtype::kF32), c2 = full.make_cache(1, kernels::CacheDtype::kF32);
  std::vector<int64_t> head(ids.begin(), ids.begin() + 4);
  EXPECT_EQ(only.forward_cached(head, 1, 4, c1).to_vector(), full.forward_cached(head, 1, 4, c2).to_vector());
  for (int64_t t = 4; t < T; ++t)
    EXPECT_EQ(only.forward_cached({ids[t]}, 1, 1, c1).to_vector(), full.forward_cached({ids[t]}, 1, 1, c2).to_vector())
        << "at position " << t;
  // forward(): every position's logits by the cached computation; its last row is the cached prefill's
  const Tensor all = only.forward(ids, 1, T);
  ASSERT_EQ(all.shape(), (Shape{1, T, 40}));
  kernels::KvCache c3 = full.make_cache(1, kernels::CacheDtype::kF32);
  const Tensor last = full.forward_cached(ids, 1, T, c3);
  EXPECT_EQ(all.select(1, T - 1).contiguous().to_vector(), last.select(0, 0).contiguous().to_vector());
  // and every row within bf16's bound of the float model's full forward in bf16 mode
  const Tensor ref = full.forward(ids, 1, T);
  EXPECT_LE(max_abs_diff(all, ref), 2e-2 * max_abs_diff(ref, Tensor::zeros(ref.shape())));
}

class Bf16Only : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(Bf16Only, SameNumbersAsTheFloatModelWithBf16Copies) {
  const auto [family, tied] = GetParam();
  Generator gen(5);
  DecoderModel m(small(family, tied), gen);
  if (family == "gpt") {  // GPT-2 ships no BF16 folder: its state, rounded where the products read it
    for (const StateEntry& e : m.state_dict())  // its floats as bf16 values, so the copies are the same
      if (e.tensor && e.shape().size() == 2) {
        std::vector<uint16_t> b(static_cast<size_t>(e.tensor->numel()));
        floats_to_bf16(e.tensor->data(), b.data(), b.size());
        bf16_to_floats(b.data(), e.tensor->data(), b.size());
      }
    m.eval();
    expect_same_numbers(*bf16_only_of(m), m);
    return;
  }
  const std::string dir = testing_support::temp_dir("qkv-bf16-only-");
  save_hf_folder(m, dir, /*bf16=*/true);  // a BF16 checkpoint, as the families ship
  const HfFolder w = read_hf_folder(dir);
  EXPECT_EQ(w.stored_dtype, "BF16");
  Generator g1, g2;
  auto only = hf_model_from(w, Dtype::kBF16, AttentionPath::kFused, g1, /*bf16_only=*/true);
  auto full = hf_model_from(w, Dtype::kBF16, AttentionPath::kFused, g2, /*bf16_only=*/false);
  expect_same_numbers(*only, *full);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16Only,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "qwen3_5", "gpt"), ::testing::Bool()));

TEST(Bf16OnlyRefusals, WhatNeedsTheFloatWeightsSaysHowToLoadThem) {
  Generator gen(6);
  DecoderModel full(small("qwen3", true), gen);
  std::unique_ptr<DecoderModel> m = bf16_only_of(full);
  const std::string how = "load it with f32 products";
  for (const std::string& e : {testing_support::error_of([&] { m->state_dict(); }),
                               testing_support::error_of([&] { m->train(true); }),
                               testing_support::error_of([&] { m->keep_bf16_weights(false); }),
                               testing_support::error_of([&] {
                                 m->forward({1, 2}, 1, 2);
                                 m->backward(Tensor::zeros({1, 2, 40}));
                               })})
    EXPECT_NE(e.find(how), std::string::npos) << e;
  ForwardObserver watch;
  const std::string t = testing_support::error_of([&] { m->forward({1, 2}, 1, 2, &watch); });
  EXPECT_NE(t.find("load it with f32 products"), std::string::npos) << t;
  // a head computing in f32 (the attention-only LM's) cannot hold bf16 weights only
  LMConfig c;
  c.vocab_size = 9;
  c.context_length = 4;
  c.d_model = 8;
  c.attention.heads = 2;
  c.attention.dtype = Dtype::kBF16;
  c.path = AttentionPath::kFused;
  set_head_dim(c);
  DecoderModel lm(lm_spec(c), gen);
  EXPECT_NE(testing_support::error_of([&] { bf16_only_of(lm); }).find("its head computes in f32"), std::string::npos);
}

}  // namespace
}  // namespace qkv
