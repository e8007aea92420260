// A model as llama.cpp's GGUF file. See include/qkv/models/gguf_model.h.
#include <cstring>
#include <map>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/core/read_file.h"
#include "qkv/kernels/rope.h"
#include "qkv/models/gguf_model.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/vocab_files.h"

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

}  // namespace

void check_gguf_writable(const ModelFamily& family) {
  QKV_CHECK(has_gguf(family), "qkv writes GGUF files of ", family_titles(has_gguf), " models, not of ", family.title,
            " models");
}

std::string gguf_model_bytes(LanguageModel& model, const json* tokenizer, const std::string& type_name,
                             std::vector<std::string>& notes) {
  const ModelFamily& family = model.family();
  check_gguf_writable(family);
  const QuantType& type = quant_type_named(type_name);
  bool writable = false;
  for (const std::string& w : writable_quant_types()) writable |= w == type.name;
  QKV_CHECK(writable, "qkv writes GGUF tensors as F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K, not ", type.name);
  const DecoderSpec& s = model.spec();
  const kernels::AttentionSpec& a = s.attention;
  const std::string arch = family.gguf_architectures.front();
  const bool llama = arch == "llama", qwen35 = arch == "qwen35";
  if (qwen35) {
    QKV_CHECK(s.attention_gate, "llama.cpp's qwen35 gates every full-attention layer's output; this ", family.title,
              " model has attn_output_gate false");
    QKV_CHECK(s.linear_layers() == 0 || s.linear.key_dim == s.linear.value_dim, "llama.cpp's qwen35 reads linear ",
              "layers whose key and value heads are of one width (ssm.state_size); this model's are ",
              s.linear.key_dim, " (linear_key_head_dim) and ", s.linear.value_dim, " (linear_value_head_dim)");
  }

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
      {arch + ".attention.head_count", gguf_u32(static_cast<uint64_t>(a.heads))}};
  if (arch == "gpt2") {  // LayerNorm, learned positions: no rotary keys
    meta.push_back({arch + ".attention.layer_norm_epsilon", gguf_f32(s.norm_eps)});
  } else {
    meta.push_back({arch + ".attention.head_count_kv", gguf_u32(static_cast<uint64_t>(a.groups()))});
    meta.push_back({arch + ".attention.key_length", gguf_u32(static_cast<uint64_t>(a.head_dim))});
    meta.push_back({arch + ".attention.value_length", gguf_u32(static_cast<uint64_t>(a.head_dim))});
    meta.push_back({arch + ".rope.freq_base", gguf_f32(a.rope_base)});
    meta.push_back({arch + ".attention.layer_norm_rms_epsilon", gguf_f32(s.norm_eps)});
  }
  if (llama) {  // as llama.cpp's converter writes them for this architecture
    meta.push_back({arch + ".vocab_size", gguf_u32(static_cast<uint64_t>(s.vocab_size))});
    meta.push_back({arch + ".rope.dimension_count", gguf_u32(static_cast<uint64_t>(a.head_dim))});
  }
  if (qwen35) {  // partial RoPE, the linear layers
    const LinearAttentionSizes& l = s.linear;
    meta.push_back({arch + ".rope.dimension_count", gguf_u32(static_cast<uint64_t>(a.rotary_dim()))});
    // llama.cpp's multimodal RoPE sections: the rotated pairs shared between the time, height and
    // width positions, interleaved (a text token's three positions are one: plain RoPE); as Qwen3.5's
    // mrope_section (11, 11, 10 of 32 pairs), none left to a fourth
    const int64_t pairs = a.rotary_dim() / 2, t = (pairs + 2) / 3, h = (pairs - t + 1) / 2;
    meta.push_back({arch + ".rope.dimension_sections", gguf_i32s({t, h, pairs - t - h, 0})});
    meta.push_back({arch + ".full_attention_interval", gguf_u32(static_cast<uint64_t>(full_attention_interval(s)))});
    meta.push_back({arch + ".ssm.conv_kernel", gguf_u32(static_cast<uint64_t>(l.conv_kernel))});
    meta.push_back({arch + ".ssm.state_size", gguf_u32(static_cast<uint64_t>(l.key_dim))});
    meta.push_back({arch + ".ssm.group_count", gguf_u32(static_cast<uint64_t>(l.key_heads))});
    meta.push_back({arch + ".ssm.time_step_rank", gguf_u32(static_cast<uint64_t>(l.value_heads))});
    meta.push_back({arch + ".ssm.inner_size", gguf_u32(static_cast<uint64_t>(l.value_heads * l.value_dim))});
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
  // Each GGUF tensor and the state tensors it holds (gpt2's attn_qkv: Q, K and V's rows in turn).
  std::vector<std::pair<GgufPlace, std::vector<const Tensor*>>> parts;
  std::map<std::string, size_t> index;
  for (const StateEntry& e : model.state_dict()) {
    if (e.tensor == nullptr) continue;  // the book's mask buffers
    const GgufPlace place = gguf_place(family, arch, s, e.name);
    QKV_CHECK(!place.name.empty(), "qkv has no GGUF name for the ", family.name, " model's ", excerpt(e.name));
    if (!index.count(place.name)) {
      index[place.name] = parts.size();
      parts.push_back({place, {}});
    }
    parts[index[place.name]].second.push_back(e.tensor);
  }
  // llama.cpp's gpt2 reads a bias for Q, K and V: zeros for a model without one (the book's default).
  std::vector<float> zeros;
  if (arch == "gpt2" && !s.qkv_bias) {
    const int64_t rows = (a.heads + 2 * a.groups()) * a.head_dim;
    zeros.assign(static_cast<size_t>(rows), 0.0f);
    notes.push_back("the model has no bias on Q, K and V: the file holds zeros there (llama.cpp reads one)");
    for (int64_t i = 0; i < s.layers; ++i)
      tensors.push_back({str("blk.", i, ".attn_qkv.bias"), {rows}, &quant_type_named("F32"), [&zeros](uint8_t* out) {
                           std::memcpy(out, zeros.data(), zeros.size() * sizeof(float));
                         }});
  }
  for (const auto& part : parts) {
    const GgufPlace& place = part.first;  // named, not bound: a lambda below copies both
    const std::vector<const Tensor*>& held = part.second;
    const std::string& name = place.name;
    Shape shape = place.shape.empty() ? held.front()->shape() : place.shape;
    for (size_t i = 1; i < held.size(); ++i) shape[0] += held[i]->size(0);
    const QuantType& t = shape.size() == 1 || place.f32 ? quant_type_named("F32") : fitting_quant_type(type, shape.back());
    if (&t != &type && !place.f32 && shape.size() != 1) fallbacks[t.name].push_back(name);
    tensors.push_back({name, shape, &t, [held, place, &t, shape](uint8_t* out) {
                         for (const Tensor* tensor : held) {  // rows whole blocks: quantized part by part
                           const float* w = tensor->data();
                           std::vector<float> mine;
                           if (!place.order.same() || place.values != GgufValues::kSame) {
                             mine.assign(w, w + tensor->numel());
                             const int64_t cols = shape.size() == 1 ? 1 : shape.back();
                             gguf_reorder(place.order, mine.data(), tensor->numel() / cols, cols, sizeof(float), false);
                             gguf_map_values(place.values, mine.data(), tensor->numel(), false, place.name);
                             w = mine.data();
                           }
                           quantize(t, w, tensor->numel(), out, "tensor " + excerpt(place.name));
                           out += quant_bytes(t, tensor->numel(), "a GGUF tensor");
                         }
                       }});
  }
  for (const auto& [name, which] : fallbacks)
    notes.push_back(str(which.size(), which.size() == 1 ? " tensor is " : " tensors are ", name, " (", which.front(),
                        which.size() > 1 ? ", ..." : "", "): their rows are not whole ", type.name, " blocks of ",
                        type.block));
  return serialize_gguf(meta, tensors);
}

namespace {

// GPT-2's vocabulary (encoder.json, vocab.bpe: text/vocab_files.h) as a tokenizer.json: the same
// tokens, merges and split (ByteLevel's own), <|endoftext|> its special token.
json gpt2_tokenizer_json() {
  const std::string dir = find_gpt2_vocab(gpt2_vocab_places());
  json vocab = parse_json(read_file(dir + "/encoder.json"), excerpt(dir + "/encoder.json"));
  const std::string bpe = read_file(dir + "/vocab.bpe");
  json merges = json::array();
  size_t at = bpe.find('\n');  // the first line is "#version: ..."
  while (at != std::string::npos && at + 1 < bpe.size()) {
    const size_t end = bpe.find('\n', at + 1);
    const std::string line = bpe.substr(at + 1, (end == std::string::npos ? bpe.size() : end) - at - 1);
    if (!line.empty()) merges.push_back(line);
    at = end;
  }
  return {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}}},
          {"added_tokens", json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}})},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
}

}  // namespace

json tokenizer_json_file(const std::string& path) {
  const HfTokenizer::File f = HfTokenizer::read(path);  // a file, a folder holding one, or an installed name
  (void)HfTokenizer::parse(f.text, f.file);  // the loader's checks: a tokenizer qkv refuses to read is not written
  return parse_json(f.text, excerpt(f.file));
}

std::optional<json> model_tokenizer_json(const LoadedModel& m, const std::string& source) {
  if (!m.tokenizer_file.empty() && m.tokenizer_file.ends_with("tokenizer.json"))
    return parse_json(read_file(m.tokenizer_file), excerpt(m.tokenizer_file));
  if (m.tokenizer != nullptr && m.model->family().vocabulary == "gpt2" && !is_gguf_file(source) &&
      m.tokenizer->vocab_size() == 50257)
    return gpt2_tokenizer_json();
  if (is_gguf_file(source)) {
    const GgufFile f(source);
    if (f.has("tokenizer.ggml.model")) return gguf_tokenizer_json(f);
  }
  return std::nullopt;
}

}  // namespace qkv
