// `qkv bench --module accuracy` as a user runs it, on a small Qwen3-shaped model with Qwen3's
// tokenizer (installed by scripts/setup.sh; skipped without it): a float file against every type
// the products read, a quantized file against itself decoded, and bad input named. (What the
// figures mean is tested in tests/models/logit_agreement_test.cc; here, that the command reports
// them for the right models and tokens.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "model_support.h"
#include "qkv/core/read_file.h"
#include "qkv/io/gguf.h"
#include "qkv/kernels/memory_bandwidth.h"
#include "qkv/models/gguf_model.h"
#include "qkv/text/vocab_files.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

class CliBenchAccuracy : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    if (!find_hf_vocab("qwen3")) GTEST_SKIP() << "qwen3's tokenizer.json is not installed (scripts/setup.sh installs it)";
  }
  // The model (rows of 64: whole blocks of Q8_0 and Q4_0; the K-quants' 256 fall back to Q8_0) in
  // a GGUF file of `type` with Qwen3's tokenizer.
  std::string model_file(const std::string& type) {
    Generator gen(3);
    DecoderModel m(llama_sizes("qwen3", 151936, 64, 128, 1, 2, 1, 32, 64, /*tied=*/true), gen);
    const nlohmann::json tokenizer = nlohmann::json::parse(read_file(*find_hf_vocab("qwen3")));
    std::vector<std::string> notes;
    return write("m-" + type + ".gguf", gguf_model_bytes(m, &tokenizer, type, notes));
  }
  const std::string verdict_ = std::string(QKV_TEST_DATA_DIR) + "/the-verdict.txt";
};

TEST_F(CliBenchAccuracy, AFloatFileAgainstEveryTypeTheProductsRead) {
  const std::string f32 = model_file("f32");
  Result r = run("bench --module accuracy --weights " + f32 + " --text " + verdict_ + " --seq-len 40 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("on 40 tokens of " + verdict_ + " (of its "));
  EXPECT_THAT(r.out, HasSubstr("1 window of up to 64"));
  const nlohmann::json j = last_json_line(r.out);
  EXPECT_EQ(j["tokens"], 40);
  EXPECT_GT(j["text_tokens"].get<int>(), 1000);
  EXPECT_THAT(j["reference"].get<std::string>(), HasSubstr("f32 products"));
  ASSERT_EQ(j["rows"].size(), 4u);
  // Bits per weight as the matrices are kept: every row here is 64 or 128 values, whole blocks of
  // Q8_0 (34 bytes per 32) and Q4_0 (18 per 32) but not of the K-quants' 256, which fall back to Q8_0,
  // and say so (the rows were labelled Q6_K and Q4_K).
  const std::vector<std::pair<std::string, double>> types = {
      {"Q8_0", 8.5}, {"Q6_K as Q8_0", 8.5}, {"Q4_K as Q8_0", 8.5}, {"Q4_0", 4.5}};
  for (size_t i = 0; i < types.size(); ++i) {
    const nlohmann::json& row = j["rows"][i];
    EXPECT_EQ(row["type"], types[i].first);
    EXPECT_EQ(row["bits_per_weight"], types[i].second);
    EXPECT_EQ(row["positions"], 40);
    EXPECT_EQ(row["predictions"], 39);
    EXPECT_GT(row["mean_kl"].get<double>(), 0.0) << types[i].first;
    EXPECT_GE(row["max_kl"].get<double>(), row["mean_kl"].get<double>()) << types[i].first;
    EXPECT_GE(row["top1"].get<double>(), 0.0);
    EXPECT_LE(row["top1"].get<double>(), 1.0);
    EXPECT_EQ(row["ref_perplexity"], j["rows"][0]["ref_perplexity"]);  // one reference for all
    EXPECT_THAT(row["candidate"].get<std::string>(), HasSubstr("integer products"));
    EXPECT_THAT(r.out, HasSubstr("  " + types[i].first + " "));
  }
  // Q8_0 against Q4_0 on the same rows of 64 (the K-quants' fall back to Q8_0 here)
  EXPECT_LT(j["rows"][0]["mean_kl"].get<double>(), j["rows"][3]["mean_kl"].get<double>());
  // one type: the same figures as its row of the table
  r = run("bench --module accuracy --weights " + f32 + " --text " + verdict_ + " --seq-len 40 --quantize q4_0 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json one = last_json_line(r.out);
  ASSERT_EQ(one["rows"].size(), 1u);
  EXPECT_EQ(one["rows"][0]["mean_kl"], j["rows"][3]["mean_kl"]);
  EXPECT_EQ(one["rows"][0]["cand_perplexity"], j["rows"][3]["cand_perplexity"]);
}

TEST_F(CliBenchAccuracy, AQuantizedFileAgainstItselfDecoded) {
  const std::string q8 = model_file("q8_0");
  Result r = run("bench --module accuracy --weights " + q8 + " --text " + verdict_ + " --seq-len 30 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = last_json_line(r.out);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["type"], "Q8_0");       // every matrix's rows are whole Q8_0 blocks
  EXPECT_EQ(j["rows"][0]["bits_per_weight"], 8.5);  // 34 bytes per 32 values
  EXPECT_EQ(j["rows"][0]["positions"], 30);
  EXPECT_GT(j["rows"][0]["mean_kl"].get<double>(), 0.0);  // the activations' rounding alone
  EXPECT_THAT(j["reference"].get<std::string>(), HasSubstr("Q8_0 weights, f32 products"));
  EXPECT_THAT(j["rows"][0]["candidate"].get<std::string>(), HasSubstr("integer products on its blocks"));
}

TEST_F(CliBenchAccuracy, BadInputNamesTheValueAndWhatWasExpected) {
  const std::string q8 = model_file("q8_0");
  const std::string one = write("one.txt", "a");
  const std::string w = " --weights " + q8 + " --text " + verdict_;
  // (the paths in the messages are excerpts: the scratch folder's long name is cut)
  // (status 2: bad usage, a flag's value or combination; 1: the files' contents)
  const std::tuple<std::string, std::string, int> cases[] = {
      {w + " --seq-len 0", "--seq-len 0: must be at least 2", 2},
      {w + " --seq-len 1", "--seq-len 1: must be at least 2", 2},
      {" --weights " + q8 + " --text " + one, "qkv: error: --text '", 1},
      {" --weights " + q8 + " --text " + one, ": 1 token with the model's tokenizer; expected at least 2", 1},
      {w + " --quantize q4_0", "qkv: error: quantizing the weights (q4_0): the weights of '", 1},
      {w + " --quantize q4_0", " are Q8_0 already; expected a file of float weights (F32, F16, BF16) to "
                               "quantize", 1},
      {" --weights " + q8, "--module accuracy needs --text FILE", 2},
      {" --text " + verdict_, "--module accuracy needs --weights PATH", 2},
      {w + " --iters 3", "--iters is not a flag of --module accuracy", 2},
      {" --weights " + path("none.gguf") + " --text " + verdict_, "none.gguf", 1},
      {" --weights " + q8 + " --text " + path("none.txt"), "none.txt", 1},
  };
  for (const auto& [args, message, status] : cases) {
    Result r = run("bench --module accuracy" + args);
    EXPECT_EQ(r.status, status) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  Result r = run("bench --module accuracy" + w + " --quantize q5_k");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--quantize: q5_k not in {q8_0,q6_k,q4_k,q4_0}"));
  r = run("bench --module mha --seq-len 4 --weights " + q8);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--weights is a flag of --module accuracy or gpt, not mha"));
}

// qkv bench --module gpt --weights: a model's files timed as qkv generate loads them; a decoding
// step's bytes are the products' as held (this tied model's head is token_embd: every 2-D tensor
// of the file once), and --quantize's blocks are the file's of that type.
TEST_F(CliBenchAccuracy, GptTimesAModelsFilesAsTheyLoad) {
  auto matrix_bytes = [](const std::string& path) {
    const GgufFile f(path);
    double n = 0;
    for (const GgufTensor& t : f.tensors())
      if (t.shape.size() == 2) n += static_cast<double>(t.bytes);
    return n;
  };
  const std::string q8 = model_file("q8_0"), q4 = model_file("q4_0"), f32 = model_file("f32");
  Result r = run("bench --module gpt --weights " + q8 + " --seq-len 8 --new-tokens 3 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = last_json_line(r.out);
  EXPECT_EQ(j["weights"], q8);
  EXPECT_EQ(j["mode"], "decode");
  EXPECT_THAT(j["model"].get<std::string>(), HasSubstr("(GGUF, Q8_0 weights, integer products on its blocks)"));
  EXPECT_EQ(j["weight_bytes"].get<double>(), matrix_bytes(q8));
  // the model's own peak is taken before the bandwidth probe's buffer, which the process's includes
  const double buffer_mib = static_cast<double>(kernels::read_bandwidth_buffer_bytes()) / (1 << 20);
  EXPECT_GT(j["model_max_rss_mib"].get<double>(), 0.0);
  EXPECT_LE(j["model_max_rss_mib"].get<double>(), j["max_rss_mib"].get<double>() - buffer_mib / 2);
  EXPECT_THAT(r.out, HasSubstr(" MiB before the bandwidth probe, "));
  r = run("bench --module gpt --weights " + f32 + " --quantize q4_0 --seq-len 8 --new-tokens 3 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(last_json_line(r.out)["weight_bytes"].get<double>(), matrix_bytes(q4));
  r = run("bench --module gpt --weights " + f32 + " --seq-len 8 --iters 1 --warmup 0 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = last_json_line(r.out);
  EXPECT_EQ(j["mode"], "forward");
  EXPECT_EQ(j["dtype"], "f32");
  EXPECT_THAT(r.out, HasSubstr("(GGUF, F32 weights, f32 products) forward, B=1 T=8 f32"));
  for (const auto& [flags, message] :
       {std::pair<std::string, std::string>{"--preset qwen3-0.6b", "--preset and --weights: time a preset's drawn "
                                                                    "weights or a model's files, not both"},
        {"--backward", "--backward with --weights: a model's files are timed in a forward or decoding"},
        {"--dtype bf16", "--dtype with --weights: the model computes as its files load"}}) {
    r = run("bench --module gpt --weights " + f32 + " --seq-len 8 " + flags);
    EXPECT_EQ(r.status, 2) << flags;  // bad usage, as the other combinations bench refuses
    EXPECT_THAT(r.err, HasSubstr(message)) << flags;
  }
  r = run("bench --module gpt --preset gpt2-small --seq-len 8 --quantize q8_0");
  EXPECT_THAT(r.err, HasSubstr("--quantize quantizes --weights' float weights at load: give --weights"));
}

}  // namespace
}  // namespace qkv
