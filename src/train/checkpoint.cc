// Training checkpoints. See include/qkv/train/checkpoint.h.
#include "qkv/train/checkpoint.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/core/ops.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/lm_checkpoint.h"

namespace qkv {
namespace {

constexpr const char* kKind = kLmCheckpointKind;
constexpr const char* kOptimizerPrefix = "optimizer.";

Tensor as_tensor(const std::vector<float>& v) { return Tensor::from({static_cast<int64_t>(v.size())}, v); }

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  NamedTensors tensors;
  std::set<std::string> bf16;  // the model's weights in bf16 mode's checkpoints
  for (const auto& [name, t] : c.model) {
    if (c.weights_dtype == Dtype::kBF16) bf16.insert(name);
    QKV_CHECK(!name.starts_with(kOptimizerPrefix) && !name.starts_with("train.") && !name.starts_with("data."),
              "checkpoint: the model tensor name ", excerpt(name), " collides with the checkpoint's own names");
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
  // The run's input files by absolute paths, so that a run resumed from another directory reads
  // the same ones (as given, relative to the directory the run started in, it read whatever file of
  // that name the new directory had). A path that cannot be made absolute is kept as given.
  TrainOptions options = c.options;
  for (std::string* file : {&options.text_file, &options.data_file}) {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(*file, ec);
    if (!file->empty() && !ec) *file = absolute.lexically_normal().string();
  }
  save_safetensors(path, tensors,
                   {{"format", "pt"},
                    {"qkv", kKind},
                    {"options", to_json(options).dump()},
                    {"step", std::to_string(c.step)},
                    {"rng.model", c.model_rng},
                    {"data.state", c.data_state.dump()},
                    {"evals", evals.dump()}},
                   bf16);
}

namespace {

void read_evals(const nlohmann::json& j, std::vector<EvalStats>& out) {
  QKV_CHECK(j.is_array(), "its evaluations must be a JSON array, not ", json_excerpt(j));
  for (const nlohmann::json& e : j) {
    const bool ok = e.is_object() && e.size() == 3 && e.contains("step") && e["step"].is_number_unsigned() &&
                    e["step"].get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                    e.contains("loss") && e["loss"].is_number() && e.contains("accuracy") && e["accuracy"].is_number();
    QKV_CHECK(ok, "an evaluation must be {\"step\": N, \"loss\": X, \"accuracy\": X}, not ", json_excerpt(e));
    out.push_back({e["step"].get<int64_t>(), e["loss"].get<float>(), e["accuracy"].get<double>()});
  }
}

// Everything a checkpoint says, checked against everything else it says, before anything is built
// from it: the options against the limits, every tensor's shape against the options, every value
// finite, the step against the loss history.
void validate(const Checkpoint& c) {
  check_train_request(c.options);  // sizes in range, products checked, memory within the limits
  validate_lm_config(c.options.model);  // the variants too: num_kv_heads divides num_heads, window <= context, ...
  check_lm_tensors(c.options.model, c.model);  // every tensor of the model, of its shape, finite
  std::map<std::string, Shape> params;
  for (const auto& [name, t] : c.model)
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".mask") != 0) params[name] = t.shape();
  for (const auto& [name, t] : c.optimizer) {
    const size_t dot = name.find('.');
    auto it = dot == std::string::npos ? params.end() : params.find(name.substr(dot + 1));
    QKV_CHECK(it != params.end(), "optimizer tensor ", excerpt(name), " is not the state of a parameter");
    QKV_CHECK(t.shape() == it->second, "optimizer tensor ", excerpt(name), " has shape ", shape_str(t.shape()),
              " but its parameter has shape ", shape_str(it->second));
  }
  for (const auto& [name, t] : c.optimizer)
    QKV_CHECK(all_finite(t), "tensor ", excerpt(kOptimizerPrefix + name),
              " holds a value that is not finite (NaN or infinity): the weights are damaged");
  QKV_CHECK(static_cast<int64_t>(c.losses.size()) == c.step, "its loss history has ", c.losses.size(), " entries for ",
            c.step, " steps");
  for (const EvalStats& e : c.evals)
    QKV_CHECK(e.step <= c.step, "an evaluation at step ", e.step, " is after its step ", c.step);
  // The generators' states parse (the row of fixed batches is checked against the data on restore).
  Generator g(0);
  set_generator_state_hex(g, c.model_rng);
  const nlohmann::json& d = c.data_state;
  if (c.options.task == TrainTask::kData) {
    QKV_CHECK(d.is_object() && d.contains("row") && d["row"].is_number_unsigned(),
              "its data state must be {\"row\": N}, not ", json_excerpt(d));
  } else {
    QKV_CHECK(d.is_object() && d.contains("generator") && d["generator"].is_string(),
              "its data state must be {\"generator\": \"<hex>\"}, not ", json_excerpt(d));
    set_generator_state_hex(g, d["generator"].get<std::string>());
  }
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path) {
  TensorFile f = open_lm_checkpoint(path);
  auto meta = [&](const char* key) -> const std::string& { return checkpoint_metadata(f, path, key); };
  Checkpoint c;
  reading_checkpoint(path, [&] {
    c.options = train_options_from_json(parse_json(meta("options"), "its options"));
    c.step = checkpoint_step(f, path);
    c.model_rng = meta("rng.model");
    c.data_state = parse_json(meta("data.state"), "its data state");
    read_evals(parse_json(meta("evals"), "its evaluations"), c.evals);
    for (const auto& [name, t] : f.tensors) {
      if (name.starts_with(kOptimizerPrefix)) {
        c.optimizer[name.substr(std::string(kOptimizerPrefix).size())] = t;
      } else if (name == "train.losses") {
        c.losses = t.to_vector();
      } else if (name == "data.vocab") {
        c.vocab = read_lm_vocab(t);
      } else {
        c.model[name] = t;
        if (f.stored_dtypes.at(name) == "BF16") c.weights_dtype = Dtype::kBF16;
      }
    }
    validate(c);
  });
  return c;
}

}  // namespace qkv
