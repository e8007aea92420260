// The qkv command line, run as a user runs it: bad input gets a clear error on stderr, a non-zero
// exit, and no output file; good input gives the outputs promised.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/safetensors.h"
#include "qkv/modules/attention_module.h"
#include "cli_runner.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;


class Cli : public CliTest {
 protected:
  // A random (shape) tensor saved as `input` in a new file; returns the path.
  std::string input(const Shape& shape, const std::string& name = "in.safetensors") const {
    Generator g(7);
    Tensor x = Tensor::empty(shape);
    g.normal(x.data(), x.numel());
    save_safetensors(path(name), {{"input", x}});
    return path(name);
  }

  // Expects failure with every phrase in stderr and no file at `must_not_exist`.
  void expect_error(const std::string& args, const std::vector<std::string>& phrases, int status = 1) {
    Result r = run(args + " --output " + path("out.safetensors"));
    EXPECT_EQ(r.status, status) << args << "\nstderr: " << r.err;
    for (const std::string& p : phrases) EXPECT_THAT(r.err, HasSubstr(p)) << args;
    EXPECT_FALSE(fs::exists(path("out.safetensors"))) << "an output was written for: " << args;
    EXPECT_EQ(r.out, "") << args;
  }
};

TEST_F(Cli, HelpListsTheSubcommandsAndFlags) {
  Result r = run("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("walkthrough"));
  EXPECT_THAT(r.out, HasSubstr("forward"));
  // every environment variable qkv reads, where a user looks first
  for (const char* var : {"QKV_NUM_THREADS", "QKV_SIMD", "QKV_GEMM", "QKV_BF16_DOT", "QKV_PREFETCH", "QKV_VOCAB_DIR",
                          "QKV_MPI_TIMEOUT"})
    EXPECT_THAT(r.out, HasSubstr(var));
  Result f = run("forward --help");
  EXPECT_EQ(f.status, 0);
  for (const char* flag : {"--module", "--d-in", "--d-out", "--context-length", "--num-heads", "--dropout",
                           "--qkv-bias", "--train", "--seed", "--weights", "--input", "--output",
                           "--save-weights", "--attn-weights"})
    EXPECT_THAT(f.out, HasSubstr(flag));
}

TEST_F(Cli, ForwardWithSeedWritesOutputWeightsAndAttention) {
  std::string in = input({2, 6, 3});
  Result r = run("forward --module mha --d-in 3 --d-out 4 --context-length 6 --num-heads 2 --seed 123 --input " +
              in + " --output " + path("y.st") + " --save-weights " + path("w.st") + " --attn-weights " +
              path("a.st"));
  ASSERT_EQ(r.status, 0) << r.err;
  TensorFile y = load_safetensors(path("y.st")), w = load_safetensors(path("w.st")), a = load_safetensors(path("a.st"));
  EXPECT_EQ(y.get("output").shape(), (Shape{2, 6, 4}));
  EXPECT_EQ(a.get("attn_weights").shape(), (Shape{2, 2, 6, 6}));
  EXPECT_EQ(w.names, (std::vector<std::string>{"mask", "W_query.weight", "W_key.weight", "W_value.weight",
                                               "out_proj.weight", "out_proj.bias"}));  // PyTorch's order
  // Loading the saved weights gives the same output.
  Result again = run("forward --module mha --d-in 3 --d-out 4 --context-length 6 --num-heads 2 --weights " +
                  path("w.st") + " --input " + in + " --output " + path("y2.st"));
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(max_abs_diff(load_safetensors(path("y2.st")).get("output"), y.get("output")), 0.0);
}

TEST_F(Cli, AttentionPathFlagChoosesTheComputationAndBothAgree) {
  std::string in = input({2, 9, 5});
  const std::string common = "forward --module mha --d-in 5 --d-out 6 --context-length 9 --num-heads 3 --seed 5 --input " + in;
  for (const char* path_name : {"fused", "textbook", "auto"}) {
    Result r = run(common + " --attention " + path_name + " --output " + path(std::string(path_name) + ".st") +
                   " --attn-weights " + path(std::string("a_") + path_name + ".st"));
    ASSERT_EQ(r.status, 0) << path_name << ": " << r.err;
  }
  const Tensor fused = load_safetensors(path("fused.st")).get("output");
  const Tensor textbook = load_safetensors(path("textbook.st")).get("output");
  EXPECT_GT(max_abs_diff(fused, Tensor::zeros(fused.shape())), 0.1);  // a real output, not zeros
  EXPECT_LE(max_abs_diff(fused, textbook), 1e-5);
  EXPECT_EQ(max_abs_diff(load_safetensors(path("auto.st")).get("output"), fused), 0.0);  // eval mode: fused
  EXPECT_LE(max_abs_diff(load_safetensors(path("a_fused.st")).get("attn_weights"),
                         load_safetensors(path("a_textbook.st")).get("attn_weights")),
            1e-6);
  Result bad = run(common + " --attention flash");
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.err, HasSubstr("--attention"));
  EXPECT_THAT(bad.err, HasSubstr("flash"));
  EXPECT_THAT(bad.err, HasSubstr("auto,fused,textbook"));
}

TEST_F(Cli, ForwardPrintsLikePyTorchWithoutOutputFile) {
  std::string in = input({6, 3});
  Result r = run("forward --module self-attention-v1 --d-in 3 --d-out 2 --seed 123 --input " + in);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tensor([["));
}

TEST_F(Cli, ShapeMismatchNamesBothShapes) {
  expect_error("forward --module causal-attention --d-in 3 --d-out 2 --context-length 8 --seed 1 --input " +
                   input({2, 5, 4}),
               {"(2, 5, 4)", "(batch, num_tokens, d_in = 3)"});
  expect_error("forward --module self-attention-v2 --d-in 3 --d-out 2 --seed 1 --input " + input({2, 5, 3}),
               {"(2, 5, 3)", "(num_tokens, d_in = 3)"});
}

TEST_F(Cli, DOutNotDivisibleByHeads) {
  expect_error("forward --module mha --d-in 3 --d-out 10 --num-heads 4 --context-length 6 --seed 1 --input " +
                   input({1, 6, 3}),
               {"--num-heads: MultiHeadAttention: d_out (10) must be divisible by num_heads (4)"}, 2);
}

TEST_F(Cli, MoreTokensThanContextLengthIsSaidPlainly) {
  expect_error("forward --module causal-attention --d-in 3 --d-out 2 --context-length 4 --seed 1 --input " +
                   input({1, 6, 3}),
               {"6 tokens but context_length is 4", "use a larger --context-length"});
}

// qkv forward decides by the module's AttentionModuleInfo what it takes; the table must say what
// the modules do.
TEST(AttentionModules, TheirInfoSaysWhatEachModuleTakes) {
  ASSERT_EQ(attention_modules().size(), attention_module_names().size());
  for (size_t i = 0; i < attention_modules().size(); ++i) {
    const AttentionModuleInfo& info = attention_modules()[i];
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.name, attention_module_names()[i]);
    EXPECT_EQ(&attention_module_info(info.name), &info);
    const AttentionConfig c = info.linear_sizes ? gated_deltanet_config(4, 2, 1, 2, 2, 2, 3)
                                                : attention_config(info.name, 4, 4, 3, 0.0, info.multi_head ? 2 : 1, info.bias);
    Generator gen(1);
    std::unique_ptr<AttentionModule> m = make_attention_module(info.name, c, gen);
    EXPECT_EQ(m->input_rank(), info.input_rank);
    bool has_mask = false, has_bias = false;
    for (const StateEntry& e : m->state_dict()) {
      has_mask = has_mask || e.name.ends_with("mask");
      has_bias = has_bias || e.name.ends_with(".bias");  // (not dt_bias: the decay's, no projection's)
    }
    // a chapter-3 causal module holds PyTorch's mask buffer; the bonus classes' is not in their state
    // dicts (gated-mha registers it with persistent=False, mla masks by positions, the linear
    // attentions have none)
    const std::string name = info.name;
    const bool bonus = name == "gated-mha" || name == "mla" || !info.softmax;
    EXPECT_EQ(has_mask, info.causal && !bonus) << "the mask buffer in the state";
    EXPECT_EQ(has_bias, info.bias);
    AttentionConfig biased = c;
    biased.qkv_bias = true;
    if (!info.bias) {
      EXPECT_THROW(make_attention_module(info.name, biased, gen), qkv::Error);
    }
    if (info.multi_head) {
      const Tensor y = m->forward(Tensor::zeros({1, 3, 4}));
      EXPECT_EQ(y.size(-1), info.name == std::string("mha-wrapper") ? 8 : 4) << "num_heads is used";
    }
  }
  EXPECT_THROW(attention_module_info("attention"), qkv::Error);
}

TEST_F(Cli, DropoutOutsideZeroOne) {  // a flag's value out of its range: a usage error
  for (const char* p : {"1", "1.5", "-0.1"})
    expect_error(std::string("forward --module mha --d-in 3 --d-out 2 --context-length 6 --num-heads 1 --seed 1 "
                             "--dropout ") + p + " --input " + input({1, 6, 3}),
                 {"--dropout (", "must be in [0, 1)"}, 2);
}

TEST_F(Cli, UnknownOrMissingFlagsAreUsageErrors) {  // exit status 2, as qkv --help says
  expect_error("forward --module mha --d-in 3 --d-out 2 --seed 1 --input x --bogus 1", {"--bogus"}, 2);
  expect_error("forward --d-in 3 --d-out 2 --seed 1 --input x", {"--module is required"}, 2);
  expect_error("forward --module attention --d-in 3 --d-out 2 --seed 1 --input x", {"attention"}, 2);
  expect_error("forward --module mha --d-in 3 --d-out 2 --context-length 6 --input " + input({1, 6, 3}),
               {"--seed S", "--weights FILE"}, 2);
  expect_error("forward --module causal-attention --d-in 3 --d-out 2 --seed 1 --input " + input({1, 6, 3}),
               {"--context-length: --module causal-attention needs it"}, 2);
  expect_error("forward --module self-attention-v1 --d-in 3 --d-out 2 --context-length 6 --seed 1 --input " +
                   input({6, 3}),
               {"takes no --context-length"}, 2);
}

TEST_F(Cli, BadSafetensorsFilesAreNamed) {
  write_file_atomically(path("short.st"), std::string("\x10\x00\x00", 3));
  expect_error("forward --module self-attention-v2 --d-in 3 --d-out 2 --seed 1 --input " + path("short.st"),
               {"short.st"});
  write_file_atomically(path("noinput.st"), serialize_safetensors({{"x", Tensor::zeros({6, 3})}}));
  expect_error("forward --module self-attention-v2 --d-in 3 --d-out 2 --seed 1 --input " + path("noinput.st"),
               {"no tensor 'input'"});
  expect_error("forward --module self-attention-v2 --d-in 3 --d-out 2 --seed 1 --input " + path("missing.st"),
               {"missing.st"});
}

TEST_F(Cli, WeightsFromAnotherConfigurationAreRefusedByName) {
  std::string in = input({1, 6, 3});
  ASSERT_EQ(run("forward --module mha --d-in 3 --d-out 4 --context-length 6 --num-heads 2 --seed 1 --input " + in +
                " --save-weights " + path("w.st"))
                .status,
            0);
  expect_error("forward --module mha --d-in 3 --d-out 6 --context-length 6 --num-heads 2 --weights " + path("w.st") +
                   " --input " + in,
               {"W_query.weight", "(4, 3)", "(6, 3)"});
  expect_error("forward --module causal-attention --d-in 3 --d-out 4 --context-length 6 --weights " + path("w.st") +
                   " --input " + in,
               {"unexpected tensors 'out_proj.bias' (4), 'out_proj.weight' (4, 4)"});
  write_file_atomically(path("partial.st"), serialize_safetensors({{"mask", Tensor::zeros({6, 6})},
                                                                  {"W_query.weight", Tensor::zeros({4, 3})}}));
  expect_error("forward --module mha --d-in 3 --d-out 4 --context-length 6 --num-heads 2 --weights " +
                   path("partial.st") + " --input " + in,
               {"lack the tensor 'W_key.weight' of shape (4, 3)"});
}

TEST_F(Cli, FailedRunLeavesAnExistingOutputUntouched) {
  write_file_atomically(path("out.safetensors"), "previous contents");
  Result r = run("forward --module mha --d-in 3 --d-out 8 --num-heads 4 --context-length 6 --seed 1 --input " +
              input({1, 6, 5}) + " --output " + path("out.safetensors"));  // the input's width is not --d-in
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(read_file(path("out.safetensors")), "previous contents");
}

// Chapter 4's figure: the untrained GPT-2 small of torch.manual_seed(123), greedy, 10 new tokens
// after "Hello, I am" (the ids and text the book prints).
TEST_F(Cli, WalkthroughEndsWithTheBooksChapter4Figure) {
  const std::vector<int64_t> book = {15496, 11, 314, 716, 27018, 24086, 47843, 30961, 42348, 7267, 49706, 43231, 47062,
                                     34657};
  const std::string text = "Hello, I am Featureiman Byeswickattribute argue logger Normandy Compton analogous";
  const Result json_run = run("walkthrough --json");
  ASSERT_EQ(json_run.status, 0) << json_run.err;
  const nlohmann::json j = nlohmann::json::parse(json_run.out)["gpt.hello_i_am"];
  EXPECT_EQ(j["ids"].get<std::vector<int64_t>>(), book);
  EXPECT_EQ(j["text"], text);
  const Result gen = run("generate --model gpt2-small --seed 123 --prompt \"Hello, I am\" --max-new-tokens 10 "
                         "--temperature 0 --json");
  ASSERT_EQ(gen.status, 0) << gen.err;
  const nlohmann::json g = nlohmann::json::parse(gen.out);
  EXPECT_EQ(g["ids"].get<std::vector<int64_t>>(), book);
  EXPECT_EQ(g["new_ids"].get<std::vector<int64_t>>(), std::vector<int64_t>(book.begin() + 4, book.end()));
  EXPECT_EQ(g["text"], text);
  EXPECT_EQ("Hello, I am" + g["completion"].get<std::string>(), text);
}

TEST_F(Cli, WalkthroughJsonHoldsEveryStepAndSvgDrawsEveryHead) {
  Result r = run("walkthrough --no-gpt --json --svg " + path("svg"));
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mha.seed123"]["shape"], nlohmann::json({2, 6, 2}));
  EXPECT_EQ(j["tiny_vocab.ids"]["ids"], nlohmann::json({1, 8, 3, 5, 7, 4, 6, 2}));
  EXPECT_TRUE(j.contains("causal.masked_scores"));
  for (const char* f : {"causal_attention.svg", "mha_wrapper.head0.svg", "mha_wrapper.head1.svg", "mha.head0.svg",
                        "mha.head1.svg"}) {
    std::string svg = read_file(path(std::string("svg/") + f));
    EXPECT_THAT(svg, HasSubstr("<svg")) << f;
    EXPECT_THAT(svg, HasSubstr(">journey</text>")) << f;
  }
}

TEST_F(Cli, WalkthroughOnOtherTextAndTooShortText) {
  Result r = run("walkthrough --no-gpt --text \"The cat sat on the mat.\"");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("'cat'"));
  Result bad = run("walkthrough --no-gpt --text \"Hello\"");
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("at least 2 words"));
  // the text in the message escaped and cut short (a NUL ended it; a long one was printed whole)
  write("nul.txt", std::string("a\0b", 3));
  bad = run("explore --text-file nul.txt --out page.html");  // (the chapter's page, from a file)
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("got 1 in 'a\\x00b'")) << bad.err;
  write("long.txt", "x" + std::string(100000, '!'));
  bad = run("explore --text-file long.txt --out page.html");
  EXPECT_EQ(bad.status, 1);
  EXPECT_LT(bad.err.size(), 1000u);
}

}  // namespace
}  // namespace qkv
