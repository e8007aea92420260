// `qkv bench --module gated-deltanet` as a user runs it: the report's fields and their arithmetic
// (the chunked form's counted FLOPs written out here), the chunked and recurrent outputs' agreement,
// and bad flags. (Timings are the benchmark's business, not a test's.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

TEST_F(CliTest, GatedDeltaNetBenchCountsTheChunkedProducts) {
  Result r = run("bench --module gated-deltanet --seq-len 70 --num-heads 2 --head-dim 16 --batch 2 --iters 2 "
                 "--threads 2 --backward --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("gated-deltanet (the gated delta rule in chunks of 64), B=2 T=70 H=2 Dk=Dv=16, "
                               "forward + backward, 2 threads"));
  const nlohmann::json j = last_json_line(r.out);
  // chunks of 64 and 6 tokens, D = 16, triangles counted half. Forward: K K^T, Q K^T (C^2 D each),
  // (I + A)^-1 [V | K] (2 C^2 D), W S_0, Q S_0, K^T U (2 C D^2 each), P U (C^2 D). Backward: the
  // forward's first four again (4 C^2 D + 2 C D^2); P^T dY, (I + A)^-T dU, dA, dP, dQK K, dQK^T Q
  // (C^2 D each), (dKK + dKK^T) K (2 C^2 D); diag(tail) K dS, dR S_0^T, dY S_0^T, U dS^T, K^T G, Q^T G
  // (2 C D^2 each)
  auto forward = [](double C) { return (2 + 2 + 1) * C * C * 16 + 3 * 2 * C * 16 * 16; };
  auto backward = [](double C) { return (4 + 6 + 2) * C * C * 16 + (1 + 6) * 2 * C * 16 * 16; };
  const double want = 2 * 2 * (forward(64) + forward(6) + backward(64) + backward(6));
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), want);
  EXPECT_EQ(j["times_ms"].size(), 2u);
  EXPECT_NEAR(j["gflops"].get<double>(), want / (j["median_ms"].get<double>() * 1e-3) / 1e9, 1e-6);
  EXPECT_NEAR(j["speedup"].get<double>(), j["recurrence_median_ms"].get<double>() / j["median_ms"].get<double>(), 1e-9);
  EXPECT_LT(j["max_abs_difference"].get<double>(), 1e-5);
  EXPECT_GT(j["peak_gflops"].get<double>(), 0.0);
}

TEST_F(CliTest, GatedDeltaNetDecodingBenchSizesTheStatesAndAgreesWithTheDefinition) {
  Result r = run("bench --module gated-deltanet --new-tokens 3 --num-layers 2 --num-heads 3 --head-dim 10 --batch 2 "
                 "--threads 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("gated-deltanet decoding (one token through 2 layers' gated delta rule), B=2 H=3 "
                               "Dk=Dv=10, 2 threads"));
  const nlohmann::json j = last_json_line(r.out);
  EXPECT_EQ(j["state_bytes"].get<int64_t>(), 2 * 2 * 3 * 10 * 10 * 4);  // layers x B x H x Dk x Dv floats
  EXPECT_EQ(j["times_ms"].size(), 3u);
  EXPECT_NEAR(j["read_gb_s"].get<double>(), 4800 / (j["median_ms"].get<double>() * 1e-3) / 1e9, 1e-9);
  EXPECT_NEAR(j["speedup"].get<double>(), j["reference_median_ms"].get<double>() / j["median_ms"].get<double>(), 1e-9);
  // three tokens stepped in float (kernels/delta_rule_step.h): about a rounding a token of the
  // states' largest (2.03 x 2^-24 on AVX2 and AVX-512; each number's bound is the kernel test's)
  EXPECT_LT(j["max_state_difference"].get<double>(), 3 * 0x1p-24);
  EXPECT_LT(j["max_output_difference"].get<double>(), 1e-6);
  EXPECT_GT(j["bandwidth_gb_s"].get<double>(), 0.0);
  EXPECT_GE(j["eviction_bytes"].get<int64_t>(), int64_t{256} << 20);  // the caches flushed between steps
  EXPECT_GT(j["plain_read_gb_s"].get<double>(), 0.0);
}

TEST_F(CliTest, GatedDeltaNetBenchBadFlagsNameTheValue) {
  const std::pair<std::string, std::string> cases[] = {
      {"--module gated-deltanet", "--seq-len is required for --module gated-deltanet (or --new-tokens"},
      {"--module gated-deltanet --new-tokens 2 --seq-len 8", "--seq-len and --new-tokens: decoding times each"},
      {"--module gated-deltanet --new-tokens 0", "--new-tokens 0: must be at least 1"},
      {"--module gated-deltanet --new-tokens 2 --num-layers 0", "layers (0) and steps (2) must be at least 1"},
      {"--module gated-deltanet --seq-len 8 --num-layers 2", "--num-layers is a flag of --module gated-deltanet's "
                                                             "decoding steps"},
      {"--module gated-deltanet --new-tokens 2 --preset gpt2-small", "--preset is not a flag of --module gated-deltanet"},
      {"--module gated-deltanet --seq-len 8 --num-heads 0", "heads (0) and head_dim (128) must be at least 1"},
      {"--module gated-deltanet --seq-len 8 --window 4", "--window is not a flag of --module gated-deltanet"},
      {"--module gated-deltanet --seq-len 8 --iters 0", "iters (0) must be at least 1"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run("bench " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

}  // namespace
}  // namespace qkv
