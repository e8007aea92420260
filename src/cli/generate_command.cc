// qkv generate --checkpoint C --prompt "..." : samples from a model qkv train wrote.
//
// A built-in task's model reads and writes the task's letters and '|' ("abcdefgh|" -> its copy);
// a text model reads and writes text through GPT-2's tokenizer, restricted to the tokens of the
// text it was trained on.
//
// With the KV cache (the default) each new token runs one position through the model; with
// --no-kv-cache the whole window runs again for every token (the README's generation table has
// the two measured against each other).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/qkv.h"
#include "stop_signals.h"

namespace qkv::cli {
namespace {

struct GenerateFlags {
  std::string checkpoint, prompt, vocab_dir;
  SamplingOptions sampling;
  bool json = false;
  std::optional<Dtype> dtype;  // the blocks' products; default: the checkpoint's
};

// The text of the ids so far, printed as it becomes final: decoding a prefix can end in U+FFFD for
// a character whose bytes are not all there yet, so trailing replacement characters wait for the
// next token (or the end).
class TextStream {
 public:
  explicit TextStream(const LoadedModel& m) : m_(m) {}
  void add(int64_t id) {
    ids_.push_back(id);
    const std::string text = m_.decode(ids_);
    static const std::string kReplacement = "\xEF\xBF\xBD";
    size_t stable = text.size();
    while (stable >= printed_ + kReplacement.size() && text.compare(stable - kReplacement.size(), kReplacement.size(),
                                                                   kReplacement) == 0)
      stable -= kReplacement.size();
    print_to(text, stable);
  }
  void finish() { print_to(m_.decode(ids_), std::string::npos); }

 private:
  void print_to(const std::string& text, size_t end) {
    end = std::min(end, text.size());
    if (end > printed_) std::cout << text.substr(printed_, end - printed_) << std::flush;
    printed_ = std::max(printed_, end);
  }
  const LoadedModel& m_;
  std::vector<int64_t> ids_;
  size_t printed_ = 0;
};

int run_generate(GenerateFlags& f, const CLI::App& sub) {
  LoadOptions load;
  load.vocab_dir = f.vocab_dir;
  load.dtype = f.dtype;
  LoadedModel m = load_model(f.checkpoint, load);
  const std::vector<int64_t> prompt = m.encode(f.prompt);
  if (sub.count("--max-new-tokens") == 0) f.sampling.max_new_tokens = m.default_new_tokens;
  // Tokens are printed as they come (without --json); Ctrl-C stops after the token in progress,
  // with what was generated printed.
  std::optional<TextStream> stream;
  if (!f.json) {
    std::cout << f.prompt << std::flush;
    stream.emplace(m);
  }
  StopSignals signals;
  const auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> out = generate(*m.model, prompt, f.sampling, [&](int64_t id) {
    if (stream) stream->add(id);
    return *StopSignals::flag() == 0;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int stopped = *StopSignals::flag();
  if (f.json) {
    std::cout << nlohmann::json({{"prompt", f.prompt},
                                 {"completion", m.decode(out)},
                                 {"ids", out},
                                 {"prompt_tokens", prompt.size()},
                                 {"new_tokens", out.size()},
                                 {"kv_cache", f.sampling.kv_cache},
                                 {"cache_dtype", kernels::cache_dtype_name(f.sampling.cache_dtype)},
                                 {"dtype", m.model->config_json().value("dtype", "f32")},
                                 {"seconds", seconds},
                                 {"tokens_per_s", seconds > 0 ? static_cast<double>(out.size()) / seconds : 0.0},
                                 {"stopped", stopped != 0}})
                     .dump()
              << "\n";
  } else {
    stream->finish();
    std::cout << "\n";
  }
  if (stopped) {
    std::cerr << "qkv generate: " << (stopped == SIGINT ? "interrupted (Ctrl-C)" : "terminated") << " after "
              << out.size() << " of " << f.sampling.max_new_tokens << " new tokens\n";
    return 128 + stopped;
  }
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* sub = app.add_subcommand("generate", "Sample text from a model that qkv train wrote");
  sub->add_option("--checkpoint", f->checkpoint, "A checkpoint written by qkv train")->required();
  sub->add_option("--prompt", f->prompt, "The start of the text (built-in task: letters and '|', e.g. \"abcdefgh|\")")
      ->required();
  add_number_with_default(sub, "--max-new-tokens", f->sampling.max_new_tokens,
                          "Tokens to add (default: the task's length; text 50)", non_negative<int64_t>());
  add_number_with_default(sub, "--temperature", f->sampling.temperature,
                          "Softmax temperature; 0 picks the most likely token", non_negative<double>());
  add_number_with_default(sub, "--top-k", f->sampling.top_k, "Sample only among the k most likely tokens (0: all)",
                          non_negative<int64_t>());
  add_number_with_default(sub, "--seed", f->sampling.seed, "Seed of the sampling generator");
  sub->add_option("--vocab-dir", f->vocab_dir, "Where GPT-2's encoder.json and vocab.bpe are (text models)");
  sub->add_flag_function(
      "--no-kv-cache", [f](int64_t) { f->sampling.kv_cache = false; },
      "Recompute the whole window for every token instead of keeping the keys and values of past positions "
      "(same tokens, much slower)");
  sub->add_option_function<std::string>(
         "--cache-dtype",
         [f](const std::string& s) {
           if (s != "f32" && s != "bf16")
             throw CLI::ValidationError("--cache-dtype: " + excerpt(s) + " is not a cache type; expected f32 or bf16");
           f->sampling.cache_dtype = s == "bf16" ? kernels::CacheDtype::kBF16 : kernels::CacheDtype::kF32;
         },
         "The KV cache's element type: f32 | bf16 (half the memory; keys and values rounded to bf16) "
         "(default: f32)")
      ->type_name("TYPE");
  add_dtype_flag(sub, "--dtype", [f](Dtype d) { f->dtype = d; },
                 "The attention blocks' products: f32 | bf16 (bf16 projections; default: as the checkpoint was trained)");
  sub->add_flag("--json", f->json,
                "Print {prompt, completion, ids, prompt_tokens, new_tokens, kv_cache, cache_dtype, dtype, seconds, "
                "tokens_per_s, stopped} as JSON (seconds: the generation alone, without loading); without it the "
                "text is printed as it is generated");
  return {sub, [f, sub]() { return run_generate(*f, *sub); }};
}

}  // namespace qkv::cli
