// The Llama 3, Qwen2.5 and Qwen3 families: config.json, the presets, their registry entries. See
// include/qkv/models/llama.h; their files are hf_folder.cc's.
#include "qkv/models/llama.h"

#include <sys/stat.h>

#include <utility>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/models/family.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/hf_folder.h"
#include "qkv/text/vocab_files.h"
#include "models/families.h"

namespace qkv {

using json = nlohmann::json;

namespace models_detail {


int64_t integer(const json& j, const char* key, const std::string& where) {
  QKV_CHECK(j.contains(key), where, ": \"", key, "\" is missing");
  const bool fits = j[key].is_number_integer() && !(j[key].is_number_unsigned() && j[key].get<uint64_t>() > INT64_MAX);
  QKV_CHECK(fits, where, ": \"", key, "\" is ", json_excerpt(j[key]), "; expected an integer of at most 2^63-1");
  return j[key].get<int64_t>();
}

double number(const json& j, const char* key, const std::string& where) {
  QKV_CHECK(j.contains(key), where, ": \"", key, "\" is missing");
  QKV_CHECK(j[key].is_number(), where, ": \"", key, "\" is ", json_excerpt(j[key]), "; expected a number");
  return j[key].get<double>();
}

bool boolean(const json& j, const char* key, bool absent, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return absent;
  QKV_CHECK(j[key].is_boolean(), where, ": \"", key, "\" is ", json_excerpt(j[key]), "; expected true or false");
  return j[key].get<bool>();
}

std::string text(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return "";
  QKV_CHECK(j[key].is_string(), where, ": \"", key, "\" is ", json_excerpt(j[key]), "; expected a string");
  return j[key].get<std::string>();
}

// The spec's fields as config.json names them.
std::string config_key(DecoderField f) {
  switch (f) {
    case DecoderField::kVocabSize: return "\"vocab_size\"";
    case DecoderField::kContextLength: return "\"max_position_embeddings\"";
    case DecoderField::kWidth: return "\"hidden_size\"";
    case DecoderField::kLayers: return "\"num_hidden_layers\"";
    case DecoderField::kFfWidth: return "\"intermediate_size\"";
    case DecoderField::kNormEps: return "\"rms_norm_eps\"";
    case DecoderField::kLayerKinds: return "\"layer_types\"";
    case DecoderField::kLinearValueHeads: return "\"linear_num_value_heads\"";
    case DecoderField::kLinearKeyHeads: return "\"linear_num_key_heads\"";
    case DecoderField::kLinearKeyDim: return "\"linear_key_head_dim\"";
    case DecoderField::kLinearValueDim: return "\"linear_value_head_dim\"";
    case DecoderField::kLinearConvKernel: return "\"linear_conv_kernel_dim\"";
  }
  return "?";
}
std::string config_attention_key(kernels::SpecField f) {
  switch (f) {
    case kernels::SpecField::kHeads: return "\"num_attention_heads\"";
    case kernels::SpecField::kKvHeads: return "\"num_key_value_heads\"";
    case kernels::SpecField::kHeadDim: return "\"head_dim\"";
    case kernels::SpecField::kRopeBase: return "\"rope_theta\"";
    case kernels::SpecField::kRopeScaling: return "\"rope_scaling\"";
    case kernels::SpecField::kQkNorm: return "\"rms_norm_eps\"";
    default: return kernels::spec_field_name(f);
  }
}
extern const DecoderNames kConfigKeys{config_key, config_attention_key};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// tokenizer.json: a file or folder path, or an installed vocabulary's name (qwen3, llama3).
std::unique_ptr<Tokenizer> hf_tokenizer(const std::string& source, const LoadOptions&, std::string& file) {
  const std::optional<std::string> installed = find_hf_vocab(source);
  file = installed ? *installed : source;
  return std::make_unique<HfTextTokenizer>(HfTokenizer::load(source),
                                           installed ? source + "'s installed tokenizer.json" : excerpt(source));
}

// "quantized to Q4_K (2 of 16 matrices to Q8_0), integer products": hf_model_from's rule.
std::string quantized(const HfFolder& w, const QuantType& t) {
  std::map<std::string, int64_t> to;  // type -> matrices
  for (const auto& [name, i] : w.file_of) {
    const Shape& s = w.files[i]->shape(name);
    if (s.size() == 2) ++to[fitting_quant_type(t, s[1]).name];
  }
  std::string others;
  for (const auto& [type, n] : to)
    if (type != t.name) others += str(others.empty() ? " (" : ", ", n, " matrices ", type == "F16" ? "bf16" : "to " + type);
  return str("quantized to ", t.name, others, others.empty() ? "" : ")", ", integer products");
}

// Hugging Face's folder: products in the weights' precision unless asked (f32 when the float
// weights are wanted), a BF16 folder's weights kept in bf16 only for generation. Or a GGUF file.
LoadedModel load_hf_folder(const std::string& dir, const LoadOptions& options) {
  if (is_gguf_file(dir)) return load_gguf(dir, options);
  HfFolder w = read_hf_folder(dir);
  if (options.dropout) w.spec.attention.dropout = *options.dropout;
  const QuantType* quantize = options.quantize.empty() ? nullptr : &product_quant_type(options.quantize);
  QKV_CHECK(!quantize || (!options.float_weights && options.dtype.value_or(Dtype::kBF16) == Dtype::kBF16),
            "quantizing the weights (", options.quantize, ") is for generation: it does not go with f32 products or ",
            "the float weights");
  const Dtype dtype = options.dtype.value_or(
      (w.stored_dtype == "F32" && !quantize) || options.float_weights ? Dtype::kF32 : Dtype::kBF16);
  const bool bf16_only = dtype == Dtype::kBF16 && !options.float_weights;
  LoadedModel m;
  m.generator = std::make_unique<Generator>(options.seed.value_or(Generator::kDefaultSeed));
  m.model = hf_model_from(w, dtype, options.path.value_or(AttentionPath::kFused), *m.generator, bf16_only,
                          options.draw && !quantize, quantize);
  if (dtype == Dtype::kBF16 && !bf16_only) m.model->keep_bf16_weights();
  m.description = str(m.model->describe(), " from ", excerpt(dir), " (", w.stored_dtype, " weights, ",
                      quantize ? quantized(w, *quantize) : dtype_name(dtype) + std::string(" products"), ")");
  const std::string tokenizer = (dir.back() == '/' ? dir : dir + "/") + "tokenizer.json";
  m.no_tokenizer = str(excerpt(dir), " has no tokenizer.json");
  if (options.tokenizer && exists(tokenizer)) {
    std::string file;
    std::unique_ptr<Tokenizer> t = hf_tokenizer(tokenizer, options, file);
    attach_tokenizer(m, std::move(t), excerpt(tokenizer), file);
  }
  return m;
}

std::vector<OutputFile> hf_folder_checkpoint(LanguageModel& model, const std::string& dir, const std::string& tokenizer) {
  return hf_folder_files(model, dir, tokenizer);
}

}  // namespace models_detail

using models_detail::boolean;
using models_detail::integer;
using models_detail::kConfigKeys;
using models_detail::number;
using models_detail::text;

namespace {

// "Qwen3", "Qwen2", "Llama": the family's word for people (Qwen2's model_type is Qwen2.5's too).
const char* title_of(const std::string& family) {
  return family == "qwen3" ? "Qwen3" : family == "qwen2" ? "Qwen2" : "Llama";
}

std::string describe_llama(const DecoderSpec& s) {
  const kernels::AttentionSpec& a = s.attention;
  return str(title_of(s.family), " model: ", s.layers, " layers x ", a.heads, " heads (", a.groups(),
             " key/value) of ", a.head_dim, ", hidden ", s.width, ", intermediate ", s.ff_width, ", vocab ",
             s.vocab_size, ", context ", s.context_length, s.tied_head ? ", head tied to the embedding" : "");
}

ModelFamily family_entry(const char* name) {
  const std::string family = name;
  const bool qwen = family != "llama";  // Qwen2.5 and Qwen3: ChatML, Qwen's vocabulary
  ModelFamily f;
  f.name = name;
  f.title = family == "qwen3" ? "Qwen3" : family == "qwen2" ? "Qwen2.5" : "Llama 3";
  f.model_types = {name};
  f.gguf_architectures = {name};
  f.names = {.embed = "model.embed_tokens.", .positions = "", .blocks = "model.layers.",
             .norm1 = "input_layernorm.", .attention = "self_attn.", .norm2 = "post_attention_layernorm.", .ff = "mlp.",
             .q = "q_proj.", .k = "k_proj.", .v = "v_proj.", .o = "o_proj.", .q_norm = "q_norm.", .k_norm = "k_norm.", .linear = "",
             .final_norm = "model.norm.", .head = "lm_head.", .mask = false, .norms_last = false};
  f.words = {.projection_note = "", .attention = "self_attn(h)", .layer = "layer", .show_weights = false};
  f.keys = kConfigKeys;
  f.read_config = read_llama_config;
  f.write_config = llama_config_json;
  f.describe = describe_llama;
  const std::string prefix = family == "qwen3" ? "qwen3-" : family == "qwen2" ? "qwen2.5-" : "llama-";
  for (const std::string& p : llama_preset_names())
    if (p.starts_with(prefix)) f.presets.push_back(p);
  f.preset = llama_preset;
  f.load = models_detail::load_hf_folder;
  f.checkpoint = models_detail::hf_folder_checkpoint;
  f.checkpoint_kind = "Hugging Face's folder, F32; qkv generate --weights and qkv chat read it";
  f.checkpoint_folder = true;
  // Qwen2.5's tokenizer is Qwen3's but for Qwen3's last four added tokens (<tool_response>,
  // </tool_response>, <think>, </think>): the installed Qwen3 file serves its presets.
  f.vocabulary = qwen ? "qwen3" : "llama3";
  f.tokenizer = models_detail::hf_tokenizer;
  f.end_tokens = qwen ? std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}
                      : std::vector<std::string>{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
  f.chat = family == "qwen3" ? ChatFormat::kQwen3 : family == "qwen2" ? ChatFormat::kQwen2 : ChatFormat::kLlama3;
  return f;
}

// Newer config.json files list each layer's attention ("layer_types"); qkv runs full attention in
// every layer, so such a list must say so, once per layer.
void check_full_attention_layers(const json& j, int64_t layers, const std::string& where) {
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return;
  const json& types = j["layer_types"];
  QKV_CHECK(types.is_array(), where, ": \"layer_types\" is ", json_excerpt(types),
            "; expected a list of \"full_attention\", one per layer");
  QKV_CHECK(std::cmp_equal(types.size(), layers), where, ": \"layer_types\" has ", types.size(),
            " entries for \"num_hidden_layers\" ", layers, "; expected one per layer");
  for (size_t i = 0; i < types.size(); ++i)
    QKV_CHECK(types[i] == "full_attention", where, ": \"layer_types\"[", i, "] is ", json_excerpt(types[i]),
              "; qkv runs full attention in every layer (\"full_attention\")");
}

}  // namespace

DecoderSpec read_llama_config(const json& j, const std::string& where) {
  QKV_CHECK(j.is_object(), where, " is not a JSON object");
  DecoderSpec s;
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (type != "llama" && type != "qwen2" && type != "qwen3")
    fail(where, ": \"model_type\" is ",
         !j.contains("model_type") ? std::string("missing") : j["model_type"].is_string() ? excerpt(type) : excerpt(j["model_type"].dump()),
         "; qkv reads \"llama\" (Llama 3), \"qwen2\" (Qwen2.5) and \"qwen3\" here (GPT-2's \"gpt2\" loads as ",
         "the book's GPT model)");
  s.family = type;
  kernels::AttentionSpec& a = s.attention;
  s.vocab_size = integer(j, "vocab_size", where);
  s.width = integer(j, "hidden_size", where);
  s.ff_width = integer(j, "intermediate_size", where);
  s.layers = integer(j, "num_hidden_layers", where);
  a.heads = integer(j, "num_attention_heads", where);
  a.kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                   ? integer(j, "num_key_value_heads", where)
                   : a.heads;
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    a.head_dim = integer(j, "head_dim", where);
  } else {
    QKV_CHECK(a.heads > 0 && s.width % a.heads == 0, where, ": \"num_attention_heads\" (", a.heads,
              ") must divide \"hidden_size\" (", s.width, ") when there is no \"head_dim\"");
    a.head_dim = s.width / a.heads;
  }
  s.norm = NormKind::kRMSNorm;
  s.norm_eps = number(j, "rms_norm_eps", where);
  a.rope = kernels::RopeLayout::kHalf;
  a.rope_base = j.contains("rope_theta") ? number(j, "rope_theta", where) : 10000.0;
  s.context_length = integer(j, "max_position_embeddings", where);
  s.tied_head = boolean(j, "tie_word_embeddings", false, where);
  if (j.contains("hidden_act"))
    QKV_CHECK(j["hidden_act"] == "silu", where, ": \"hidden_act\" is ", excerpt(j["hidden_act"].dump()),
              "; the SwiGLU feed-forward uses \"silu\"");
  // Qwen2's q, k and v always have a bias (its config.json has no key for it); no other projection has.
  const bool qwen2 = type == "qwen2";
  if (type != "llama")
    QKV_CHECK(!boolean(j, "use_sliding_window", false, where), where, ": \"use_sliding_window\" is true; qkv ",
              "runs ", title_of(type), "'s full attention in every layer (the published models turn it off)");
  check_full_attention_layers(j, s.layers, where);
  if (qwen2) {
    QKV_CHECK(!boolean(j, "mlp_bias", false, where), where, ": \"mlp_bias\" is true; Qwen2's feed-forward has no bias");
  } else {
    for (const char* key : {"attention_bias", "mlp_bias"})
      QKV_CHECK(!boolean(j, key, false, where), where, ": \"", key,
                "\" is true; qkv's Llama and Qwen3 projections have no bias");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& r = j["rope_scaling"];
    QKV_CHECK(r.is_object(), where, ": \"rope_scaling\" is ", excerpt(r.dump()), "; expected an object or null");
    const std::string scaling = where + " rope_scaling";
    const std::string rope_type = r.contains("rope_type") ? text(r, "rope_type", scaling) : text(r, "type", scaling);
    QKV_CHECK(rope_type == "llama3" || rope_type == "default", where, ": \"rope_scaling\" has rope_type ",
              excerpt(rope_type), "; qkv reads Llama 3's (\"llama3\") or none (\"default\", or null)");
    if (rope_type == "llama3") {
      a.rope_scaling.factor = number(r, "factor", scaling);
      // A factor of 0 or less would read as no scaling at all (RopeScaling::on): refused, as 0.5 is.
      QKV_CHECK(a.rope_scaling.factor > 0.0, scaling, ": \"factor\" is ", a.rope_scaling.factor,
                "; Llama 3's scaling needs a factor of at least 1");
      a.rope_scaling.low_freq_factor = number(r, "low_freq_factor", scaling);
      a.rope_scaling.high_freq_factor = number(r, "high_freq_factor", scaling);
      a.rope_scaling.original_max_positions = integer(r, "original_max_position_embeddings", scaling);
    }
  }
  a.qk_norm = type == "qwen3";  // Qwen3's RMSNorm on each head's queries and keys
  a.qk_norm_eps = s.norm_eps;
  s.ff = FeedForwardKind::kSwiGLU;
  s.learned_positions = false;
  s.qkv_bias = qwen2;
  s.out_bias = s.head_bias = false;
  s.shortcut_dropout = false;
  validate_decoder_spec(s, where, kConfigKeys);
  return s;
}

json llama_config_json(const DecoderSpec& s) {
  const kernels::AttentionSpec& a = s.attention;
  json j = {{"model_type", s.family},
            {"architectures", {str(title_of(s.family), "ForCausalLM")}},
            {"vocab_size", s.vocab_size}, {"hidden_size", s.width},
            {"intermediate_size", s.ff_width}, {"num_hidden_layers", s.layers},
            {"num_attention_heads", a.heads}, {"num_key_value_heads", a.groups()},
            {"head_dim", a.head_dim}, {"rms_norm_eps", s.norm_eps}, {"rope_theta", a.rope_base},
            {"max_position_embeddings", s.context_length}, {"tie_word_embeddings", s.tied_head},
            {"hidden_act", "silu"}};
  if (s.family == "qwen2")
    j["use_sliding_window"] = false;
  else
    j["attention_bias"] = false;
  if (a.rope_scaling.on())
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", a.rope_scaling.factor},
                         {"low_freq_factor", a.rope_scaling.low_freq_factor},
                         {"high_freq_factor", a.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", a.rope_scaling.original_max_positions}};
  return j;
}

const std::vector<std::string>& llama_preset_names() {
  static const std::vector<std::string> names = {"llama-3.2-1b", "llama-3.2-3b", "qwen2.5-0.5b", "qwen3-0.6b",
                                                 "qwen3-1.7b"};
  return names;
}

DecoderSpec llama_preset(const std::string& name) {
  // Hugging Face's config.json of each (the fields this configuration reads).
  const json llama32 = {{"model_type", "llama"}, {"vocab_size", 128256}, {"intermediate_size", 8192},
                        {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}, {"max_position_embeddings", 131072},
                        {"tie_word_embeddings", true}, {"num_key_value_heads", 8}, {"hidden_act", "silu"},
                        {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}};
  const json qwen3 = {{"model_type", "qwen3"}, {"vocab_size", 151936}, {"rms_norm_eps", 1e-6},
                      {"rope_theta", 1000000.0}, {"max_position_embeddings", 40960}, {"tie_word_embeddings", true},
                      {"num_key_value_heads", 8}, {"head_dim", 128}, {"hidden_act", "silu"}, {"num_hidden_layers", 28},
                      {"num_attention_heads", 16}};
  const json qwen25 = {{"model_type", "qwen2"}, {"vocab_size", 151936}, {"rms_norm_eps", 1e-6},
                       {"rope_theta", 1000000.0}, {"max_position_embeddings", 32768}, {"hidden_act", "silu"},
                       {"use_sliding_window", false}};
  json j;
  if (name == "qwen2.5-0.5b") {
    j = qwen25;
    j.update({{"hidden_size", 896}, {"intermediate_size", 4864}, {"num_hidden_layers", 24},
              {"num_attention_heads", 14}, {"num_key_value_heads", 2}, {"tie_word_embeddings", true}});
  } else if (name == "llama-3.2-1b") {
    j = llama32;
    j.update({{"hidden_size", 2048}, {"num_hidden_layers", 16}, {"num_attention_heads", 32}, {"head_dim", 64}});
  } else if (name == "llama-3.2-3b") {
    j = llama32;
    j.update({{"hidden_size", 3072}, {"num_hidden_layers", 28}, {"num_attention_heads", 24}, {"head_dim", 128}});
  } else if (name == "qwen3-0.6b") {
    j = qwen3;
    j.update({{"hidden_size", 1024}, {"intermediate_size", 3072}});
  } else if (name == "qwen3-1.7b") {
    j = qwen3;
    j.update({{"hidden_size", 2048}, {"intermediate_size", 6144}});
  } else {
    std::string known;
    for (const std::string& n : llama_preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown Llama/Qwen preset ", excerpt(name), "; expected one of: ", known);
  }
  return read_llama_config(j, name);
}

namespace models_detail {

const ModelFamily& llama_family() {
  static const ModelFamily f = family_entry("llama");
  return f;
}

const ModelFamily& qwen2_family() {
  static const ModelFamily f = family_entry("qwen2");
  return f;
}

const ModelFamily& qwen3_family() {
  static const ModelFamily f = family_entry("qwen3");
  return f;
}

}  // namespace models_detail
}  // namespace qkv
