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

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/train/attention_lm.h"
#include "qkv/train/data.h"
#include "qkv/train/loss.h"
#include "qkv/train/lr_schedule.h"
#include "qkv/train/optimizer.h"

namespace qkv {

struct TrainOptions {
  // What to train on: "copy" / "reverse" (built in), "text" (text_file), "data" (data_file).
  std::string task = "copy";
  int64_t task_length = 16;   // symbols before the separator (built-in tasks)
  int64_t task_symbols = 16;  // alphabet size (built-in tasks)
  std::string text_file, data_file;
  // The model. vocab_size comes from the data; context_length 0 means the data's sequence length.
  LMConfig model;
  // Optimisation.
  std::string optimizer = "adamw";  // or "sgd"
  int64_t steps = 500, batch_size = 32, warmup = 50;
  double lr = 3e-3, min_lr = 3e-4;
  double weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW (weight_decay: SGD too)
  double momentum = 0.0, dampening = 0.0;                               // SGD
  bool nesterov = false;
  double clip = 1.0;  // max global gradient norm; 0 = no clipping
  uint64_t seed = 123;
  // Evaluation on held-out sequences (built-in tasks).
  int64_t eval_every = 50, eval_sequences = 512;
};

nlohmann::json to_json(const TrainOptions& o);
TrainOptions train_options_from_json(const nlohmann::json& j);

// The data an options object describes, for the built-in tasks and "data". (Text is tokenised by
// the caller and given to the Trainer as TokenWindows.)
std::unique_ptr<TrainingData> make_task_data(const TrainOptions& o);

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
};

class Trainer {
 public:
  // `data` may be null for the built-in tasks and "data" (made from the options).
  explicit Trainer(TrainOptions options, std::unique_ptr<TrainingData> data = nullptr,
                   std::vector<int64_t> vocab = {});

  StepStats step();      // throws NonFiniteError (and changes no parameter) on a non-finite loss or gradient
  EvalStats evaluate();  // on the held-out set; needs has_eval()
  bool has_eval() const { return eval_.batch > 0; }

  int64_t steps_done() const { return optimizer_->steps(); }
  const TrainOptions& options() const { return options_; }
  const std::vector<float>& losses() const { return losses_; }
  const std::vector<EvalStats>& evals() const { return evals_; }
  void record_eval(const EvalStats& e) { evals_.push_back(e); }
  AttentionLM& model() { return *model_; }
  TrainingData& data() { return *data_; }
  Optimizer& optimizer() { return *optimizer_; }
  const std::vector<int64_t>& vocab() const { return vocab_; }

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
  std::unique_ptr<AttentionLM> model_;
  std::vector<Param> params_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  CrossEntropyLoss loss_;
  Batch eval_;
  std::vector<float> losses_;
  std::vector<EvalStats> evals_;
};

}  // namespace qkv
