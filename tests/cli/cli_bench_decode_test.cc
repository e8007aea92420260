// `qkv bench --module decode` as a user runs it: the report's fields and their arithmetic, and
// bad flags. (Timings are the benchmark's business, not a test's.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

class CliBenchDecode : public CliTest {};

TEST_F(CliBenchDecode, ReportsBytesReadAgainstTheBandwidth) {
  Result r = run("bench --module decode --kv-len 300 --batch 2 --num-heads 6 --num-kv-heads 2 --head-dim 16 "
                 "--cache-dtype bf16 --iters 3 --threads 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("decode (one query per head over a KV cache), B=2 H=6 G=2 D=16 kv_len=300 bf16"));
  EXPECT_THAT(r.out, HasSubstr("% of the measured read bandwidth"));
  const nlohmann::json j = last_json_line(r.out);
  for (const char* key : {"median_ms", "read_gb_s", "bandwidth_gb_s", "read_bytes", "percent_of_bandwidth"})
    ASSERT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["times_ms"].size(), 3u);
  EXPECT_EQ(j["threads"].get<int>(), 2);
  // B G S (D + Dv) bytes of bf16.
  EXPECT_DOUBLE_EQ(j["read_bytes"].get<double>(), 2.0 * 2 * 300 * (16 + 16) * 2);
  EXPECT_NEAR(j["read_gb_s"].get<double>(), j["read_bytes"].get<double>() / (j["median_ms"].get<double>() * 1e-3) / 1e9,
              1e-9);
  EXPECT_GT(j["bandwidth_gb_s"].get<double>(), 0.0);
  EXPECT_NEAR(j["percent_of_bandwidth"].get<double>(),
              100.0 * j["read_gb_s"].get<double>() / j["bandwidth_gb_s"].get<double>(), 1e-9);
}

TEST_F(CliBenchDecode, LatentAttentionReadsTheLatentsOnceForEveryHead) {
  Result r = run("bench --module decode --kv-len 200 --batch 2 --num-heads 5 --head-dim 8 --latent-dim 24 --iters 2 "
                 "--threads 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("decode, latent attention absorbed (5 queries of latent_dim 24 over the cached latents, "
                               "keys and values both), B=2 kv_len=200"));
  const nlohmann::json j = last_json_line(r.out);
  EXPECT_EQ(j["attention"], "latent");
  EXPECT_DOUBLE_EQ(j["read_bytes"].get<double>(), 2.0 * 200 * 24 * 4);  // B S L floats, not B H S 2 D
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), 4.0 * 2 * 5 * 200 * 24);   // scores and weighted sums of every head
  EXPECT_NEAR(j["gflops"].get<double>(), j["flops"].get<double>() / (j["median_ms"].get<double>() * 1e-3) / 1e9, 1e-9);
  EXPECT_GT(j["peak_gflops"].get<double>(), 0.0);
  EXPECT_EQ(j["times_ms"].size(), 2u);
}

TEST_F(CliBenchDecode, BadFlagsNameTheValueAndWhatWasExpected) {
  const std::pair<std::string, std::string> cases[] = {
      {"--module decode --kv-len 0", "--kv-len 0: must be at least 1"},
      {"--module decode", "--kv-len 0: must be at least 1"},
      {"--module decode --kv-len 8 --num-heads 12 --num-kv-heads 5", "--num-kv-heads (5) must divide --num-heads (12)"},
      {"--module decode --kv-len 8 --cache-dtype fp8", "--cache-dtype"},
      {"--module decode --kv-len 8 --seq-len 4", "--seq-len is not a flag of --module decode"},
      {"--module decode --kv-len 8 --head-dim -1", "--head-dim (-1) must be at least 1"},
      {"--module attention-core --seq-len 4 --kv-len 8", "--kv-len is a flag of --module decode, not attention-core"},
      {"--module attention-core", "--seq-len is required for --module attention-core"},
      {"--module decode --kv-len 8 --latent-dim 0", "--latent-dim 0: must be at least 1"},
      {"--module decode --kv-len 8 --latent-dim 4 --cache-dtype bf16", "--latent-dim with --cache-dtype or"},
      {"--module mha --seq-len 8 --latent-dim 4", "--latent-dim is a flag of --module cache-memory or decode, not mha"},
      // 0 was taken as "not given" (the default head width; no softcap) where --help says > 0
      {"--module decode --kv-len 8 --head-dim 0", "--head-dim (0) must be at least 1"},
      {"--module attention-core --seq-len 4 --head-dim 0", "--head-dim (0) must be at least 1"},
      {"--module attention-core --seq-len 4 --softcap 0", "--softcap (0) must be positive"},
      {"--module gated-deltanet --seq-len 4 --head-dim 0", "--head-dim (0) must be at least 1"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run("bench " + args);
    EXPECT_EQ(r.status, 2) << args;  // bad usage, as a flag's value out of its range is elsewhere
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

}  // namespace
}  // namespace qkv
