// `qkv bench --module cache-memory` as a user runs it: the book's MLA estimator's figures (ch04/05_mla's
// README: 3.25, 0.81 and 0.81 GB; 4.00x and 4.03x) from qkv's caches, a hybrid model's states constant in
// T, and bad flags.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

TEST_F(CliTest, CacheMemoryReproducesTheBooksMlaEstimate) {
  Result r = run("bench --module cache-memory --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("MHA  3.25 GB"));
  EXPECT_THAT(r.out, HasSubstr("GQA  0.81 GB"));
  EXPECT_THAT(r.out, HasSubstr("MLA  0.81 GB"));
  EXPECT_THAT(r.out, HasSubstr("MHA / GQA 4.00x (saves 75.00%), MHA / MLA 4.03x (saves 75.19%)"));
  const nlohmann::json j = last_json_line(r.out);
  // T=8192, 48 layers, keys and values of 24 (6) heads of ceil(2048 / 24) = 86, bf16; 1024 latents
  EXPECT_EQ(j["mha_bytes"].get<int64_t>(), int64_t{8192} * 48 * 2 * 24 * 86 * 2);
  EXPECT_EQ(j["gqa_bytes"].get<int64_t>(), int64_t{8192} * 48 * 2 * 6 * 86 * 2);
  EXPECT_EQ(j["mla_bytes"].get<int64_t>(), int64_t{8192} * 48 * 1024 * 2);
}

// Qwen3.5-0.8B: 6 attention layers of 2 key/value heads of 256, 18 Gated DeltaNet layers of 16 value
// heads (16 key heads) of 128 and a kernel of 4; Qwen3-0.6B: 28 layers of 8 key/value heads of 128.
TEST_F(CliTest, CacheMemoryOfAHybridModelGrowsWithItsAttentionLayersOnly) {
  auto run_json = [&](const std::string& args) {
    Result r = run("bench --module cache-memory --cache-dtype f32 --json " + args);
    EXPECT_EQ(r.status, 0) << r.err;
    return last_json_line(r.out);
  };
  const nlohmann::json q35 = run_json("--preset qwen3.5-0.8b --seq-len 32768");
  EXPECT_EQ(q35["attention_layers"].get<int64_t>(), 6);
  EXPECT_EQ(q35["linear_layers"].get<int64_t>(), 18);
  EXPECT_EQ(q35["kv_bytes"].get<int64_t>(), int64_t{6} * 2 * 2 * 256 * 32768 * 4);
  // per layer: the state 16 x 128 x 128 and the convolution's last 3 inputs of 2 x 16 x 128 + 16 x 128 channels
  EXPECT_EQ(q35["state_bytes"].get<int64_t>(), int64_t{18} * (16 * 128 * 128 + 3 * (2 * 16 * 128 + 16 * 128)) * 4);  // floats
  const nlohmann::json longer = run_json("--preset qwen3.5-0.8b --seq-len 65536");
  EXPECT_EQ(longer["kv_bytes"].get<int64_t>(), 2 * q35["kv_bytes"].get<int64_t>());
  EXPECT_EQ(longer["state_bytes"].get<int64_t>(), q35["state_bytes"].get<int64_t>());
  const nlohmann::json q3 = run_json("--preset qwen3-0.6b --seq-len 32768");
  EXPECT_EQ(q3["kv_bytes"].get<int64_t>(), int64_t{28} * 2 * 8 * 128 * 32768 * 4);
  EXPECT_EQ(q3["state_bytes"].get<int64_t>(), 0);
}

TEST_F(CliTest, CacheMemoryBadFlagsNameTheValue) {
  const std::pair<std::string, std::string> cases[] = {
      {"--module cache-memory --num-heads 24 --num-kv-heads 5", "kv_heads (5) must divide heads (24)"},
      {"--module cache-memory --preset qwen3-0.6b --d-model 64", "--d-model and --preset"},
      {"--module cache-memory --iters 3", "--iters is not a flag of --module cache-memory"},
      {"--module cache-memory --seq-len 0", "tokens (0) must be at least 1"},
      {"--module cache-memory --latent-dim 0", "latent_dim (0) must be at least 1"},
      {"--module decode --kv-len 8 --num-layers 4", "--num-layers is a flag of --module cache-memory or gated-deltanet, not decode"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run("bench " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

}  // namespace
}  // namespace qkv
