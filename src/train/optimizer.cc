// SGD, AdamW, gradient clipping. See include/qkv/train/optimizer.h.
#include "qkv/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/pointwise.h"
#include "qkv/core/ops.h"

namespace qkv {
namespace {

}  // namespace

std::vector<Param> parameters_of(Module& m) {
  std::vector<Param> out;
  for (const StateEntry& e : m.state_dict())
    if (e.is_parameter && e.grad != nullptr) out.push_back({e.name, e.tensor, e.grad});
  return out;
}

float clip_grad_norm(const std::vector<Param>& params, double max_norm) {
  // torch.norm(torch.stack([torch.norm(g) for g in grads])): a norm of per-tensor norms.
  double total_sq = 0.0;
  for (const Param& p : params) {
    double sq = 0.0;
    const float* g = p.grad->data();
    for (int64_t i = 0, n = p.grad->numel(); i < n; ++i) sq += static_cast<double>(g[i]) * g[i];
    const float norm = static_cast<float>(std::sqrt(sq));
    total_sq += static_cast<double>(norm) * norm;
  }
  const float total = static_cast<float>(std::sqrt(total_sq));
  if (!std::isfinite(total)) return total;
  // clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1, all in float32
  const float coef = std::min(static_cast<float>(max_norm) / (total + 1e-6f), 1.0f);
  if (coef < 1.0f)
    for (const Param& p : params) {
      float* g = p.grad->data();
      for (int64_t i = 0, n = p.grad->numel(); i < n; ++i) g[i] *= coef;
    }
  return total;
}

std::string first_non_finite(const std::vector<Param>& params, bool grads) {
  for (const Param& p : params)
    if (!all_finite(grads ? *p.grad : *p.value)) return p.name;
  return "";
}

void Optimizer::zero_grad() {
  for (const Param& p : params_) std::fill(p.grad->data(), p.grad->data() + p.grad->numel(), 0.0f);
}

Sgd::Sgd(std::vector<Param> params, double lr_, const SgdOptions& o) : Optimizer(std::move(params)), options(o) {
  QKV_CHECK(lr_ >= 0.0, "SGD: lr (", lr_, ") must be non-negative");
  QKV_CHECK(o.momentum >= 0.0 && o.weight_decay >= 0.0, "SGD: momentum (", o.momentum, ") and weight_decay (",
            o.weight_decay, ") must be non-negative");
  QKV_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
            "SGD: nesterov momentum requires a momentum and zero dampening");
  lr = lr_;
  for (const Param& p : params_) momentum_buffer_.push_back(Tensor::zeros(p.value->shape()));
}

void Sgd::step() {
  const float wd = static_cast<float>(options.weight_decay), mom = static_cast<float>(options.momentum);
  const float damp = static_cast<float>(1.0 - options.dampening), neg_lr = static_cast<float>(-lr);
  const bool first = steps_ == 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    float* w = params_[k].value->data();
    const float* g = params_[k].grad->data();
    float* buf = momentum_buffer_[k].data();
    for (int64_t i = 0, n = params_[k].value->numel(); i < n; ++i) {
      float d = g[i];
      if (options.weight_decay != 0.0) d = d + wd * w[i];  // d_p = d_p.add(param, alpha=weight_decay)
      if (options.momentum != 0.0) {
        buf[i] = first ? d : buf[i] * mom + damp * d;  // buf = clone(d_p) | buf.mul_(m).add_(d_p, alpha=1-damp)
        d = options.nesterov ? d + mom * buf[i] : buf[i];
      }
      w[i] = w[i] + neg_lr * d;  // param.add_(d_p, alpha=-lr)
    }
  }
  ++steps_;
}

std::vector<std::pair<std::string, Tensor*>> Sgd::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  if (options.momentum != 0.0)
    for (size_t k = 0; k < params_.size(); ++k)
      out.push_back({"momentum_buffer." + params_[k].name, &momentum_buffer_[k]});
  return out;
}

AdamW::AdamW(std::vector<Param> params, double lr_, const AdamWOptions& o) : Optimizer(std::move(params)), options(o) {
  QKV_CHECK(lr_ >= 0.0, "AdamW: lr (", lr_, ") must be non-negative");
  QKV_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0 && o.beta2 >= 0.0 && o.beta2 < 1.0, "AdamW: betas (", o.beta1,
            ", ", o.beta2, ") must be in [0, 1)");
  QKV_CHECK(o.eps >= 0.0 && o.weight_decay >= 0.0, "AdamW: eps (", o.eps, ") and weight_decay (",
            o.weight_decay, ") must be non-negative");
  lr = lr_;
  for (const Param& p : params_) {
    exp_avg_.push_back(Tensor::zeros(p.value->shape()));
    exp_avg_sq_.push_back(Tensor::zeros(p.value->shape()));
  }
}

void AdamW::step() {
  ++steps_;
  // The scalars as torch computes them: in Python doubles, then used as float32 scalars.
  const double step = static_cast<double>(steps_);
  const double bias_correction1 = 1.0 - std::pow(options.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(options.beta2, step);
  AdamWScalars s;
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.decay = static_cast<float>(1.0 - lr * options.weight_decay);
  s.b1 = static_cast<float>(options.beta1), s.a1 = static_cast<float>(1.0 - options.beta1);
  s.b2 = static_cast<float>(options.beta2), s.a2 = static_cast<float>(1.0 - options.beta2);
  s.eps = static_cast<float>(options.eps);
  for (size_t k = 0; k < params_.size(); ++k)  // element by element, as torch (core/pointwise.h)
    adamw_update(params_[k].value->data(), params_[k].grad->data(), exp_avg_[k].data(), exp_avg_sq_[k].data(),
                 params_[k].value->numel(), s);
}

std::vector<std::pair<std::string, Tensor*>> AdamW::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t k = 0; k < params_.size(); ++k) out.push_back({"exp_avg." + params_[k].name, &exp_avg_[k]});
  for (size_t k = 0; k < params_.size(); ++k) out.push_back({"exp_avg_sq." + params_[k].name, &exp_avg_sq_[k]});
  return out;
}

}  // namespace qkv
