// Training checkpoints. See include/qkv/train/checkpoint.h.
#include "qkv/train/checkpoint.h"

#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"

namespace qkv {
namespace {

constexpr const char* kKind = "train-checkpoint 1";
constexpr const char* kOptimizerPrefix = "optimizer.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

Tensor as_tensor(const std::vector<float>& v) { return Tensor::from({static_cast<int64_t>(v.size())}, v); }

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  NamedTensors tensors;
  for (const auto& [name, t] : c.model) {
    QKV_CHECK(!starts_with(name, kOptimizerPrefix) && !starts_with(name, "train.") && !starts_with(name, "data."),
              "checkpoint: the model tensor name '", name, "' collides with the checkpoint's own names");
    tensors.push_back({name, t});
  }
  for (const auto& [name, t] : c.optimizer) tensors.push_back({kOptimizerPrefix + name, t});
  tensors.push_back({"train.losses", as_tensor(c.losses)});
  if (!c.vocab.empty()) {
    std::vector<float> ids(c.vocab.begin(), c.vocab.end());  // GPT-2 ids < 2^24: exact in float32
    tensors.push_back({"data.vocab", as_tensor(ids)});
  }
  nlohmann::json evals = nlohmann::json::array();
  for (const EvalStats& e : c.evals) evals.push_back({{"step", e.step}, {"loss", e.loss}, {"accuracy", e.accuracy}});
  save_safetensors(path, tensors,
                   {{"format", "pt"},
                    {"qkv", kKind},
                    {"options", to_json(c.options).dump()},
                    {"step", std::to_string(c.step)},
                    {"rng.model", c.model_rng},
                    {"data.state", c.data_state.dump()},
                    {"evals", evals.dump()}});
}

Checkpoint load_checkpoint(const std::string& path) {
  TensorFile f = load_safetensors(path);
  auto meta = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    QKV_CHECK(it != f.metadata.end(), "'", path, "' is not a qkv training checkpoint: its metadata has no '", key,
              "' (training checkpoints are written by save_checkpoint)");
    return it->second;
  };
  QKV_CHECK(meta("qkv") == kKind, "'", path, "' is a '", meta("qkv"), "' file, not a ", kKind);
  Checkpoint c;
  try {
    c.options = train_options_from_json(nlohmann::json::parse(meta("options")));
    c.step = std::stoll(meta("step"));
    c.model_rng = meta("rng.model");
    c.data_state = nlohmann::json::parse(meta("data.state"));
    for (const nlohmann::json& e : nlohmann::json::parse(meta("evals")))
      c.evals.push_back({e.at("step").get<int64_t>(), e.at("loss").get<float>(), e.at("accuracy").get<double>()});
  } catch (const Error& e) {
    fail("'", path, "': ", e.what());
  } catch (const std::exception& e) {
    fail("'", path, "': malformed checkpoint metadata: ", e.what());
  }
  for (const auto& [name, t] : f.tensors) {
    if (starts_with(name, kOptimizerPrefix)) {
      c.optimizer[name.substr(std::string(kOptimizerPrefix).size())] = t;
    } else if (name == "train.losses") {
      c.losses = t.to_vector();
    } else if (name == "data.vocab") {
      for (float v : t.to_vector()) c.vocab.push_back(static_cast<int64_t>(v));
    } else {
      c.model[name] = t;
    }
  }
  return c;
}

}  // namespace qkv
