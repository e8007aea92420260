// State dict handling shared by every module. See include/qkv/modules/module.h.
#include "qkv/modules/module.h"

#include <algorithm>
#include <set>

#include "qkv/core/error.h"

namespace qkv {

std::vector<StateEntry> Module::state_dict() {
  std::vector<StateEntry> out;
  collect_state("", out);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& tensors, bool strict) {
  std::vector<StateEntry> entries = state_dict();
  std::set<std::string> known;
  for (const StateEntry& e : entries) {
    known.insert(e.name);
    auto it = tensors.find(e.name);
    QKV_CHECK(it != tensors.end(), type_name(), ": the weights lack the tensor '", e.name,
              "' of shape ", shape_str(e.shape()));
    QKV_CHECK(it->second.shape() == e.shape(), type_name(), ": tensor '", e.name, "' has shape ",
              shape_str(it->second.shape()), " but this module expects ", shape_str(e.shape()));
  }
  if (strict) {
    std::string unexpected;
    for (const auto& [name, t] : tensors)
      if (!known.count(name)) unexpected += (unexpected.empty() ? "'" : ", '") + name + "' " + shape_str(t.shape());
    QKV_CHECK(unexpected.empty(), type_name(), ": unexpected tensors ", unexpected,
              " (this module has no such parameters or buffers; is the file for another module?)");
  }
  for (const StateEntry& e : entries) e.load(tensors.at(e.name));
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (const StateEntry& e : state_dict())
    if (e.is_parameter) n += e.tensor->numel();
  return n;
}

void Module::zero_grad() {
  for (const StateEntry& e : state_dict())
    if (e.grad != nullptr) std::fill(e.grad->data(), e.grad->data() + e.grad->numel(), 0.0f);
}

}  // namespace qkv
