// The model's part of a qkv train checkpoint. See include/qkv/models/lm_checkpoint.h.
#include "qkv/models/lm_checkpoint.h"

#include <cmath>
#include <algorithm>
#include <set>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/numbers.h"
#include "qkv/core/json_read.h"
#include "qkv/core/ops.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder.h"

namespace qkv {
namespace {

// A name the trainer keeps beside the model's in the same file.
bool trainer_tensor(const std::string& name) {
  return name.starts_with("optimizer.") || name.starts_with("train.") || name.starts_with("data.");
}

bool ends_with_mask(const std::string& name) { return name.size() >= 5 && name.compare(name.size() - 5, 5, ".mask") == 0; }

}  // namespace

bool is_lm_checkpoint(const std::map<std::string, std::string>& metadata) {
  const auto kind = metadata.find("qkv");
  return kind != metadata.end() && kind->second.rfind("train-checkpoint", 0) == 0;
}

void check_lm_tensors(const LMConfig& c, const std::map<std::string, Tensor>& tensors) {
  Generator skip(0);
  const std::unique_ptr<DecoderModel> model = build_model_to_load(lm_spec(c), skip);  // its names and shapes
  std::vector<StateEntry> entries = model->state_dict();
  std::stable_partition(entries.begin(), entries.end(), [](const StateEntry& e) { return e.tensor != nullptr; });
  const kernels::AttentionSpec& a = c.attention;
  const std::string kv_heads = a.kv_heads > 0 ? str(", num_heads ", a.heads, ", num_kv_heads ", a.kv_heads) : "";
  for (const StateEntry& e : entries) {  // the parameters first, then the mask buffers
    auto it = tensors.find(e.name);
    QKV_CHECK(it != tensors.end(), "it has no tensor ", excerpt(e.name), ", which its options (", c.num_layers,
              " layers) call for");
    QKV_CHECK(it->second.shape() == e.shape(), "tensor ", excerpt(e.name), " has shape ", shape_str(it->second.shape()),
              " but its options (vocab_size ", c.vocab_size, ", context_length ", c.context_length, ", d_model ",
              c.d_model, kv_heads, ") make it ", shape_str(e.shape()));
  }
  QKV_CHECK(tensors.size() == entries.size(), "it has ", tensors.size(), " model tensors but its options call for ",
            entries.size());
  for (const auto& [name, t] : tensors)
    QKV_CHECK(ends_with_mask(name) || all_finite(t), "tensor ", excerpt(name),
              " holds a value that is not finite (NaN or infinity): the weights are damaged");
}

std::vector<int64_t> read_lm_vocab(const Tensor& t) {
  constexpr float kLimit = 16777216.0f;  // 2^24
  std::vector<int64_t> out;
  for (float v : t.to_vector()) {
    QKV_CHECK(std::isfinite(v) && v == std::floor(v) && v >= 0 && v < kLimit, "data.vocab holds ", v,
              ", not a GPT-2 id (a whole number in [0, 2^24))");
    QKV_CHECK(out.empty() || static_cast<int64_t>(v) > out.back(), "data.vocab is not increasing (", out.back(),
              " then ", v, ")");
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

const std::string& checkpoint_metadata(const TensorFile& f, const std::string& path, const char* key) {
  auto it = f.metadata.find(key);
  QKV_CHECK(it != f.metadata.end(), excerpt(path, 4096), " is not a qkv training checkpoint: its metadata has no '",
            key, "' (training checkpoints are written by qkv train)");
  return it->second;
}

int64_t checkpoint_step(const TensorFile& f, const std::string& path) {
  const std::string& text = checkpoint_metadata(f, path, "step");
  const std::optional<int64_t> step = parse_number<int64_t>(text, non_negative<int64_t>());
  QKV_CHECK(step.has_value(), "its step must be a non-negative integer, not ", excerpt(text));
  return *step;
}

void reading_checkpoint(const std::string& path, const std::function<void()>& read) {
  const std::string file = excerpt(path, 4096);
  try {
    read();
  } catch (const Error& e) {
    fail(file, ": ", e.what());
  } catch (const std::exception& e) {
    fail(file, ": malformed checkpoint metadata: ", excerpt(e.what(), 200));
  }
}

TensorFile open_lm_checkpoint(const std::string& path) {
  TensorFile f = load_safetensors(path);
  const std::string& kind = checkpoint_metadata(f, path, "qkv");
  QKV_CHECK(kind == kLmCheckpointKind, excerpt(path, 4096), " is a ", excerpt(kind), " file, not a ", kLmCheckpointKind);
  return f;
}

LmCheckpoint read_lm_checkpoint(const std::string& path) {
  const TensorFile f = open_lm_checkpoint(path);
  auto meta = [&](const char* key) -> const std::string& { return checkpoint_metadata(f, path, key); };
  LmCheckpoint c;
  reading_checkpoint(path, [&] {
    const nlohmann::json o = parse_json(meta("options"), "its options");
    QKV_CHECK(o.is_object() && o.contains("model"), "its options must be a JSON object with \"model\", not ",
              json_excerpt(o));
    c.config = lm_config_from_json(o["model"]);
    if (o.contains("task")) read_option(o["task"], c.task, "task");
    if (o.contains("task_length")) read_option(o["task_length"], c.task_length, "task_length");
    if (o.contains("task_symbols")) read_option(o["task_symbols"], c.task_symbols, "task_symbols");
    if (o.contains("text_file")) read_option(o["text_file"], c.text_file, "text_file");
    if (o.contains("seed")) read_option(o["seed"], c.seed, "seed");
    c.step = checkpoint_step(f, path);
    for (const auto& [name, t] : f.tensors) {
      if (name == "data.vocab") c.vocab = read_lm_vocab(t);
      if (trainer_tensor(name)) continue;
      c.model[name] = t;
      if (f.stored_dtypes.at(name) == "BF16") c.weights_dtype = Dtype::kBF16;
    }
    validate_lm_config(c.config);  // the variants too: num_kv_heads divides num_heads, window <= context, ...
    check_lm_tensors(c.config, c.model);
  });
  return c;
}

}  // namespace qkv
