// How closely a candidate model's next-token distributions follow a reference's
// (models/logit_agreement.h): the figures on a toy distribution worked out here from their
// definitions, a model against itself (nothing moves), the windows of a text longer than the
// context, and quantized copies of a model, whose KL divergence grows as their bits shrink.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model_support.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/logit_agreement.h"
#include "qkv/qkv.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;
using testing_support::temp_dir;

// softmax of a row, in double, written out: exp(x_v) / sum exp(x).
std::vector<double> softmax_of(const std::vector<float>& x) {
  std::vector<double> p;
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v));
  for (float v : x) p.push_back(std::exp(static_cast<double>(v)) / sum);
  return p;
}

// Two positions over three tokens. Position 0: the same most likely token (2), next token 1;
// position 1: the reference's is token 2, the candidate's token 0, no next token.
TEST(LogitAgreement, TwoPositionsOfThreeTokensGiveTheDefinitions) {
  const std::vector<std::vector<float>> ref = {{1, 2, 3}, {0, 0, 1}}, cand = {{1, 2, 2.5f}, {1, 0, 0}};
  LogitTally tally;
  tally.add(ref[0].data(), cand[0].data(), 3, 1);
  tally.add(ref[1].data(), cand[1].data(), 3, -1);
  const LogitAgreement a = tally.result();
  double kl[2];
  for (int t = 0; t < 2; ++t) {
    const std::vector<double> p = softmax_of(ref[t]), q = softmax_of(cand[t]);
    kl[t] = 0;
    for (int v = 0; v < 3; ++v) kl[t] += p[v] * std::log(p[v] / q[v]);
  }
  // worked out on paper too: KL = 0.0291451..., 0.3641753...
  EXPECT_NEAR(kl[0], 0.0291451188, 1e-9);
  EXPECT_NEAR(kl[1], 0.3641753271, 1e-9);
  EXPECT_EQ(a.positions, 2);
  EXPECT_EQ(a.predictions, 1);
  EXPECT_NEAR(a.mean_kl, (kl[0] + kl[1]) / 2, 1e-12);
  EXPECT_NEAR(a.max_kl, kl[1], 1e-12);
  EXPECT_EQ(a.top1, 0.5);
  EXPECT_NEAR(a.ref_perplexity, 1 / softmax_of(ref[0])[1], 1e-12);   // 4.0861...
  EXPECT_NEAR(a.cand_perplexity, 1 / softmax_of(cand[0])[1], 1e-12);  // 3.0166...
  EXPECT_NEAR(a.ref_perplexity, 4.0861612696, 1e-9);
  EXPECT_NEAR(a.ref_nll, -std::log(softmax_of(ref[0])[1]), 1e-12);
  EXPECT_NEAR(a.cand_nll, -std::log(softmax_of(cand[0])[1]), 1e-12);
}

// Distributions within rounding of one-hot (logits 800 apart: the others' probabilities e^-800,
// below a double's range): a KL that sums to a hair below 0 by rounding counts as 0, and the
// perplexity of an unlikely next token is past a double (inf) while its mean -log p is not.
TEST(LogitAgreement, SaturatedDistributionsStayAtOrAbove0) {
  const std::vector<float> ref = {800, 0, 0}, cand = {800, 0, 1};
  LogitTally tally;
  tally.add(ref.data(), cand.data(), 3, 1);
  const LogitAgreement a = tally.result();
  EXPECT_GE(a.mean_kl, 0.0);
  EXPECT_LT(a.mean_kl, 1e-300);
  EXPECT_EQ(a.top1, 1.0);
  EXPECT_NEAR(a.ref_nll, 800.0, 1e-9);
  EXPECT_EQ(a.ref_perplexity, INFINITY);
}

// Logits far from zero: the log-softmax subtracts the largest first (exp(1000) overflows a double).
TEST(LogitAgreement, LargeLogitsStayFinite) {
  const std::vector<float> ref = {1000, 999, 998}, cand = {1000, 998, 999};
  LogitTally tally;
  tally.add(ref.data(), cand.data(), 3, 2);
  const LogitAgreement a = tally.result();
  const std::vector<float> r0 = {2, 1, 0}, c0 = {2, 0, 1};  // the same distributions, shifted
  LogitTally small;
  small.add(r0.data(), c0.data(), 3, 2);
  EXPECT_TRUE(std::isfinite(a.mean_kl));
  EXPECT_GT(a.mean_kl, 0);
  EXPECT_NEAR(a.mean_kl, small.result().mean_kl, 1e-12);
  EXPECT_NEAR(a.ref_perplexity, small.result().ref_perplexity, 1e-9);
}

TEST(LogitAgreement, BadRowsAreRefusedNamingTheValue) {
  const std::vector<float> row = {0, 1, 2}, bad = {0, NAN, 2};
  LogitTally tally;
  EXPECT_THAT(error_of([&] { tally.add(row.data(), row.data(), 3, 3); }),
              HasSubstr("the next token 3 at position 0: expected an id in [0, 3) or -1"));
  EXPECT_THAT(error_of([&] { tally.add(row.data(), bad.data(), 3, 0); }),
              HasSubstr("the candidate's logit of token 1 at position 0 is nan; expected a finite number"));
  EXPECT_THAT(error_of([&] { tally.add(row.data(), row.data(), 0, -1); }), HasSubstr("of 0 tokens: expected at least 1"));
}

class LogitAgreementModels : public testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir("qkv_logit_agreement_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// A model against itself: every position's distributions are equal, so KL is exactly 0, every
// top token the same, the two perplexities one. A text of 20 tokens over a context of 8 runs as
// windows of 8, 8 and 4, each a fresh forward.
TEST_F(LogitAgreementModels, AModelAgainstItselfMovesNothing) {
  Generator gen(11);
  DecoderModel m(llama_sizes("qwen3", 50, 32, 64, 2, 4, 2, 8, 8), gen);
  m.eval();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 20; ++i) ids.push_back((i * 7 + 3) % 50);
  const std::vector<Tensor> windows = logits_over(m, ids);
  ASSERT_EQ(windows.size(), 3u);
  EXPECT_EQ(windows[0].shape(), (Shape{1, 8, 50}));
  EXPECT_EQ(windows[2].shape(), (Shape{1, 4, 50}));
  const Tensor second = m.forward(std::vector<int64_t>(ids.begin() + 8, ids.begin() + 16), 1, 8);
  EXPECT_EQ(std::memcmp(second.data(), windows[1].data(), 4 * static_cast<size_t>(second.numel())), 0);
  const LogitAgreement a = compare_on_text(m, m, ids);
  EXPECT_EQ(a.positions, 20);
  EXPECT_EQ(a.predictions, 19);
  EXPECT_EQ(a.mean_kl, 0.0);
  EXPECT_EQ(a.max_kl, 0.0);
  EXPECT_EQ(a.top1, 1.0);
  EXPECT_EQ(a.ref_perplexity, a.cand_perplexity);
  EXPECT_GT(a.ref_perplexity, 1.0);
  EXPECT_THAT(error_of([&] { compare_on_text(m, m, {3}); }),
              HasSubstr("the text has 1 token; comparing next-token predictions needs at least 2"));
  EXPECT_THAT(error_of([&] { logits_over(m, {3, 50}); }),
              HasSubstr("token 1 of the text is id 50; the model's vocabulary is [0, 50)"));
  Generator gen2(11);
  DecoderModel other(llama_sizes("qwen3", 60, 32, 64, 2, 4, 2, 8, 8), gen2);
  EXPECT_THAT(error_of([&] { compare_on_text(m, other, ids); }),
              HasSubstr("the reference has a vocabulary of 50 tokens, the candidate 60; expected the same"));
}

// The same weights quantized at load (rows of 256: whole blocks of every type) against the f32
// model: the distributions move (KL > 0), and Q8_0's 8.5 bits move them less than Q4_0's 4.5.
// Both candidates are compared with the same reference, so its perplexity is the same.
TEST_F(LogitAgreementModels, QuantizedCopiesMoveTheDistributionsByTheirBits) {
  Generator gen(5);
  DecoderModel m(llama_sizes("qwen3", 300, 256, 512, 2, 4, 2, 64, 64), gen);
  std::vector<std::string> notes;
  const std::string path = dir_ + "/m.gguf";
  std::ofstream(path, std::ios::binary) << gguf_model_bytes(m, nullptr, "f32", notes);
  LoadOptions f32;
  f32.dtype = Dtype::kF32;
  LoadedModel ref = load_model(path, f32);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 48; ++i) ids.push_back((i * 37 + 11) % 300);
  const std::vector<Tensor> ref_logits = logits_over(*ref.model, ids);
  LogitAgreement by_type[2];
  const char* types[2] = {"q8_0", "q4_0"};
  for (int k = 0; k < 2; ++k) {
    LoadOptions q;
    q.quantize = types[k];
    LoadedModel cand = load_model(path, q);
    by_type[k] = compare_logits(ref_logits, logits_over(*cand.model, ids), ids);
    EXPECT_GT(by_type[k].mean_kl, 0.0) << types[k];
    EXPECT_GE(by_type[k].max_kl, by_type[k].mean_kl) << types[k];
    EXPECT_GT(by_type[k].cand_perplexity, 1.0) << types[k];
  }
  EXPECT_LT(by_type[0].mean_kl, by_type[1].mean_kl);
  EXPECT_EQ(by_type[0].ref_perplexity, by_type[1].ref_perplexity);
}

}  // namespace
}  // namespace qkv
