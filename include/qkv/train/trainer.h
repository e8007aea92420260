// qkv/train/trainer.h - one training run of the attention-only LM: options, data, model,
// optimiser, learning-rate schedule, evaluation, and checkpoints that resume exactly.
//
// A step does what the PyTorch loop does, in the same order:
//   lr = schedule(step); zero_grad(); logits = model(inputs); loss = cross_entropy(logits, targets)
//   loss.backward(); clip_grad_norm_(params, clip); optimizer.step()
// The model and its dropout draw from Generator(seed) (PyTorch's global generator after
// torch.manual_seed(seed)); the built-in tasks and text windows draw from Generator(seed + 1); the
// held-out set of the built-in tasks comes from Generator(seed + 2). A checkpoint holds the model,
// the optimiser state, the step, both generators and the loss history, so a run stopped and
// resumed produces the same losses, bit for bit, as one that never stopped.
#pragma once

#include <csignal>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/models/attention_lm.h"
#include "qkv/models/language_model.h"
#include "qkv/train/data_parallel.h"
#include "qkv/train/data.h"
#include "qkv/train/loss.h"
#include "qkv/train/lr_schedule.h"
#include "qkv/train/optimizer.h"
#include "qkv/train/train_options.h"

namespace qkv {

// The data an options object describes, for the built-in tasks and "data". (Text is tokenised by
// the caller and given to the Trainer as TokenWindows.)
std::unique_ptr<TrainingData> make_task_data(const TrainOptions& o);

// Throws qkv::Error unless the run `o` describes is one qkv can hold: every size in its range
// (vocab_size and context_length already known), every product of sizes without overflow, and the
// model's parameters, their gradients, the optimiser state, one batch and the held-out set each
// within limits().max_memory_bytes. Called before anything is built from options that came from
// outside (the Trainer, load_checkpoint).
void check_train_request(const TrainOptions& o);

struct StepStats {
  int64_t step = 0;       // 1-based number of the step just taken
  float loss = 0;         // before the update
  double lr = 0;
  float grad_norm = 0;    // before clipping
  int64_t correct = 0, counted = 0;  // argmax hits on the batch's counted targets
  int64_t tokens = 0;     // batch * sequence length
};

struct EvalStats {
  int64_t step = 0;
  float loss = 0;
  double accuracy = 0;  // fraction of counted targets whose argmax is right
};

// A number for messages: "nan" (whatever its sign bit), "inf", "-inf", or its digits.
std::string number_text(float v);

// A loss, or gradient, that is NaN or infinite. Nothing was updated in that step.
class NonFiniteError : public Error {
 public:
  NonFiniteError(int64_t step, std::string what, std::string tensor);
  int64_t step;
  std::string tensor;  // the first tensor holding a non-finite value
};

// What a checkpoint file holds (see checkpoint.h for the file layout).
struct Checkpoint {
  TrainOptions options;
  int64_t step = 0;
  std::map<std::string, Tensor> model, optimizer;  // optimizer: "<state>.<param name>"
  std::vector<float> losses;                       // one per step taken
  std::vector<EvalStats> evals;
  std::string model_rng;                           // generator_state_hex
  nlohmann::json data_state;
  std::vector<int64_t> vocab;                      // text: model id -> GPT-2 id; else empty
  // How the model's weights are (to be) stored: F32, or BF16 (half the size, for generation and
  // shipping; a run resumed from it continues from the bf16 values, the fp32 master weights being
  // lost). The optimiser state is F32 either way.
  Dtype weights_dtype = Dtype::kF32;
};

// How one process runs the steps: what is not an option of the training itself (not saved in
// checkpoints). Evaluation follows TrainOptions::eval_every, which a resumed run keeps.
struct RunPolicy {
  std::string checkpoint_path;    // written every checkpoint_every steps and at the end; "" = none
                                  // (data-parallel: by rank 0; its failure is an AllRanksError)
  int64_t checkpoint_every = 0;   // 0: only at the end (never after the last step: the end writes it)
  int64_t stop_after = 0;         // stop after this step, as a signal would (0: run to the end)
  Dtype checkpoint_weights = Dtype::kF32;  // the checkpoints' model weights: F32 or BF16 (Checkpoint)
  // Read between steps: non-zero stops the run there (a signal handler stores the signal's number).
  const volatile std::sig_atomic_t* stop_flag = nullptr;
};

enum class StopReason { kFinished, kStopAfter, kStopFlag };

struct RunResult {
  StopReason reason = StopReason::kFinished;
  int stop_flag = 0;       // the flag's value when the steps ended (it may be set on a finished run)
  int64_t steps_run = 0;   // steps taken by this call
  int64_t tokens = 0;      // tokens of those steps
};

// What Trainer::run reports, in order: on_step after each step (then on_eval when that step is
// evaluated, then on_checkpoint when it is saved), on_steps_end when the steps stop, then the
// final evaluation's on_eval and the final checkpoint's on_checkpoint.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_step(const StepStats& /*s*/, int64_t /*tokens_this_run*/) {}
  virtual void on_eval(const EvalStats& /*e*/) {}
  virtual void on_checkpoint(const std::string& /*path*/, int64_t /*step*/) {}
  virtual void on_steps_end(const RunResult& /*r*/) {}
};

class Trainer {
 public:
  // `data` may be null for the built-in tasks and "data" (made from the options).
  explicit Trainer(TrainOptions options, std::unique_ptr<TrainingData> data = nullptr,
                   std::vector<int64_t> vocab = {});

  // Data-parallel training over the ranks of `dp` (see data_parallel.h; null: this process alone).
  // Each step then runs forward and backward on this rank's slice of the global batch and sums the
  // gradients over the ranks; the stop flag is the ranks' largest; only rank 0 writes
  // checkpoints. Nothing a checkpoint holds depends on the rank count, so a run resumes on any.
  // The batch size must be at least the rank count (an error names both); `dp` must outlive the
  // Trainer's use of it, and every rank must make the same calls (step, run, evaluate) in order.
  void set_data_parallel(DataParallel* dp);
  const DataParallel* data_parallel() const { return dp_; }

  StepStats step();      // throws NonFiniteError (and changes no parameter) on a non-finite loss or gradient
  EvalStats evaluate();  // on the held-out set; needs has_eval()
  bool has_eval() const { return eval_.batch > 0; }

  int64_t steps_done() const { return optimizer_->steps(); }
  const TrainOptions& options() const { return options_; }
  const std::vector<float>& losses() const { return losses_; }
  const std::vector<EvalStats>& evals() const { return evals_; }
  void record_eval(const EvalStats& e) { evals_.push_back(e); }
  LanguageModel& model() { return *model_; }  // the attention-lm family's
  TrainingData& data() { return *data_; }
  Optimizer& optimizer() { return *optimizer_; }
  const std::vector<int64_t>& vocab() const { return vocab_; }

  // Takes the steps left (up to options().steps), evaluating every eval_every steps (built-in
  // tasks) and writing checkpoints as `policy` says, until the end, policy.stop_after, or the stop
  // flag; then evaluates once more if the run is finished and the last step was not evaluated, and
  // writes the checkpoint. A NonFiniteError leaves the run as it was before that step and writes
  // nothing more.
  RunResult run(const RunPolicy& policy, RunObserver& observer);

  Checkpoint checkpoint();
  // Continues from `c`: model, optimiser, step, generators, data position and history. The model
  // must have this run's configuration: a tensor of another shape is an error naming it and both
  // shapes.
  void restore(const Checkpoint& c);

 private:
  TrainOptions options_;
  std::unique_ptr<TrainingData> data_;
  std::vector<int64_t> vocab_;
  Generator model_gen_;
  std::unique_ptr<LanguageModel> model_;
  std::vector<Param> params_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  CrossEntropyLoss loss_;
  Batch eval_;
  std::vector<float> losses_;
  std::vector<EvalStats> evals_;
  DataParallel* dp_ = nullptr;
  std::vector<float> flat_grads_;  // every gradient, in params_ order: the buffer summed over ranks
  void sum_gradients_over_ranks();
};

}  // namespace qkv
