// A training run. See include/qkv/train/trainer.h.
#include "qkv/train/trainer.h"

#include "qkv/models/decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

TaskKind task_kind(TrainTask task) { return task == TrainTask::kCopy ? TaskKind::kCopy : TaskKind::kReverse; }

}  // namespace

std::unique_ptr<TrainingData> make_task_data(const TrainOptions& o) {
  switch (o.task) {
    case TrainTask::kCopy:
    case TrainTask::kReverse:
      return std::make_unique<SequenceTask>(task_kind(o.task), o.task_length, o.task_symbols, o.seed + 1);
    case TrainTask::kData: return std::make_unique<FixedBatches>(o.data_file, o.model.vocab_size);
    case TrainTask::kText: break;
  }
  fail("task ", train_task_name(o.task), ": the caller tokenises the text and gives the Trainer its TokenWindows");
}

void check_train_request(const TrainOptions& o) {
  const LMConfig& m = o.model;
  const int64_t V = m.vocab_size, T = m.context_length, C = m.d_model, H = m.attention.heads, L = m.num_layers;
  const int64_t B = o.batch_size;
  QKV_CHECK(V >= 1 && T >= 1 && C >= 1, "train: vocab_size (", V, "), context_length (", T, ") and d_model (", C,
            ") must be positive");
  QKV_CHECK(H >= 1 && C % H == 0, "train: d_model (", C, ") must be divisible by num_heads (", H, ")");
  QKV_CHECK(L >= 0, "train: num_layers (", L, ") must not be negative");
  check_train_options(o);
  // The parameters: tok_emb (V, C), pos_emb (T, C), per block W_query, W_key, W_value, out_proj (C, C) with
  // out_proj's bias (C) and, with qkv_bias, three more (C); out_head (V, C) and its bias (V).
  const char* what = "the model's parameters (from vocab_size, context_length, d_model and num_layers)";
  const int64_t block = checked_add(checked_mul(4, checked_mul(C, C, what), what), (m.qkv_bias ? 4 : 1) * C, what);
  int64_t params = checked_mul(checked_add(checked_mul(2, V, what), T, what), C, what);
  params = checked_add(checked_add(params, V, what), checked_mul(L, block, what), what);
  check_memory_request(checked_bytes(params, 4, what), what);
  check_memory_request(checked_bytes(params, 4, "their gradients"), "the gradients of the model's parameters");
  const int64_t states = o.optimizer == OptimizerKind::kAdamW ? 2 : o.momentum != 0.0 ? 1 : 0;
  check_memory_request(checked_bytes(checked_mul(states, params, "the optimizer state"), 4, "the optimizer state"),
                       "the optimizer state");
  const char* masks = "the attention masks (num_layers x context_length x context_length)";
  check_memory_request(checked_bytes(checked_product({L, T, T}, masks), 4, masks), masks);
  const char* logits = "one batch's logits (batch_size x context_length x vocab_size)";
  check_memory_request(checked_bytes(checked_product({B, T, V}, logits), 4, logits), logits);
  const char* weights = "one batch's attention weights (batch_size x num_heads x context_length^2 x num_layers)";
  check_memory_request(checked_bytes(checked_product({B, H, T, T, std::max<int64_t>(L, 1)}, weights), 4, weights),
                       weights);
  if (is_builtin_task(o.task)) {
    // A sequence is 2 x task_length tokens, held as inputs and targets (8 bytes each).
    const int64_t seq = checked_mul(2, o.task_length, "a task sequence (2 x task_length)");
    const char* batch = "one batch of the task (batch_size x 2 x task_length tokens)";
    check_memory_request(checked_bytes(checked_mul(B, seq, batch), 16, batch), batch);
    const char* held_out = "the held-out set (eval_sequences x 2 x task_length tokens)";
    check_memory_request(checked_bytes(checked_mul(o.eval_sequences, seq, held_out), 16, held_out), held_out);
  }
}

std::string number_text(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return str(v);
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
  o.model.vocab_size = data_->vocab_size();
  set_head_dim(o.model);  // d_model / num_heads: the attention LM's only head width
  if (o.model.context_length == 0) o.model.context_length = data_->tokens();
  QKV_CHECK(data_->tokens() <= o.model.context_length, "train: the sequences have ", data_->tokens(),
            " tokens but context_length is ", o.model.context_length);
  check_train_request(o);
  // torch.manual_seed(seed); model = AttentionLM(...)
  model_ = build_model(lm_spec(o.model), model_gen_);
  params_ = parameters_of(*model_);
  switch (o.optimizer) {
    case OptimizerKind::kAdamW:
      optimizer_ = std::make_unique<AdamW>(params_, o.lr, AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
      break;
    case OptimizerKind::kSgd:
      optimizer_ = std::make_unique<Sgd>(params_, o.lr, SgdOptions{o.momentum, o.dampening, o.weight_decay, o.nesterov});
      break;
  }
  QKV_CHECK(optimizer_ != nullptr, "train: unknown optimizer kind ", static_cast<int>(o.optimizer));
  schedule_ = LrSchedule{o.lr, o.min_lr, o.warmup, o.steps};
  if (is_builtin_task(o.task) && o.eval_sequences > 0) {
    SequenceTask held_out(task_kind(o.task), o.task_length, o.task_symbols,
                          o.seed + 2);
    eval_ = held_out.next(o.eval_sequences);
  }
}

void Trainer::set_data_parallel(DataParallel* dp) {
  QKV_CHECK(!dp || options_.batch_size >= dp->ranks(), "data-parallel training: the batch size (",
            options_.batch_size, ") must be at least the number of ranks (", dp ? dp->ranks() : 1,
            "): every rank takes a slice of each batch");
  dp_ = dp;
  if (!dp_) {
    model_->set_batch_slice(0, 0);
    return;
  }
  const BatchSlice slice = batch_slice(options_.batch_size, dp_->rank(), dp_->ranks());
  model_->set_batch_slice(slice.begin, options_.batch_size);  // dropout keyed by the global sequence
}

void Trainer::sum_gradients_over_ranks() { sum_gradients(*dp_, params_, flat_grads_); }

StepStats Trainer::step() {
  StepStats s;
  s.step = steps_done() + 1;
  Batch b = data_->next(options_.batch_size);  // every rank draws the whole batch: the streams stay equal
  s.tokens = b.batch * b.tokens;
  if (dp_) {  // this rank's sequences [begin, end): rows of the (B, T) inputs and targets
    const BatchSlice slice = batch_slice(b.batch, dp_->rank(), dp_->ranks());
    const auto row = [&](int64_t r) { return static_cast<std::ptrdiff_t>(r * b.tokens); };
    b.inputs = std::vector<int64_t>(b.inputs.begin() + row(slice.begin), b.inputs.begin() + row(slice.end));
    b.targets = std::vector<int64_t>(b.targets.begin() + row(slice.begin), b.targets.begin() + row(slice.end));
    b.batch = slice.end - slice.begin;
  }
  s.lr = optimizer_->lr = schedule_.at(s.step - 1);
  model_->train(true);
  optimizer_->zero_grad();
  Tensor logits = model_->forward(b.inputs, b.batch, b.tokens);  // (B, T, V)
  s.loss = loss_.forward(logits, b.targets);
  s.correct = loss_.correct();
  s.counted = loss_.count();
  if (dp_) {  // the whole batch's mean loss: (sum of losses, hits, counted targets) over the ranks
    double totals[3] = {loss_.total(), static_cast<double>(s.correct), static_cast<double>(s.counted)};
    dp_->sum_doubles(totals, 3);
    s.loss = static_cast<float>(totals[0] / totals[2]);
    s.correct = static_cast<int64_t>(totals[1]);
    s.counted = static_cast<int64_t>(totals[2]);
  }
  // (PyTorch's mean over no targets is 0 / 0 = NaN too; said as what it is, not as an overflow)
  QKV_CHECK(s.counted > 0, "step ", s.step, ": every target of the batch is ", kIgnoreIndex,
            " (ignored), so its mean loss is 0 / 0; each batch needs a target to learn from (the --data file's "
            "'targets' marks which)");
  if (!std::isfinite(s.loss))
    throw NonFiniteError(s.step, "the loss is " + number_text(s.loss), first_non_finite(*model_, b.inputs, b.batch, b.tokens));
  // The slice's share of the batch's mean: divided by the whole batch's count of targets.
  model_->backward(loss_.backward_over(s.counted));
  if (dp_) sum_gradients_over_ranks();
  s.grad_norm = clip_grad_norm(params_, options_.clip > 0.0 ? options_.clip : std::numeric_limits<double>::infinity());
  if (!std::isfinite(s.grad_norm)) {
    const std::string p = first_non_finite(params_, /*grads=*/true);
    throw NonFiniteError(s.step, "the gradient norm is " + number_text(s.grad_norm), p.empty() ? "" : "the gradient of " + p);
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
