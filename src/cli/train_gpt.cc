// qkv train --model gpt --text-file F: chapter 5's training of the book's GPT model, printing the
// book's table. See train_gpt.h and qkv/train/book_training.h.
#include "train_gpt.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
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
#include "qkv/models/gpt_weights.h"
#include "qkv/models/llama_weights.h"
#include "qkv/models/tokenizer.h"
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

void add_gpt_train_flags(CLI::App* sub, GptTrainFlags& g) {
  sub->add_option("--model", g.model, "attention-lm (the attention-only LM) | gpt (the book's GPT model, chapter 5) | "
                                      "llama | qwen3 (Llama 3, Qwen3: chapter 5's loop, fine-tuning from --init)")
      ->check(CLI::IsMember({"attention-lm", "gpt", "llama", "qwen3"}))
      ->capture_default_str();
  std::vector<std::string> presets = gpt_preset_names();
  for (const std::string& n : llama_preset_names()) presets.push_back(n);
  sub->add_option("--preset", g.preset, "--model gpt: the sizes to start from (the flags given override them); "
                                        "llama, qwen3: an untrained model of these sizes (llama-3.2-1b, qwen3-0.6b, ...)")
      ->check(CLI::IsMember(presets))
      ->capture_default_str();
  sub->add_option("--init", g.init, "--model gpt: start from these weights (fine-tuning; any layout qkv generate "
                                    "--weights reads); llama, qwen3: Hugging Face's folder (config.json, the weights, "
                                    "tokenizer.json)");
  add_number_with_default(sub, "--epochs", g.book.epochs, "--model gpt: passes over the training text",
                          non_negative<int64_t>());
  add_number_with_default(sub, "--eval-freq", g.book.eval_freq, "--model gpt: evaluate every N steps",
                          positive<int64_t>());
  add_number_with_default(sub, "--eval-iter", g.book.eval_iter, "--model gpt: batches of each set per evaluation",
                          positive<int64_t>());
  add_number_with_default(sub, "--train-ratio", g.book.train_ratio,
                          "--model gpt: the share of the text's characters for training (the rest validates)");
  sub->add_option("--start-context", g.book.start_context, "--model gpt: the text each epoch's sample continues")
      ->capture_default_str();
  add_number_with_default(sub, "--sample-tokens", g.book.sample_tokens, "--model gpt: tokens of each sample",
                          non_negative<int64_t>());
}

namespace {

// What chapter 5's loop trains and writes: the model, its generator and tokenizer, a line that every
// data-parallel rank must agree on, and the files its weights go to.
struct BookModel {
  std::unique_ptr<Generator> gen;
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string agreement;                       // the run's settings, compared across ranks
  std::function<std::vector<OutputFile>()> checkpoint;  // the weights' files (called after training)
  std::string written;                         // what the checkpoint is, for the closing line
  int64_t context = 0;                         // the training windows' length
};

// The book's GPT model: the preset's sizes (context 256, as chapter 5), the flags on top; or --init's.
BookModel gpt_book_model(const GptTrainFlags& g, const TrainOptions& o, const CLI::App& sub, const std::string& checkpoint,
                         const std::string& vocab_dir, uint64_t seed) {
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  GPTConfig c = gpt_preset(g.preset);
  c.context_length = 256;
  std::optional<GptWeights> init;
  if (!g.init.empty()) {
    for (const char* flag : {"--preset", "--d-model", "--num-heads", "--num-layers", "--context-length", "--qkv-bias"})
      if (given(flag)) bad_flag(flag, "comes from --init's weights");
    init = read_gpt_weights(g.init);
    c = init->config;
  }
  if (given("--d-model")) c.emb_dim = o.model.d_model;
  if (given("--num-heads")) c.attention.heads = o.model.attention.heads;
  if (given("--num-layers")) c.n_layers = o.model.num_layers;
  if (given("--context-length")) c.context_length = o.model.context_length;
  if (given("--qkv-bias")) c.qkv_bias = o.model.qkv_bias;
  c.attention.dropout = given("--dropout") ? o.model.attention.dropout : init ? 0.0 : 0.1;
  if (given("--attention")) c.path = o.model.path;
  if (given("--dtype")) c.attention.dtype = o.model.attention.dtype;
  if (c.attention.heads < 1 || c.emb_dim % c.attention.heads != 0)
    bad_flag("--num-heads", c.attention.heads, " must divide --d-model (", c.emb_dim, ")");
  set_head_dim(c);
  check_attention_flags(c.attention);
  check_sizes({c.vocab_size, c.emb_dim}, 4, "the token embedding (vocabulary x --d-model)");
  BookModel m;
  m.context = c.context_length;
  m.agreement = str(to_json(c).dump(), " ", excerpt(g.init));
  auto tokenizer = std::make_unique<Gpt2Tokenizer>(load_gpt2(vocab_dir));
  QKV_CHECK(c.vocab_size == tokenizer->vocab_size(), "--model gpt reads GPT-2's tokens: the model's vocabulary (",
            c.vocab_size, ") must be GPT-2's ", tokenizer->vocab_size());
  m.tokenizer = std::move(tokenizer);
  // torch.manual_seed(seed); model = GPTModel(cfg) [; model.load_state_dict(init)]
  m.gen = std::make_unique<Generator>(seed);
  auto model = std::make_unique<GPTModel>(c, *m.gen);
  if (init) load_gpt_weights(*model, *init);
  GPTModel* raw = model.get();
  m.model = std::move(model);
  if (!checkpoint.empty())
    m.checkpoint = [raw, c, checkpoint] {
      return std::vector<OutputFile>{
          {checkpoint,
           serialize_safetensors(gpt_state_in_layout(*raw, GptLayout::kBook),
                                 {{"format", "pt"}, {"qkv", "gpt-weights 1"}, {"config", to_json(c).dump()}}),
           "--checkpoint"}};
    };
  m.written = "the book's names; qkv generate --weights reads them";
  return m;
}

// Llama 3 / Qwen3: --init's folder (fine-tuning) or an untrained --preset; windows of --context-length
// tokens (default 256, chapter 5's); no dropout. The checkpoint is a folder as Hugging Face ships one.
BookModel llama_book_model(const GptTrainFlags& g, const TrainOptions& o, const CLI::App& sub,
                           const std::string& checkpoint, BookTrainingOptions& b, uint64_t seed) {
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  for (const char* flag : {"--d-model", "--num-heads", "--num-layers", "--qkv-bias", "--dropout"})
    if (given(flag)) bad_flag(flag, "is not a flag of --model ", g.model, " (the model is --init's or --preset's)");
  if (g.init.empty() == !given("--preset"))
    bad_flag("--init", "--model ", g.model, " starts from --init DIR (Hugging Face's folder) or --preset NAME, one of them");
  BookModel m;
  LlamaConfig c;
  std::optional<LlamaWeights> init;
  std::string tokenizer_path;
  if (!g.init.empty()) {
    init = read_llama_weights(g.init);
    c = init->config;
    tokenizer_path = g.init + "/tokenizer.json";
  } else {
    bool known = false;
    for (const std::string& n : llama_preset_names()) known = known || n == g.preset;
    if (!known) bad_flag("--preset", g.preset, " is not a Llama 3 or Qwen3 preset");
    c = llama_preset(g.preset);
    tokenizer_path = c.family == LlamaFamily::kQwen3 ? "qwen3" : "llama3";
  }
  if (llama_family_name(c.family) != g.model)
    bad_flag("--model", g.model, " but ", excerpt(g.init.empty() ? g.preset : g.init), " is a ",
             llama_family_name(c.family), " model");
  if (given("--attention")) c.path = o.model.path;
  if (given("--dtype")) c.dtype = o.model.attention.dtype;
  b.context_length = given("--context-length") ? o.model.context_length : std::min<int64_t>(256, c.max_position_embeddings);
  if (b.context_length > c.max_position_embeddings)
    bad_flag("--context-length", b.context_length, " is more than the model's ", c.max_position_embeddings, " positions");
  m.context = b.context_length;
  m.agreement = str(llama_config_json(c).dump(), " ", excerpt(g.init), " ", excerpt(g.preset), " context ",
                    b.context_length);
  const HfTokenizer tok = HfTokenizer::load(tokenizer_path);
  QKV_CHECK(tok.vocab_size() <= c.vocab_size, excerpt(tokenizer_path), " has ", tok.vocab_size(),
            " tokens, more than the model's ", c.vocab_size);
  m.tokenizer = std::make_unique<HfTextTokenizer>(tok, tokenizer_path);
  m.gen = std::make_unique<Generator>(seed);
  if (init) {
    m.model = llama_model_from(*init, c.dtype, c.path, *m.gen);
  } else {
    m.model = std::make_unique<LlamaModel>(c, *m.gen);
  }
  auto* raw = static_cast<LlamaModel*>(m.model.get());
  if (!checkpoint.empty()) {
    const std::string source = init ? g.init + "/tokenizer.json" : *find_hf_vocab(tokenizer_path);
    m.checkpoint = [raw, checkpoint, source] {
      NamedTensors t;
      for (const StateEntry& e : raw->state_dict()) t.push_back({e.name, e.value()});
      nlohmann::json config = llama_config_json(raw->config);
      config["torch_dtype"] = "float32";
      return std::vector<OutputFile>{
          {checkpoint + "/model.safetensors", serialize_safetensors(t, {{"format", "pt"}}), "--checkpoint"},
          {checkpoint + "/config.json", config.dump(2) + "\n", "--checkpoint"},
          {checkpoint + "/tokenizer.json", read_file(source), "--checkpoint"}};
    };
  }
  m.written = "Hugging Face's folder, F32; qkv generate --weights and qkv chat read it";
  return m;
}

}  // namespace

int run_train_gpt(const GptTrainFlags& g, const TrainOptions& o, const CLI::App& sub, std::string checkpoint,
                  std::string svg, const std::string& vocab_dir, bool json, bool quiet, TrainRanks* ranks) {
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
  const bool gpt = g.model == "gpt";
  std::vector<OutputFile> destinations;
  if (!checkpoint.empty() && gpt) destinations.push_back({checkpoint, "", "--checkpoint"});
  if (!checkpoint.empty() && !gpt) {  // a folder: made now, its files checked before any training
    QKV_CHECK(::mkdir(checkpoint.c_str(), 0777) == 0 || errno == EEXIST, "cannot make the --checkpoint folder ",
              excerpt(checkpoint), ": ", std::strerror(errno));
    for (const char* file : {"/model.safetensors", "/config.json", "/tokenizer.json"})
      destinations.push_back({checkpoint + file, "", "--checkpoint"});
  }
  if (!svg.empty()) destinations.push_back({svg, "", "--svg"});
  check_output_files(destinations);
  BookModel m = gpt ? gpt_book_model(g, o, sub, checkpoint, vocab_dir, seed)
                    : llama_book_model(g, o, sub, checkpoint, b, seed);
  if (ranks != nullptr) {  // every rank the same run, and a slice of every batch for each
    ranks->check_agreement(str(m.agreement, " ", excerpt(o.text_file), " seed ", seed, " batch ", b.batch_size,
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
    std::cerr << "qkv train: " << model.describe() << (gpt ? str(", dropout ", static_cast<GPTModel&>(model).config.attention.dropout) : std::string())
              << " (" << model.num_parameters() << " parameters)\n  " << excerpt(o.text_file) << ": " << text.size()
              << " bytes, " << utf8_length(text) << " characters, the first " << b.train_ratio
              << " for training; windows of " << m.context << " tokens; AdamW lr " << b.lr << ", weight decay "
              << b.weight_decay << ", batch " << b.batch_size << ", " << b.epochs << " epochs, seed " << seed
              << (ranks ? str("; data-parallel over ", ranks->ranks(), " ranks") : std::string()) << "\n";
  std::vector<float> step_losses;
  std::vector<EvalStats> curve_evals;
  StopSignals signals;
  BookTrainingCallbacks cb;
  cb.stop_flag = StopSignals::flag();
  cb.on_step = [&](int64_t, float loss) { step_losses.push_back(loss); };
  cb.on_eval = [&](const BookEval& e) {
    char line[160];
    std::snprintf(line, sizeof line, "Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f",
                  static_cast<long long>(e.epoch), static_cast<long long>(e.step), e.train_loss, e.val_loss);
    if (lead) info << line << std::endl;
    if (json)
      std::cout << nlohmann::json({{"epoch", e.epoch},
                                   {"step", e.step},
                                   {"tokens_seen", e.tokens_seen},
                                   {"train_loss", e.train_loss},
                                   {"val_loss", e.val_loss}})
                       .dump()
                << std::endl;
    curve_evals.push_back({e.step + 1, static_cast<float>(e.val_loss), NAN});
  };
  cb.on_sample = [&](int64_t, const std::string& sample) {
    if (lead) info << sample << std::endl;
  };
  const BookTrainingReport r =
      train_like_the_book(model, *m.gen, *m.tokenizer, text, b, cb, ranks ? &ranks->data_parallel() : nullptr);

  std::vector<OutputFile> files;
  if (!checkpoint.empty() && m.checkpoint) files = m.checkpoint();
  if (!svg.empty()) {
    LossCurveOptions lc;
    lc.title = "qkv train --model " + g.model + ": " + excerpt(o.text_file) + ", " + std::to_string(r.steps) +
               " steps of " + std::to_string(b.batch_size * m.context) + " tokens (dots: validation loss)";
    files.push_back({svg, loss_curve_svg(step_losses, curve_evals, lc), "--svg"});
  }
  write_files_atomically(files);
  if (!checkpoint.empty()) info << "weights: " << checkpoint << " (" << m.written << ")\n";
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
