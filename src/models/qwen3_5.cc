// The Qwen3.5 family: config.json, the preset, its registry entry. See include/qkv/models/qwen3_5.h;
// its files are Hugging Face's (hf_folder.cc, read as llama.cc reads its families').
#include "qkv/models/qwen3_5.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/models/family.h"
#include "models/families.h"

namespace qkv {

using json = nlohmann::json;
using models_detail::boolean;
using models_detail::integer;
using models_detail::kConfigKeys;
using models_detail::number;
using models_detail::text;

namespace {

constexpr int64_t kMaxLayers = int64_t{1} << 20;

// A count or a list of layer types ("full_attention" / "linear_attention"), one per layer; without
// one, Hugging Face's default: every full_attention_interval-th layer attends, the others are linear.
std::vector<LayerKind> layer_kinds(const json& t, int64_t layers, const std::string& where) {
  std::vector<LayerKind> kinds;
  if (t.contains("layer_types") && !t["layer_types"].is_null()) {
    const json& types = t["layer_types"];
    QKV_CHECK(types.is_array(), where, ": \"layer_types\" is ", json_excerpt(types), "; expected a list of strings");
    for (size_t i = 0; i < types.size(); ++i) {
      const json& k = types[i];
      QKV_CHECK(k == "full_attention" || k == "linear_attention", where, ": \"layer_types\"[", i, "] is ",
                json_excerpt(k), "; expected \"full_attention\" or \"linear_attention\"");
      kinds.push_back(k == "linear_attention" ? LayerKind::kLinear : LayerKind::kAttention);
    }
    return kinds;  // (one per layer: validate_decoder_spec)
  }
  const int64_t every = t.contains("full_attention_interval") ? integer(t, "full_attention_interval", where) : 4;
  QKV_CHECK(every >= 1, where, ": \"full_attention_interval\" (", every, ") must be at least 1");
  for (int64_t i = 0; i < layers && i < kMaxLayers; ++i)
    kinds.push_back((i + 1) % every != 0 ? LayerKind::kLinear : LayerKind::kAttention);
  return kinds;
}

// rope_parameters (or the older top-level keys): the base, and the rotated dims R = D * factor.
void read_rope(const json& t, const std::string& where, kernels::AttentionSpec& a) {
  double factor = 0.25;
  a.rope_base = 10000.0;
  const char* key = t.contains("rope_parameters") && !t["rope_parameters"].is_null() ? "rope_parameters"
                    : t.contains("rope_scaling") && !t["rope_scaling"].is_null() ? "rope_scaling"
                                                                                 : nullptr;
  const json& r = key ? t[key] : t;
  const std::string at = key ? where + " " + key : where;
  if (key) QKV_CHECK(r.is_object(), where, ": \"", key, "\" is ", json_excerpt(r), "; expected an object or null");
  if (key) {
    const std::string type = text(r, "rope_type", at);
    // (mrope_section / mrope_interleaved: a text token's three positions are one, plain RoPE)
    QKV_CHECK(type.empty() || type == "default", at, ": \"rope_type\" is ", excerpt(type),
              "; Qwen3.5's text model uses \"default\"");
  }
  if (r.contains("rope_theta")) a.rope_base = number(r, "rope_theta", at);
  if (r.contains("partial_rotary_factor")) factor = number(r, "partial_rotary_factor", at);
  const double dims = std::floor(static_cast<double>(a.head_dim) * factor);
  QKV_CHECK(factor > 0.0 && factor <= 1.0 && dims >= 2 && std::fmod(dims, 2.0) == 0.0, at,
            ": \"partial_rotary_factor\" (", factor, ") rotates ", dims, " of head_dim ", a.head_dim,
            "; expected a factor in (0, 1] leaving an even number of at least 2");
  a.rope_dim = static_cast<int64_t>(dims) == a.head_dim ? 0 : static_cast<int64_t>(dims);
}

std::string describe_qwen3_5(const DecoderSpec& s) {
  const kernels::AttentionSpec& a = s.attention;
  const LinearAttentionSizes& l = s.linear;
  return str("Qwen3.5 model: ", s.layers, " layers (", s.linear_layers(), " Gated DeltaNet of ",
             l.value_heads, " value heads (", l.key_heads, " key) of ", l.key_dim, " / ", l.value_dim, ", ",
             s.layers - s.linear_layers(), " gated attention of ", a.heads, " heads (", a.groups(), " key/value) of ",
             a.head_dim, ", RoPE on ", a.rotary_dim(), "), hidden ", s.width, ", intermediate ", s.ff_width,
             ", vocab ", s.vocab_size, ", context ", s.context_length, s.tied_head ? ", head tied to the embedding" : "");
}

ModelFamily family_entry() {
  ModelFamily f;
  f.name = "qwen3_5";
  f.title = "Qwen3.5";
  f.model_types = {"qwen3_5"};
  f.gguf_architectures = {"qwen35"};
  f.other_tensors = {"model.visual.", "mtp."};
  f.names = {.embed = "model.language_model.embed_tokens.", .positions = "", .blocks = "model.language_model.layers.",
             .norm1 = "input_layernorm.", .attention = "self_attn.", .norm2 = "post_attention_layernorm.", .ff = "mlp.",
             .q = "q_proj.", .k = "k_proj.", .v = "v_proj.", .o = "o_proj.", .q_norm = "q_norm.", .k_norm = "k_norm.",
             .linear = "linear_attn.", .final_norm = "model.language_model.norm.", .head = "lm_head.", .mask = false,
             .norms_last = true};
  f.words = {.projection_note = "", .attention = "self_attn(h)", .layer = "layer", .show_weights = false};
  f.keys = kConfigKeys;
  f.read_config = read_qwen3_5_config;
  f.write_config = qwen3_5_config_json;
  f.describe = describe_qwen3_5;
  f.presets = {"qwen3.5-0.8b"};
  f.preset = qwen3_5_preset;
  f.load = models_detail::load_hf_folder;
  f.checkpoint = models_detail::hf_folder_checkpoint;
  f.checkpoint_kind = "Hugging Face's folder, F32; qkv generate --weights and qkv chat read it";
  f.checkpoint_folder = true;
  f.vocabulary = "";  // (Qwen3.5's 248,320 tokens are not Qwen3's: no installed file serves them)
  f.tokenizer = models_detail::hf_tokenizer;
  f.end_tokens = {"<|im_end|>", "<|endoftext|>"};
  f.chat = ChatFormat::kQwen3;  // ChatML with Qwen3's think block
  return f;
}

}  // namespace

DecoderSpec read_qwen3_5_config(const json& j, const std::string& where) {
  QKV_CHECK(j.is_object(), where, " is not a JSON object");
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  QKV_CHECK(type == "qwen3_5", where, ": \"model_type\" is ",
            !j.contains("model_type") ? std::string("missing") : json_excerpt(j["model_type"]),
            "; Qwen3.5's is \"qwen3_5\"");
  QKV_CHECK(j.contains("text_config") && j["text_config"].is_object(), where, ": \"text_config\" is ",
            j.contains("text_config") ? json_excerpt(j["text_config"]) : std::string("missing"),
            "; Qwen3.5's config.json holds its text model's keys there");
  const json& t = j["text_config"];
  const std::string w = where + " text_config";
  QKV_CHECK(!t.contains("num_experts") || t["num_experts"].is_null() || integer(t, "num_experts", w) == 0, w,
            ": \"num_experts\" is ", json_excerpt(t["num_experts"]), "; qkv reads Qwen3.5's dense models");
  DecoderSpec s;
  s.family = "qwen3_5";
  kernels::AttentionSpec& a = s.attention;
  s.vocab_size = integer(t, "vocab_size", w);
  s.width = integer(t, "hidden_size", w);
  s.ff_width = integer(t, "intermediate_size", w);
  s.layers = integer(t, "num_hidden_layers", w);
  a.heads = integer(t, "num_attention_heads", w);
  a.kv_heads = t.contains("num_key_value_heads") ? integer(t, "num_key_value_heads", w) : a.heads;
  a.head_dim = t.contains("head_dim") ? integer(t, "head_dim", w) : 256;
  s.norm = NormKind::kRMSNorm;
  s.norm_unit_offset = true;
  s.norm_eps = t.contains("rms_norm_eps") ? number(t, "rms_norm_eps", w) : 1e-6;
  s.context_length = integer(t, "max_position_embeddings", w);
  // tie_word_embeddings: the text model's, else the whole model's (the published files say it at the top)
  s.tied_head = t.contains("tie_word_embeddings") && !t["tie_word_embeddings"].is_null()
                    ? boolean(t, "tie_word_embeddings", false, w)
                    : boolean(j, "tie_word_embeddings", false, where);
  if (t.contains("hidden_act"))
    QKV_CHECK(t["hidden_act"] == "silu", w, ": \"hidden_act\" is ", json_excerpt(t["hidden_act"]),
              "; the SwiGLU feed-forward uses \"silu\"");
  QKV_CHECK(!boolean(t, "attention_bias", false, w), w, ": \"attention_bias\" is true; Qwen3.5's projections have no bias");
  s.attention_gate = boolean(t, "attn_output_gate", true, w);
  a.rope = kernels::RopeLayout::kHalf;
  read_rope(t, w, a);
  a.qk_norm = true;
  a.qk_norm_eps = s.norm_eps;
  // (a kind per layer is kept: a count past any model's is refused by name, not by the list's length)
  QKV_CHECK(s.layers <= kMaxLayers, w, ": \"num_hidden_layers\" (", s.layers, ") is more than the ", kMaxLayers,
            " layers qkv reads");
  s.layer_kinds = layer_kinds(t, s.layers, w);
  if (s.linear_layers() > 0 || !t.contains("layer_types")) {
    LinearAttentionSizes& l = s.linear;
    l.value_heads = integer(t, "linear_num_value_heads", w);
    l.key_heads = integer(t, "linear_num_key_heads", w);
    l.key_dim = integer(t, "linear_key_head_dim", w);
    l.value_dim = integer(t, "linear_value_head_dim", w);
    l.conv_kernel = integer(t, "linear_conv_kernel_dim", w);
  }
  s.ff = FeedForwardKind::kSwiGLU;
  s.learned_positions = false;
  s.qkv_bias = s.out_bias = s.head_bias = false;
  s.shortcut_dropout = false;
  validate_decoder_spec(s, w, kConfigKeys);
  return s;
}

json qwen3_5_config_json(const DecoderSpec& s) {
  const kernels::AttentionSpec& a = s.attention;
  const LinearAttentionSizes& l = s.linear;
  json types = json::array();
  for (int64_t i = 0; i < s.layers; ++i) types.push_back(layer_kind_name(s.kind(i)));
  const json text = {{"model_type", "qwen3_5_text"},
                     {"vocab_size", s.vocab_size},
                     {"hidden_size", s.width},
                     {"intermediate_size", s.ff_width},
                     {"num_hidden_layers", s.layers},
                     {"num_attention_heads", a.heads},
                     {"num_key_value_heads", a.groups()},
                     {"head_dim", a.head_dim},
                     {"rms_norm_eps", s.norm_eps},
                     {"max_position_embeddings", s.context_length},
                     {"hidden_act", "silu"},
                     {"attention_bias", false},
                     {"attn_output_gate", s.attention_gate},
                     {"rope_parameters",
                      {{"rope_type", "default"},
                       {"rope_theta", a.rope_base},
                       {"partial_rotary_factor", static_cast<double>(a.rotary_dim()) / static_cast<double>(a.head_dim)}}},
                     {"layer_types", types},
                     {"linear_num_value_heads", l.value_heads},
                     {"linear_num_key_heads", l.key_heads},
                     {"linear_key_head_dim", l.key_dim},
                     {"linear_value_head_dim", l.value_dim},
                     {"linear_conv_kernel_dim", l.conv_kernel},
                     {"tie_word_embeddings", s.tied_head}};
  return {{"model_type", "qwen3_5"},
          {"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"tie_word_embeddings", s.tied_head},
          {"text_config", text}};
}

DecoderSpec qwen3_5_preset(const std::string& name) {
  QKV_CHECK(name == "qwen3.5-0.8b", "unknown Qwen3.5 preset ", excerpt(name), "; expected qwen3.5-0.8b");
  // Qwen/Qwen3.5-0.8B's text model (the book's QWEN3_5_CONFIG): three linear layers, then one full, x 6
  json types = json::array();
  for (int i = 0; i < 24; ++i) types.push_back((i + 1) % 4 != 0 ? "linear_attention" : "full_attention");
  const json text = {{"vocab_size", 248320},
                     {"hidden_size", 1024},
                     {"intermediate_size", 3584},
                     {"num_hidden_layers", 24},
                     {"num_attention_heads", 8},
                     {"num_key_value_heads", 2},
                     {"head_dim", 256},
                     {"rms_norm_eps", 1e-6},
                     {"max_position_embeddings", 262144},
                     {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}}},
                     {"layer_types", types},
                     {"linear_num_value_heads", 16},
                     {"linear_num_key_heads", 16},
                     {"linear_key_head_dim", 128},
                     {"linear_value_head_dim", 128},
                     {"linear_conv_kernel_dim", 4}};
  return read_qwen3_5_config({{"model_type", "qwen3_5"}, {"tie_word_embeddings", true}, {"text_config", text}}, name);
}

namespace models_detail {

const ModelFamily& qwen3_5_family() {
  static const ModelFamily f = family_entry();
  return f;
}

}  // namespace models_detail
}  // namespace qkv
