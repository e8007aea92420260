// qkv/qkv.h - qkv's front door: load a model and its tokenizer from a file, generate with it.
//
//   #include "qkv/qkv.h"
//
//   qkv::LoadedModel m = qkv::load_model("Qwen3-0.6B/");                 // any family's files
//   std::vector<int64_t> prompt = m.encode("The capital of France is");
//   qkv::SamplingOptions o;
//   o.max_new_tokens = m.default_new_tokens;
//   o.temperature = 0;                                                 // greedy
//   qkv::generate(*m.model, prompt, o, [&](int64_t id) {
//     std::cout << m.tokenizer->token_text(id) << std::flush;          // tokens as they come
//     return true;                                                     // false stops early
//   });
//
// The model (models/language_model.h) is what generation, training and the explorer use: ids in,
// logits out, with or without a KV cache, its state by name, its description (spec(), family()).
// The families and their files are the registry's (models/family.h): load_model reads a Hugging
// Face folder (Llama 3, Qwen3, GPT-2), GPT-2's weights in a file, or a checkpoint qkv train wrote;
// make_model draws an untrained preset. The tokenizer (models/tokenizer.h) turns text into the
// model's ids and back. The rest of the library is reachable through the layers' own headers
// (qkv/core, qkv/kernels, qkv/modules, qkv/models, qkv/train, ...).
#pragma once

#include "qkv/models/chat.h"
#include "qkv/models/family.h"
#include "qkv/models/generation.h"
#include "qkv/models/language_model.h"
#include "qkv/models/loaded_model.h"
#include "qkv/models/tokenizer.h"
