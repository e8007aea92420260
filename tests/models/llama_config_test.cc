// The Llama 3 / Qwen2.5 / Qwen3 configuration (qkv/models/llama.h): config.json as Hugging Face publishes it
// read into the one description (DecoderSpec), the presets' published sizes, and every field out of
// range refused by config.json's name for it.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/models/llama.h"

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
    read_llama_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LlamaConfigJson, ReadsLlama32sPublishedConfig) {
  const DecoderSpec c = read_llama_config(json::parse(kLlama32_1B));
  EXPECT_EQ(c.family, "llama");
  EXPECT_EQ(c.width, 2048);
  EXPECT_EQ(c.attention.heads, 32);
  EXPECT_EQ(c.attention.kv_heads, 8);
  EXPECT_EQ(c.attention.head_dim, 64);
  EXPECT_EQ(c.ff_width, 8192);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.context_length, 131072);
  EXPECT_DOUBLE_EQ(c.attention.rope_base, 500000.0);
  EXPECT_DOUBLE_EQ(c.attention.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.attention.rope_scaling.original_max_positions, 8192);
  EXPECT_TRUE(c.tied_head);
  EXPECT_FALSE(c.attention.qk_norm);
  // what the family is, beyond its keys: RMSNorm, SwiGLU, RoPE "half", no biases, no dropout
  EXPECT_EQ(c.norm, NormKind::kRMSNorm);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.ff, FeedForwardKind::kSwiGLU);
  EXPECT_EQ(c.attention.rope, kernels::RopeLayout::kHalf);
  EXPECT_FALSE(c.learned_positions || c.qkv_bias || c.out_bias || c.head_bias || c.shortcut_dropout);
  // and back: config.json's keys give the same spec
  const DecoderSpec again = read_llama_config(llama_config_json(c));
  EXPECT_EQ(llama_config_json(again), llama_config_json(c));
}

TEST(LlamaConfigJson, PresetsAreThePublishedSizes) {
  const DecoderSpec a = llama_preset("llama-3.2-1b");
  EXPECT_EQ(a.width, 2048);
  EXPECT_EQ(a.layers, 16);
  const DecoderSpec b = llama_preset("llama-3.2-3b");
  EXPECT_EQ(b.width, 3072);
  EXPECT_EQ(b.attention.heads, 24);
  EXPECT_EQ(b.attention.head_dim, 128);
  EXPECT_EQ(b.layers, 28);
  const DecoderSpec q = llama_preset("qwen3-0.6b");
  EXPECT_EQ(q.family, "qwen3");
  EXPECT_TRUE(q.attention.qk_norm);
  EXPECT_DOUBLE_EQ(q.attention.qk_norm_eps, 1e-6);
  EXPECT_EQ(q.width, 1024);
  EXPECT_EQ(q.attention.head_dim, 128);  // not hidden_size / heads (64): Qwen3 gives it
  EXPECT_EQ(q.attention.width(), 2048);
  EXPECT_EQ(q.ff_width, 3072);
  EXPECT_EQ(q.vocab_size, 151936);
  EXPECT_DOUBLE_EQ(q.norm_eps, 1e-6);
  EXPECT_FALSE(q.attention.rope_scaling.on());
  const DecoderSpec r = llama_preset("qwen3-1.7b");
  EXPECT_EQ(r.width, 2048);
  EXPECT_EQ(r.ff_width, 6144);
  EXPECT_EQ(llama_preset_names().size(), 5u);
  try {
    llama_preset("llama-4");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown Llama/Qwen preset 'llama-4'; expected one of: llama-3.2-1b"),
              std::string::npos)
        << e.what();
  }
}

// Qwen/Qwen2.5-0.5B's config.json as published.
const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

TEST(LlamaConfigJson, ReadsQwen25sPublishedConfigWithItsBiases) {
  const DecoderSpec c = read_llama_config(json::parse(kQwen25_05B));
  EXPECT_EQ(c.family, "qwen2");
  EXPECT_EQ(c.width, 896);
  EXPECT_EQ(c.attention.heads, 14);
  EXPECT_EQ(c.attention.kv_heads, 2);
  EXPECT_EQ(c.attention.head_dim, 64);  // no head_dim: hidden_size / heads
  EXPECT_EQ(c.ff_width, 4864);
  EXPECT_EQ(c.layers, 24);
  EXPECT_EQ(c.context_length, 32768);
  EXPECT_TRUE(c.tied_head);
  EXPECT_TRUE(c.qkv_bias);  // Qwen2's q, k and v have biases; nothing else has
  EXPECT_FALSE(c.out_bias || c.head_bias || c.attention.qk_norm || c.learned_positions);
  // The model card's counts: 0.49B parameters, 0.36B of them not the embedding.
  EXPECT_EQ(decoder_parameters(c), 494032768);
  EXPECT_EQ(decoder_parameters(c) - c.vocab_size * c.width, 357898112);
  // The preset is the published file, and the spec goes back to config.json's keys unchanged.
  EXPECT_EQ(llama_config_json(llama_preset("qwen2.5-0.5b")), llama_config_json(c));
  EXPECT_EQ(llama_config_json(read_llama_config(llama_config_json(c))), llama_config_json(c));
  EXPECT_EQ(llama_config_json(c)["architectures"][0], "Qwen2ForCausalLM");
  // What qkv does not run is refused by name.
  json j = json::parse(kQwen25_05B);
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of(j).find("\"use_sliding_window\" is true"), std::string::npos) << error_of(j);
  j = json::parse(kQwen25_05B);
  j["mlp_bias"] = true;
  EXPECT_NE(error_of(j).find("\"mlp_bias\" is true"), std::string::npos) << error_of(j);
}

TEST(LlamaConfigJson, HeadDimDefaultsToHiddenOverHeads) {
  json j = json::parse(kLlama32_1B);
  j.erase("head_dim");
  EXPECT_EQ(read_llama_config(j).attention.head_dim, 64);
  j["num_attention_heads"] = 30;
  j["num_key_value_heads"] = 5;
  EXPECT_NE(error_of(j).find("\"num_attention_heads\" (30) must divide \"hidden_size\" (2048)"), std::string::npos)
      << error_of(j);
}

TEST(LlamaConfigJson, FieldsOutOfRangeAreRefusedByName) {
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
  EXPECT_NE(with("head_dim", 63).find("needs an even \"head_dim\", got 63"), std::string::npos) << with("head_dim", 63);
  EXPECT_NE(with("vocab_size", nullptr).find("\"vocab_size\" is missing"), std::string::npos);
  EXPECT_NE(with("vocab_size", "big").find("\"vocab_size\" is \"big\"; expected an integer"), std::string::npos)
      << with("vocab_size", "big");
  EXPECT_NE(with("num_hidden_layers", -1).find("\"num_hidden_layers\" (-1) must not be negative"), std::string::npos);
  EXPECT_NE(with("hidden_size", 0).find("\"hidden_size\" (0) must be positive"), std::string::npos);
  EXPECT_NE(with("intermediate_size", 0).find("\"intermediate_size\" (0) must be positive"), std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("\"hidden_act\" is"), std::string::npos);
  EXPECT_NE(with("attention_bias", true).find("\"attention_bias\" is true"), std::string::npos);
  EXPECT_NE(with("rms_norm_eps", -1).find("\"rms_norm_eps\" (-1) must be a positive number"), std::string::npos)
      << with("rms_norm_eps", -1);
  json yarn = base;
  yarn["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_NE(error_of(yarn).find("\"rope_scaling\" has rope_type 'yarn'"), std::string::npos) << error_of(yarn);
  json bad = base;
  bad["rope_scaling"]["low_freq_factor"] = 8.0;
  EXPECT_NE(error_of(bad).find("\"rope_scaling\": RoPE scaling: low_freq_factor (8)"), std::string::npos)
      << error_of(bad);
  EXPECT_NE(error_of(json::array()).find("is not a JSON object"), std::string::npos);
}

// Newer transformers write each layer's attention into config.json; qkv runs full attention in
// every layer, so a list saying otherwise, or of another length, is refused by name (it was ignored).
TEST(LlamaConfigJson, LayerTypesMustSayFullAttentionOncePerLayer) {
  json j = llama_config_json(llama_preset("qwen3-0.6b"));
  j["layer_types"] = json(std::vector<std::string>(28, "full_attention"));
  EXPECT_EQ(read_llama_config(j).layers, 28);
  j["layer_types"].erase(27);
  EXPECT_NE(error_of(j).find("\"layer_types\" has 27 entries for \"num_hidden_layers\" 28"), std::string::npos)
      << error_of(j);
  j["layer_types"].push_back("sliding_attention");
  EXPECT_NE(error_of(j).find("\"layer_types\"[27] is \"sliding_attention\"; qkv runs full attention"),
            std::string::npos)
      << error_of(j);
  j["layer_types"] = "full_attention";
  EXPECT_NE(error_of(j).find("\"layer_types\" is \"full_attention\"; expected a list"), std::string::npos)
      << error_of(j);
  // Qwen3's sliding window was run as full attention; only Qwen2's was refused.
  j = llama_config_json(llama_preset("qwen3-0.6b"));
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of(j).find("\"use_sliding_window\" is true; qkv runs Qwen3's full attention"), std::string::npos)
      << error_of(j);
}

}  // namespace
}  // namespace qkv
