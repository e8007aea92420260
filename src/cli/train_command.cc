// qkv train: trains the attention-only language model (include/qkv/train/trainer.h) on a built-in
// task, a text file, or fixed batches; shows a progress bar; writes checkpoints, the loss curve
// (SVG) and a summary. Ctrl-C stops after the current step and leaves a checkpoint that resumes.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"
#include "qkv/text/vocab_files.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss_curve.h"
#include "qkv/train/trainer.h"

namespace qkv::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// SIGINT and SIGTERM set a flag the loop reads between steps; the previous handlers come back
// when training ends, so a second Ctrl-C during the final writes is not swallowed forever.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa = {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};

struct TrainFlags {
  TrainOptions o;
  std::string checkpoint = "qkv-train.safetensors", resume, svg = "qkv-train-loss.svg", vocab_dir;
  int64_t checkpoint_every = 250, stop_after = 0;
  bool json = false, quiet = false;
};

// A flag that describes the run, and how to copy its value onto options read from a checkpoint
// (on --resume, only the flags given on the command line override the checkpoint's).
struct RunFlag {
  std::string name;
  std::function<void(TrainOptions& to, const TrainOptions& from)> copy;
};

#define QKV_RUN_FLAG(flag, field) \
  RunFlag { flag, [](TrainOptions& to, const TrainOptions& from) { to.field = from.field; } }

const std::vector<RunFlag>& run_flags() {
  static const std::vector<RunFlag> flags = {
      QKV_RUN_FLAG("--task", task),
      QKV_RUN_FLAG("--length", task_length),
      QKV_RUN_FLAG("--symbols", task_symbols),
      QKV_RUN_FLAG("--text-file", text_file),
      QKV_RUN_FLAG("--data", data_file),
      QKV_RUN_FLAG("--d-model", model.d_model),
      QKV_RUN_FLAG("--num-heads", model.num_heads),
      QKV_RUN_FLAG("--num-layers", model.num_layers),
      QKV_RUN_FLAG("--context-length", model.context_length),
      QKV_RUN_FLAG("--dropout", model.dropout),
      QKV_RUN_FLAG("--qkv-bias", model.qkv_bias),
      QKV_RUN_FLAG("--attention", model.attention),
      QKV_RUN_FLAG("--vocab-size", model.vocab_size),
      QKV_RUN_FLAG("--optimizer", optimizer),
      QKV_RUN_FLAG("--steps", steps),
      QKV_RUN_FLAG("--batch-size", batch_size),
      QKV_RUN_FLAG("--warmup", warmup),
      QKV_RUN_FLAG("--lr", lr),
      QKV_RUN_FLAG("--min-lr", min_lr),
      QKV_RUN_FLAG("--weight-decay", weight_decay),
      QKV_RUN_FLAG("--beta1", beta1),
      QKV_RUN_FLAG("--beta2", beta2),
      QKV_RUN_FLAG("--eps", eps),
      QKV_RUN_FLAG("--momentum", momentum),
      QKV_RUN_FLAG("--dampening", dampening),
      QKV_RUN_FLAG("--nesterov", nesterov),
      QKV_RUN_FLAG("--clip", clip),
      QKV_RUN_FLAG("--seed", seed),
      QKV_RUN_FLAG("--eval-every", eval_every),
      QKV_RUN_FLAG("--eval-sequences", eval_sequences),
  };
  return flags;
}
#undef QKV_RUN_FLAG

std::string clock_time(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

std::string rate(double tokens_per_s) {
  char buf[32];
  if (tokens_per_s >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", tokens_per_s / 1e6);
  else if (tokens_per_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", tokens_per_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", tokens_per_s);
  return buf;
}

// The text of the run's data: GPT-2 tokens of the file, with a vocabulary of the tokens it uses.
std::unique_ptr<TrainingData> text_data(TrainOptions& o, const std::string& vocab_dir, std::vector<int64_t>& vocab) {
  QKV_CHECK(!o.text_file.empty(), "--task text needs --text-file FILE");
  const std::string text = read_file(o.text_file);
  const Encoding gpt2 = load_gpt2(vocab_dir);
  CompactTokens c = compact_vocabulary(gpt2.encode(text, SpecialTokens::all()));
  vocab = c.vocab;
  if (o.model.context_length == 0) o.model.context_length = 64;
  return std::make_unique<TokenWindows>(std::move(c.ids), static_cast<int64_t>(c.vocab.size()), o.model.context_length,
                                        o.seed + 1, "'" + o.text_file + "'");
}

class Progress {
 public:
  Progress(bool enabled, int64_t first_step, int64_t total)
      : enabled_(enabled), tty_(::isatty(2) == 1), first_(first_step), total_(total) {}

  void update(const StepStats& s, double elapsed, int64_t tokens, bool force) {
    if (!enabled_) return;
    const bool milestone = total_ >= 10 ? s.step % (total_ / 10) == 0 : true;
    if (tty_ ? !force && elapsed - last_ < 0.1 : !(milestone || force)) return;
    last_ = elapsed;
    const int64_t done = s.step - first_;
    const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - s.step) : -1;
    const int width = 24;
    const int fill = total_ > 0 ? static_cast<int>(width * s.step / total_) : width;
    char line[256];
    std::snprintf(line, sizeof line, "step %*lld/%lld [%s%s] loss %.4f", static_cast<int>(std::to_string(total_).size()),
                  static_cast<long long>(s.step), static_cast<long long>(total_), std::string(static_cast<size_t>(fill), '#').c_str(),
                  std::string(static_cast<size_t>(width - fill), '-').c_str(), static_cast<double>(s.loss));
    std::string text = line;
    if (s.counted > 0) {
      std::snprintf(line, sizeof line, "  acc %5.1f%%", 100.0 * static_cast<double>(s.correct) / static_cast<double>(s.counted));
      text += line;
    }
    text += "  " + rate(elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0) + " tok/s  left " + clock_time(eta);
    if (tty_) std::cerr << "\r" << text << "\033[K" << std::flush;
    else std::cerr << text << "\n";
    dirty_ = tty_;
  }

  void message(const std::string& text) {
    if (!enabled_) return;
    if (dirty_) std::cerr << "\r\033[K";
    std::cerr << text << "\n";
    dirty_ = false;
    last_ = -1;
  }

  void finish() {
    if (dirty_) std::cerr << "\n";
    dirty_ = false;
  }

 private:
  bool enabled_, tty_;
  int64_t first_, total_;
  double last_ = -1;
  bool dirty_ = false;
};

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * x);
  return buf;
}

int run_train(TrainFlags& f, const CLI::App& sub) {
  // Options: the flags, or the checkpoint's options with the flags given on top.
  TrainOptions o = f.o;
  std::optional<Checkpoint> resumed;
  if (!f.resume.empty()) {
    resumed = load_checkpoint(f.resume);
    o = resumed->options;
    for (const RunFlag& flag : run_flags())
      if (sub.count(flag.name) > 0) flag.copy(o, f.o);
  }
  if (sub.count("--text-file") > 0) o.task = "text";
  if (sub.count("--data") > 0) o.task = "data";
  QKV_CHECK(o.task != "data" || !o.data_file.empty(), "--task data needs --data FILE");
  QKV_CHECK(f.checkpoint_every >= 0 && f.stop_after >= 0, "--checkpoint-every and --stop-after must not be negative");

  std::unique_ptr<TrainingData> data;
  std::vector<int64_t> vocab;
  if (o.task == "text") data = text_data(o, f.vocab_dir, vocab);
  Trainer trainer(o, std::move(data), vocab);
  if (resumed) trainer.restore(*resumed);
  o = trainer.options();
  const std::string ckpt_path = sub.count("--checkpoint") == 0 && resumed ? f.resume : f.checkpoint;

  std::ostream& info = f.json ? std::cerr : std::cout;
  Progress progress(!f.quiet, trainer.steps_done(), o.steps);
  if (!f.quiet) {
    const LMConfig& m = o.model;
    std::cerr << "qkv train: " << trainer.data().describe() << "\n  model: attention-only LM, vocab " << m.vocab_size
              << ", d_model " << m.d_model << ", " << m.num_heads << " heads, " << m.num_layers
              << " layers, context " << m.context_length << ", dropout " << m.dropout << " ("
              << trainer.model().num_parameters() << " parameters)\n  " << o.optimizer << ", lr " << o.lr << " -> "
              << o.min_lr << " (warm-up " << o.warmup << ", cosine), batch " << o.batch_size << ", clip " << o.clip
              << ", seed " << o.seed << "\n";
    if (resumed) std::cerr << "  resuming '" << f.resume << "' at step " << trainer.steps_done() << "\n";
  }

  std::optional<int64_t> last_saved;
  auto save = [&] {
    if (ckpt_path.empty()) return;
    save_checkpoint(ckpt_path, trainer.checkpoint());
    last_saved = trainer.steps_done();
  };
  auto evaluate = [&] {
    EvalStats e = trainer.evaluate();
    trainer.record_eval(e);
    char line[160];
    std::snprintf(line, sizeof line, "step %lld: held-out loss %.4f, accuracy %s", static_cast<long long>(e.step),
                  static_cast<double>(e.loss), percent(e.accuracy).c_str());
    progress.message(line);
  };

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  int64_t tokens = 0, steps_run = 0;
  StepStats last;
  int stop_signal = 0;
  {
    StopSignals signals;
    while (trainer.steps_done() < o.steps) {
      if (g_stop_signal) break;
      try {
        last = trainer.step();
      } catch (const NonFiniteError& e) {
        progress.finish();
        std::cerr << "qkv: error: " << e.what() << ". Training stopped without writing a checkpoint; ";
        if (last_saved) std::cerr << "the last good one is '" << ckpt_path << "' (step " << *last_saved << ")\n";
        else if (resumed) std::cerr << "the last good one is '" << f.resume << "' (step " << resumed->step << ")\n";
        else std::cerr << "none had been written yet (--checkpoint-every " << f.checkpoint_every << ")\n";
        return 1;
      }
      tokens += last.tokens;
      ++steps_run;
      const bool eval_now = trainer.has_eval() && o.eval_every > 0 && last.step % o.eval_every == 0;
      progress.update(last, seconds(), tokens, last.step == o.steps);
      if (eval_now) evaluate();
      if (f.checkpoint_every > 0 && last.step % f.checkpoint_every == 0 && last.step != o.steps) save();
      if (f.stop_after > 0 && last.step >= f.stop_after && last.step < o.steps) break;
    }
    stop_signal = g_stop_signal;
  }
  const double elapsed = seconds();
  const bool finished = trainer.steps_done() >= o.steps;
  if (finished && trainer.has_eval() && (trainer.evals().empty() || trainer.evals().back().step != trainer.steps_done()))
    evaluate();
  progress.finish();
  save();
  if (!f.svg.empty()) {
    LossCurveOptions lc;
    lc.title = "qkv train: " + (o.task == "text" ? "'" + o.text_file + "'" : o.task + " task") + ", " +
               std::to_string(trainer.steps_done()) + " steps";
    write_file_atomically(f.svg, loss_curve_svg(trainer.losses(), trainer.evals(), lc));
  }

  const double tokens_per_s = elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0.0;
  const float final_loss = trainer.losses().empty() ? NAN : trainer.losses().back();
  const bool has_accuracy = trainer.has_eval() && !trainer.evals().empty();
  const double accuracy = has_accuracy ? trainer.evals().back().accuracy : NAN;
  char line[256];
  std::snprintf(line, sizeof line, "%s %lld steps (%lld in this run) in %.1f s, %s tokens/s; final loss %.4f",
                finished ? "trained" : "stopped after", static_cast<long long>(trainer.steps_done()),
                static_cast<long long>(steps_run), elapsed, rate(tokens_per_s).c_str(), static_cast<double>(final_loss));
  info << line;
  if (has_accuracy) info << ", held-out accuracy " << percent(accuracy);
  info << "\n";
  if (!ckpt_path.empty()) info << "checkpoint: " << ckpt_path << "\n";
  if (!f.svg.empty()) info << "loss curve: " << f.svg << "\n";
  if (!finished) {
    info << (stop_signal ? (stop_signal == SIGINT ? "interrupted (Ctrl-C)" : "terminated") : "stopped (--stop-after)")
         << " at step " << trainer.steps_done() << " of " << o.steps;
    if (!ckpt_path.empty()) info << "; continue with: qkv train --resume " << ckpt_path;
    info << "\n";
  }
  if (f.json) {
    nlohmann::json j = {{"steps", trainer.steps_done()},
                        {"steps_this_run", steps_run},
                        {"final_loss", final_loss},
                        {"accuracy", has_accuracy ? nlohmann::json(accuracy) : nlohmann::json(nullptr)},
                        {"tokens_per_s", tokens_per_s},
                        {"seconds", elapsed},
                        {"task", o.task},
                        {"finished", finished},
                        {"checkpoint", ckpt_path},
                        {"loss_curve", f.svg}};
    std::cout << j.dump() << "\n";
  }
  std::cout << std::flush;
  return stop_signal ? 128 + stop_signal : 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  TrainOptions& o = f->o;
  CLI::App* sub = app.add_subcommand(
      "train", "Train an attention-only language model (built-in copy/reverse task, or a text file)");
  sub->add_option("--task", o.task, "copy | reverse (built in), text (with --text-file), data (with --data)")
      ->capture_default_str()
      ->check(CLI::IsMember({"copy", "reverse", "text", "data"}));
  sub->add_option("--length", o.task_length, "Built-in task: symbols before the separator")->capture_default_str();
  sub->add_option("--symbols", o.task_symbols, "Built-in task: alphabet size (2..26)")->capture_default_str();
  sub->add_option("--text-file", o.text_file, "Next-token prediction on this text, GPT-2 tokens (sets --task text)");
  sub->add_option("--vocab-dir", f->vocab_dir, "Where GPT-2's encoder.json and vocab.bpe are (default: searched)");
  sub->add_option("--data", o.data_file, "Fixed batches: a safetensors file with (N, T) 'inputs' and 'targets' (sets --task data)");
  sub->add_option("--vocab-size", o.model.vocab_size, "--data only: the vocabulary size (default: largest id + 1)");
  sub->add_option("--d-model", o.model.d_model, "Embedding and attention width")->capture_default_str();
  sub->add_option("--num-heads", o.model.num_heads, "Heads per attention block")->capture_default_str();
  sub->add_option("--num-layers", o.model.num_layers, "Attention blocks")->capture_default_str();
  sub->add_option("--context-length", o.model.context_length,
                  "Positions the model has (default: the task's sequence length; 64 for text)");
  sub->add_option("--dropout", o.model.dropout, "Dropout on the attention weights, in [0, 1)")->capture_default_str();
  sub->add_flag("--qkv-bias", o.model.qkv_bias, "Give the query, key and value projections a bias");
  add_attention_flag(sub, o.model.attention,
                     "auto (fused; textbook while dropout is on, for PyTorch's masks) | fused | textbook");
  sub->add_option("--optimizer", o.optimizer, "adamw | sgd")->capture_default_str()->check(CLI::IsMember({"adamw", "sgd"}));
  sub->add_option("--steps", o.steps, "Optimisation steps in all")->capture_default_str();
  sub->add_option("--batch-size", o.batch_size, "Sequences per step")->capture_default_str();
  sub->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  sub->add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine decay")->capture_default_str();
  sub->add_option("--warmup", o.warmup, "Steps of linear warm-up")->capture_default_str();
  sub->add_option("--weight-decay", o.weight_decay, "Weight decay (decoupled for AdamW)")->capture_default_str();
  sub->add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  sub->add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  sub->add_option("--eps", o.eps, "AdamW eps")->capture_default_str();
  sub->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  sub->add_option("--dampening", o.dampening, "SGD dampening")->capture_default_str();
  sub->add_flag("--nesterov", o.nesterov, "SGD: Nesterov momentum");
  sub->add_option("--clip", o.clip, "Clip the global gradient norm to this (0: no clipping)")->capture_default_str();
  sub->add_option("--seed", o.seed, "Seed: weights and dropout as torch.manual_seed(S), data from S + 1")
      ->capture_default_str();
  sub->add_option("--eval-every", o.eval_every, "Built-in task: held-out accuracy every N steps (0: only at the end)")
      ->capture_default_str();
  sub->add_option("--eval-sequences", o.eval_sequences, "Built-in task: held-out sequences")->capture_default_str();
  sub->add_option("--checkpoint", f->checkpoint, "Checkpoint file (\"\": none); with --resume, default the resumed file")
      ->capture_default_str();
  sub->add_option("--checkpoint-every", f->checkpoint_every, "Also write the checkpoint every N steps (0: only at the end)")
      ->capture_default_str();
  sub->add_option("--resume", f->resume, "Continue from a checkpoint; flags given override its options");
  sub->add_option("--stop-after", f->stop_after, "Stop after step N as Ctrl-C would (checkpoint written), to resume later");
  sub->add_option("--svg", f->svg, "Write the loss curve here (\"\": no picture)")->capture_default_str();
  sub->add_flag("--json", f->json, "Make the last line of output a JSON summary (steps, final_loss, accuracy, ...)");
  sub->add_flag("--quiet", f->quiet, "No progress bar");
  sub->footer(
      "With no arguments: 500 steps of the copy task (16 letters, '|', the 16 letters again), held-out\n"
      "accuracy every 50 steps. Ctrl-C stops after the current step and writes the checkpoint;\n"
      "`qkv train --resume FILE` continues the same loss curve, bit for bit.");
  return {sub, [f, sub]() { return run_train(*f, *sub); }};
}

}  // namespace qkv::cli
