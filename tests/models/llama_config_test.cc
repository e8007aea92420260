// The Llama 3 / Qwen3 configuration (qkv/models/llama_config.h): config.json as Hugging Face
// publishes it, the presets' published sizes, and every field out of range refused by name.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/models/llama_config.h"

namespace qkv {
namespace {

using json = nlohmann::json;

// meta-llama/Llama-3.2-1B's config.json as published (keys qkv does not read included).
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

std::string error_of(const json& j) {
  try {
    parse_llama_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LlamaConfig, ReadsLlama32sPublishedConfig) {
  const LlamaConfig c = parse_llama_config(json::parse(kLlama32_1B));
  EXPECT_EQ(c.family, LlamaFamily::kLlama);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qk_norm());
}

TEST(LlamaConfig, PresetsAreThePublishedSizes) {
  const LlamaConfig a = llama_preset("llama-3.2-1b");
  EXPECT_EQ(a.hidden_size, 2048);
  EXPECT_EQ(a.num_hidden_layers, 16);
  const LlamaConfig b = llama_preset("llama-3.2-3b");
  EXPECT_EQ(b.hidden_size, 3072);
  EXPECT_EQ(b.num_attention_heads, 24);
  EXPECT_EQ(b.head_dim, 128);
  EXPECT_EQ(b.num_hidden_layers, 28);
  const LlamaConfig q = llama_preset("qwen3-0.6b");
  EXPECT_EQ(q.family, LlamaFamily::kQwen3);
  EXPECT_TRUE(q.qk_norm());
  EXPECT_EQ(q.hidden_size, 1024);
  EXPECT_EQ(q.head_dim, 128);  // not hidden_size / heads (64): Qwen3 gives it
  EXPECT_EQ(q.num_attention_heads * q.head_dim, 2048);
  EXPECT_EQ(q.intermediate_size, 3072);
  EXPECT_EQ(q.vocab_size, 151936);
  EXPECT_DOUBLE_EQ(q.rms_norm_eps, 1e-6);
  EXPECT_FALSE(q.rope_scaling.on());
  const LlamaConfig r = llama_preset("qwen3-1.7b");
  EXPECT_EQ(r.hidden_size, 2048);
  EXPECT_EQ(r.intermediate_size, 6144);
  EXPECT_EQ(llama_preset_names().size(), 4u);
  try {
    llama_preset("llama-4");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown Llama/Qwen3 preset 'llama-4'; expected one of: llama-3.2-1b"),
              std::string::npos)
        << e.what();
  }
}

TEST(LlamaConfig, HeadDimDefaultsToHiddenOverHeads) {
  json j = json::parse(kLlama32_1B);
  j.erase("head_dim");
  EXPECT_EQ(parse_llama_config(j).head_dim, 64);
  j["num_attention_heads"] = 30;
  j["num_key_value_heads"] = 5;
  EXPECT_NE(error_of(j).find("\"num_attention_heads\" (30) must divide \"hidden_size\" (2048)"), std::string::npos)
      << error_of(j);
}

TEST(LlamaConfig, FieldsOutOfRangeAreRefusedByName) {
  const json base = json::parse(kLlama32_1B);
  auto with = [&](const char* key, const json& v) {
    json j = base;
    if (v.is_null()) j.erase(key);
    else j[key] = v;
    return error_of(j);
  };
  EXPECT_NE(with("model_type", "mistral").find("\"model_type\" is 'mistral'; qkv reads \"llama\""), std::string::npos);
  EXPECT_NE(with("num_key_value_heads", 5).find("\"num_key_value_heads\" (5) must divide \"num_attention_heads\" (32)"),
            std::string::npos);
  EXPECT_NE(with("head_dim", 63).find("\"head_dim\" is 63; RoPE rotates pairs"), std::string::npos);
  EXPECT_NE(with("vocab_size", nullptr).find("\"vocab_size\" is missing"), std::string::npos);
  EXPECT_NE(with("vocab_size", "big").find("\"vocab_size\" is '\"big\"'; expected an integer"), std::string::npos)
      << with("vocab_size", "big");
  EXPECT_NE(with("num_hidden_layers", 0).find("\"num_hidden_layers\" is 0; expected a positive integer"),
            std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("\"hidden_act\" is"), std::string::npos);
  EXPECT_NE(with("attention_bias", true).find("\"attention_bias\" is true"), std::string::npos);
  EXPECT_NE(with("rms_norm_eps", -1).find("\"rms_norm_eps\" is -1"), std::string::npos);
  json yarn = base;
  yarn["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_NE(error_of(yarn).find("\"rope_scaling\" has rope_type 'yarn'"), std::string::npos) << error_of(yarn);
  json bad = base;
  bad["rope_scaling"]["low_freq_factor"] = 8.0;
  EXPECT_NE(error_of(bad).find("\"rope_scaling\": RoPE scaling: low_freq_factor (8)"), std::string::npos)
      << error_of(bad);
  EXPECT_NE(error_of(json::array()).find("is not a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace qkv
