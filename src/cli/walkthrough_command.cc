// qkv walkthrough [--text T] [--json] [--svg DIR]
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "qkv/chapter/walkthrough.h"
#include "qkv/qkv.h"
#include "qkv/core/error.h"
#include "qkv/core/print.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/text/tiny_vocab.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/heatmap_svg.h"
#include "qkv/io/tensor_json.h"

namespace qkv::cli {
namespace {

struct WalkthroughFlags {
  std::string text = kBookSentence;
  int64_t max_tokens = 256;
  bool json = false, gpt = true;
  std::string svg_dir, vocab_dir;
};

// Chapter 4's figure: the untrained GPT-2 small the book builds with torch.manual_seed(123),
// continuing "Hello, I am" greedily for 10 tokens (its generate_text_simple).
struct GptFigure {
  std::vector<int64_t> ids;  // the prompt's and the new ones
  std::string text;
};

GptFigure gpt_figure(const std::string& vocab_dir) {
  LoadOptions o;
  o.vocab_dir = vocab_dir;
  LoadedModel m = make_model("gpt2-small", 123, o);
  GptFigure fig;
  fig.ids = m.encode("Hello, I am");
  SamplingOptions greedy;
  greedy.max_new_tokens = 10;
  greedy.temperature = 0.0;
  const std::vector<int64_t> out = generate(*m.model, fig.ids, greedy);
  fig.ids.insert(fig.ids.end(), out.begin(), out.end());
  fig.text = m.decode(fig.ids);
  return fig;
}

std::string list(const std::vector<std::string>& words) {
  std::string s = "[";
  for (size_t i = 0; i < words.size(); ++i) s += (i ? ", '" : "'") + words[i] + "'";
  return s + "]";
}

void print_people(const Walkthrough& w) {
  std::cout << "qkv walkthrough: chapter 3 of \"Build a Large Language Model From Scratch\" on\n  \""
            << w.text << "\"\n\n";
  std::cout << "Tokens   : " << list(w.words) << "\nVocab    : {";
  for (size_t i = 0; i < w.vocab.size(); ++i) std::cout << (i ? ", '" : "'") << w.vocab[i] << "': " << i;
  std::cout << "}\nToken IDs: [";
  for (size_t i = 0; i < w.ids.size(); ++i) std::cout << (i ? ", " : "") << w.ids[i];
  std::cout << "]\n";
  if (!w.book_embeddings)
    std::cout << "(words the book has no embedding for get rows of nn.Embedding drawn after "
                 "torch.manual_seed(0))\n";
  std::string section;
  for (const WalkthroughStep& s : w.steps) {
    if (s.section != section) {
      section = s.section;
      std::cout << "\n== " << section << " ==\n";
    }
    std::cout << "\n" << s.name << ": " << s.caption << "\n" << to_string(s.value) << "\n";
  }
}

nlohmann::json to_json(const Walkthrough& w) {
  nlohmann::json j = nlohmann::json::object();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < w.vocab.size(); ++i) vocab[w.vocab[i]] = i;
  j["tiny_vocab.ids"] = {{"tokens", w.words}, {"vocab", vocab}, {"ids", w.ids}};
  for (const WalkthroughStep& s : w.steps) j[s.name] = tensor_to_json(s.value);
  return j;
}

void write_pictures(const Walkthrough& w, const std::string& dir) {
  HeatmapOptions o;
  o.row_labels = w.words;
  o.causal = true;
  std::vector<OutputFile> files;  // drawn first, written together
  for (const WalkthroughPicture& p : w.pictures) {
    o.title = p.title;
    files.push_back({dir + "/" + p.file, heatmap_svg(p.weights, o), "--svg"});
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    fail("cannot create the directory ", excerpt(dir), " for --svg: ", std::strerror(errno));
  write_files_atomically(files);
  for (const OutputFile& f : files) std::cerr << "wrote " << f.path << "\n";
}

int run(const WalkthroughFlags& f) {
  const int64_t words = static_cast<int64_t>(tiny_words(f.text).size());
  QKV_CHECK(words <= f.max_tokens, "walkthrough: the text has ", words, " words, more than --max-tokens ",
            f.max_tokens, " (every (T, T) matrix of the chapter is printed and kept: memory and output grow as "
            "T squared); raise --max-tokens to walk through it anyway");
  check_sizes({words, words, 64}, 4, "walkthrough: the (T, T) matrices of every step");
  Walkthrough w = run_walkthrough(f.text);
  if (f.json) {
    nlohmann::json j = to_json(w);
    if (f.gpt) {
      const GptFigure fig = gpt_figure(f.vocab_dir);
      j["gpt.hello_i_am"] = {{"ids", fig.ids}, {"text", fig.text}};
    }
    std::cout << j.dump() << "\n";
  } else {
    print_people(w);
    if (f.gpt) {
      std::cout << "\n== 4.6 Coding the GPT model: an untrained GPT-2 small generates ==\n\n"
                << "torch.manual_seed(123); model = GPTModel(GPT_CONFIG_124M); model.eval()\n"
                << "generate_text_simple(model, encode(\"Hello, I am\"), max_new_tokens=10, context_size=1024)\n"
                << std::flush;
      const GptFigure fig = gpt_figure(f.vocab_dir);
      std::cout << "Output:";
      for (int64_t id : fig.ids) std::cout << " " << id;
      std::cout << "\n\"" << fig.text << "\"\n(the weights are random: the book's point is that the model "
                << "runs, not that it writes sense; chapter 5 trains it: qkv train --model gpt)\n";
    }
  }
  if (!f.svg_dir.empty()) write_pictures(w, f.svg_dir);
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
