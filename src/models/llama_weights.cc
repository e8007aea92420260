// The Llama 3 and Qwen3 checkpoints. See include/qkv/models/llama_weights.h.
#include "qkv/models/llama_weights.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/read_file.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/json_read.h"

namespace qkv {
namespace {

bool exists(const std::string& path, bool directory) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

std::string slash(const std::string& dir) { return dir.empty() || dir.back() == '/' ? dir : dir + "/"; }

// Names a file may carry that are not the model's and are skipped: rotary tables some exporters write.
bool skipped(const std::string& name) {
  const std::string tail = "rotary_emb.inv_freq";
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool is_llama_directory(const std::string& path) {
  const std::string config = slash(path) + "config.json";
  if (!exists(path, true) || !exists(config, false)) return false;
  try {
    const nlohmann::json j = parse_json(read_file(config), excerpt(config));
    return j.is_object() && j.contains("model_type") && (j["model_type"] == "llama" || j["model_type"] == "qwen3");
  } catch (const Error&) {
    return false;
  }
}

LlamaWeights read_llama_weights(const std::string& path) {
  QKV_CHECK(exists(path, true), "cannot read ", excerpt(path), ": a Llama or Qwen3 model is a directory holding ",
            "config.json and model.safetensors (or its shards and model.safetensors.index.json)");
  const std::string dir = slash(path);
  QKV_CHECK(exists(dir + "config.json", false), excerpt(path), " has no config.json");
  LlamaWeights w;
  w.dir = path;
  w.config = parse_llama_config(parse_json(read_file(dir + "config.json"), excerpt(dir + "config.json")),
                                excerpt(dir + "config.json"));
  // The files: model.safetensors, or the shards the index names (each once, in order of first mention).
  std::map<std::string, std::string> index;  // tensor -> shard, from the index
  std::vector<std::string> shards;
  const std::string index_path = dir + "model.safetensors.index.json";
  if (exists(index_path, false)) {
    const nlohmann::json j = parse_json(read_file(index_path), excerpt(index_path));
    QKV_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), excerpt(index_path),
              " has no \"weight_map\" object (tensor name -> shard file)");
    for (const auto& [name, file] : j["weight_map"].items()) {
      QKV_CHECK(file.is_string(), excerpt(index_path), ": the shard of ", excerpt(name), " is ",
                excerpt(file.dump()), "; expected a file name");
      const std::string shard = file.get<std::string>();
      QKV_CHECK(!shard.empty() && shard.find('/') == std::string::npos, excerpt(index_path), ": the shard of ",
                excerpt(name), " is ", excerpt(shard), "; expected a file name in the same directory");
      index[name] = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    QKV_CHECK(!shards.empty(), excerpt(index_path), " names no shards");
  } else {
    QKV_CHECK(exists(dir + "model.safetensors", false), excerpt(path), " has neither model.safetensors nor ",
              "model.safetensors.index.json (with its shards)");
    shards.push_back("model.safetensors");
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = dir + shards[i];
    QKV_CHECK(exists(file, false), excerpt(index_path), " names the shard ", excerpt(shards[i]),
              ", which is missing from ", excerpt(path));
    w.files.push_back(std::make_shared<const MappedSafetensors>(file));
    for (const std::string& name : w.files.back()->names()) {
      const auto [it, fresh] = w.file_of.emplace(name, i);
      QKV_CHECK(fresh, "the tensor ", excerpt(name), " is in two shards: ", excerpt(shards[it->second]), " and ",
                excerpt(shards[i]));
      QKV_CHECK(index.empty() || (index.count(name) && index.at(name) == shards[i]), "the tensor ", excerpt(name),
                " is in ", excerpt(shards[i]), " but ", excerpt(index_path),
                index.count(name) ? " places it in " + excerpt(index.at(name)) : std::string(" does not list it"));
    }
  }
  for (const auto& [name, shard] : index)
    QKV_CHECK(w.file_of.count(name), excerpt(index_path), " places ", excerpt(name), " in ", excerpt(shard),
              ", which does not hold it");
  if (!w.file_of.empty()) w.stored_dtype = w.files[w.file_of.begin()->second]->stored_dtype(w.file_of.begin()->first);
  return w;
}

namespace {
// Every tensor against the model - names, shapes, dtypes, nothing left over - before anything is
// loaded into it. Returns the model's entries.
std::vector<StateEntry> check_llama_weights(LlamaModel& model, const LlamaWeights& w) {
  const std::vector<StateEntry> entries = model.state_dict();
  std::set<std::string> wanted;
  for (const StateEntry& e : entries) {
    wanted.insert(e.name);
    const auto it = w.file_of.find(e.name);
    QKV_CHECK(it != w.file_of.end(), excerpt(w.dir), " has no tensor ", excerpt(e.name), " (of shape ",
              shape_str(e.shape()), ", which config.json's model needs)");
    const MappedSafetensors& f = *w.files[it->second];
    QKV_CHECK(f.shape(e.name) == e.shape(), "the tensor ", excerpt(e.name), " in ", excerpt(f.path()), " has shape ",
              shape_str(f.shape(e.name)), "; config.json's model has ", shape_str(e.shape()));
    const std::string dtype = f.stored_dtype(e.name);
    QKV_CHECK(dtype == "F32" || dtype == "BF16" || dtype == "F16", "the tensor ", excerpt(e.name), " in ",
              excerpt(f.path()), " is ", dtype, "; qkv reads these families' weights in BF16, F16 or F32");
  }
  for (const auto& [name, i] : w.file_of)
    QKV_CHECK(wanted.count(name) || skipped(name) || (name == "lm_head.weight" && model.config.tie_word_embeddings),
              "the tensor ", excerpt(name), " in ", excerpt(w.files[i]->path()), " is not of config.json's ",
              llama_family_name(model.config.family), " model");
  return entries;
}
}  // namespace

void load_llama_weights(LlamaModel& model, const LlamaWeights& w) {
  const std::vector<StateEntry> entries = check_llama_weights(model, w);
  // Straight into the model's own tensors, one at a time: no second copy of the model.
  for (const StateEntry& e : entries) w.files[w.file_of.at(e.name)]->read_into(e.name, e.tensor->data());
}

std::unique_ptr<LlamaModel> llama_model_from(const LlamaWeights& w, Dtype dtype, AttentionPath path, Generator& gen,
                                             bool bf16_only) {
  LlamaConfig c = w.config;
  c.dtype = dtype;
  c.path = path;
  gen.set_init_draws(false);  // every weight is about to be loaded
  auto model = std::make_unique<LlamaModel>(c, gen);
  gen.set_init_draws(true);
  if (bf16_only) {
    QKV_CHECK(dtype == Dtype::kBF16, "weights in bf16 only need bf16 products");
    check_llama_weights(*model, w);
    auto file = [&](const std::string& name) -> const MappedSafetensors& { return *w.files[w.file_of.at(name)]; };
    model->load_bf16_only([&](const std::string& name, uint16_t* out) { file(name).read_bf16_into(name, out); },
                          [&](const std::string& name, float* out) { file(name).read_into(name, out); });
  } else {
    load_llama_weights(*model, w);
  }
  model->eval();
  return model;
}

void save_llama_directory(LlamaModel& model, const std::string& dir, bool bf16) {
  QKV_CHECK(exists(dir, true), "cannot write the model into ", excerpt(dir), ": it is not a directory");
  NamedTensors tensors;
  std::set<std::string> as_bf16;
  for (const StateEntry& e : model.state_dict()) {
    tensors.push_back({e.name, e.value()});
    if (bf16) as_bf16.insert(e.name);
  }
  const std::string d = slash(dir);
  save_safetensors(d + "model.safetensors", tensors, {{"format", "pt"}}, as_bf16);
  write_file_atomically(d + "config.json", llama_config_json(model.config).dump(2) + "\n");
}

}  // namespace qkv
