// The registry of model families and the questions every command asks it. See
// include/qkv/models/family.h.
#include "qkv/models/family.h"

#include <sys/stat.h>

#include <fstream>


#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/read_file.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/gpt_weights.h"
#include "qkv/models/hf_folder.h"
#include "qkv/models/lm_checkpoint.h"
#include "models/families.h"

namespace qkv {
namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string list(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all = {&models_detail::attention_lm_family(),
                                                      &models_detail::gpt_family(), &models_detail::llama_family(),
                                                      &models_detail::qwen2_family(), &models_detail::qwen3_family(),
                                                      &models_detail::qwen3_5_family()};
  return all;
}

const ModelFamily& model_family(const std::string& name) {
  std::vector<std::string> names;
  for (const ModelFamily* f : model_families()) {
    if (f->name == name) return *f;
    names.push_back(f->name);
  }
  fail("unknown model family ", excerpt(name), "; qkv knows ", list(names));
}

std::string family_titles(bool (*has)(const ModelFamily&), const char* last) {
  std::vector<std::string> titles;
  for (const ModelFamily* f : model_families())
    if (has(*f)) titles.push_back(f->title);
  std::string s;
  for (size_t i = 0; i < titles.size(); ++i)
    s += (i == 0 ? "" : i + 1 == titles.size() ? str(" ", last, " ") : ", ") + titles[i];
  return s;
}

bool has_gguf(const ModelFamily& f) { return !f.gguf_architectures.empty(); }
bool has_chat(const ModelFamily& f) { return f.chat.has_value(); }
bool has_hf_folder(const ModelFamily& f) { return f.checkpoint_folder; }

const ModelFamily* family_of_model_type(const std::string& model_type) {
  for (const ModelFamily* f : model_families())
    for (const std::string& t : f->model_types)
      if (t == model_type) return f;
  return nullptr;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelFamily* f : model_families()) names.insert(names.end(), f->presets.begin(), f->presets.end());
  return names;
}

const ModelFamily& family_of_preset(const std::string& preset) {
  for (const ModelFamily* f : model_families())
    for (const std::string& p : f->presets)
      if (p == preset) return *f;
  fail("unknown preset ", excerpt(preset), "; expected one of: ", list(model_preset_names()));
}

namespace {

// A file's first (up to) 4 bytes for a message: "it is empty", "its first bytes are 0x7b 0x22 ...".
std::string first_bytes_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  const auto n = static_cast<size_t>(in.gcount());
  if (n == 0) return "it is empty";
  std::string text = n == 1 ? "its first byte is" : "its first bytes are";
  static const char* digits = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(head[i]);
    text += std::string(" 0x") + digits[b >> 4] + digits[b & 15];
  }
  return text;
}

}  // namespace

const ModelFamily& family_of_path(const std::string& path) {
  check_path(path);
  if (is_directory(path)) {  // config.json's model_type; GPT-2's folders say "gpt2", or nothing
    const std::optional<std::string> type = hf_model_type(path);
    if (!type) {  // GPT-2's folders may not say; anything else must
      const std::string dir = path.back() == '/' ? path : path + "/";
      struct stat st {};
      if (::stat((dir + "config.json").c_str(), &st) == 0 && ::stat((dir + "model.safetensors").c_str(), &st) == 0)
        QKV_CHECK(is_gpt_weights(MappedSafetensors(dir + "model.safetensors")), excerpt(dir + "config.json"),
                  " has no \"model_type\" and ", excerpt(dir + "model.safetensors"),
                  " is not GPT-2's weights (which is all a folder without one may hold); config.json must say ",
                  "\"model_type\": \"llama\", \"qwen2\", \"qwen3\" or \"gpt2\"");
      return models_detail::gpt_family();
    }
    const ModelFamily* f = family_of_model_type(*type);
    if (f == nullptr) {
      std::vector<std::string> types;
      for (const ModelFamily* g : model_families())
        for (const std::string& t : g->model_types) types.push_back("\"" + t + "\"");
      fail(excerpt((path.back() == '/' ? path : path + "/") + "config.json"), ": \"model_type\" is ", excerpt(*type),
           "; qkv reads ", list(types));
    }
    return *f;
  }
  if (is_gguf_file(path)) return family_of_gguf(GgufFile(path));  // the metadata only: tensors are mapped
  // A file named .gguf without GGUF's first bytes: said so (read as safetensors, its first bytes
  // made a header length of petabytes)
  const size_t n = path.size();
  if (n >= 5 && (path.compare(n - 5, 5, ".gguf") == 0 || path.compare(n - 5, 5, ".GGUF") == 0))
    fail(excerpt(path, 4096), " is named .gguf but does not begin with GGUF's magic bytes \"GGUF\" (",
         first_bytes_text(path), "); expected a GGUF file (llama.cpp's format): a damaged or unfinished download?");
  const MappedSafetensors header(path);  // the header only: the tensors are read when loaded
  if (is_lm_checkpoint(header.metadata())) return models_detail::attention_lm_family();
  if (is_gpt_weights(header)) return models_detail::gpt_family();
  // A Llama 3 / Qwen model.safetensors on its own: its sizes are in the config.json beside it.
  for (const ModelFamily* f : model_families())
    if (f->read_config != nullptr && !f->book_config && header.contains(f->names.embed + "weight"))
      fail(excerpt(path), " holds Hugging Face ", f->names.embed, "weight (Llama 3 or Qwen weights): give the ",
           "folder that holds it with its config.json (and tokenizer.json)");
  // Neither: the checkpoint reader says what is missing
  return models_detail::attention_lm_family();
}

std::vector<OutputFile> checkpoint_destinations(const ModelFamily& f, const std::string& path, const std::string& what) {
  if (!f.checkpoint_folder) return {{path, "", what}};
  std::vector<OutputFile> files;
  for (const char* file : {"/model.safetensors", "/config.json", "/tokenizer.json"}) files.push_back({path + file, "", what});
  return files;
}

void attach_tokenizer(LoadedModel& m, std::unique_ptr<Tokenizer> tokenizer, const std::string& source,
                      std::string file) {
  const LanguageModel& model = *m.model;
  QKV_CHECK(tokenizer->vocab_size() <= model.vocab_size(), source, " has ids up to ", tokenizer->vocab_size() - 1,
            " (its largest), past the model's vocabulary of ", model.vocab_size(), " (ids 0 .. ", model.vocab_size() - 1,
            ")");
  const ModelFamily& f = model.family();
  for (const std::string& end : f.end_tokens)
    if (const auto id = tokenizer->special_id(end); id && *id < model.vocab_size()) m.end_ids.push_back(*id);
  if (!m.end_ids.empty()) m.eos_id = m.end_ids.front();
  m.chat_format = f.chat;
  m.tokenizer = std::move(tokenizer);
  m.tokenizer_file = std::move(file);
}

LoadedModel make_model(const std::string& preset, uint64_t seed, const LoadOptions& options) {
  const ModelFamily& f = family_of_preset(preset);
  DecoderSpec spec = f.preset(preset);
  if (options.dtype) {
    spec.attention.dtype = *options.dtype;
    // generation runs in eval mode, where auto is the fused path (dropout is off)
    if (*options.dtype == Dtype::kBF16 && spec.path == AttentionPath::kAuto) spec.path = AttentionPath::kFused;
  }
  if (options.path) spec.path = *options.path;
  LoadedModel m;
  m.generator = std::make_unique<Generator>(seed);
  m.model = build_model(spec, *m.generator);  // torch.manual_seed(seed); Model(cfg)
  m.model->eval();
  if (spec.attention.dtype == Dtype::kBF16) m.model->keep_bf16_weights();  // decoding reads bf16
  m.description = str("untrained ", preset, " (seed ", seed, "): ", m.model->describe());
  if (f.vocabulary.empty()) {  // (Qwen3.5's: not installed) the model runs on ids; text needs its folder
    m.no_tokenizer = str(f.title, "'s vocabulary is not installed: an untrained ", preset,
                         " is for benchmarks (qkv bench --module gpt --preset ", preset, "); for text, load a ", f.title,
                         " folder with its tokenizer.json (--weights DIR)");
    return m;
  }
  std::string file;
  std::unique_ptr<Tokenizer> t = f.tokenizer(f.vocabulary, options, file);
  attach_tokenizer(m, std::move(t), f.vocabulary + "'s installed tokenizer", file);
  return m;
}

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  if (!options.quantize.empty()) (void)product_quant_type(options.quantize);  // a type first, whatever the model
  const ModelFamily& family = family_of_path(path);
  // (a head count is read only from the book's state dict in safetensors, which may not say it)
  QKV_CHECK(!options.num_heads || (family.book_config && !is_gguf_file(path)), "a head count (", *options.num_heads,
            ") was given for ", excerpt(path), ", whose ", is_gguf_file(path) ? "GGUF metadata" : family.name + " files",
            " give their own; it is for GPT weights in safetensors without a config.json");
  return family.load(path, options);
}

std::vector<int64_t> LoadedModel::encode(const std::string& text) const {
  QKV_CHECK(tokenizer != nullptr, description, " has no tokenizer to read text with: ", no_tokenizer);
  std::vector<int64_t> ids = tokenizer->prompt_prefix();
  const std::vector<int64_t> body = tokenizer->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::string LoadedModel::decode(const std::vector<int64_t>& ids) const {
  QKV_CHECK(tokenizer != nullptr, description, " has no tokenizer to write text with: ", no_tokenizer);
  return tokenizer->decode(ids);
}

const ModelFamily& LanguageModel::family() const { return model_family(spec().family); }

}  // namespace qkv
