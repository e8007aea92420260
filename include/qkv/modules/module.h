// qkv/modules/module.h - what every module shares: its state dict, train/eval mode.
//
// State names are PyTorch's state_dict() keys for the book's classes, in PyTorch's order
// (registration order: parameters, then buffers, children in turn), so a state dict saved by
// PyTorch loads here, and one written here loads into PyTorch with load_state_dict(strict=True).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

struct StateEntry {
  std::string name;    // "heads.0.W_query.weight"
  Tensor* tensor;      // the module's own tensor
  bool is_parameter;   // false for buffers such as "mask"
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

  // nn.Module.train() / eval(): only dropout behaves differently.
  virtual void train(bool on = true) { training_ = on; }
  void eval() { train(false); }
  bool is_training() const { return training_; }

 protected:
  bool training_ = false;
};

}  // namespace qkv
