// A model as Hugging Face ships it. See include/qkv/models/hf_folder.h.
#include "qkv/models/hf_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/read_file.h"
#include "qkv/io/atomic_file.h"
#include "qkv/core/json_read.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"

namespace qkv {
namespace {

bool exists(const std::string& path, bool directory) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

std::string slash(const std::string& dir) { return dir.empty() || dir.back() == '/' ? dir : dir + "/"; }

// Names a file may carry that are not the model's and are skipped: rotary tables some exporters
// write, and what the family says is not its model's (Qwen3.5's vision tower).
bool skipped(const std::string& name, const ModelFamily& family) {
  const std::string tail = "rotary_emb.inv_freq";
  if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) return true;
  for (const std::string& prefix : family.other_tensors)
    if (name.starts_with(prefix)) return true;
  return false;
}

// "\"llama\" (Llama 3), ..., \"qwen3_5\" (Qwen3.5)": their model_type values, for messages.
std::string folder_types() {
  std::string s;
  for (const ModelFamily* f : model_families())
    if (has_hf_folder(*f))
      for (const std::string& t : f->model_types) s += str(s.empty() ? "" : ", ", "\"", t, "\" (", f->title, ")");
  return s;
}

}  // namespace

std::optional<std::string> hf_model_type(const std::string& path) {
  const std::string config = slash(path) + "config.json";
  if (!exists(path, true) || !exists(config, false)) return std::nullopt;
  const std::string where = excerpt(config);
  const nlohmann::json j = parse_json(read_file(config), where);
  QKV_CHECK(j.is_object(), where, " is not a JSON object");
  if (!j.contains("model_type")) return std::nullopt;
  QKV_CHECK(j["model_type"].is_string(), where, ": \"model_type\" is ", json_excerpt(j["model_type"]),
            "; expected a string");
  return j["model_type"].get<std::string>();
}

HfFolder read_hf_folder(const std::string& path) {
  QKV_CHECK(exists(path, true), "cannot read ", excerpt(path), ": a Hugging Face model is a directory holding ",
            "config.json and model.safetensors (or its shards and model.safetensors.index.json)");
  const std::string dir = slash(path);
  QKV_CHECK(exists(dir + "config.json", false), excerpt(path), " has no config.json");
  HfFolder w;
  w.dir = path;
  const std::string where = excerpt(dir + "config.json");
  const nlohmann::json config = parse_json(read_file(dir + "config.json"), where);
  QKV_CHECK(config.is_object(), where, " is not a JSON object");
  const std::string type = config.contains("model_type") && config["model_type"].is_string()
                               ? config["model_type"].get<std::string>() : "";
  const ModelFamily* family = family_of_model_type(type);
  QKV_CHECK(family != nullptr && family->read_config != nullptr && !family->book_config, where, ": \"model_type\" is ",
            !config.contains("model_type") ? std::string("missing")
                                           : config["model_type"].is_string() ? excerpt(type) : excerpt(config["model_type"].dump()),
            "; qkv reads ", folder_types(), " folders here (GPT-2's \"gpt2\" loads as the book's GPT model)");
  w.spec = family->read_config(config, where);
  // The files: model.safetensors when there is one (as Hugging Face's from_pretrained reads it, even
  // beside an index), else the shards the index names (each once, in order of first mention).
  std::map<std::string, std::string> index;  // tensor -> shard, from the index
  std::vector<std::string> shards;
  const std::string index_path = dir + "model.safetensors.index.json";
  if (exists(dir + "model.safetensors", false)) {
    shards.push_back("model.safetensors");
  } else {
    QKV_CHECK(exists(index_path, false), excerpt(path), " has neither model.safetensors nor ",
              "model.safetensors.index.json (with its shards)");
    const nlohmann::json j = parse_json(read_file(index_path), excerpt(index_path));
    QKV_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), excerpt(index_path),
              " has no \"weight_map\" object (tensor name -> shard file)");
    std::set<std::string> seen;
    for (const auto& [name, file] : j["weight_map"].items()) {
      QKV_CHECK(file.is_string(), excerpt(index_path), ": the shard of ", excerpt(name), " is ",
                json_excerpt(file), "; expected a file name");
      const std::string shard = file.get<std::string>();
      QKV_CHECK(!shard.empty() && shard.find('/') == std::string::npos, excerpt(index_path), ": the shard of ",
                excerpt(name), " is ", excerpt(shard), "; expected a file name in the same directory");
      index[name] = shard;
      if (seen.insert(shard).second) shards.push_back(shard);
    }
    QKV_CHECK(!shards.empty(), excerpt(index_path), " names no shards");
    // Every shard is there before any is opened.
    size_t missing = 0;
    std::string first;
    for (const std::string& shard : shards)
      if (!exists(dir + shard, false) && missing++ == 0) first = shard;
    QKV_CHECK(missing == 0, excerpt(index_path), " names the shard ", excerpt(first), ", which is missing from ",
              excerpt(path), missing > 1 ? str(" (", missing, " of its ", shards.size(), " shards are)") : "");
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = dir + shards[i];
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
  // config.json against the files before the model is built: a config of 100,000 layers over a
  // file of 2 is refused here, not after allocating the layers, so what is allocated is at most
  // twice what the files hold. Within that (a tensor or a layer missing), the model is built and
  // check_folder names what is missing, extra or of another shape.
  int64_t held = 0;
  const std::string tied = family->names.head + "weight";
  for (const auto& [name, i] : w.file_of)
    if (!skipped(name, *family) && !(w.spec.tied_head && name == tied))
      held = checked_add(held, checked_product(w.files[i]->shape(name), "the files' parameters"),
                         "the files' parameters");
  const int64_t wanted = decoder_parameters(w.spec, "config.json's parameters");
  QKV_CHECK(wanted / 2 <= held, where, " describes a ", family->name, " model of ", wanted, " parameters (",
            w.spec.layers, " layers, width ", w.spec.width, ", vocabulary ", w.spec.vocab_size, ") but the weights in ",
            excerpt(path), " hold only ", held, " (", w.file_of.size(),
            " tensors), not half of it: config.json does not describe these weights");
  if (!w.file_of.empty()) w.stored_dtype = w.files[w.file_of.begin()->second]->stored_dtype(w.file_of.begin()->first);
  return w;
}

namespace {
// Every tensor against the model - names, shapes, dtypes, nothing left over - before anything is
// loaded into it. Returns the model's entries.
std::vector<StateEntry> check_folder(LanguageModel& model, const HfFolder& w) {
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
    QKV_CHECK(wanted.count(name) || skipped(name, model.family()) ||
                  (name == model.family().names.head + "weight" && model.spec().tied_head),
              "the tensor ", excerpt(name), " in ", excerpt(w.files[i]->path()), " is not of config.json's ",
              model.family().name, " model");
  return entries;
}
}  // namespace

std::unique_ptr<LanguageModel> hf_model_from(const HfFolder& w, Dtype dtype, AttentionPath path, Generator& gen,
                                             bool bf16_only, bool draw, const QuantType* quantize) {
  DecoderSpec spec = w.spec;
  spec.attention.dtype = dtype;
  spec.path = path;
  QKV_CHECK(!(draw && bf16_only), "weights in bf16 only are never drawn");
  QKV_CHECK(quantize == nullptr || bf16_only, "quantized weights are loaded for generation (bf16 only)");
  std::unique_ptr<DecoderModel> model =
      draw ? std::make_unique<DecoderModel>(spec, gen) : build_model_to_load(spec, gen);  // to load: nothing drawn
  const std::vector<StateEntry> entries = check_folder(*model, w);
  auto file = [&](const std::string& name) -> const MappedSafetensors& { return *w.files[w.file_of.at(name)]; };
  if (bf16_only) {
    QKV_CHECK(dtype == Dtype::kBF16, "weights in bf16 only need bf16 products");
    std::function<std::optional<QuantMatrix>(const std::string&)> readq;
    if (quantize != nullptr)
      readq = [&](const std::string& name) -> std::optional<QuantMatrix> {
        const Shape shape = file(name).shape(name);
        if (shape.size() != 2) return std::nullopt;
        const QuantType& t = fitting_quant_type(*quantize, shape[1]);  // as qkv convert --to gguf writes it
        if (std::string(t.name) == "F16") return std::nullopt;          // rows not whole blocks of 32: bf16
        // The file's values as stored (an F32 folder's floats, not rounded to bf16 first), a piece
        // of rows at a time: never the whole matrix in floats.
        const int64_t cols = shape[1], piece = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, cols));
        std::vector<float> rows(static_cast<size_t>(std::min(piece, shape[0]) * cols));
        int64_t held = -1;  // the first row in `rows`
        return quantize_matrix(t, shape[0], cols, [&](int64_t r, float* out) {
          if (held < 0 || r < held || r >= held + piece) {
            held = r;
            file(name).read_range_into(name, r * cols, std::min(piece, shape[0] - r) * cols, rows.data());
          }
          std::copy_n(rows.data() + (r - held) * cols, cols, out);
        }, "tensor " + excerpt(name));
      };
    model->load_bf16_only(
        [&](const std::string& name, uint16_t* out) { file(name).read_bf16_into(name, out); },
        [&](const std::string& name, float* out) { file(name).read_into(name, out); }, readq);
  } else {
    // Straight into the model's own tensors, one at a time: no second copy of the model.
    for (const StateEntry& e : entries) file(e.name).read_into(e.name, e.tensor->data());
  }
  model->eval();
  return model;
}

std::vector<OutputFile> hf_folder_files(LanguageModel& model, const std::string& dir, const std::string& tokenizer_file,
                                        bool bf16) {
  NamedTensors tensors;
  std::set<std::string> as_bf16;
  for (const StateEntry& e : model.state_dict()) {
    tensors.push_back({e.name, e.value()});
    if (bf16) as_bf16.insert(e.name);
  }
  nlohmann::json config = model.family().write_config(model.spec());
  config["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  const std::string d = slash(dir);
  std::vector<OutputFile> files = {
      {d + "model.safetensors", serialize_safetensors(tensors, {{"format", "pt"}}, as_bf16), "--checkpoint"},
      {d + "config.json", config.dump(2) + "\n", "--checkpoint"}};
  if (!tokenizer_file.empty()) files.push_back({d + "tokenizer.json", read_file(tokenizer_file), "--checkpoint"});
  return files;
}

void save_hf_folder(LanguageModel& model, const std::string& dir, bool bf16) {
  QKV_CHECK(exists(dir, true), "cannot write the model into ", excerpt(dir), ": it is not a directory");
  for (const OutputFile& f : hf_folder_files(model, dir, "", bf16)) write_file_atomically(f.path, f.bytes);
}

}  // namespace qkv
