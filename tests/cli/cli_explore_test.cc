// qkv explore: a page for each source, and bad input refused with the right exit status and no
// page written. The page in a real browser: tests/explore (explore.browser).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "model_support.h"
#include "qkv/core/generator.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/gpt.h"
#include "qkv/explore/explore.h"
#include "qkv/models/gpt_weights.h"
#include "qkv/text/bpe.h"
#include "qkv/text/vocab_files.h"

namespace qkv {
namespace {

class ExploreCli : public CliTest {
 protected:
  // Runs the command and checks it failed with `status`, saying `words`, writing no page.
  void refused(const std::string& args, int status, const std::string& words) {
    const Result r = run(args + " --out page.html");
    EXPECT_EQ(r.status, status) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << args << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("page.html"))) << args;
  }
  const std::string mha = "--module mha --d-in 6 --d-out 6 --num-heads 2 --context-length 16 --seed 123";
};

TEST_F(ExploreCli, WritesTheChapterPageAndReportsItsSize) {
  const Result r = run("explore --out page.html");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("bytes"), std::string::npos) << r.out;
  const std::string html = slurp(path("page.html"));
  EXPECT_EQ(r.out.find(std::to_string(html.size()) + " bytes"), r.out.find("page.html: ") + 11) << r.out;
  EXPECT_NE(html.find("causal.attn_weights"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);  // nothing to fetch (http:// is only the SVG namespace)
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST_F(ExploreCli, LabelsThatAreMarkupStayInsideTheData) {
  const Result r = run("explore --text " + shell_quote("x </script><img src=x onerror=alert(1)> y") +
                       " --module mha --d-in 6 --d-out 6 --num-heads 2 --context-length 32 --seed 1 --out page.html");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = slurp(path("page.html"));
  EXPECT_EQ(html.find("</script><img"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
}

TEST_F(ExploreCli, EmptyTextIsRefused) { refused("explore --text ''", 1, "empty"); }

TEST_F(ExploreCli, TextLongerThanTheContextIsRefused) {
  refused("explore --text 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen' " + mha, 1, "--context-length is 16");
}

TEST_F(ExploreCli, ACheckpointThatIsNotAnAttentionLMIsRefused) {
  ASSERT_EQ(run("forward --module mha --d-in 4 --d-out 4 --num-heads 2 --context-length 8 --seed 1 --text hi "
                "--save-weights w.safetensors --output y.safetensors").status, 0);
  refused("explore --checkpoint w.safetensors --text hi", 1, "w.safetensors");
}

// A small GPT with GPT-2's vocabulary (its tokenizer reads the text), in Hugging Face's layout
// (the weights and config.json) in `dir`: 2 layers x 2 heads, context 16.
DecoderModel small_gpt(const std::string& dir, uint64_t seed = 4) {
  Generator gen(seed);
  DecoderModel model = tiny_gpt(50257, 16, 8, 2, 2, gen);  // (qkv biases: GPT-2's layout has them)
  std::filesystem::create_directories(dir);
  save_safetensors(dir + "/model.safetensors", gpt_state_in_layout(model, GptLayout::kHuggingFace));
  write_file_atomically(dir + "/config.json", hugging_face_config_json(model.spec()));
  return model;
}

TEST_F(ExploreCli, AGptModelsFileGivesAPageOfEveryLayerAndHead) {
  small_gpt(path("gpt"));
  const Result r = run("explore --checkpoint gpt --text 'Every effort moves you' --out page.html");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 layer(s) x 2 head(s)"), std::string::npos) << r.out;
  const std::string html = slurp(path("page.html"));
  EXPECT_NE(html.find("trf_blocks.1.attn_weights"), std::string::npos);
  EXPECT_NE(html.find("trf_blocks.1.ff"), std::string::npos);
  std::filesystem::remove(path("page.html"));
  refused("explore --checkpoint gpt --text 'one two three four five six seven eight nine ten eleven "
          "twelve thirteen fourteen fifteen sixteen seventeen'", 1, "context length is 16");
  refused("explore --model gpt2-tiny --text hi", 2, "--model: 'gpt2-tiny' is not a preset; expected one of: gpt2-small");
  refused("explore --model gpt2-small --checkpoint gpt", 2, "not both");
  refused("explore --model gpt2-small --num-heads 3", 2, "does not apply to --model");
}

// The page's data: the JSON inside its <script id="qkv-data"> element.
nlohmann::json page_data(const std::string& html) {
  const std::string open = "<script id=\"qkv-data\" type=\"application/json\">";
  const size_t a = html.find(open), b = html.find("</script>", a);
  EXPECT_NE(a, std::string::npos);
  return nlohmann::json::parse(html.substr(a + open.size(), b - a - open.size()));
}

// --attention-weights computed: the layers' weights name their queries and keys and the cells
// stored (the browser test reads them as the stored page's); --pipeline-layer keeps one layer's steps.
TEST_F(ExploreCli, AComputedPageWithOneLayersPipeline) {
  small_gpt(path("gpt"));
  const std::string base = "explore --checkpoint gpt --text 'Every effort moves you forward' ";
  const Result r = run(base + "--attention-weights computed --pipeline-layer 1 --out page.html");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("attention weights computed in the page; the pipeline of layer 1 only"), std::string::npos) << r.out;
  const nlohmann::json d = page_data(slurp(path("page.html")));
  EXPECT_EQ(d["computedWeights"], true);
  EXPECT_EQ(d["pipelineLayer"], 1);
  for (const nlohmann::json& s : d["pipeline"]) EXPECT_EQ(s["layer"], 1) << s["name"];
  for (const nlohmann::json& l : d["layers"]) {
    const nlohmann::json& w = d["tensors"][l["weights"].get<std::string>()];
    EXPECT_EQ(w["computed"], true);
    EXPECT_EQ(w["queries"], l["queries"]);
    EXPECT_EQ(d["tensors"][l["queries"].get<std::string>()]["dtype"], "f16");
    EXPECT_EQ(w["fixStart"].size(), 3u);  // 2 heads
    EXPECT_LE(w["largestUncorrected"].get<double>(), kExploreComputedTolerance);
  }
  std::filesystem::remove(path("page.html"));
  refused(base + "--pipeline-layer 2", 2, "--pipeline-layer: 2 is not a layer of the page (it has 2: 0 .. 1)");
  refused("explore --pipeline-layer 1", 2, "--pipeline-layer: 1 is not a layer of the page (it has 1: 0 .. 0)");
  refused(base + "--attention-weights sometimes", 2, "--attention-weights");
  // stored: the weights themselves, every layer's steps
  ASSERT_EQ(run(base + "--attention-weights stored --out page.html").status, 0);
  const nlohmann::json s = page_data(slurp(path("page.html")));
  EXPECT_EQ(s["computedWeights"], false);
  EXPECT_EQ(s["pipelineLayer"], -1);
  EXPECT_EQ(s["tensors"][s["layers"][0]["weights"].get<std::string>()]["dtype"], "f32");
}

// qkv forward --module gpt --attn-weights: every block's weights, as the model's traces hold them.
TEST_F(ExploreCli, ForwardWritesEveryGptBlocksWeights) {
  DecoderModel model = small_gpt(path("gpt"));
  const Result r = run("forward --module gpt --weights gpt --text 'Every effort moves you' --attn-weights w.st "
                       "--output y.st");
  ASSERT_EQ(r.status, 0) << r.err;
  const TensorFile f = load_safetensors(path("w.st"));
  Encoding gpt2 = load_gpt2("");
  const std::vector<int64_t> ids = gpt2.encode("Every effort moves you", SpecialTokens::all());
  const std::vector<Tensor> weights = forward_weights(model, ids);
  for (size_t l = 0; l < 2; ++l) {
    const Tensor& w = f.get("trf_blocks." + std::to_string(l) + ".attn_weights");
    const Tensor want = weights[l].unsqueeze(0);
    ASSERT_EQ(w.shape(), want.shape()) << l;
    EXPECT_EQ(w.shape(), (Shape{1, 2, static_cast<int64_t>(ids.size()), static_cast<int64_t>(ids.size())}));
    for (int64_t n = 0; n < w.numel(); ++n) ASSERT_EQ(w.data()[n], want.data()[n]) << l << " " << n;
  }
}

TEST_F(ExploreCli, GeneratedTokensAreQkvGeneratesAndMarked) {
  small_gpt(path("gpt"), 6);
  const std::string text = "'Every effort moves you'";  // 4 tokens
  for (const std::string& pick : {std::string("--temperature 0"), std::string("--temperature 1.3 --top-k 7 --seed 9")}) {
    const Result r = run("explore --weights gpt --text " + text + " --generate 6 " + pick + " --out page.html");
    ASSERT_EQ(r.status, 0) << pick << "\n" << r.err;
    const nlohmann::json d = page_data(slurp(path("page.html")));
    const Result g = run("generate --weights gpt --prompt " + text + " --max-new-tokens 6 " + pick + " --json");
    ASSERT_EQ(g.status, 0) << g.err;
    const nlohmann::json want = nlohmann::json::parse(g.out);
    EXPECT_EQ(d["ids"], want["ids"]) << pick;
    EXPECT_EQ(d["generatedFrom"], 4) << pick;
    EXPECT_EQ(d["tokens"].size(), 10u);
    EXPECT_NE(d["title"].get<std::string>().find("+ 6 generated token(s)"), std::string::npos) << d["title"];
    // the head-patterns table (induction measured) and the logit lens: embeddings and both blocks
    EXPECT_TRUE(d["layers"][1]["stats"][1]["induction"].is_number());
    EXPECT_EQ(d["lens"]["rows"], nlohmann::json({"embeddings", "block 0", "block 1"}));
    EXPECT_EQ(d["lens"]["ids"].size(), 3u * 10u * 5u);
    if (pick == "--temperature 0") {  // greedy: the last layer's top token at each generated step is the next id
      for (int t = 3; t < 9; ++t)
        EXPECT_EQ(d["lens"]["ids"][(2 * 10 + t) * 5], d["ids"][t + 1]) << "position " << t;
    }
    std::filesystem::remove(path("page.html"));
  }
  refused("explore --weights gpt --text " + text + " --generate 13", 1, "lower --generate");
  refused("explore --weights gpt --text " + text + " --temperature 0.5", 2, "--temperature: picks generated tokens");
  refused("explore --weights gpt --text " + text + " --generate 2 --top-k 50258", 2, "--top-k: 50258 is not in [1, 50257]");
  refused("explore --weights gpt --checkpoint gpt --text hi", 2, "not both");
  refused("explore --checkpoint gpt --seed 3 --text hi", 2, "--seed: does not apply to --checkpoint without --generate");
  refused("explore --generate 2 " + mha, 2, "--generate: needs a model");
}

TEST_F(ExploreCli, ModuleFlagsThatDoNotFitAreUsageErrors) {
  refused("explore --d-in 4", 2, "needs --module");
  refused("explore --module self-attention-v1 --d-in 4 --d-out 4 --context-length 8 --num-heads 2 --seed 1", 2,
          "--num-heads");
  refused("explore --module mha --d-in 4 --d-out 6 --num-heads 4 --context-length 8 --seed 1", 2, "divisible");
  refused("explore --module causal-attention --d-in 4 --d-out 4 --seed 1", 2, "--context-length");
  refused("explore --module mha --d-in 4 --d-out 4 --num-heads 2 --context-length 8 --seed 1 --rope half --alibi "
          "--window 0", 2, "--window");
  refused("explore --checkpoint c.safetensors --module mha", 2, "does not apply to --checkpoint");
}

// A linear recurrence's page: in place of softmax weights its maps A (tests/explore's
// linear_module_page_test checks their numbers), one per head and value channel for the book's
// GatedDeltaNet, named so; the size check before any work counts those maps.
TEST_F(ExploreCli, TheGatedDeltaNetsPagesShowTheirMaps) {
  const Result r = run("explore --module deltanet --d-in 6 --d-out 8 --num-heads 2 --context-length 16 --seed 123 "
                       "--out page.html");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("1 layer(s) x 8 head(s)"), std::string::npos) << r.out;
  std::string html = slurp(path("page.html"));
  EXPECT_NE(html.find("\"linear\":true"), std::string::npos);
  EXPECT_NE(html.find("\"headNames\":[\"head 0 ch 0\""), std::string::npos);
  std::filesystem::remove(path("page.html"));
  const Result q = run("explore --module gated-deltanet --d-in 8 --num-heads 4 --num-kv-heads 2 --head-dim 4 "
                       "--value-head-dim 2 --conv-kernel 4 --context-length 16 --seed 123 --out page.html");
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_NE(q.out.find("1 layer(s) x 4 head(s)"), std::string::npos) << q.out;
  html = slurp(path("page.html"));
  EXPECT_NE(html.find("\"linear\":true"), std::string::npos);
  EXPECT_EQ(html.find("\"headNames\":"), std::string::npos);
  std::filesystem::remove(path("page.html"));
  std::string text;
  for (int i = 0; i < 600; ++i) text += " a";
  write_file_atomically(path("long.txt"), text);
  refused("explore --text-file " + path("long.txt") + " --module deltanet --d-in 8 --d-out 64 --num-heads 2 "
          "--context-length 1000 --seed 1 --precision u8 --max-page-size 1M", 1, "1 layer(s) x 64 head(s) of 600 x 600");
}

TEST_F(ExploreCli, APageOverTheSizeLimitIsRefusedNamingTheFlags) {
  // Too large even in 8 bits (the template alone is more than 20K): no advice to use 8 bits.
  refused("explore " + mha + " --max-page-size 20K", 1, "(u8), more than --max-page-size 20480 bytes");
  const Result r = run("explore " + mha + " --max-page-size 20K --out page.html");
  EXPECT_EQ(r.err.find("--precision u8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a shorter --text, or raise --max-page-size"), std::string::npos) << r.err;
  // 200 tokens: in float32 about 2 MB, in 8 bits about 0.5 MB: with a 1 MB limit the advice is 8 bits.
  std::string text;
  for (int i = 0; i < 100; ++i) text += " word" + std::to_string(i % 50);
  const std::string page = "explore --text '" + text + "' --module mha --d-in 6 --d-out 6 --num-heads 2 "
                           "--context-length 512 --seed 123 --max-page-size 1M --out page.html ";
  const Result f32 = run(page + "--precision f32");
  EXPECT_EQ(f32.status, 1) << f32.err;
  EXPECT_NE(f32.err.find("make it smaller with --precision u8"), std::string::npos) << f32.err;
  EXPECT_EQ(run(page + "--precision u8").status, 0);
}

// A page whose attention weights and scores alone are beyond the limit is refused before anything
// is computed: 2,000 tokens' (T, T) weights for 2 heads are at least 2.5 MB stored in 8 bits, and
// the module's scores and scaled scores as much again each; weights computed in the page from
// queries and keys still show the scores, so a small head (--d-out 8, computed) is refused as well
// (it ran before: 60,000 characters took 95 s and 12 GB to be refused after the work).
TEST_F(ExploreCli, AnOversizePageIsRefusedBeforeAnyWork) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += " a";
  write_file_atomically(path("long.txt"), text);
  for (const std::string& shape : {std::string("--d-out 8 --attention-weights stored"), std::string("--d-out 512"),
                                   std::string("--d-out 8"), std::string("--d-out 8 --attention-weights computed")}) {
    const Result r = run("explore --text-file " + path("long.txt") + " --module mha --d-in 8 " + shape +
                         " --num-heads 2 --context-length 400000 --seed 1 --precision u8 --max-page-size 1M --out page.html");
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("the page's attention weights and scores (2 more per head) alone (1 layer(s) x 2 head(s) "
                         "of 2000 x 2000) would be at least"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("--precision u8"), std::string::npos) << r.err;  // it is 8-bit already
    EXPECT_FALSE(std::filesystem::exists(path("page.html")));
  }
}

}  // namespace
}  // namespace qkv
