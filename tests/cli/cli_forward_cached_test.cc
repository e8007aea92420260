// `qkv forward --cached` as a user runs it: the modules with an inference cache (multi-head
// attention and its gated form over a KV cache, latent attention, Qwen3.5's linear-attention
// layer) give the forward's output through it, token by token; the
// others, model families and the training-only flags are refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "qkv/io/safetensors.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

TEST_F(CliTest, CachedFormGivesTheForwardsOutputTokenByToken) {
  const std::string text = "--text \"Your journey starts with one step and then another\" --context-length 16 ";
  for (const std::string& module :
       {std::string("mha --d-in 8 --d-out 12 --num-heads 3 --qkv-bias --seed 5 "),
        std::string("gated-mha --d-in 8 --d-out 16 --num-heads 4 --num-kv-heads 2 --rope half --seed 6 "),
        std::string("mla --d-in 8 --d-out 12 --num-heads 3 --latent-dim 5 --qkv-bias --seed 7 "),
        std::string("gated-deltanet --d-in 8 --num-heads 4 --num-kv-heads 2 --head-dim 4 --value-head-dim 2 "
                    "--conv-kernel 4 --seed 9 ")}) {
    SCOPED_TRACE(module);
    const std::string base = "forward --module " + module + text;
    Result r = run(base + "--output whole.st");
    ASSERT_EQ(r.status, 0) << r.err;
    r = run(base + "--cached --output cached.st");
    ASSERT_EQ(r.status, 0) << r.err;
    const Tensor whole = load_safetensors(path("whole.st")).get("output"),
                 cached = load_safetensors(path("cached.st")).get("output");
    ASSERT_EQ(whole.shape(), cached.shape());
    ASSERT_GE(whole.size(1), 8);  // the text's tokens, each a decoding step
    const std::vector<float> a = whole.to_vector(), b = cached.to_vector();
    double scale = 0, worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
      worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 1e-5 * scale);
  }
}

TEST_F(CliTest, CachedFormRefusesWhatHasNoCacheOrIsTraining) {
  const std::pair<std::string, std::string> cases[] = {
      {"forward --module deltanet --d-in 4 --d-out 4 --num-heads 2 --context-length 8 --text hi --cached",
       "--cached: deltanet (GatedDeltaNet) has no inference cache (modules with one: mha, gated-mha, mla, "
       "gated-deltanet)"},
      {"forward --module mla --d-in 4 --d-out 4 --num-heads 2 --context-length 8 --text hi --cached --train",
       "--cached: not with --train: the cached form is inference"},
      {"forward --module mla --d-in 4 --d-out 4 --num-heads 2 --context-length 8 --text hi --cached --attn-weights a.st",
       "--cached: not with --attn-weights"},
      {"forward --module gpt --seed 1 --vocab-size 16 --d-model 8 --num-layers 1 --num-heads 2 --context-length 8 "
       "--cached",
       "--cached: a flag of the modules with an inference cache (mha, gated-mha, mla, gated-deltanet), not of "
       "--module gpt"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

}  // namespace
}  // namespace qkv
