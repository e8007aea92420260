// qkv/modules/module.h - what every module shares: its state dict, train/eval mode, gradients.
//
// State names are PyTorch's state_dict() keys for the book's classes, in PyTorch's order
// (registration order: parameters, then buffers, children in turn), so a state dict saved by
// PyTorch loads here, and one written here loads into PyTorch with load_state_dict(strict=True).
//
// Gradients work as PyTorch's `.grad`: every parameter `w` has a member `dw` of the same shape,
// allocated zero; each backward() call adds to it, and zero_grad() sets it back to zero. A
// module's forward() records what its backward() needs, and backward() differentiates the most
// recent forward() call (one backward per forward, as in llm.c; calling forward twice before
// backward differentiates the second call).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/modules/mask_buffer.h"

namespace qkv {

// One entry of a state dict: a tensor the module owns, or the causal mask buffer, which has no
// tensor of its own until one is asked for (see mask_buffer.h). Read it with shape() / value()
// and write it with load(), which serve both kinds.
struct StateEntry {
  std::string name;    // "heads.0.W_query.weight"
  Tensor* tensor;      // the module's own tensor; nullptr for the mask buffer
  bool is_parameter;   // false for buffers such as "mask"
  Tensor* grad = nullptr;    // the parameter's gradient (same shape), nullptr for buffers
  MaskBuffer* mask = nullptr;  // the mask buffer, when tensor is nullptr

  Shape shape() const { return tensor ? tensor->shape() : mask->shape(); }
  // The values as PyTorch's state_dict() holds them: the tensor itself (not a copy), or the
  // mask materialised as an (n, n) tensor.
  Tensor value() const { return tensor ? *tensor : mask->to_tensor(); }
  void load(const Tensor& t) const {  // same shape (checked by the caller)
    if (tensor) tensor->copy_from(t);
    else mask->load(t);
  }
};

class Module {
 public:
  virtual ~Module() = default;
  virtual const char* type_name() const = 0;

  // Parameters and persistent buffers in state_dict() order, names prefixed by `prefix`.
  virtual void collect_state(const std::string& prefix, std::vector<StateEntry>& out) = 0;
  std::vector<StateEntry> state_dict();
  // Copies tensors in by name. Every entry must be present and of the same shape; with `strict`,
  // a name the module does not have is an error too. Errors name the tensor and both shapes.
  // Nothing is changed unless everything checks.
  void load_state_dict(const std::map<std::string, Tensor>& tensors, bool strict = true);
  int64_t num_parameters();
  // Sets every parameter's gradient to zero (PyTorch's zero_grad(set_to_none=False)).
  void zero_grad();

  // nn.Module.train() / eval(): only dropout behaves differently.
  virtual void train(bool on = true) { training_ = on; }
  void eval() { train(false); }
  bool is_training() const { return training_; }

 protected:
  bool training_ = false;
};

}  // namespace qkv
