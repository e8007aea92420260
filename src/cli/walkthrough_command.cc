// qkv walkthrough [--text T] [--json] [--svg DIR]
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "qkv/chapter/walkthrough_report.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/output_files.h"
#include "qkv/text/tiny_vocab.h"

namespace qkv::cli {
namespace {

struct WalkthroughFlags {
  std::string text = kBookSentence;
  int64_t max_tokens = 256;
  bool json = false, gpt = true;
  std::string svg_dir, vocab_dir;
};

int run(const WalkthroughFlags& f) {
  const int64_t words = static_cast<int64_t>(tiny_words(f.text).size());
  QKV_CHECK(words <= f.max_tokens, "walkthrough: the text has ", words, " words, more than --max-tokens ",
            f.max_tokens, " (every (T, T) matrix of the chapter is printed and kept: memory and output grow as "
            "T squared); raise --max-tokens to walk through it anyway");
  check_sizes({words, words, 64}, 4, "walkthrough: the (T, T) matrices of every step");
  Walkthrough w = run_walkthrough(f.text);
  if (f.json) {
    nlohmann::json j = walkthrough_json(w);
    if (f.gpt) {
      const GptFigure fig = gpt_figure(f.vocab_dir);
      j["gpt.hello_i_am"] = {{"ids", fig.ids}, {"text", fig.text}};
    }
    std::cout << j.dump() << "\n";
  } else {
    std::cout << walkthrough_text(w);
    if (f.gpt) {
      std::cout << "\n== 4.6 Coding the GPT model: an untrained GPT-2 small generates ==\n\n"
                << "torch.manual_seed(123); model = GPTModel(GPT_CONFIG_124M); model.eval()\n"
                << "generate_text_simple(model, encode(\"Hello, I am\"), max_new_tokens=10, context_size=1024)\n"
                << std::flush;
      std::cout << gpt_figure_text(gpt_figure(f.vocab_dir));
    }
  }
  if (!f.svg_dir.empty()) {
    const std::vector<OutputFile> files = walkthrough_pictures(w, f.svg_dir, "--svg");  // drawn first, written together
    if (::mkdir(f.svg_dir.c_str(), 0755) != 0 && errno != EEXIST)
      fail("cannot create the directory ", excerpt(f.svg_dir), " for --svg: ", std::strerror(errno));
    write_files_atomically(files);
    for (const OutputFile& file : files) std::cerr << "wrote " << file.path << "\n";
  }
  return 0;
}

}  // namespace

Command add_walkthrough(CLI::App& app) {
  auto flags = std::make_shared<WalkthroughFlags>();
  CLI::App* sub = app.add_subcommand(
      "walkthrough", "The chapter step by step on a sentence: every table the notebooks print");
  sub->add_option("--text", flags->text, "Sentence to walk through")->capture_default_str();
  sub->add_flag("--json", flags->json, "Print every intermediate as JSON (name -> {shape, data})");
  sub->add_option("--svg", flags->svg_dir, "Write the causal attention weights of each head as SVG heatmaps into DIR");
  sub->add_flag_function("--no-gpt", [flags](int64_t) { flags->gpt = false; },
                         "Leave out chapter 4's figure (an untrained GPT-2 small, drawn from seed 123, continuing "
                         "\"Hello, I am\"; it needs GPT-2's vocabulary)");
  sub->add_option("--vocab-dir", flags->vocab_dir, "Where GPT-2's encoder.json and vocab.bpe are (chapter 4's figure)");
  add_number_with_default(sub, "--max-tokens", flags->max_tokens,
                          "Refuse longer texts: every (T, T) matrix is printed and kept, so memory and output grow "
                          "as T squared",
                          positive<int64_t>());
  return {sub, [flags]() { return run(*flags); }};
}

}  // namespace qkv::cli
