// src/models/families.h - each family's registry entry, defined in its own file (models/family.h
// lists them in order).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/models/family.h"

namespace qkv::models_detail {

const ModelFamily& attention_lm_family();  // attention_lm.cc
const ModelFamily& gpt_family();           // gpt.cc
const ModelFamily& llama_family();         // llama.cc
const ModelFamily& qwen2_family();         // llama.cc
const ModelFamily& qwen3_family();         // llama.cc
const ModelFamily& qwen3_5_family();       // qwen3_5.cc

// What the families read from Hugging Face's folders share (llama.cc): config.json's values (each
// a qkv::Error "<where>: \"key\" is ..." when missing or of another type; boolean's and text's
// `absent` / "" when missing or null), its keys' names for the spec's fields, tokenizer.json, and
// the folder itself (models/hf_folder.h; a GGUF file too) and its checkpoint.
int64_t integer(const nlohmann::json& j, const char* key, const std::string& where);
double number(const nlohmann::json& j, const char* key, const std::string& where);
bool boolean(const nlohmann::json& j, const char* key, bool absent, const std::string& where);
std::string text(const nlohmann::json& j, const char* key, const std::string& where);
extern const DecoderNames kConfigKeys;
std::unique_ptr<Tokenizer> hf_tokenizer(const std::string& source, const LoadOptions& options, std::string& file);
LoadedModel load_hf_folder(const std::string& dir, const LoadOptions& options);
std::vector<OutputFile> hf_folder_checkpoint(LanguageModel& model, const std::string& dir, const std::string& tokenizer);

}  // namespace qkv::models_detail
