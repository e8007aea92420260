// qkv train --model gpt --text-file F: chapter 5's training of the book's GPT model, printing the
// book's table. See train_gpt.h and qkv/train/book_training.h.
#include "train_gpt.h"

#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/gpt_weights.h"
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
  sub->add_option("--model", g.model, "attention-lm (the attention-only LM) | gpt (the book's GPT model, chapter 5)")
      ->check(CLI::IsMember({"attention-lm", "gpt"}))
      ->capture_default_str();
  sub->add_option("--preset", g.preset, "--model gpt: the sizes to start from (the flags given override them)")
      ->check(CLI::IsMember(gpt_preset_names()))
      ->capture_default_str();
  sub->add_option("--init", g.init, "--model gpt: start from these weights (fine-tuning; any layout qkv generate "
                                    "--weights reads)");
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
    if (sub.count(flag) > 0) bad_flag(flag, "is not a flag of --model gpt");
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  QKV_CHECK(!o.text_file.empty(), "--model gpt trains on a text: give --text-file FILE (the book's is "
            "the-verdict.txt)");
  // The model: the preset's sizes (the book's chapter 5 uses context 256), the flags on top; or --init's.
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
  BookTrainingOptions b = g.book;
  b.batch_size = given("--batch-size") ? o.batch_size : 2;
  b.lr = given("--lr") ? o.lr : 4e-4;
  b.weight_decay = given("--weight-decay") ? o.weight_decay : 0.1;
  const uint64_t seed = given("--seed") ? o.seed : 123;
  check_sizes({c.vocab_size, c.emb_dim}, 4, "the token embedding (vocabulary x --d-model)");
  if (ranks != nullptr) {  // every rank the same run, and a slice of every batch for each
    ranks->check_agreement(str(to_json(c).dump(), " ", excerpt(o.text_file), " ", excerpt(g.init), " seed ", seed,
                               " batch ", b.batch_size, " lr ", b.lr, " weight decay ", b.weight_decay, " epochs ",
                               b.epochs, " eval ", b.eval_freq, "/", b.eval_iter, " ratio ", b.train_ratio),
                           "");
    if (b.batch_size < ranks->ranks())
      throw AllRanksError(str("data-parallel training: --batch-size ", b.batch_size,
                              " must be at least the number of ranks (", ranks->ranks(),
                              "): every rank takes a slice of each batch"));
  }

  std::vector<OutputFile> destinations;
  if (!checkpoint.empty()) destinations.push_back({checkpoint, "", "--checkpoint"});
  if (!svg.empty()) destinations.push_back({svg, "", "--svg"});
  check_output_files(destinations);
  const std::string text = read_file(o.text_file);
  const Gpt2Tokenizer tokenizer(load_gpt2(vocab_dir));
  QKV_CHECK(c.vocab_size == tokenizer.vocab_size(), "--model gpt reads GPT-2's tokens: the model's vocabulary (",
            c.vocab_size, ") must be GPT-2's ", tokenizer.vocab_size());

  // torch.manual_seed(seed); model = GPTModel(cfg) [; model.load_state_dict(init)]
  Generator gen(seed);
  GPTModel model(c, gen);
  if (init) {
    load_gpt_weights(model, *init);
  }
  std::ostream& info = json ? std::cerr : std::cout;
  if (!quiet)
    std::cerr << "qkv train: " << model.describe() << ", dropout " << c.attention.dropout << " ("
              << model.num_parameters() << " parameters)\n  " << excerpt(o.text_file) << ": " << text.size()
              << " bytes, " << utf8_length(text) << " characters, the first " << b.train_ratio
              << " for training; AdamW lr " << b.lr << ", weight decay " << b.weight_decay << ", batch "
              << b.batch_size << ", " << b.epochs << " epochs, seed " << seed
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
      train_like_the_book(model, gen, tokenizer, text, b, cb, ranks ? &ranks->data_parallel() : nullptr);

  std::vector<OutputFile> files;
  if (!checkpoint.empty())
    files.push_back({checkpoint,
                     serialize_safetensors(gpt_state_in_layout(model, GptLayout::kBook),
                                           {{"format", "pt"}, {"qkv", "gpt-weights 1"}, {"config", to_json(c).dump()}}),
                     "--checkpoint"});
  if (!svg.empty()) {
    LossCurveOptions lc;
    lc.title = "qkv train --model gpt: " + excerpt(o.text_file) + ", " + std::to_string(r.steps) + " steps of " +
               std::to_string(b.batch_size * c.context_length) + " tokens (dots: validation loss)";
    files.push_back({svg, loss_curve_svg(step_losses, curve_evals, lc), "--svg"});
  }
  write_files_atomically(files);
  if (!checkpoint.empty()) info << "weights: " << checkpoint << " (the book's names; qkv generate --weights reads them)\n";
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
