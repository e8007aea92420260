// qkv/train/run_report.h - what a training run of the attention LM says of itself: its plan before
// the steps (the data, the model with its attention variants, the optimiser) and its summary after
// (a line for people and an object for machines); and the text run's data.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/train/trainer.h"

namespace qkv {

// "qkv train: <data>\n  model: attention-only LM, vocab ..., dropout ...<variants> (N parameters)\n
//  adamw, lr ... (warm-up ..., cosine), batch ..., clip ..., seed ...\n" (+ the ranks' share of a batch).
std::string run_plan_text(Trainer& trainer, int ranks = 1);
// ", 2 kv heads, rope half (base 10000), window 8, alibi, softcap 30" for the variants on (and bf16
// mode), or "".
std::string variants_text(const LMConfig& m);

struct RunSummary {
  int64_t steps = 0, steps_this_run = 0;
  double seconds = 0, tokens_per_s = 0;
  float final_loss = 0;          // NaN before any step
  std::optional<double> accuracy;  // the last held-out accuracy (built-in tasks)
  int64_t accuracy_step = 0;       // the step it was measured after (before `steps` when a run stopped early)
  bool finished = false;          // every step of the options taken
  std::string task, checkpoint, loss_curve;
  int ranks = 0;                  // data-parallel ranks (0: one process)
};
RunSummary summarize_run(const Trainer& t, const RunResult& r, double seconds, const std::string& checkpoint,
                         const std::string& loss_curve, int ranks);
// "trained 500 steps (500 in this run) in 3.1 s, 83.2k tokens/s; final loss 0.0132, held-out accuracy 99.80%"
// (", held-out accuracy 61.20% at step 450" when it was measured before the last step)
std::string summary_line(const RunSummary& s);
nlohmann::json summary_json(const RunSummary& s);

// The text run's data: GPT-2 tokens of `text_file` in windows of the model's context (64 when the
// options leave it 0, set in `o`), with `vocab` the GPT-2 ids the text uses.
std::unique_ptr<TrainingData> text_run_data(TrainOptions& o, const std::string& vocab_dir, std::vector<int64_t>& vocab);

// "1.2M", "83.2k", "512": a rate of tokens; "99.80%": a share.
std::string rate_text(double tokens_per_s);
std::string percent_text(double x);

}  // namespace qkv
