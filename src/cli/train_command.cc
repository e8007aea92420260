// qkv train: trains the attention-only language model (include/qkv/train/trainer.h) on a built-in
// task, a text file, or fixed batches; shows a progress bar; writes checkpoints, the loss curve
// (SVG) and a summary. Ctrl-C stops after the current step and leaves a checkpoint that resumes.
// Under mpirun (built with MPI), every rank trains on its slice of each batch (data-parallel,
// qkv/mpi/train_ranks.h); rank 0 prints and writes.
#include <unistd.h>

#include <chrono>
#include <concepts>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/text/vocab_files.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss_curve.h"
#include "qkv/train/run_options.h"
#include "qkv/train/run_report.h"
#include "qkv/train/trainer.h"
#include "progress.h"
#include "train_book.h"
#include "qkv/train/ranks.h"
#ifdef QKV_HAVE_MPI
#include "qkv/mpi/train_ranks.h"
#endif

namespace qkv::cli {
namespace {

struct TrainFlags {
  TrainOptions o;
  BookTrainFlags gpt;
  std::string checkpoint = "qkv-train.safetensors", resume, svg = "qkv-train-loss.svg", vocab_dir;
  int64_t checkpoint_every = 250, stop_after = 0;
  bool json = false, quiet = false;
  Dtype checkpoint_dtype = Dtype::kF32;  // the checkpoints' model weights
};

// The model's flags (or a resumed checkpoint's options with the flags on top), checked against
// each other before anything is built: the attention spec's rules with the flags' names, and the
// attention LM's own (a window within the context, bf16 on the fused path): usage errors.
void check_model_flags(const LMConfig& m, const CLI::App& sub) {
  check_attention_flags(m.attention);
  if (sub.count("--rope-base") > 0 && m.attention.rope == kernels::RopeLayout::kNone)
    bad_flag("--rope-base", m.attention.rope_base, " needs --rope half or --rope interleaved");
  if (sub.count("--context-length") > 0 && m.context_length < 1)
    bad_flag("--context-length", m.context_length, " must be at least 1 (leave the flag out for the task's length)");
  if (m.attention.window > m.context_length && m.context_length > 0)
    bad_flag("--window", m.attention.window, " must be at most --context-length (", m.context_length,
             "): a wider window hides nothing");
  if (m.attention.dtype == Dtype::kBF16 && m.path == AttentionPath::kTextbook)
    bad_flag("--dtype", "bf16 runs on the fused attention; --attention textbook computes in f32 only");
  if (m.attention.dtype == Dtype::kBF16 && m.attention.dropout > 0 && m.path == AttentionPath::kAuto)
    bad_flag("--dtype", "bf16 with --dropout ", m.attention.dropout, " needs --attention fused (auto runs the "
             "textbook path while dropout is on, for PyTorch's masks, in f32)");
}

// What a run is built from: the options (the flags, over a resumed checkpoint's), the trainer,
// and where the checkpoint goes.
struct TrainSetup {
  TrainOptions o;
  std::optional<Checkpoint> resumed;
  std::unique_ptr<Trainer> trainer;
  std::string ckpt_file;
};

// `writes`: this process writes the outputs (alone, or rank 0), so their destinations are checked.
TrainSetup set_up(const TrainFlags& f, const CLI::App& sub, bool writes) {
  TrainSetup setup;
  // Options: the flags, or the checkpoint's options with the flags given on top.
  TrainOptions& o = setup.o;
  std::optional<Checkpoint>& resumed = setup.resumed;
  if (!f.resume.empty()) {
    resumed = load_checkpoint(f.resume);
    if (resumed->weights_dtype == Dtype::kBF16)
      std::cerr << "qkv train: note: " << excerpt(f.resume, 4096)
                << " holds its model weights in BF16 (--checkpoint-dtype bf16): training continues from them "
                   "widened to f32 (exactly); the fp32 master weights they were rounded from are not in the file\n";
  }
  try {
    o = run_options(resumed ? &resumed->options : nullptr, f.o,
                    [&](const OptionField& field) { return sub.count(field.flag) > 0; }, f.resume);
    check_train_options(o);
  } catch (const OptionError& e) {
    throw CLI::ValidationError(e.what());  // a usage error: exit status 2
  } catch (const Error& e) {  // set_head_dim: d_model and num_heads
    bad_flag("--num-heads", e.what());
  }
  check_model_flags(o.model, sub);
  if (!is_builtin_task(o.task)) {  // a text or --data run: the built-in tasks' flags would be ignored
    const char* source = o.task == TrainTask::kText ? "--text-file" : "--data";
    if (sub.count("--task") > 0 && is_builtin_task(f.o.task))  // (--text-file or --data set the run's task)
      bad_flag("--task", train_task_name(f.o.task), " is a built-in task, but ", source, " gives the run its data");
    for (const char* flag : {"--length", "--symbols", "--eval-every", "--eval-sequences"})
      if (sub.count(flag) > 0)
        bad_flag(flag, "is a flag of the built-in tasks (copy, reverse); this run trains on ", source);
  }
  QKV_CHECK(o.task != TrainTask::kData || !o.data_file.empty(), "--task data needs --data FILE");
  QKV_CHECK(f.checkpoint_every >= 0 && f.stop_after >= 0, "--checkpoint-every and --stop-after must not be negative");

  // The outputs' destinations, checked before any training step (and again when written).
  const std::string ckpt_flag = sub.count("--checkpoint") == 0 && resumed ? "--resume" : "--checkpoint";
  const std::string ckpt_file = ckpt_flag == "--resume" ? f.resume : f.checkpoint;
  setup.ckpt_file = ckpt_file;
  if (writes) {
    std::vector<OutputFile> destinations;
    if (!ckpt_file.empty()) destinations.push_back({ckpt_file, "", ckpt_flag});
    if (!f.svg.empty()) destinations.push_back({f.svg, "", "--svg"});
    // (the resumed checkpoint is an input the run may replace: its default destination)
    check_output_files(destinations, {{o.text_file, "--text-file"}, {o.data_file, "--data"}});
  }

  std::unique_ptr<TrainingData> data;
  std::vector<int64_t> vocab;
  if (o.task == TrainTask::kText) data = text_run_data(o, f.vocab_dir, vocab);
  setup.trainer = std::make_unique<Trainer>(o, std::move(data), vocab);
  if (resumed) setup.trainer->restore(*resumed);
  o = setup.trainer->options();
  return setup;
}

// A rank's configuration, compared across the ranks: the flags given and the resumed step.
std::string rank_description(const TrainFlags& f, const CLI::App& sub, const TrainSetup& setup) {
  std::string d;
  visit_fields(
      [&](const OptionField& field, const auto& value) {
        if (sub.count(field.flag) > 0) d += str(d.empty() ? "" : " ", field.flag, " ", option_text(value));
      },
      f.o);
  for (const char* flag : {"--checkpoint", "--resume"})
    if (sub.count(flag) > 0) d += str(" ", flag, " ", excerpt(flag == std::string("--resume") ? f.resume : f.checkpoint));
  if (sub.count("--checkpoint-every") > 0) d += str(" --checkpoint-every ", f.checkpoint_every);
  if (sub.count("--stop-after") > 0) d += str(" --stop-after ", f.stop_after);
  if (setup.resumed) d += str(" (resuming step ", setup.resumed->step, ")");
  return d;
}

int run_train(const TrainFlags& flags, const CLI::App& sub, TrainRanks* ranks) {
  // A reader gone (`qkv train 2>&1 | head`) fails the progress lines' writes instead of killing the
  // run before its checkpoint: a lost standard output is then reported at exit (status 1).
  std::signal(SIGPIPE, SIG_IGN);
  TrainFlags f = flags;
  if (f.gpt.model != "attention-lm")  // chapter 5's loop on a model of any other family
    return run_train_book(f.gpt, f.o, sub,
                          sub.count("--checkpoint") > 0 ? std::optional<std::string>(f.checkpoint) : std::nullopt,
                          f.svg, f.vocab_dir, f.json, f.quiet, ranks);
  for (const char* flag : {"--preset", "--init", "--epochs", "--eval-freq", "--eval-iter", "--train-ratio",
                           "--start-context", "--sample-tokens"})
    if (sub.count(flag) > 0) bad_flag(flag, "is a flag of --model gpt");
  const bool lead = ranks == nullptr || ranks->rank() == 0;  // prints and writes
  if (!lead) {
    f.quiet = true;
    f.json = false;
    f.svg.clear();
  }
  TrainSetup setup;
  if (ranks == nullptr) {
    setup = set_up(f, sub, true);
  } else {  // every rank builds its trainer; a problem on any rank, or differing flags, stop all
    std::string problem;
    try {
      setup = set_up(f, sub, lead);
      setup.trainer->set_data_parallel(&ranks->data_parallel());
    } catch (const std::exception& e) {
      problem = e.what();
    }
    ranks->check_agreement(rank_description(f, sub, setup), problem);
  }
  TrainOptions& o = setup.o;
  const std::optional<Checkpoint>& resumed = setup.resumed;
  Trainer& trainer = *setup.trainer;
  RunPolicy policy;
  policy.checkpoint_path = setup.ckpt_file;
  policy.checkpoint_every = f.checkpoint_every;
  policy.stop_after = f.stop_after;
  policy.checkpoint_weights = f.checkpoint_dtype;
  policy.stop_flag = StopSignals::flag();
  const std::string& ckpt_path = policy.checkpoint_path;

  std::ostream null_out(nullptr);  // the other ranks' output: none
  std::ostream& info = !lead ? null_out : f.json ? std::cerr : std::cout;
  Progress progress(!f.quiet, trainer.steps_done(), o.steps);
  if (!f.quiet) {
    std::cerr << run_plan_text(trainer, ranks ? ranks->ranks() : 1);
    if (resumed) std::cerr << "  resuming " << excerpt(f.resume) << " at step " << trainer.steps_done() << "\n";
  }

  std::optional<StopSignals> signals;
  signals.emplace();
  ProgressObserver observer(progress, o.steps, signals);
  RunResult r;
  try {
    r = trainer.run(policy, observer);
  } catch (const NonFiniteError& e) {  // data-parallel: every rank has it; rank 0 says it
    progress.finish();
    if (!lead) return 1;
    std::cerr << "qkv: error: " << e.what() << ". Training stopped without writing a checkpoint; ";
    if (observer.last_saved) std::cerr << "the last good one is " << excerpt(ckpt_path) << " (step " << *observer.last_saved << ")\n";
    else if (resumed) std::cerr << "the last good one is " << excerpt(f.resume) << " (step " << resumed->step << ")\n";
    else std::cerr << "none had been written yet (--checkpoint-every " << f.checkpoint_every << ")\n";
    return 1;
  }
  progress.finish();
  const double elapsed = observer.elapsed;
  const int stop_signal = r.stop_flag;
  const bool finished = trainer.steps_done() >= o.steps;
  if (!f.svg.empty()) {
    LossCurveOptions lc;
    lc.title = "qkv train: " +
               (o.task == TrainTask::kText ? excerpt(o.text_file) : std::string(train_task_name(o.task)) + " task") +
               ", " + std::to_string(trainer.steps_done()) + " steps";
    write_files_atomically({{f.svg, loss_curve_svg(trainer.losses(), trainer.evals(), lc), "--svg"}});
  }

  const RunSummary summary = summarize_run(trainer, r, elapsed, ckpt_path, f.svg, ranks ? ranks->ranks() : 0);
  info << summary_line(summary) << "\n";
  if (!ckpt_path.empty()) info << "checkpoint: " << ckpt_path << "\n";
  if (!f.svg.empty()) info << "loss curve: " << f.svg << "\n";
  if (!finished) {
    info << (stop_signal ? (stop_signal == SIGINT ? "interrupted (Ctrl-C)" : "terminated") : "stopped (--stop-after)")
         << " at step " << trainer.steps_done() << " of " << o.steps;
    if (!ckpt_path.empty()) info << "; continue with: qkv train --resume " << ckpt_path;
    info << "\n";
  }
  if (f.json) std::cout << summary_json(summary).dump() << "\n";
  std::cout << std::flush;
  return stop_signal ? 128 + stop_signal : 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  TrainOptions& o = f->o;
  CLI::App* sub = app.add_subcommand(
      "train", "Train a model: the attention-only LM (built-in copy/reverse task, or a text file), the book's GPT "
               "model on a text (--model gpt, chapter 5), or fine-tune a Hugging Face model (--model FAMILY --init DIR)");
  // The run's options, each from its one declaration (qkv/train/train_options.h).
  visit_fields(OptionFlags{sub,
                           [sub, f](const OptionField& field) {
                             if (std::string(field.flag) == "--text-file")
                               sub->add_option("--vocab-dir", f->vocab_dir,
                                               "Where GPT-2's encoder.json and vocab.bpe are (default: searched)");
                           }},
               o);
  add_book_train_flags(sub, f->gpt);
  sub->add_option("--checkpoint", f->checkpoint, "Checkpoint file (\"\": none); with --resume, default the resumed file")
      ->capture_default_str();
  add_number_with_default(sub, "--checkpoint-every", f->checkpoint_every,
                          "Also write the checkpoint every N steps (0: only at the end)", non_negative<int64_t>());
  add_dtype_flag(sub, "--checkpoint-dtype", [f](Dtype d) { f->checkpoint_dtype = d; },
                 "The checkpoint's model weights: f32 | bf16 (half the size, for generation; a run resumed from it "
                 "starts from the bf16 values) (default: f32)");
  sub->add_option("--resume", f->resume, "Continue from a checkpoint; flags given override its options");
  add_number(sub, "--stop-after", f->stop_after, "Stop after step N as Ctrl-C would (checkpoint written), to resume later",
             non_negative<int64_t>());
  sub->add_option("--svg", f->svg, "Write the loss curve here (\"\": no picture)")->capture_default_str();
  sub->add_flag("--json", f->json, "Make the last line of output a JSON summary (steps, final_loss, accuracy, ...)");
  sub->add_flag("--quiet", f->quiet, "No progress bar");
  sub->footer(
      "With no arguments: 500 steps of the copy task (16 letters, '|', the 16 letters again), held-out\n"
      "accuracy every 50 steps. Ctrl-C stops after the current step and writes the checkpoint;\n"
      "`qkv train --resume FILE` continues the same loss curve, bit for bit.\n"
      "Under `mpirun -np N` (a build with MPI): data-parallel over N ranks, each batch split between\n"
      "them, the losses and weights those of one process within 1e-6; rank 0 prints and writes.");
  return {sub, [f, sub]() {
#ifdef QKV_HAVE_MPI
            if (mpi::started_by_mpirun())
              return mpi::with_train_ranks([&](TrainRanks& ranks) { return run_train(*f, *sub, &ranks); },
                                           [](const std::string& e) { return "qkv: error: " + e + limit_hint(e); });
#endif
            return run_train(*f, *sub, nullptr);
          }};
}

}  // namespace qkv::cli
