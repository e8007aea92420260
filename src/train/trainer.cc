// A training run. See include/qkv/train/trainer.h.
#include "qkv/train/trainer.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"

namespace qkv {
namespace {

std::string number(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return str(v);
}

template <typename T>
void read(const nlohmann::json& j, const char* key, T& out) {
  if (j.contains(key)) out = j.at(key).get<T>();
}

}  // namespace

nlohmann::json to_json(const TrainOptions& o) {
  return {{"task", o.task},
          {"task_length", o.task_length},
          {"task_symbols", o.task_symbols},
          {"text_file", o.text_file},
          {"data_file", o.data_file},
          {"model", to_json(o.model)},
          {"optimizer", o.optimizer},
          {"steps", o.steps},
          {"batch_size", o.batch_size},
          {"warmup", o.warmup},
          {"lr", o.lr},
          {"min_lr", o.min_lr},
          {"weight_decay", o.weight_decay},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"nesterov", o.nesterov},
          {"clip", o.clip},
          {"seed", o.seed},
          {"eval_every", o.eval_every},
          {"eval_sequences", o.eval_sequences}};
}

TrainOptions train_options_from_json(const nlohmann::json& j) {
  TrainOptions o;
  try {
    read(j, "task", o.task);
    read(j, "task_length", o.task_length);
    read(j, "task_symbols", o.task_symbols);
    read(j, "text_file", o.text_file);
    read(j, "data_file", o.data_file);
    o.model = lm_config_from_json(j.at("model"));
    read(j, "optimizer", o.optimizer);
    read(j, "steps", o.steps);
    read(j, "batch_size", o.batch_size);
    read(j, "warmup", o.warmup);
    read(j, "lr", o.lr);
    read(j, "min_lr", o.min_lr);
    read(j, "weight_decay", o.weight_decay);
    read(j, "beta1", o.beta1);
    read(j, "beta2", o.beta2);
    read(j, "eps", o.eps);
    read(j, "momentum", o.momentum);
    read(j, "dampening", o.dampening);
    read(j, "nesterov", o.nesterov);
    read(j, "clip", o.clip);
    read(j, "seed", o.seed);
    read(j, "eval_every", o.eval_every);
    read(j, "eval_sequences", o.eval_sequences);
  } catch (const nlohmann::json::exception& e) {
    fail("the training options are malformed: ", e.what());
  }
  return o;
}

std::unique_ptr<TrainingData> make_task_data(const TrainOptions& o) {
  if (o.task == "copy" || o.task == "reverse")
    return std::make_unique<SequenceTask>(o.task == "copy" ? TaskKind::kCopy : TaskKind::kReverse, o.task_length,
                                          o.task_symbols, o.seed + 1);
  if (o.task == "data") return std::make_unique<FixedBatches>(o.data_file, o.model.vocab_size);
  fail("unknown task '", o.task, "'; expected copy, reverse, text or data");
}

NonFiniteError::NonFiniteError(int64_t s, std::string what, std::string t)
    : Error(str("step ", s, ": ", what, "; the first tensor that is not finite is ",
                t.empty() ? std::string("(none found: the overflow happened inside the loss)") : "'" + t + "'")),
      step(s),
      tensor(std::move(t)) {}

Trainer::Trainer(TrainOptions options, std::unique_ptr<TrainingData> data, std::vector<int64_t> vocab)
    : options_(std::move(options)), data_(std::move(data)), vocab_(std::move(vocab)), model_gen_(options_.seed) {
  TrainOptions& o = options_;
  if (!data_) data_ = make_task_data(o);
  QKV_CHECK(o.steps >= 0, "train: steps (", o.steps, ") must not be negative");
  QKV_CHECK(o.batch_size >= 1, "train: batch size (", o.batch_size, ") must be at least 1");
  QKV_CHECK(o.warmup >= 0, "train: warm-up steps (", o.warmup, ") must not be negative");
  QKV_CHECK(o.clip >= 0.0, "train: clip (", o.clip, ") must not be negative (0 turns clipping off)");
  QKV_CHECK(o.eval_every >= 0 && o.eval_sequences >= 0, "train: eval_every and eval_sequences must not be negative");
  o.model.vocab_size = data_->vocab_size();
  if (o.model.context_length == 0) o.model.context_length = data_->tokens();
  QKV_CHECK(data_->tokens() <= o.model.context_length, "train: the sequences have ", data_->tokens(),
            " tokens but context_length is ", o.model.context_length);
  // torch.manual_seed(seed); model = AttentionLM(...)
  model_ = std::make_unique<AttentionLM>(o.model, model_gen_);
  params_ = parameters_of(*model_);
  if (o.optimizer == "adamw") {
    optimizer_ = std::make_unique<AdamW>(params_, o.lr, AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
  } else if (o.optimizer == "sgd") {
    optimizer_ = std::make_unique<Sgd>(params_, o.lr, SgdOptions{o.momentum, o.dampening, o.weight_decay, o.nesterov});
  } else {
    fail("unknown optimizer '", o.optimizer, "'; expected adamw or sgd");
  }
  QKV_CHECK(o.min_lr >= 0.0 && o.min_lr <= o.lr, "train: min_lr (", o.min_lr, ") must be in [0, lr = ", o.lr, "]");
  schedule_ = LrSchedule{o.lr, o.min_lr, o.warmup, o.steps};
  if ((o.task == "copy" || o.task == "reverse") && o.eval_sequences > 0) {
    SequenceTask held_out(o.task == "copy" ? TaskKind::kCopy : TaskKind::kReverse, o.task_length, o.task_symbols,
                          o.seed + 2);
    eval_ = held_out.next(o.eval_sequences);
  }
}

StepStats Trainer::step() {
  StepStats s;
  s.step = steps_done() + 1;
  Batch b = data_->next(options_.batch_size);
  s.tokens = b.batch * b.tokens;
  s.lr = optimizer_->lr = schedule_.at(s.step - 1);
  model_->train(true);
  optimizer_->zero_grad();
  Tensor logits = model_->forward(b.inputs, b.batch, b.tokens);  // (B, T, V)
  s.loss = loss_.forward(logits, b.targets);
  s.correct = loss_.correct();
  s.counted = loss_.count();
  if (!std::isfinite(s.loss))
    throw NonFiniteError(s.step, "the loss is " + number(s.loss), model_->first_non_finite(b.inputs, b.batch, b.tokens));
  model_->backward(loss_.backward());
  s.grad_norm = clip_grad_norm(params_, options_.clip > 0.0 ? options_.clip : std::numeric_limits<double>::infinity());
  if (!std::isfinite(s.grad_norm)) {
    const std::string p = first_non_finite(params_, /*grads=*/true);
    throw NonFiniteError(s.step, "the gradient norm is " + number(s.grad_norm), p.empty() ? "" : "the gradient of " + p);
  }
  optimizer_->step();
  losses_.push_back(s.loss);
  return s;
}

EvalStats Trainer::evaluate() {
  QKV_CHECK(has_eval(), "train: this task has no held-out set");
  EvalStats e;
  e.step = steps_done();
  model_->eval();
  const int64_t T = eval_.tokens;
  double loss_sum = 0.0;
  int64_t correct = 0, counted = 0;
  CrossEntropyLoss ce;
  for (int64_t at = 0; at < eval_.batch; at += options_.batch_size) {
    const int64_t n = std::min(options_.batch_size, eval_.batch - at);
    std::vector<int64_t> in(eval_.inputs.begin() + at * T, eval_.inputs.begin() + (at + n) * T);
    std::vector<int64_t> tg(eval_.targets.begin() + at * T, eval_.targets.begin() + (at + n) * T);
    const float l = ce.forward(model_->forward(in, n, T), tg);
    loss_sum += static_cast<double>(l) * static_cast<double>(ce.count());
    correct += ce.correct();
    counted += ce.count();
  }
  model_->train(true);
  e.loss = static_cast<float>(loss_sum / static_cast<double>(counted));
  e.accuracy = static_cast<double>(correct) / static_cast<double>(counted);
  return e;
}

Checkpoint Trainer::checkpoint() {
  Checkpoint c;
  c.options = options_;
  c.step = steps_done();
  for (const StateEntry& e : model_->state_dict()) c.model[e.name] = e.tensor ? e.tensor->clone() : e.value();
  for (const auto& [name, t] : optimizer_->state_tensors()) c.optimizer[name] = t->clone();
  c.losses = losses_;
  c.evals = evals_;
  c.model_rng = generator_state_hex(model_gen_);
  c.data_state = data_->state();
  c.vocab = vocab_;
  return c;
}

void Trainer::restore(const Checkpoint& c) {
  model_->load_state_dict(c.model, /*strict=*/true);  // errors name the tensor and both shapes
  std::vector<std::pair<std::string, Tensor*>> state = optimizer_->state_tensors();
  for (const auto& [name, t] : state) {
    auto it = c.optimizer.find(name);
    QKV_CHECK(it != c.optimizer.end(), "the checkpoint has no optimizer tensor '", name, "' (was it written by another ",
              "optimizer than ", optimizer_->name(), "?)");
    QKV_CHECK(it->second.shape() == t->shape(), "optimizer tensor '", name, "' has shape ", shape_str(it->second.shape()),
              " in the checkpoint but this model expects ", shape_str(t->shape()));
  }
  QKV_CHECK(c.optimizer.size() == state.size(), "the checkpoint has ", c.optimizer.size(),
            " optimizer tensors but the ", optimizer_->name(), " optimizer has ", state.size());
  for (const auto& [name, t] : state) t->copy_from(c.optimizer.at(name));
  QKV_CHECK(static_cast<int64_t>(c.losses.size()) == c.step, "the checkpoint's loss history has ", c.losses.size(),
            " entries for ", c.step, " steps");
  optimizer_->set_steps(c.step);
  losses_ = c.losses;
  evals_ = c.evals;
  set_generator_state_hex(model_gen_, c.model_rng);
  data_->set_state(c.data_state);
  if (!c.vocab.empty() || !vocab_.empty())
    QKV_CHECK(c.vocab == vocab_, "the checkpoint's vocabulary (", c.vocab.size(), " tokens) differs from this text's (",
              vocab_.size(), " tokens): was it trained on another text?");
}

}  // namespace qkv
