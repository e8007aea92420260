// src/models/families.h - each family's registry entry, defined in its own file (models/family.h
// lists them in order).
#pragma once

#include "qkv/models/family.h"

namespace qkv::models_detail {

const ModelFamily& attention_lm_family();  // attention_lm.cc
const ModelFamily& gpt_family();           // gpt.cc
const ModelFamily& llama_family();         // llama.cc
const ModelFamily& qwen2_family();         // llama.cc
const ModelFamily& qwen3_family();         // llama.cc

}  // namespace qkv::models_detail
