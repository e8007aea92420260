// `qkv bench` as a user runs it: the report's fields and their arithmetic, the generic head
// dimensions, and bad input. (Only what does not depend on the machine's speed is asserted:
// timings are the benchmark's business, not a test's.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "qkv/core/gemm.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/simd.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class CliBench : public CliTest {};

TEST_F(CliBench, AttentionCoreReportsTimesFlopsAndThePeak) {
  Result r = run("bench --module attention-core --batch 1 --seq-len 64 --num-heads 2 --head-dim 16 --iters 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("attention-core forward, B=1 T=64"));
  EXPECT_THAT(r.out, HasSubstr("% of the measured FMA peak"));
  const nlohmann::json j = last_json_line(r.out);
  for (const char* key : {"median_ms", "gflops", "peak_gflops", "gflop", "percent_of_peak"}) ASSERT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["median_ms"].get<double>(), 0.0);
  EXPECT_GT(j["peak_gflops"].get<double>(), 1.0);
  EXPECT_EQ(j["times_ms"].size(), 3u);
  // Causal work only: the two products (scores, weights @ values) over the T (T + 1) / 2 visible
  // pairs, 2 D FLOPs per pair each, for B H heads.
  const double pairs = 64.0 * 65.0 / 2.0;
  EXPECT_DOUBLE_EQ(j["gflop"].get<double>(), 2.0 * 2.0 * 16.0 * pairs * 1.0 * 2.0 / 1e9);
  EXPECT_NEAR(j["gflops"].get<double>(), j["gflop"].get<double>() / (j["median_ms"].get<double>() * 1e-3), 1e-6);
  EXPECT_NEAR(j["percent_of_peak"].get<double>(), 100.0 * j["gflops"].get<double>() / j["peak_gflops"].get<double>(),
              1e-9);
}

// $QKV_SIMD (and qkv bench --simd) caps the kernels' target: the benchmark runs and names it, its peak the target's own;
// a name the CPU or the build does not run is refused naming it and listing those it does.
TEST_F(CliBench, QkvSimdCapsTheKernelsTargetAndABadNameIsRefused) {
  const std::string cmd = "bench --module attention-core --batch 1 --seq-len 32 --num-heads 2 --head-dim 16 --iters 1 --json";
  for (int64_t t : kernels::available_simd_targets()) {
    const std::string name = kernels::simd_target_name(t);
    const Result r = run(cmd, "", "QKV_SIMD=" + name);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    EXPECT_EQ(last_json_line(r.out)["simd"], name);
    const Result flag = run(cmd + " --simd " + name);  // the flag, over the environment's
    ASSERT_EQ(flag.status, 0) << name << ": " << flag.err;
    EXPECT_EQ(last_json_line(flag.out)["simd"], name);
  }
  const Result bad_flag = run(cmd + " --simd avx9");
  EXPECT_EQ(bad_flag.status, 2);  // a usage error, as any malformed flag value
  EXPECT_THAT(bad_flag.err, HasSubstr("--simd"));
  EXPECT_THAT(bad_flag.err, HasSubstr("'avx9'; this CPU and build run "));
  const Result bad = run(cmd, "", "QKV_SIMD=avx9");
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("QKV_SIMD is 'avx9'; this CPU and build run "));
  EXPECT_THAT(bad.err, HasSubstr(kernels::simd_target()));
}

TEST_F(CliBench, MhaNamesTheBlasAndCountsTheProjections) {
  Result r = run("bench --module mha --batch 2 --seq-len 8 --d-model 32 --num-heads 4 --iters 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("projections: "));
  const nlohmann::json j = last_json_line(r.out);
  EXPECT_EQ(j["gemm"].get<std::string>(), "qkv");  // the default
  EXPECT_THAT(j["projections"].get<std::string>(), HasSubstr("qkv packed GEMM"));
  EXPECT_EQ(j["projections_vector_bits"].get<int>(), kernels::simd_vector_bits());
  EXPECT_THAT(r.out, Not(HasSubstr("note: these kernels")));
  // QKV 2 B T C 3C + out_proj 2 B T C C + attention 4 D (T (T + 1) / 2) B H
  const double B = 2, T = 8, C = 32, H = 4, D = 8;
  EXPECT_DOUBLE_EQ(j["gflop"].get<double>(),
                   (2 * B * T * C * 3 * C + 2 * B * T * C * C + 4 * D * (T * (T + 1) / 2) * B * H) / 1e9);
}

// A GPT bench names the product that ran in its precision: the float32 one with its blocks, or
// in bf16 mode the bf16 one (the AVX512_BF16 dot product with its own blocks, or the widening path).
TEST_F(CliBench, GptNamesTheProductOfItsPrecision) {
  Result r = run("bench --module gpt --seq-len 4 --iters 1 --warmup 0 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(last_json_line(r.out)["gemm"].get<std::string>(), HasSubstr("tiles, KC "));
  r = run("bench --module gpt --seq-len 4 --iters 1 --warmup 0 --threads 1 --json --dtype bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string bf16 = last_json_line(r.out)["gemm"].get<std::string>();
  EXPECT_EQ(bf16, gemm_bf16_description());
  EXPECT_THAT(bf16, HasSubstr(gemm_bf16_dot() ? "AVX512_BF16 dot product, KC " : "bf16 widened to float32"));
}

// OPENBLAS_CORETYPE=Haswell pins OpenBLAS to 256-bit kernels. With --gemm openblas (or
// QKV_GEMM=openblas) on a CPU whose kernels here run 512-bit vectors, the report says so and
// measures the peak at 256 bits too; otherwise it has nothing to add.
TEST_F(CliBench, ABlasPinnedToNarrowerVectorsIsMeasuredAtItsWidth) {
  for (const std::string how : {"flag", "environment"}) {
    Result r = how == "flag"
                   ? run("bench --module mha --batch 1 --seq-len 8 --d-model 32 --num-heads 4 --iters 1 --json --gemm openblas",
                         "", "OPENBLAS_CORETYPE=Haswell")
                   : run("bench --module mha --batch 1 --seq-len 8 --d-model 32 --num-heads 4 --iters 1 --json", "",
                         "OPENBLAS_CORETYPE=Haswell QKV_GEMM=openblas");
    ASSERT_EQ(r.status, 0) << how << "\n" << r.err;
    const nlohmann::json j = last_json_line(r.out);
    EXPECT_EQ(j["gemm"].get<std::string>(), "openblas") << how;
    EXPECT_THAT(j["projections"].get<std::string>(), HasSubstr("Haswell kernels"));
    EXPECT_EQ(j["projections_vector_bits"].get<int>(), 256);
    if (kernels::simd_vector_bits() == 512) {
      EXPECT_THAT(r.out, HasSubstr("note: these kernels compute with 256-bit vectors, the kernels here with 512-bit"));
      EXPECT_THAT(r.out, HasSubstr("--gemm qkv runs them at this CPU's width"));
      ASSERT_TRUE(j["peak_gflops_at_projection_width"].is_number());
      EXPECT_GT(j["peak_gflops_at_projection_width"].get<double>(), 0.0);
    } else {
      EXPECT_THAT(r.out, Not(HasSubstr("note: these kernels")));
      EXPECT_TRUE(j["peak_gflops_at_projection_width"].is_null());
    }
  }
  // The fused kernel alone uses no BLAS: no note, whatever the pin.
  Result r = run("bench --module attention-core --seq-len 8 --num-heads 1 --head-dim 8 --iters 1 --json", "",
          "OPENBLAS_CORETYPE=Haswell");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("note: these kernels")));
  EXPECT_TRUE(last_json_line(r.out)["peak_gflops_at_projection_width"].is_null());
}

TEST_F(CliBench, GenericHeadDimensionsShortSequencesAndTheBackwardRun) {
  for (const std::string args : {"--module attention-core --seq-len 1 --num-heads 3 --head-dim 7",
                                 "--module attention-core --seq-len 33 --num-heads 1 --head-dim 5 --backward --no-mask",
                                 "--module causal-attention --seq-len 19 --d-model 13 --backward",
                                 "--module mha --seq-len 9 --d-model 15 --num-heads 3 --backward --dropout 0.1"}) {
    Result r = run("bench " + args + " --iters 1 --warmup 0 --json");
    ASSERT_EQ(r.status, 0) << args << "\n" << r.err;
    EXPECT_GT(last_json_line(r.out)["gflop"].get<double>(), 0.0) << args;
  }
}

TEST_F(CliBench, MoreThreadsThanCoresAreWarnedAboutAndRun) {
  const int threads = hardware_cores() + 2;
  Result r = run("bench --module attention-core --seq-len 16 --num-heads 1 --head-dim 8 --iters 1 --threads " +
                 std::to_string(threads));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: " + std::to_string(threads) + " threads"));
  EXPECT_THAT(r.out, HasSubstr(std::to_string(threads) + " threads"));
}

// Every module at the smallest sizes on far more threads than work (64 threads, one position,
// one head of dimension 1) runs and reports; sizes past the machine's memory, past int64, or
// threads past the limit are refused before any work, with the sizes named, nothing on standard
// output and no crash (issue 26).
TEST_F(CliBench, EveryModuleTakesHostileSizesAndThreadCounts) {
  // ring-attention starts MPI (one rank, alone): under the sanitizers its leak check is off, as
  // for every MPI test (Open MPI keeps memory past MPI_Finalize; tests/CMakeLists.txt).
  const auto env_for = [](const std::string& args) -> std::string {
    return args.find("ring-attention") != std::string::npos ? "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1" : "";
  };
  const std::string tiny[] = {
      "--module mha --seq-len 1 --d-model 1 --num-heads 1 --backward",
      "--module mha --seq-len 3 --d-model 6 --num-heads 3 --num-kv-heads 1 --backward --dtype bf16",
      "--module causal-attention --seq-len 1 --d-model 1 --backward",
      "--module attention-core --seq-len 1 --num-heads 1 --head-dim 1 --backward",
      "--module attention-core --seq-len 1 --num-heads 1 --head-dim 1 --backward --dtype bf16",
      "--module decode --kv-len 1 --num-heads 1 --num-kv-heads 1 --head-dim 1",
      "--module decode --kv-len 1 --num-heads 1 --num-kv-heads 1 --head-dim 1 --cache-dtype bf16",
      "--module ring-attention --seq-len 1 --num-heads 1 --head-dim 1 --backward",
  };
  for (const std::string& args : tiny) {
    const Result r = run("bench " + args + " --threads 64 --iters 1 --json", "", env_for(args));
    ASSERT_EQ(r.status, 0) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("64 threads requested")) << args;
    EXPECT_THAT(r.out, HasSubstr("64 thread")) << args;
    EXPECT_GT(last_json_line(r.out)["median_ms"].get<double>(), 0.0) << args;
  }
  const std::pair<std::string, std::string> refused[] = {
      {"--module mha --batch 4294967296 --seq-len 2", "B=4294967296 T=2"},
      {"--module mha --seq-len 8 --d-model 99999999999 --num-heads 1", "exceeds the largest size"},
      {"--module causal-attention --seq-len 3000000000", "T=3000000000"},
      {"--module attention-core --seq-len 16 --num-heads 100000000 --head-dim 100000", "H=100000000 D=100000"},
      {"--module decode --kv-len 99999999999", "capacity 99999999999 is more than 2^31 - 1 positions"},
      {"--module decode --kv-len 8 --batch 99999999999", "KvCache needs"},
      {"--module decode --kv-len 8 --head-dim 9999999999", "raise it with --max-memory"},
      {"--module ring-attention --seq-len 3000000000 --num-heads 64", "this rank's inputs and outputs needs"},
      {"--module ring-attention --seq-len 8 --head-dim 4611686018427387904", "exceeds the largest size"},
      {"--module decode --kv-len 8 --threads 100000", "--threads: 100000 is more than the"},
      {"--module mha --seq-len 8 --threads 100000", "--threads: 100000 is more than the"},
      {"--module gpt --seq-len 1025", "--seq-len 1025: must be in [1, 1024] (gpt2-small's context length)"},
      {"--module gpt --seq-len 0", "--seq-len 0: must be at least 1"},
      {"--module gpt --preset gpt5 --seq-len 8", "unknown preset 'gpt5'; expected one of: gpt2-small"},
      {"--module gpt --seq-len 1000 --new-tokens 25", "--new-tokens 25: must be at least 1, and the prompt (1000)"},
      {"--module gpt --seq-len 8 --batch 0", "--batch 0: must be at least 1"},
      {"--module gpt --seq-len 8 --backward --new-tokens 3", "a training step or decoding, not both"},
      {"--module gpt --seq-len 8 --window 4", "--window is not a flag of --module gpt"},
      {"--module gpt --seq-len 8 --dropout 0.1", "dropout acts in a training step"},
      {"--module gpt --seq-len 8 --new-tokens 0", "--new-tokens 0: must be at least 1"},
      {"--module gpt --seq-len 8 --new-tokens -3", "--new-tokens -3: must be at least 1"},
      {"--module gpt --seq-len 8 --new-tokens 3 --iters 5", "give one or the other"},
      {"--module mha --seq-len 8 --preset gpt2-small", "--preset is a flag of --module gpt, not mha"},
  };
  for (const auto& [args, message] : refused) {
    const Result r =
        run("bench " + args + (args.find("--threads") == std::string::npos ? " --threads 1" : ""), "", env_for(args));
    // A flag's value or combination refused is bad usage (2); sizes this machine cannot hold, an error (1).
    const bool usage = args.starts_with("--module gpt") || args.find("--preset") != std::string::npos ||
                       args.find("--threads") != std::string::npos;
    EXPECT_EQ(r.status, usage ? 2 : 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

TEST_F(CliBench, BadInputNamesTheValueAndWhatWasExpected) {
  const std::pair<std::string, std::string> cases[] = {
      {"--module attention-core --seq-len 0", "--seq-len 0: must be at least 1"},
      {"--module attention-core --seq-len 4 --batch -2", "--batch -2: must be at least 1"},
      {"--module attention-core --seq-len 4 --dropout 1.5", "--dropout (1.5) must be in [0, 1)"},
      {"--module attention-core --seq-len 4 --iters 0", "--iters 0: must be at least 1"},
      {"--module attention-core --seq-len 4 --threads -1", "--threads -1: must be at least 1"},
      {"--module attention-core --seq-len 4 --head-dim -3", "--head-dim (-3) must be at least 1"},
      {"--module mha --seq-len 4 --d-model 10 --num-heads 3", "--d-model (10) must be divisible by --num-heads (3)"},
      {"--module causal-attention --seq-len 4 --num-heads 2", "--num-heads 2: --module causal-attention has one head"},
      {"--module mha --seq-len 4 --d-model 0", "--d-model 0: must be at least 1"},
      {"--module attention-core --seq-len 100000000 --batch 1000", "MiB of inputs and outputs; this machine has"},
      {"--module nope --seq-len 4", "nope"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run("bench " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
    EXPECT_EQ(r.out, "") << args;  // nothing half-printed
  }
  Result r = run("bench --module mha --seq-len 4 --gemm mkl");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--gemm: mkl not in {qkv,openblas}"));
  r = run("walkthrough --no-gpt", "", "QKV_GEMM=mkl");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "qkv: error: QKV_GEMM: unknown matrix product 'mkl': expected qkv or openblas\n");
  EXPECT_EQ(r.out, "");
  r = run("walkthrough --no-gpt", "", "QKV_PREFETCH=l3");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "qkv: error: QKV_PREFETCH: 'l3' is not l1, l1-nta, l2 or l1+l2\n");
  EXPECT_EQ(r.out, "");
}

// $QKV_PREFETCH picks where the kernels' burst prefetches go, and the reports name it.
TEST_F(CliBench, TheReportsNameWhereBurstPrefetchesGo) {
  for (const std::string level : {"l1", "l1-nta", "l2", "l1+l2"}) {
    std::string upper = level;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const std::string module : {"decode --kv-len 64 --num-heads 2 --head-dim 8 --iters 1",
                                     "gated-deltanet --new-tokens 2 --num-heads 2 --head-dim 16 --num-layers 1"}) {
      const Result r = run("bench --module " + module + " --threads 1 --json", "", "QKV_PREFETCH=" + level);
      ASSERT_EQ(r.status, 0) << module << "\n" << r.err;
      EXPECT_THAT(r.out, HasSubstr("lines prefetched in bursts into " + upper)) << module;
      EXPECT_EQ(last_json_line(r.out)["prefetch"].get<std::string>(), upper) << module;
    }
  }
}

}  // namespace
}  // namespace qkv
