// A whole model's forward and backward, reported. See include/qkv/models/model_forward.h.
#include "qkv/models/model_forward.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/models/family.h"

namespace qkv {
namespace {

// Every block's softmax weights (B, H, T, T).
class WeightsByBlock : public ForwardObserver {
 public:
  explicit WeightsByBlock(const std::string& prefix) : prefix_(prefix) {}
  void block(const BlockView& v) override {
    out.push_back({prefix_ + std::to_string(v.layer) + ".attn_weights", v.trace->weights});
  }
  NamedTensors out;

 private:
  std::string prefix_;
};

}  // namespace

ModelForward run_model_forward(LanguageModel& model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                               bool attention_weights, const Tensor* dlogits) {
  ModelForward r;
  WeightsByBlock watch(model.family().names.blocks);
  r.logits = model.forward(ids, batch, tokens, attention_weights ? &watch : nullptr);  // (B, T, V)
  r.attention_weights = std::move(watch.out);
  if (dlogits) {
    QKV_CHECK(dlogits->shape() == r.logits.shape(), "the gradient of the logits has shape ", shape_str(dlogits->shape()),
              "; it must have the logits' shape ", shape_str(r.logits.shape()));
    model.zero_grad();
    model.backward(*dlogits);
    for (const StateEntry& e : model.state_dict())
      if (e.grad != nullptr) r.gradients.push_back({e.name, *e.grad});
  }
  return r;
}

NamedTensors torch_state(LanguageModel& model) {
  if (model.family().torch_state) return model.family().torch_state(model);
  NamedTensors out;
  for (const StateEntry& e : model.state_dict()) out.push_back({e.name, e.value()});
  return out;
}

std::vector<int64_t> token_ids_of(const Tensor& t, int64_t V, const std::string& what) {
  QKV_CHECK(t.dim() == 2 && t.size(0) >= 1 && t.size(1) >= 1, what, " has shape ", shape_str(t.shape()),
            "; expected (batch, num_tokens) token ids");
  std::vector<int64_t> ids;
  for (float v : t.to_vector()) {
    QKV_CHECK(v == std::floor(v) && v >= 0 && v < static_cast<float>(V), what, " holds ", v,
              ", not a token id in [0, ", V, ")");
    ids.push_back(static_cast<int64_t>(v));
  }
  return ids;
}

}  // namespace qkv
