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
#include "qkv/text/utf8.h"
#include "chat_flags.h"
#include "sampling_flags.h"
#include "stop_signals.h"

namespace qkv::cli {
namespace {

struct GenerateFlags {
  std::string checkpoint, weights, model, prompt, vocab_dir;
  std::optional<int64_t> num_heads, eos_id;
  bool eos = false;
  SamplingFlags pick;  // --temperature, --top-k
  SamplingOptions sampling;
  bool json = false;
  std::optional<Dtype> dtype;  // the blocks' products; default: the checkpoint's
  std::string quantize;        // --quantize
  bool chat = false;           // one chat turn (Llama 3, Qwen3)
  ChatFlags chat_flags;
};

int run_generate(GenerateFlags& f, const CLI::App& sub) {
  const int sources = !f.checkpoint.empty() + !f.weights.empty() + !f.model.empty();
  if (sources != 1) bad_flag("--model", "give one of --model PRESET, --weights PATH or --checkpoint FILE");
  if (sub.count("--num-heads") > 0 && f.weights.empty()) bad_flag("--num-heads", "goes with --weights");
  if (f.json && !utf8::is_valid(f.prompt))
    bad_flag("--prompt", "not UTF-8 text, and --json writes the prompt as a JSON string");
  LoadOptions load;
  load.vocab_dir = f.vocab_dir;
  load.dtype = f.dtype;
  load.num_heads = f.num_heads;
  load.quantize = f.quantize;
  LoadedModel m = !f.model.empty() ? make_model(f.model, f.sampling.seed, load)
                                   : load_model(f.checkpoint.empty() ? f.weights : f.checkpoint, load);
  for (const char* flag : {"--system", "--thinking", "--max-context"})
    if (!f.chat && sub.count(flag) > 0) bad_flag(flag, "goes with --chat");
  if (sub.count("--max-new-tokens") == 0) f.sampling.max_new_tokens = m.default_new_tokens;
  // A preset's weights were drawn from its seed's generator: sampling continues it, as the book's
  // torch.manual_seed(S); model = GPTModel(cfg); generate(...) does.
  if (!f.model.empty()) f.sampling.generator = m.generator.get();
  apply_sampling_flags(f.pick, m.model->vocab_size(), f.sampling);
  if (f.eos_id) {
    if (*f.eos_id < 0 || *f.eos_id >= m.model->vocab_size())
      bad_flag("--eos-id", *f.eos_id, " is not in [0, ", m.model->vocab_size(), ")");
    f.sampling.eos_id = f.eos_id;
  } else if (f.eos) {
    if (!m.eos_id) bad_flag("--stop-at-eos", "the model's tokenizer has no end-of-text token");
    f.sampling.eos_id = m.eos_id;
    f.sampling.stop_ids = m.end_ids;  // Qwen3's and Llama 3's end-of-turn tokens too
  }
  if (f.chat) {
    if (f.eos_id || f.eos) bad_flag(f.eos ? "--stop-at-eos" : "--eos-id", "a chat turn stops at the family's end tokens");
    if (!f.sampling.kv_cache) bad_flag("--no-kv-cache", "a chat keeps its KV cache");
    if (sub.count("--max-new-tokens") == 0) f.sampling.max_new_tokens = 1024;
    return run_chat_turn(m, f.chat_flags, f.prompt, f.sampling, f.json);
  }
  const std::vector<int64_t> prompt = m.encode(f.prompt);
  // Tokens are printed as they come (without --json); Ctrl-C stops after the token in progress,
  // with what was generated printed.
  std::optional<TextStream> stream;
  if (!f.json) {
    QKV_CHECK(m.tokenizer != nullptr, m.description, " has no tokenizer to write text with");
    std::cout << f.prompt << std::flush;
    stream.emplace(*m.tokenizer);
  }
  StopSignals signals;
  GenerationTimes times;
  std::vector<int64_t> out = generate_timed(*m.model, prompt, f.sampling, [&](int64_t id) {
    if (stream) std::cout << stream->add(id) << std::flush;
    return *StopSignals::flag() == 0;
  }, times);
  const int stopped = *StopSignals::flag();
  if (f.json) {
    std::vector<int64_t> ids = prompt;
    ids.insert(ids.end(), out.begin(), out.end());
    std::cout << nlohmann::json({{"prompt", f.prompt},
                                 {"completion", m.decode(out)},
                                 {"text", m.decode(ids)},
                                 {"ids", ids},
                                 {"new_ids", out},
                                 {"prompt_tokens", prompt.size()},
                                 {"new_tokens", out.size()},
                                 {"kv_cache", f.sampling.kv_cache},
                                 {"cache_dtype", kernels::cache_dtype_name(f.sampling.cache_dtype.value_or(m.model->default_cache_dtype()))},
                                 {"dtype", m.model->config_json().value("dtype", "f32")},
                                 {"seconds", times.seconds},
                                 {"prefill_ms", times.prefill_ms},
                                 {"tokens_per_s", times.tokens_per_s},
                                 {"model", m.description},
                                 {"stopped", stopped != 0}})
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)  // bad bytes: U+FFFD
              << "\n";
  } else {
    std::cout << stream->finish() << "\n";
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
  CLI::App* sub = app.add_subcommand(
      "generate", "Generate text with a model: GPT-2's weights, a Hugging Face folder, a GGUF file (" +
                      family_titles(has_gguf) + "), an untrained preset, or a checkpoint qkv train wrote");
  sub->add_option("--checkpoint", f->checkpoint, "A checkpoint written by qkv train");
  sub->add_option("--weights", f->weights,
                  "A model's files: a Hugging Face folder (" +
                      family_titles([](const ModelFamily& m) { return has_hf_folder(m) || m.book_config; }) +
                      ": config.json, model.safetensors or shards, tokenizer.json), a GGUF file (llama.cpp's: " +
                      family_titles(has_gguf) + "), GPT-2's model.safetensors, "
                  "or the book's state-dict names as safetensors");
  add_quantize_flag(sub, f->quantize);
  add_preset_flag(sub, f->model, "An untrained preset drawn from --seed (as torch.manual_seed(S); GPTModel(cfg))");
  add_number(sub, "--num-heads", f->num_heads, "--weights: the head count, when the file has no config.json and its "
                                               "width is not one of GPT-2's", positive<int64_t>());
  sub->add_option("--prompt", f->prompt, "The start of the text (built-in task: letters and '|', e.g. \"abcdefgh|\")")
      ->required();
  add_number_with_default(sub, "--max-new-tokens", f->sampling.max_new_tokens,
                          "Tokens to add (default: the task's length; text 50)", non_negative<int64_t>());
  add_sampling_flags(sub, f->pick);
  add_number_with_default(sub, "--seed", f->sampling.seed,
                          "Seed of the draws (torch.manual_seed(S); with --model, the weights are drawn first)");
  add_number(sub, "--eos-id", f->eos_id, "Stop when this token is generated (it is not printed)", any<int64_t>());
  sub->add_flag("--stop-at-eos", f->eos, "Stop at the tokenizer's end-of-text token (GPT-2's <|endoftext|>; Qwen3's "
                                         "<|im_end|> and <|endoftext|>; Llama 3's <|eot_id|>, <|eom_id|>, <|end_of_text|>)");
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
         "(default: bf16 when the products run in bf16 - a bf16 checkpoint, a GGUF file, --dtype bf16 - else f32)")
      ->type_name("TYPE");
  add_dtype_flag(sub, "--dtype", [f](Dtype d) { f->dtype = d; },
                 "The products: f32 | bf16 (bf16 mode; a GPT model runs every product in it, the feed-forward's and the "
                 "head's too, and keeps its weights in bf16: half the bytes per token; default: as the checkpoint was "
                 "trained)");
  sub->add_flag("--chat", f->chat,
                "One chat turn with a " + family_titles(has_chat, "or") + " model: --prompt is the user's message, wrapped in the "
                "family's chat format; the reply ends at its end token (default --max-new-tokens 1024). --json "
                "prints {prompt, completion, ids, prompt_ids, new_ids, prompt_tokens, new_tokens, ended, "
                "chat_format, model}");
  add_chat_flags(sub, f->chat_flags);
  sub->add_flag("--json", f->json,
                "Print {prompt, completion, text, ids (the prompt's and the new), new_ids, prompt_tokens, new_tokens, kv_cache, cache_dtype, dtype, seconds, "
                "prefill_ms, tokens_per_s, model, stopped} as JSON (seconds: the generation, without loading; "
                "prefill_ms: the prompt and the first token; tokens_per_s: the tokens after it over their time); "
                "without it the text is printed as it is generated");
  return {sub, [f, sub]() { return run_generate(*f, *sub); }};
}

}  // namespace qkv::cli
