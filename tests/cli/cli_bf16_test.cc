// bf16 mode from the command line (issue 16): --dtype on forward, train (mixed precision: the
// built-in task reaches the fp32 run's held-out accuracy), generate and bench; BF16 checkpoints
// written and read back (a resume from one says so); the modules and options that have no bf16
// mode say which.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli_runner.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/checkpoint.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

class Bf16Cli : public CliTest {};

std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of('\n');
  const size_t start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// The copy task of 8 symbols: fp32 and bf16 mixed precision both learn it; held-out accuracy equal
// (both 100%, the task being exact), losses close.
TEST_F(Bf16Cli, MixedPrecisionTrainingReachesTheFp32HeldOutAccuracy) {
  const std::string base = "train --length 8 --symbols 8 --steps 300 --eval-every 0 --quiet --json --svg \"\" ";
  Result f32 = run(base + "--checkpoint f32.st");
  Result bf16 = run(base + "--dtype bf16 --checkpoint bf16.st");
  ASSERT_EQ(f32.status, 0) << f32.err;
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  const auto a = nlohmann::json::parse(last_line(f32.out)), b = nlohmann::json::parse(last_line(bf16.out));
  EXPECT_GE(a["accuracy"].get<double>(), 0.99);
  EXPECT_EQ(b["accuracy"].get<double>(), a["accuracy"].get<double>());
  EXPECT_LT(b["final_loss"].get<double>(), 0.05);
  // The mode is stored with the model; generation runs in it, and --dtype f32 overrides it.
  Checkpoint c = load_checkpoint(path("bf16.st"));
  EXPECT_EQ(c.options.model.attention.dtype, Dtype::kBF16);
  EXPECT_EQ(c.weights_dtype, Dtype::kF32) << "master weights are saved in f32 by default";
  for (const char* dtype : {"", "--dtype f32", "--dtype bf16"}) {
    Result g = run(std::string("generate --checkpoint bf16.st --prompt \"hgfedcba|\" --json ") + dtype);
    ASSERT_EQ(g.status, 0) << g.err;
    const auto j = nlohmann::json::parse(last_line(g.out));
    EXPECT_EQ(j["completion"], "hgfedcba") << dtype;
    EXPECT_EQ(j["dtype"], std::string(dtype).empty() ? "bf16" : std::string(dtype).substr(8)) << dtype;
  }
}

// --checkpoint-dtype bf16 writes the model's weights as BF16 (the optimiser state stays F32); they
// read back as the rounded values, and a resume from them says that training continues from them.
TEST_F(Bf16Cli, Bf16CheckpointsAreWrittenAndReadNativelyAndAResumeSaysSo) {
  const std::string base = "train --length 4 --symbols 6 --d-model 16 --num-heads 2 --num-layers 1 --quiet --svg \"\" ";
  ASSERT_EQ(run(base + "--steps 20 --checkpoint f.st").status, 0);
  Result r = run(base + "--steps 20 --checkpoint-dtype bf16 --checkpoint b.st");
  ASSERT_EQ(r.status, 0) << r.err;
  const TensorFile f = load_safetensors(path("f.st")), b = load_safetensors(path("b.st"));
  EXPECT_EQ(b.stored_dtypes.at("blocks.0.W_query.weight"), "BF16");
  EXPECT_EQ(b.stored_dtypes.at("optimizer.exp_avg.out_head.bias"), "F32");
  EXPECT_EQ(f.stored_dtypes.at("blocks.0.W_query.weight"), "F32");
  const std::vector<float> w32 = f.get("blocks.0.W_query.weight").to_vector(),
                           w16 = b.get("blocks.0.W_query.weight").to_vector();
  ASSERT_EQ(w32.size(), w16.size());
  for (size_t i = 0; i < w32.size(); ++i)  // the same run: the f32 weights, rounded
    EXPECT_EQ(w16[i], bf16_to_float(float_to_bf16(w32[i]))) << i;
  EXPECT_EQ(load_checkpoint(path("b.st")).weights_dtype, Dtype::kBF16);

  Result resumed = run(base + "--steps 30 --resume b.st --checkpoint c.st");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("holds its model weights in BF16 (--checkpoint-dtype bf16): training continues "
                                     "from them widened to f32"));
  EXPECT_EQ(load_checkpoint(path("c.st")).weights_dtype, Dtype::kF32);
}

TEST_F(Bf16Cli, ForwardInBf16IsCloseToF32) {
  const std::string base =
      "forward --module mha --d-in 16 --d-out 8 --num-heads 2 --context-length 16 --seed 3 --text \"Your journey "
      "starts with one step\" --output out.st ";
  ASSERT_EQ(run(base).status, 0);
  const std::vector<float> f32 = load_safetensors(path("out.st")).get("output").to_vector();
  Result r = run(base + "--dtype bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<float> bf16 = load_safetensors(path("out.st")).get("output").to_vector();
  ASSERT_EQ(f32.size(), bf16.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    num += (bf16[i] - f32[i]) * (bf16[i] - f32[i]);
    den += f32[i] * f32[i];
  }
  EXPECT_GT(num, 0.0) << "bf16 rounds: the outputs cannot be the same bits";
  EXPECT_LT(std::sqrt(num / den), 1e-2);
}

TEST_F(Bf16Cli, WhatHasNoBf16ModeSaysWhich) {
  const std::pair<std::string, std::string> cases[] = {
      {"forward --module self-attention-v2 --d-in 4 --d-out 2 --text hi --dtype bf16",
       "--dtype: bf16 runs the fused path of causal-attention, mha-wrapper, mha and gated-mha; self-attention-v2 computes in f32 only"},
      {"forward --module mha --d-in 4 --d-out 2 --context-length 8 --text hi --dtype bf16 --attention textbook",
       "--dtype: bf16 runs on the fused path; --attention textbook computes in f32 only"},
      {"forward --module mha --d-in 4 --d-out 2 --context-length 8 --text hi --dtype f16",
       "--dtype: 'f16' is not a dtype; expected f32 or bf16"},
      {"train --steps 1 --dtype bf16 --attention textbook",
       "--dtype: bf16 runs on the fused attention; --attention textbook computes in f32 only"},
      {"train --steps 1 --dtype bf16 --dropout 0.1",
       "--dtype: bf16 with --dropout 0.1 needs --attention fused"},
      {"train --steps 1 --checkpoint-dtype f64", "--checkpoint-dtype: 'f64' is not a dtype; expected f32 or bf16"},
      {"bench --module decode --kv-len 16 --dtype bf16", "--dtype is not a flag of --module decode"},
      {"bench --module mha --seq-len 8 --dtype f8", "--dtype: 'f8' is not a dtype; expected f32 or bf16"},
  };
  for (const auto& [args, message] : cases) {
    const bool train = args.rfind("train", 0) == 0;
    Result r = run(train ? args + " --svg \"\"" : args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
  EXPECT_FALSE(std::filesystem::exists(path("qkv-train.safetensors")));
}

TEST_F(Bf16Cli, BenchNamesWhatRanInBf16) {
  Result r = run("bench --module mha --batch 1 --seq-len 64 --d-model 64 --num-heads 2 --iters 1 --warmup 0 "
                 "--dtype bf16 --backward --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["dtype"], "bf16");
  EXPECT_THAT(j["projections"].get<std::string>(), HasSubstr("bf16"));
  EXPECT_THAT(r.out, HasSubstr("bf16: "));
}

}  // namespace
}  // namespace qkv
