// qkv generate --checkpoint C --prompt "..." : samples from a model qkv train wrote.
//
// A built-in task's model reads and writes the task's letters and '|' ("abcdefgh|" -> its copy);
// a text model reads and writes text through GPT-2's tokenizer, restricted to the tokens of the
// text it was trained on.
//
// With the KV cache (the default) each new token runs one position through the model; with
// --no-kv-cache the whole window runs again for every token (the README's generation table has
// the two measured against each other).
#include <chrono>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/text/vocab_files.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/sampling.h"

namespace qkv::cli {
namespace {

struct GenerateFlags {
  std::string checkpoint, prompt, vocab_dir;
  SamplingOptions sampling;
  bool json = false;
  std::optional<Dtype> dtype;  // the blocks' products; default: the checkpoint's
};

int run_generate(GenerateFlags& f, const CLI::App& sub) {
  Checkpoint c = load_checkpoint(f.checkpoint);
  TrainOptions& o = c.options;
  if (f.dtype) {
    o.model.dtype = *f.dtype;
    // generation runs in eval mode, where auto is the fused path (dropout is off)
    if (o.model.dtype == Dtype::kBF16 && o.model.attention == AttentionPath::kAuto) o.model.attention = AttentionPath::kFused;
  }
  Generator gen(o.seed);
  AttentionLM model(o.model, gen);
  model.load_state_dict(c.model, /*strict=*/true);

  std::vector<int64_t> prompt;
  std::function<std::string(const std::vector<int64_t>&)> decode;
  std::optional<Encoding> gpt2;
  std::unique_ptr<SequenceTask> task;
  if (is_builtin_task(o.task)) {
    task = std::make_unique<SequenceTask>(o.task == TrainTask::kCopy ? TaskKind::kCopy : TaskKind::kReverse, o.task_length,
                                          o.task_symbols, 0);
    prompt = task->encode(f.prompt);
    decode = [&](const std::vector<int64_t>& ids) { return task->decode(ids); };
    if (sub.count("--max-new-tokens") == 0) f.sampling.max_new_tokens = o.task_length;
  } else if (o.task == TrainTask::kText) {
    QKV_CHECK(!c.vocab.empty(), excerpt(f.checkpoint), " is a text model but holds no vocabulary (data.vocab)");
    gpt2 = load_gpt2(f.vocab_dir);
    for (int64_t t : gpt2->encode(f.prompt, SpecialTokens::all())) {
      auto it = std::lower_bound(c.vocab.begin(), c.vocab.end(), t);
      QKV_CHECK(it != c.vocab.end() && *it == t, "the prompt's token ", t, " (",
                gpt2->decode(std::vector<TokenId>{t}), ") does not occur in the text the model was trained on ('",
                o.text_file, "'), so the model has no embedding for it");
      prompt.push_back(it - c.vocab.begin());
    }
    decode = [&](const std::vector<int64_t>& ids) {
      std::vector<TokenId> original;
      for (int64_t id : ids) original.push_back(c.vocab.at(static_cast<size_t>(id)));
      return gpt2->decode(original);
    };
  } else {
    fail(excerpt(f.checkpoint), " was trained on fixed batches (--task ", train_task_name(o.task),
         ") and has no tokenizer to read a prompt with");
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> out = generate(model, prompt, f.sampling);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string completion = decode(out);
  if (f.json) {
    std::cout << nlohmann::json({{"prompt", f.prompt},
                                 {"completion", completion},
                                 {"ids", out},
                                 {"prompt_tokens", prompt.size()},
                                 {"new_tokens", out.size()},
                                 {"kv_cache", f.sampling.kv_cache},
                                 {"cache_dtype", kernels::cache_dtype_name(f.sampling.cache_dtype)},
                                 {"dtype", dtype_name(o.model.dtype)},
                                 {"seconds", seconds},
                                 {"tokens_per_s", seconds > 0 ? static_cast<double>(out.size()) / seconds : 0.0}})
                     .dump()
              << "\n";
  } else {
    std::cout << f.prompt << completion << "\n";
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
                "Print {prompt, completion, ids, prompt_tokens, new_tokens, kv_cache, cache_dtype, seconds, "
                "tokens_per_s} as JSON (seconds: the generation alone, without loading)");
  return {sub, [f, sub]() { return run_generate(*f, *sub); }};
}

}  // namespace qkv::cli
