// A model as llama.cpp's GGUF file. See include/qkv/models/gguf_model.h.
#include <cstring>
#include <map>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/core/read_file.h"
#include "qkv/kernels/rope.h"
#include "qkv/models/gguf_model.h"

namespace qkv {

using json = nlohmann::json;

namespace {

// general.file_type: llama.cpp's llama_ftype of a file mostly of the type.
uint64_t file_type(const std::string& t) {
  if (t == "F32") return 0;
  if (t == "F16") return 1;
  if (t == "Q4_0") return 2;
  if (t == "Q8_0") return 7;
  if (t == "Q4_K") return 15;  // Q4_K_M's number: the nearest llama.cpp has for "mostly Q4_K"
  if (t == "Q6_K") return 18;
  return 32;                   // BF16
}

// llama.cpp's "llama" order of Q's and K's rows (the inverse of the reader's): GGUF row h D + 2 i
// + s is Hugging Face's row h D + s D/2 + i.
void permute_rows(const float* w, float* out, int64_t heads, int64_t rows_per_head, int64_t cols) {
  const int64_t half = rows_per_head / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(out + (h * rows_per_head + 2 * i + s) * cols, w + (h * rows_per_head + s * half + i) * cols,
                    static_cast<size_t>(cols) * sizeof(float));
}

}  // namespace

std::string gguf_model_bytes(LanguageModel& model, const json* tokenizer, const std::string& type_name,
                             std::vector<std::string>& notes) {
  const ModelFamily& family = model.family();
  QKV_CHECK(!family.gguf_architectures.empty(), "qkv writes GGUF files of Llama 3 and Qwen3 models, not of ",
            family.title, " models");
  const QuantType& type = quant_type_named(type_name);
  bool writable = false;
  for (const std::string& w : writable_quant_types()) writable |= w == type.name;
  QKV_CHECK(writable, "qkv writes GGUF tensors as F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K, not ", type.name);
  const DecoderSpec& s = model.spec();
  const kernels::AttentionSpec& a = s.attention;
  const std::string arch = family.gguf_architectures.front();
  const bool llama = arch == "llama";

  std::vector<GgufMetadata> meta = {
      {"general.architecture", gguf_string(arch)},
      {"general.type", gguf_string("model")},
      {"general.name", gguf_string(model.describe())},
      {"general.file_type", gguf_u32(file_type(type.name))},
      {"general.quantization_version", gguf_u32(2)},
      {arch + ".block_count", gguf_u32(static_cast<uint64_t>(s.layers))},
      {arch + ".context_length", gguf_u32(static_cast<uint64_t>(s.context_length))},
      {arch + ".embedding_length", gguf_u32(static_cast<uint64_t>(s.width))},
      {arch + ".feed_forward_length", gguf_u32(static_cast<uint64_t>(s.ff_width))},
      {arch + ".attention.head_count", gguf_u32(static_cast<uint64_t>(a.heads))},
      {arch + ".attention.head_count_kv", gguf_u32(static_cast<uint64_t>(a.groups()))},
      {arch + ".attention.key_length", gguf_u32(static_cast<uint64_t>(a.head_dim))},
      {arch + ".attention.value_length", gguf_u32(static_cast<uint64_t>(a.head_dim))},
      {arch + ".rope.freq_base", gguf_f32(a.rope_base)},
      {arch + ".attention.layer_norm_rms_epsilon", gguf_f32(s.norm_eps)}};
  if (llama) {  // as llama.cpp's converter writes them for this architecture
    meta.push_back({arch + ".vocab_size", gguf_u32(static_cast<uint64_t>(s.vocab_size))});
    meta.push_back({arch + ".rope.dimension_count", gguf_u32(static_cast<uint64_t>(a.head_dim))});
  }
  if (tokenizer != nullptr)
    for (GgufMetadata& m : gguf_tokenizer_metadata(*tokenizer, s.vocab_size, family)) meta.push_back(std::move(m));
  else
    notes.push_back("no tokenizer: the file holds no tokenizer.ggml.* (llama.cpp needs one to load it)");

  std::vector<GgufTensorSource> tensors;
  std::map<std::string, std::vector<std::string>> fallbacks;  // type -> the tensors written in it instead
  if (a.rope_scaling.on()) {  // Llama 3's scaling, as llama.cpp reads it: each frequency's divisor
    const int64_t half = a.head_dim / 2;
    tensors.push_back({"rope_freqs.weight", {half}, &quant_type_named("F32"), [&a, half](uint8_t* out) {
                         std::vector<float> f(static_cast<size_t>(half));
                         for (int64_t i = 0; i < half; ++i)
                           f[i] = static_cast<float>(kernels::rope_frequency(i, a.head_dim, a.rope_base) /
                                                     kernels::rope_frequency(i, a.head_dim, a.rope_base, a.rope_scaling));
                         std::memcpy(out, f.data(), f.size() * 4);
                       }});
  }
  for (const StateEntry& e : model.state_dict()) {
    const std::string name = gguf_tensor_name(family, e.name);
    QKV_CHECK(!name.empty(), "qkv has no GGUF name for the ", family.name, " model's ", excerpt(e.name));
    const Shape shape = e.shape();
    const QuantType& t = shape.size() == 1 ? quant_type_named("F32") : fitting_quant_type(type, shape.back());
    if (&t != &type && shape.size() != 1) fallbacks[t.name].push_back(name);
    const int64_t heads = gguf_reordered_heads(arch, name, a);
    const Tensor* tensor = e.tensor;
    tensors.push_back({name, shape, &t, [tensor, heads, &t, shape](uint8_t* out) {
                         const float* w = tensor->data();
                         std::vector<float> permuted;
                         if (heads > 0) {
                           permuted.resize(static_cast<size_t>(tensor->numel()));
                           permute_rows(w, permuted.data(), heads, shape[0] / heads, shape[1]);
                           w = permuted.data();
                         }
                         quantize(t, w, tensor->numel(), out);
                       }});
  }
  for (const auto& [name, which] : fallbacks)
    notes.push_back(str(which.size(), which.size() == 1 ? " tensor is " : " tensors are ", name, " (", which.front(),
                        which.size() > 1 ? ", ..." : "", "): their rows are not whole ", type.name, " blocks of ",
                        type.block));
  return serialize_gguf(meta, tensors);
}

std::optional<json> model_tokenizer_json(const LoadedModel& m, const std::string& source) {
  if (!m.tokenizer_file.empty() && m.tokenizer_file.ends_with("tokenizer.json"))
    return parse_json(read_file(m.tokenizer_file), excerpt(m.tokenizer_file));
  if (is_gguf_file(source)) {
    const GgufFile f(source);
    if (f.has("tokenizer.ggml.model")) return gguf_tokenizer_json(f);
  }
  return std::nullopt;
}

}  // namespace qkv
