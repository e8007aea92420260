// qkv train --model gpt|llama|qwen3 --text-file F: chapter 5's training of a model of any family,
// printing the book's table. See train_book.h and qkv/train/book_training.h.
#include "train_book.h"


#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"
#include "qkv/models/gpt.h"
#include "qkv/text/vocab_files.h"
#include "qkv/train/loss_curve.h"
#include "stop_signals.h"

namespace qkv::cli {
namespace {

// The flags of the attention LM's training that mean nothing here.
constexpr const char* kNotForGpt[] = {"--task", "--length", "--symbols", "--data", "--vocab-size", "--optimizer",
                                      "--min-lr", "--warmup", "--beta1", "--beta2", "--eps", "--momentum",
                                      "--dampening", "--nesterov", "--clip", "--eval-every", "--eval-sequences",
                                      "--steps", "--num-kv-heads", "--rope", "--rope-base", "--window", "--alibi",
                                      "--softcap", "--resume", "--checkpoint-every", "--stop-after",
                                      "--checkpoint-dtype"};

}  // namespace

void add_book_train_flags(CLI::App* sub, BookTrainFlags& g) {
  std::vector<std::string> families;
  std::string folders;  // the families of Hugging Face's folders: llama | qwen2 | ...
  for (const ModelFamily* f : model_families()) {
    families.push_back(f->name);
    if (has_hf_folder(*f)) folders += (folders.empty() ? "" : " | ") + f->name;
  }
  sub->add_option("--model", g.model, "attention-lm (the attention-only LM) | gpt (the book's GPT model, chapter 5) | " +
                                          folders + " (" + family_titles(has_hf_folder) +
                                          ": chapter 5's loop, fine-tuning from --init)")
      ->check(CLI::IsMember(families))
      ->capture_default_str();
  sub->add_option("--preset", g.preset, "--model gpt: the sizes to start from (the flags given override them); "
                                        "the others: an untrained model of these sizes (llama-3.2-1b, qwen3-0.6b, ...)")
      ->check(CLI::IsMember(model_preset_names()))
      ->capture_default_str();
  sub->add_option("--init", g.init, "--model gpt: start from these weights (fine-tuning; any layout qkv generate "
                                    "--weights reads); the others: Hugging Face's folder (config.json, the weights, "
                                    "tokenizer.json)");
  visit_fields(OptionFlags{sub}, g.book);
}

namespace {

// The book's GPT model of the preset's sizes (context 256, as chapter 5) with the flags on top: the
// flags are the book's cfg dict.
DecoderSpec sized_gpt(const BookTrainFlags& g, const TrainOptions& o, const CLI::App& sub) {
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  const DecoderSpec p = gpt_preset(g.preset);
  const int64_t E = given("--d-model") ? o.model.d_model : p.width;
  const int64_t H = given("--num-heads") ? o.model.attention.heads : p.attention.heads;
  if (H < 1 || E % H != 0) bad_flag("--num-heads", H, " must divide --d-model (", E, ")");
  kernels::AttentionSpec a{.heads = H, .head_dim = E / H, .dropout = given("--dropout") ? o.model.attention.dropout : 0.1};
  check_attention_flags(a);
  DecoderSpec s = gpt_spec(p.vocab_size, given("--context-length") ? o.model.context_length : 256, E, H,
                           given("--num-layers") ? o.model.num_layers : p.layers, a.dropout,
                           given("--qkv-bias") ? o.model.qkv_bias : p.qkv_bias);
  if (given("--attention")) s.path = o.model.path;
  if (given("--dtype")) s.attention.dtype = o.model.attention.dtype;
  check_sizes({s.vocab_size, s.width}, 4, "the token embedding (vocabulary x --d-model)");
  return s;
}

// The model chapter 5's loop trains: --init's files (fine-tuning), an untrained --preset, or for gpt
// the preset's sizes with the flags on top; torch.manual_seed(seed) before it, as the book's.
LoadedModel book_model(const ModelFamily& family, const BookTrainFlags& g, const TrainOptions& o, const CLI::App& sub,
                       const std::string& vocab_dir, uint64_t seed) {
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  const bool sized = family.book_config;  // the book's cfg dict as flags
  for (const char* flag : {"--d-model", "--num-heads", "--num-layers", "--qkv-bias", "--dropout"})
    if (given(flag) && !sized) bad_flag(flag, "is not a flag of --model ", g.model, " (the model is --init's or --preset's)");
  if (!g.init.empty()) {
    for (const char* flag : {"--preset", "--d-model", "--num-heads", "--num-layers", "--context-length", "--qkv-bias"})
      if (given(flag) && (sized || std::string(flag) == "--preset")) bad_flag(flag, "comes from --init's weights");
  } else if (!sized && !given("--preset")) {
    bad_flag("--init", "--model ", g.model, " starts from --init DIR (Hugging Face's folder) or --preset NAME, one of them");
  }
  LoadOptions load;
  load.vocab_dir = vocab_dir;
  load.seed = seed;
  load.draw = sized;  // the book: torch.manual_seed(seed); model = GPTModel(cfg); model.load_state_dict(init)
  load.float_weights = true;
  if (given("--attention")) load.path = o.model.path;
  if (given("--dtype")) load.dtype = o.model.attention.dtype;
  if (sized) load.dropout = given("--dropout") ? o.model.attention.dropout : g.init.empty() ? 0.1 : 0.0;
  LoadedModel m;
  if (!g.init.empty()) {
    m = family.load(g.init, load);
    QKV_CHECK(m.tokenizer != nullptr, excerpt(g.init), " has no tokenizer (tokenizer.json) to read the text with");
  } else if (!sized) {
    if (family_of_preset(g.preset).name != family.name)
      bad_flag("--preset", g.preset, " is not a ", family.title, " preset");
    m = make_model(g.preset, seed, load);
  } else {
    m.generator = std::make_unique<Generator>(seed);
    m.model = build_model(sized_gpt(g, o, sub), *m.generator);
    std::string file;
    attach_tokenizer(m, family.tokenizer(family.vocabulary, load, file), "GPT-2's vocabulary", file);
  }
  if (m.model->family().name != family.name)
    bad_flag("--model", g.model, " but ", excerpt(g.init.empty() ? g.preset : g.init), " is a ",
             m.model->family().name, " model");
  return m;
}

}  // namespace

int run_train_book(const BookTrainFlags& g, const TrainOptions& o, const CLI::App& sub,
                   std::optional<std::string> given_checkpoint, std::string svg, const std::string& vocab_dir,
                   bool json, bool quiet, TrainRanks* ranks) {
  const ModelFamily& family = model_family(g.model);
  // --checkpoint "" is none, as for the attention LM; without the flag, the family's default name
  std::string checkpoint = given_checkpoint.value_or("qkv-" + family.name +
                                                     (family.checkpoint_folder ? "" : ".safetensors"));
  const bool lead = ranks == nullptr || ranks->rank() == 0;
  if (!lead) {  // rank 0 prints and writes
    checkpoint.clear();
    svg.clear();
    json = false;
    quiet = true;
  }
  for (const char* flag : kNotForGpt)
    if (sub.count(flag) > 0) bad_flag(flag, "is not a flag of --model ", g.model);
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  QKV_CHECK(!o.text_file.empty(), "--model ", g.model, " trains on a text: give --text-file FILE (the book's is "
            "the-verdict.txt)");
  BookTrainingOptions b = g.book;
  b.batch_size = given("--batch-size") ? o.batch_size : 2;
  b.lr = given("--lr") ? o.lr : 4e-4;
  b.weight_decay = given("--weight-decay") ? o.weight_decay : 0.1;
  const uint64_t seed = given("--seed") ? o.seed : 123;
  try {  // the run's flags in their ranges (--batch-size and --lr as TrainOptions declares them)
    check_option_ranges(o);
    check_option_ranges(b);
  } catch (const OptionError& e) {
    throw CLI::ValidationError(e.what());  // a usage error: exit status 2
  }
  std::vector<OutputFile> destinations;  // checked before any training
  OutputFolder folder;                   // a new --checkpoint folder, gone again if the run fails
  if (!checkpoint.empty() && family.checkpoint_folder) folder = OutputFolder(checkpoint, "--checkpoint");
  if (!checkpoint.empty()) destinations = checkpoint_destinations(family, checkpoint, "--checkpoint");
  if (!svg.empty()) destinations.push_back({svg, "", "--svg"});
  check_output_files(destinations, {{o.text_file, "--text-file"}, {g.init, "--init"}});
  LoadedModel m = book_model(family, g, o, sub, vocab_dir, seed);
  // The windows: the model's own context for gpt (its --context-length sized the model; --init's its
  // file's); else --context-length, or chapter 5's 256 within the model's positions.
  const int64_t context = m.model->context_length();
  if (!family.book_config)
    b.context_length = given("--context-length") ? o.model.context_length : std::min<int64_t>(256, context);
  if (b.context_length > context)
    bad_flag("--context-length", b.context_length, " is more than the model's ", context, " positions");
  const int64_t windows = b.context_length > 0 ? b.context_length : context;
  const std::string agreement = str(m.model->config_json().dump(), " ", excerpt(g.init), " ", excerpt(g.preset),
                                    " context ", windows);
  if (ranks != nullptr) {  // every rank the same run, and a slice of every batch for each
    ranks->check_agreement(str(agreement, " ", excerpt(o.text_file), " seed ", seed, " batch ", b.batch_size,
                               " lr ", b.lr, " weight decay ", b.weight_decay, " epochs ", b.epochs, " eval ",
                               b.eval_freq, "/", b.eval_iter, " ratio ", b.train_ratio),
                           "");
    if (b.batch_size < ranks->ranks())
      throw AllRanksError(str("data-parallel training: --batch-size ", b.batch_size,
                              " must be at least the number of ranks (", ranks->ranks(),
                              "): every rank takes a slice of each batch"));
  }
  const std::string text = read_file(o.text_file);
  LanguageModel& model = *m.model;
  std::ostream& info = json ? std::cerr : std::cout;
  if (!quiet)
    std::cerr << "qkv train: " << model.describe()
              << (model.spec().shortcut_dropout ? str(", dropout ", model.spec().attention.dropout) : std::string())
              << " (" << model.num_parameters() << " parameters)\n  " << excerpt(o.text_file) << ": " << text.size()
              << " bytes, " << utf8_length(text) << " characters, the first " << b.train_ratio
              << " for training; windows of " << windows << " tokens; AdamW lr " << b.lr << ", weight decay "
              << b.weight_decay << ", batch " << b.batch_size << ", " << b.epochs << " epochs, seed " << seed
              << (ranks ? str("; data-parallel over ", ranks->ranks(), " ranks") : std::string()) << "\n";
  std::vector<float> step_losses;
  std::vector<EvalStats> curve_evals;
  StopSignals signals;
  BookTrainingCallbacks cb;
  cb.stop_flag = StopSignals::flag();
  cb.on_step = [&](int64_t, float loss) { step_losses.push_back(loss); };
  cb.on_eval = [&](const BookEval& e) {
    if (lead) info << book_eval_line(e) << std::endl;
    if (json) std::cout << book_eval_json(e).dump() << std::endl;
    curve_evals.push_back({e.step + 1, static_cast<float>(e.val_loss), NAN});
  };
  cb.on_sample = [&](int64_t, const std::string& sample) {
    if (lead) info << sample << std::endl;
  };
  const BookTrainingReport r =
      train_like_the_book(model, *m.generator, *m.tokenizer, text, b, cb, ranks ? &ranks->data_parallel() : nullptr);

  std::vector<OutputFile> files;
  if (!checkpoint.empty()) files = family.checkpoint(model, checkpoint, m.tokenizer_file);
  if (!svg.empty()) {
    LossCurveOptions lc;
    lc.title = "qkv train --model " + g.model + ": " + excerpt(o.text_file) + ", " + std::to_string(r.steps) +
               " steps of " + std::to_string(b.batch_size * windows) + " tokens (dots: validation loss)";
    files.push_back({svg, loss_curve_svg(step_losses, curve_evals, lc), "--svg"});
  }
  write_files_atomically(files);
  folder.keep();
  if (!checkpoint.empty()) info << "weights: " << checkpoint << " (" << family.checkpoint_kind << ")\n";
  if (r.stopped) {
    int sig = *StopSignals::flag();
    if (ranks) sig = ranks->data_parallel().max_int(sig);  // the signal one rank had, for every rank's status
    if (lead)
      info << (sig == SIGINT ? "interrupted (Ctrl-C)" : "terminated") << " after step " << r.steps - 1
           << "; the weights so far are written\n";
    return 128 + sig;
  }
  return 0;
}

}  // namespace qkv::cli
