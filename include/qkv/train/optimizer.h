// qkv/train/optimizer.h - SGD and AdamW with PyTorch 1.13's update rules, gradient clipping by
// global norm, and the parameters they update.
//
// An optimiser holds pointers to a module's parameters and their gradients (the state_dict()
// entries that have a grad, see modules/module.h) and updates them in place, element by element,
// with the arithmetic of torch.optim's single-tensor code path (foreach=False, the 1.13 default):
//
//   SGD (torch.optim.SGD): d = grad (+ weight_decay * param)
//     momentum != 0: buf = d on the first step, else buf = momentum * buf + (1 - dampening) * d;
//                    d = d + momentum * buf (nesterov) or d = buf
//     param -= lr * d
//   AdamW (torch.optim.AdamW, amsgrad off): step += 1
//     param *= 1 - lr * weight_decay                       (decoupled weight decay)
//     m = beta1 * m + (1 - beta1) * grad;  v = beta2 * v + (1 - beta2) * grad^2
//     param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//
// lr is read at every step (a schedule sets it, as one sets param_groups[0]["lr"]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/modules/module.h"

namespace qkv {

struct Param {
  std::string name;  // state-dict name, "blocks.0.W_query.weight"
  Tensor* value;
  Tensor* grad;
};

// The parameters of `m` that have gradients, in state_dict() order.
std::vector<Param> parameters_of(Module& m);

// torch.nn.utils.clip_grad_norm_(params, max_norm): the 2-norm of all gradients together; if it
// exceeds max_norm, every gradient is scaled by max_norm / (norm + 1e-6). Returns the norm before
// clipping (NaN or inf when a gradient is not finite; the gradients are then left as they are).
float clip_grad_norm(const std::vector<Param>& params, double max_norm);

// The first parameter (or, with `grads`, gradient) holding a NaN or an infinity; "" if none.
std::string first_non_finite(const std::vector<Param>& params, bool grads);

class Optimizer {
 public:
  explicit Optimizer(std::vector<Param> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;
  virtual const char* name() const = 0;  // "sgd", "adamw"
  virtual void step() = 0;               // one update of every parameter with the current lr
  void zero_grad();

  double lr = 1e-3;
  int64_t steps() const { return steps_; }
  void set_steps(int64_t n) { steps_ = n; }  // when resuming from a checkpoint
  const std::vector<Param>& params() const { return params_; }
  // Per-parameter state for checkpoints, named "<state>.<param name>" ("exp_avg.out_head.weight").
  virtual std::vector<std::pair<std::string, Tensor*>> state_tensors() = 0;

 protected:
  std::vector<Param> params_;
  int64_t steps_ = 0;
};

struct SgdOptions {
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Param> params, double lr, const SgdOptions& options);
  const char* name() const override { return "sgd"; }
  void step() override;
  std::vector<std::pair<std::string, Tensor*>> state_tensors() override;
  SgdOptions options;

 private:
  std::vector<Tensor> momentum_buffer_;  // one per parameter (used when momentum != 0)
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;  // PyTorch's defaults
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Param> params, double lr, const AdamWOptions& options);
  const char* name() const override { return "adamw"; }
  void step() override;
  std::vector<std::pair<std::string, Tensor*>> state_tensors() override;
  AdamWOptions options;

 private:
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // one per parameter
};

}  // namespace qkv
