// The GPT model's benchmark harness (qkv/perf/gpt_bench.h) on a small configuration: what each
// mode counts (FLOPs, weight bytes, tokens per second from the median), and bad shapes. Timings
// themselves are the benchmark's business: only their arithmetic is asserted.
#include <gtest/gtest.h>

#include <string>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
#include "qkv/models/gpt.h"
#include "model_support.h"
#include "qkv/perf/gpt_bench.h"

namespace qkv::perf {
namespace {

GptBenchShape small(GptBenchMode mode) {
  GptBenchShape s;
  s.name = "small";
  s.spec = gpt_spec(101, 24, 32, 4, 2, 0.1, false);
  s.mode = mode;
  s.batch = 2;
  s.seq_len = 6;
  return s;
}

// P = L (E 3E + E E + 2 E 4E) + V E = 2 * 12 * 32^2 + 101 * 32
constexpr double kProductParameters = 2.0 * 12 * 32 * 32 + 101.0 * 32;

TEST(GptBench, ForwardAndStepCountTwoAndSixFlopsPerWeightPerTokenPlusTheAttention) {
  ThreadPool& pool = default_pool();
  // attention: 4 L B H D T(T+1)/2 = 4 * 2 * 2 * 4 * 8 * 21
  const double attention = 4.0 * 2 * 2 * 4 * 8 * 21, forward = 2.0 * kProductParameters * 2 * 6 + attention;
  for (GptBenchMode mode : {GptBenchMode::kForward, GptBenchMode::kStep}) {
    const GptBenchReport r = run_gpt_bench(small(mode), 3, 1, pool);
    EXPECT_DOUBLE_EQ(r.product_parameters, kProductParameters);
    EXPECT_DOUBLE_EQ(r.flops, mode == GptBenchMode::kStep ? 3 * forward : forward);
    ASSERT_EQ(r.times_ms.size(), 3u);
    EXPECT_GT(r.median_ms, 0.0);
    EXPECT_NEAR(r.gflops, r.flops / (r.median_ms * 1e6), 1e-9 * r.gflops);
    EXPECT_GT(r.peak_gflops, 0.0);
    EXPECT_EQ(r.threads, default_pool().num_threads());
  }
}

TEST(GptBench, DecodeTimesEveryStepAndReadsEveryProductWeightOnce) {
  ThreadPool& pool = default_pool();
  for (Dtype dtype : {Dtype::kF32, Dtype::kBF16}) {
    GptBenchShape s = small(GptBenchMode::kDecode);
    s.new_tokens = 9;
    s.dtype = dtype;
    const GptBenchReport r = run_gpt_bench(s, 0, 2, pool);
    ASSERT_EQ(r.times_ms.size(), 9u);
    EXPECT_DOUBLE_EQ(r.weight_bytes, kProductParameters * (dtype == Dtype::kBF16 ? 2 : 4));
    EXPECT_NEAR(r.tokens_per_s, 2 * 1e3 / r.median_ms, 1e-9 * r.tokens_per_s);
    EXPECT_NEAR(r.weight_gb_s, r.weight_bytes / (r.median_ms * 1e6), 1e-9 * r.weight_gb_s);
    EXPECT_GT(r.bandwidth_gb_s, 0.0);
  }
}

// A Qwen3.5's decoding step also reads (and rewrites) its linear layers' states: each layer's
// Gated DeltaNet state (value heads x key width x value width) and its convolution's last K - 1
// inputs of q, k and v, in floats, counted from the config here; GPT-2's has none.
TEST(GptBench, DecodeCountsTheLinearLayersStates) {
  ThreadPool& pool = default_pool();
  GptBenchShape s;
  s.name = "tiny qwen3.5";
  s.spec = qwen3_5_sizes(16, 24, 2, 1, 32, {"linear_attention", "linear_attention", "linear_attention", "full_attention"});
  s.mode = GptBenchMode::kDecode;
  s.batch = 2;
  s.seq_len = 5;
  s.new_tokens = 4;
  const GptBenchReport r = run_gpt_bench(s, 0, 1, pool);
  // per layer and sequence: 4 value heads x 4 x 6, and 2 x (convolution's inputs: q, k 2 heads x 4, v 4 x 6)
  const double per_layer = 4 * 4 * 6 + 2 * (2 * 2 * 4 + 4 * 6);
  EXPECT_DOUBLE_EQ(r.state_bytes, 3 * 2 * per_layer * 4);
  EXPECT_NEAR(r.read_gb_s, (r.weight_bytes + r.cache_bytes + r.state_bytes) / (r.median_ms * 1e6), 1e-9 * r.read_gb_s);
  EXPECT_EQ(report_json(r)["state_bytes"].get<double>(), r.state_bytes);
  EXPECT_NE(report_text(r).find("MB of linear-attention states"), std::string::npos);
  GptBenchShape gpt = small(GptBenchMode::kDecode);
  gpt.new_tokens = 2;
  EXPECT_EQ(run_gpt_bench(gpt, 0, 1, pool).state_bytes, 0.0);
}

TEST(GptBench, ShapesOutsideTheModelAreErrorsNamingTheValue) {
  ThreadPool& pool = default_pool();
  auto message = [&](GptBenchShape s, int iters = 1) -> std::string {
    try {
      run_gpt_bench(s, iters, 0, pool);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  GptBenchShape s = small(GptBenchMode::kForward);
  s.seq_len = 25;
  EXPECT_EQ(message(s), "seq_len 25: must be in [1, 24] (small's context length)");
  s = small(GptBenchMode::kForward);
  s.batch = 0;
  EXPECT_EQ(message(s), "batch 0: must be at least 1");
  EXPECT_EQ(message(small(GptBenchMode::kForward), 0), "iters 0: must be at least 1");
  s = small(GptBenchMode::kDecode);
  s.new_tokens = 19;  // 6 + 19 > 24
  EXPECT_EQ(message(s), "new_tokens 19: must be at least 1, and the prompt (6) plus the new tokens at most the "
                        "context length 24");
  s = small(GptBenchMode::kForward);
  s.spec.attention.heads = 0;
  EXPECT_NE(message(s).find("n_heads (0)"), std::string::npos) << message(s);
  ThreadPool other(1);
  EXPECT_THROW(run_gpt_bench(small(GptBenchMode::kForward), 1, 0, other), Error);  // the model would not run on it
}

}  // namespace
}  // namespace qkv::perf
