// The Llama 3 and Qwen3 configuration. See include/qkv/models/llama_config.h.
#include "qkv/models/llama_config.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

namespace qkv {

using json = nlohmann::json;

namespace {

int64_t integer(const json& j, const char* key, const std::string& where) {
  QKV_CHECK(j.contains(key), where, ": \"", key, "\" is missing");
  QKV_CHECK(j[key].is_number_integer(), where, ": \"", key, "\" is ", excerpt(j[key].dump()), "; expected an integer");
  return j[key].get<int64_t>();
}

double number(const json& j, const char* key, const std::string& where) {
  QKV_CHECK(j.contains(key), where, ": \"", key, "\" is missing");
  QKV_CHECK(j[key].is_number(), where, ": \"", key, "\" is ", excerpt(j[key].dump()), "; expected a number");
  return j[key].get<double>();
}

}  // namespace

const char* llama_family_name(LlamaFamily f) { return f == LlamaFamily::kQwen3 ? "qwen3" : "llama"; }

void validate_llama_config(const LlamaConfig& c, const std::string& where) {
  for (const auto& [key, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                               {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
                               {"num_attention_heads", c.num_attention_heads},
                               {"num_key_value_heads", c.num_key_value_heads}, {"head_dim", c.head_dim},
                               {"max_position_embeddings", c.max_position_embeddings}})
    QKV_CHECK(v > 0, where, ": \"", key, "\" is ", v, "; expected a positive integer");
  QKV_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, where, ": \"num_key_value_heads\" (",
            c.num_key_value_heads, ") must divide \"num_attention_heads\" (", c.num_attention_heads,
            "): each key/value head serves a whole group of query heads");
  QKV_CHECK(c.head_dim % 2 == 0, where, ": \"head_dim\" is ", c.head_dim,
            "; RoPE rotates pairs of elements, so it must be even");
  QKV_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0, where, ": \"rms_norm_eps\" is ", c.rms_norm_eps,
            "; expected a positive number");
  QKV_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0, where, ": \"rope_theta\" is ", c.rope_theta,
            "; expected a positive number");
  try {
    kernels::rope_frequency(0, c.head_dim, c.rope_theta, c.rope_scaling);  // checks the scaling's ranges
  } catch (const Error& e) {
    fail(where, ": \"rope_scaling\": ", e.what());
  }
}

LlamaConfig parse_llama_config(const json& j, const std::string& where) {
  QKV_CHECK(j.is_object(), where, " is not a JSON object");
  LlamaConfig c;
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (type == "llama") c.family = LlamaFamily::kLlama;
  else if (type == "qwen3") c.family = LlamaFamily::kQwen3;
  else
    fail(where, ": \"model_type\" is ",
         !j.contains("model_type") ? std::string("missing") : j["model_type"].is_string() ? excerpt(type) : excerpt(j["model_type"].dump()),
         "; qkv reads \"llama\" (Llama 3) and \"qwen3\" here (GPT-2's \"gpt2\" loads as the book's GPT model)");
  c.vocab_size = integer(j, "vocab_size", where);
  c.hidden_size = integer(j, "hidden_size", where);
  c.intermediate_size = integer(j, "intermediate_size", where);
  c.num_hidden_layers = integer(j, "num_hidden_layers", where);
  c.num_attention_heads = integer(j, "num_attention_heads", where);
  c.num_key_value_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                              ? integer(j, "num_key_value_heads", where)
                              : c.num_attention_heads;
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = integer(j, "head_dim", where);
  } else {
    QKV_CHECK(c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0, where,
              ": \"num_attention_heads\" (", c.num_attention_heads, ") must divide \"hidden_size\" (", c.hidden_size,
              ") when there is no \"head_dim\"");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.rms_norm_eps = number(j, "rms_norm_eps", where);
  c.rope_theta = j.contains("rope_theta") ? number(j, "rope_theta", where) : 10000.0;
  c.max_position_embeddings = integer(j, "max_position_embeddings", where);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  if (j.contains("hidden_act"))
    QKV_CHECK(j["hidden_act"] == "silu", where, ": \"hidden_act\" is ", excerpt(j["hidden_act"].dump()),
              "; the SwiGLU feed-forward uses \"silu\"");
  for (const char* key : {"attention_bias", "mlp_bias"})
    QKV_CHECK(!j.value(key, false), where, ": \"", key, "\" is true; qkv's Llama and Qwen3 projections have no bias");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& s = j["rope_scaling"];
    const std::string rope_type = s.value("rope_type", s.value("type", ""));
    QKV_CHECK(rope_type == "llama3", where, ": \"rope_scaling\" has rope_type ", excerpt(rope_type),
              "; qkv reads Llama 3's (\"llama3\") or none");
    const std::string scaling = where + " rope_scaling";
    c.rope_scaling.factor = number(s, "factor", scaling);
    c.rope_scaling.low_freq_factor = number(s, "low_freq_factor", scaling);
    c.rope_scaling.high_freq_factor = number(s, "high_freq_factor", scaling);
    c.rope_scaling.original_max_positions = integer(s, "original_max_position_embeddings", scaling);
  }
  validate_llama_config(c, where);
  return c;
}

json llama_config_json(const LlamaConfig& c) {
  json j = {{"model_type", llama_family_name(c.family)},
            {"architectures", {c.family == LlamaFamily::kQwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
            {"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads}, {"num_key_value_heads", c.num_key_value_heads},
            {"head_dim", c.head_dim}, {"rms_norm_eps", c.rms_norm_eps}, {"rope_theta", c.rope_theta},
            {"max_position_embeddings", c.max_position_embeddings}, {"tie_word_embeddings", c.tie_word_embeddings},
            {"hidden_act", "silu"}, {"attention_bias", false}};
  if (c.rope_scaling.on())
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_positions}};
  return j;
}

const std::vector<std::string>& llama_preset_names() {
  static const std::vector<std::string> names = {"llama-3.2-1b", "llama-3.2-3b", "qwen3-0.6b", "qwen3-1.7b"};
  return names;
}

LlamaConfig llama_preset(const std::string& name) {
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
  json j;
  if (name == "llama-3.2-1b") {
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
    fail("unknown Llama/Qwen3 preset ", excerpt(name), "; expected one of: ", known);
  }
  return parse_llama_config(j, name);
}

}  // namespace qkv
