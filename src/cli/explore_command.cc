// qkv explore --text T --out page.html [--module M ... | --weights PATH | --checkpoint F | --model PRESET]
//             [--generate N --temperature X --top-k K --seed S]
//
// One offline HTML page to look at attention: the chapter on a sentence (the walkthrough), one
// module as `qkv forward --text` runs it, or every layer and head of a model (a checkpoint `qkv
// train` wrote, GPT-2's weights, an untrained preset).
// The page's data and size are the library's (qkv/explore/explore.h); this file reads the flags,
// builds the model, and writes the page by the output rule (whole or not at all).
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "commands.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/generator.h"
#include "qkv/explore/explore.h"
#include "qkv/explore/page_fit.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/module_on_text.h"
#include "qkv/qkv.h"
#include "qkv/text/tiny_vocab.h"
#include "qkv/text/vocab_files.h"
#include "sampling_flags.h"

namespace qkv::cli {
namespace {

struct ExploreFlags : ModuleFlags {
  std::string text, text_file, checkpoint, preset, out, vocab_dir;
  std::optional<int64_t> generate;  // --generate N: continue the text by N tokens first
  SamplingFlags pick;               // --temperature, --top-k (with --generate)
  std::string model_path;           // --checkpoint, or --weights without --module
  std::string precision = "auto";
  std::string weights_in_page = "auto";  // --attention-weights
  std::optional<int64_t> pipeline_layer;
  int64_t max_page_bytes = 64ll << 20;
};

const char* kModuleFlagNames[] = {"--module", "--d-in", "--d-out", "--context-length", "--num-heads", "--dropout",
                                  "--qkv-bias", "--attention", "--num-kv-heads", "--rope", "--rope-base", "--window",
                                  "--alibi", "--softcap", "--dtype", "--train", "--seed", "--weights"};

std::string gpt2_label(const Encoding& gpt2, int64_t id) { return gpt2.decode(std::vector<TokenId>{id}); }

// --pipeline-layer names one of the page's layers (checked before any work).
void check_pipeline_layer(const ExploreFlags& f, int64_t layers) {
  if (f.pipeline_layer && *f.pipeline_layer >= layers)
    bad_flag("--pipeline-layer", *f.pipeline_layer, " is not a layer of the page (it has ", layers, ": 0 .. ",
             layers - 1, ")");
}

// The page's limits from the flags.
ExploreLimits limits_of(const ExploreFlags& f) {
  return {parse_explore_precision(f.precision), parse_explore_weights(f.weights_in_page), f.pipeline_layer,
          f.max_page_bytes};
}

// The chapter's module on GPT-2 tokens, as `qkv forward --text` runs it.
ExplorePage module_page(ExploreFlags& f, const CLI::App& sub, const std::string& text) {
  const AttentionModuleInfo& info = attention_module_info(f.module);
  const AttentionConfig c = checked_module_config(f, sub, /*on_text=*/true);
  // the page's (T, T) matrices per head: softmax weights, or a linear recurrence's maps A (the
  // book's GatedDeltaNet has one per head and value channel)
  const int64_t maps = info.softmax || info.linear_sizes ? c.attention.heads : c.attention.heads * c.attention.head_dim;
  Encoding gpt2 = load_gpt2(f.vocab_dir);
  const std::vector<int64_t> ids = gpt2.encode(text, SpecialTokens::all());
  QKV_CHECK(!ids.empty(), "the text has no tokens: there is nothing to attend over");
  const int64_t T = static_cast<int64_t>(ids.size());
  QKV_CHECK(T <= c.context_length, "the text is ", T, " GPT-2 tokens but --context-length is ", c.context_length,
            "; shorten the text or raise --context-length");
  // the module's pipeline shows its scores and scaled scores, (T, T) per head, besides the weights
  check_page_fits(1, maps, c.attention.head_dim, T, info.causal, limits_of(f), /*square_steps=*/info.softmax ? 2 : 1);
  check_sizes({maps, T, T, 8}, 4, "the page's (T, T) matrices per head");
  std::map<std::string, Tensor> state;
  if (!f.weights.empty()) state = load_safetensors(f.weights).tensors;
  // torch.manual_seed(S); embeddings; module = Class(...); [load_state_dict(...)]; module(x)
  ModuleOnText model(f.module, c, gpt2.n_vocab(), f.seed.value_or(Generator::kDefaultSeed));
  if (!f.weights.empty()) model.load_state_dict(state);
  AttentionModule& m = model.module();
  m.train(f.train);
  const Tensor x = model.embed(ids);  // (1, T, d_in), or (T, d_in)
  AttentionTrace trace;
  const Tensor y = m.forward(x, &trace);
  std::vector<std::string> labels;
  for (int64_t id : ids) labels.push_back(gpt2_label(gpt2, id));
  const std::string seed = f.weights.empty() ? str("seed ", *f.seed) : "weights " + excerpt(f.weights);
  return explore_module(m, info, c, m.input_rank() == 2 ? x : x.select(0, 0), trace, y, std::move(labels),
                        str(m.type_name(), " (", seed, f.train ? ", training mode" : "", ") on \"", text, "\""));
}

// Every layer of a model (a checkpoint `qkv train` wrote, a family's files, or a preset drawn from
// --seed) on the text's tokens; with --generate, on the text and its continuation, generated as
// `qkv generate` does (the KV cache, the same draws), then run through the model once.
ExplorePage model_page(const ExploreFlags& f, const std::string& text) {
  LoadOptions load;
  load.vocab_dir = f.vocab_dir;
  load.float_weights = true;  // the page reads every weight: a BF16 folder loads with f32 products
  const std::string source = f.model_path.empty() ? f.preset : f.model_path;
  LoadedModel loaded = f.model_path.empty() ? make_model(f.preset, f.seed.value_or(123), load)
                                            : load_model(f.model_path, load);
  QKV_CHECK(loaded.model->spec().layers > 0, excerpt(source), " has no attention blocks (0 layers): nothing to show");
  check_pipeline_layer(f, loaded.model->spec().layers);
  ExploreTextOptions o;
  o.limits = limits_of(f);
  o.generate = f.generate.value_or(0);
  o.sampling.seed = f.seed.value_or(o.sampling.seed);
  apply_sampling_flags(f.pick, loaded.model->vocab_size(), o.sampling);
  // A preset's weights were drawn from its seed's generator: sampling continues it (qkv generate).
  if (!f.preset.empty()) o.sampling.generator = loaded.generator.get();
  return explore_text(loaded, text, o);
}

int run_explore(ExploreFlags& f, const CLI::App& sub) {
  const bool from_text_file = !f.text_file.empty();
  if (sub.count("--text") > 0 && from_text_file) bad_flag("--text-file", "give --text or --text-file, not both");
  // A model's file: --checkpoint, or --weights without --module (with it, the module's weights).
  if (!f.checkpoint.empty() && !f.weights.empty()) bad_flag("--weights", "give --weights PATH or --checkpoint FILE, not both");
  f.model_path = !f.checkpoint.empty() ? f.checkpoint : f.module.empty() ? f.weights : "";
  const char* path_flag = !f.checkpoint.empty() ? "--checkpoint" : "--weights";
  if (!f.model_path.empty() && !f.preset.empty()) bad_flag("--model", "give --model PRESET or ", path_flag, " PATH, not both");
  const bool model = !f.model_path.empty() || !f.preset.empty();
  if (model)
    for (const char* flag : kModuleFlagNames) {
      const std::string name = flag;
      const bool allowed = (name == "--seed" && (!f.preset.empty() || f.generate)) || (name == "--weights" && f.checkpoint.empty());
      if (sub.count(flag) > 0 && !allowed)
        bad_flag(flag, f.model_path.empty() ? "does not apply to --model (the preset's configuration is used)"
                                            : str("does not apply to ", path_flag,
                                                  name == "--seed" ? " without --generate (it seeds the draws)"
                                                                   : " (the model's own configuration is used)"));
    }
  if (!model)
    for (const char* flag : {"--generate", "--temperature", "--top-k"})
      if (sub.count(flag) > 0) bad_flag(flag, "needs a model: --weights PATH, --checkpoint FILE or --model PRESET");
  if (!f.generate)
    for (const char* flag : {"--temperature", "--top-k"})
      if (sub.count(flag) > 0) bad_flag(flag, "picks generated tokens: it needs --generate N");
  if (f.module.empty())
    for (const char* flag : kModuleFlagNames)
      if (sub.count(flag) > 0 && !model)
        bad_flag(flag, "needs --module M (without it, the page shows the chapter's walkthrough)");
  check_output_files({{f.out, "", "--out"}}, {{f.text_file, "--text-file"},
                                             {f.checkpoint, "--checkpoint"},
                                             {f.weights, "--weights"},
                                             {f.vocab_dir, "--vocab-dir"}});
  const std::string text = from_text_file ? read_file(f.text_file) : sub.count("--text") > 0 ? f.text : kBookSentence;
  QKV_CHECK(!text.empty(), "the text is empty: there are no tokens to attend over");

  if (!model) check_pipeline_layer(f, 1);  // a module's page and the walkthrough's have one layer
  ExplorePage page;
  if (model) {
    page = model_page(f, text);
  } else if (!f.module.empty()) {
    page = module_page(f, sub, text);
  } else {
    const int64_t words = static_cast<int64_t>(tiny_words(text).size());
    QKV_CHECK(words <= 1024, "the text has ", words, " words; the walkthrough page takes at most 1024 (use --module ",
              "or --checkpoint for longer texts)");
    page = explore_walkthrough(run_walkthrough(text));
  }
  ExploreStorage st;
  const std::string html = fit_page(page, limits_of(f), st);  // --pipeline-layer checked before any work
  write_files_atomically({{f.out, html, "--out"}});
  std::set<int64_t> counts;  // one, or a Qwen3.5's two: its linear layers' value heads, its attention's query heads
  for (const ExploreLayer& l : page.layers) counts.insert(l.weights.size(0));
  std::string heads;
  for (int64_t n : counts) heads += (heads.empty() ? "" : " or ") + std::to_string(n);
  std::cout << "wrote " << f.out << ": " << html.size() << " bytes (" << megabytes(static_cast<int64_t>(html.size()))
            << "), " << page.tokens.size() << " tokens, " << page.layers.size() << " layer(s) x "
            << heads << " head(s), values as " << storage_name(st)
            << (page.pipeline_layer >= 0 ? str("; the pipeline of layer ", page.pipeline_layer, " only") : "") << "\n";
  return 0;
}

}  // namespace

Command add_explore(CLI::App& app) {
  auto f = std::make_shared<ExploreFlags>();
  CLI::App* sub = app.add_subcommand(
      "explore", "Write one offline HTML page to explore attention: pipeline, heads, model and neuron views");
  sub->add_option("--text", f->text, "The text to look at (default: the chapter's sentence, \"" + std::string(kBookSentence) + "\")");
  sub->add_option("--text-file", f->text_file, "Like --text, reading the text from a file");
  sub->add_option("--out", f->out, "The HTML file to write")->required();
  sub->add_option("--checkpoint", f->checkpoint,
                  "A model's file: a checkpoint qkv train wrote, or GPT-2's weights (Hugging Face's model.safetensors "
                  "or its folder, the book's names): every layer and head");
  add_number(sub, "--generate", f->generate,
             "With a model: continue the text by N tokens (the KV cache; the draws of qkv generate with the same "
             "--seed, --temperature, --top-k) and show attention over the text and its continuation",
             non_negative<int64_t>());
  add_sampling_flags(sub, f->pick);
  add_preset_flag(sub, f->preset, "An untrained preset drawn from --seed (default 123)");
  add_module_flags(sub, *f);
  sub->add_option("--vocab-dir", f->vocab_dir, "Where GPT-2's encoder.json and vocab.bpe are (see qkv encode --help)");
  sub->add_option("--precision", f->precision,
                  "How values are stored: auto (float32, exact, for pages up to 24 MB; else float16; else the "
                  "attention weights computed in the page with float16, then 8-bit, values; else 8-bit) | f32 | f16 | u8")
      ->check(CLI::IsMember({"auto", "f32", "f16", "u8"}))
      ->capture_default_str();
  sub->add_option("--attention-weights", f->weights_in_page,
                  "Where the attention weights come from: auto (stored when that fits, else computed) | stored | "
                  "computed (the page computes a head's weights when it shows it, from float16 queries and keys, "
                  "storing qkv's value wherever that differs by more than 5e-6: 2 T H D values a layer, not H T^2)")
      ->check(CLI::IsMember({"auto", "stored", "computed"}))
      ->capture_default_str();
  add_number(sub, "--pipeline-layer", f->pipeline_layer,
             "The layer whose steps the pipeline view holds (default: every layer, or layer 0 when they would "
             "not fit --max-page-size)",
             non_negative<int64_t>());
  sub->add_option_function<std::string>(
         "--max-page-size", [f](const std::string& s) { f->max_page_bytes = parse_bytes("--max-page-size", s); },
         "Refuse to write a larger page (a browser struggles with much more); suffixes K M G")
      ->type_name("BYTES")
      ->default_str("64M");
  sub->footer(
      "Without --module, --weights, --checkpoint or --model the page shows the chapter's walkthrough on the text\n"
      "(its tiny vocabulary and the book's embeddings; the numbers of qkv walkthrough --json). With --module the\n"
      "flags are those of qkv forward --text (--weights: the module's state dict). Without --module, --weights\n"
      "PATH is a model, as --checkpoint: GPT-2's weights or a checkpoint qkv train wrote. A model's page adds the\n"
      "head-patterns table and, for GPT models, the logit lens. The page needs no network: open it from the file.");
  return {sub, [f, sub]() { return run_explore(*f, *sub); }};
}

}  // namespace qkv::cli
