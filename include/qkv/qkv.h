// qkv/qkv.h - qkv's front door: load a model and its tokenizer from a file, generate with it.
//
//   #include "qkv/qkv.h"
//
//   qkv::LoadedModel m = qkv::load_model("qkv-train.safetensors");   // a checkpoint qkv train wrote
//   std::vector<int64_t> prompt = m.encode("abcdefghijklmnop|");
//   qkv::SamplingOptions o;
//   o.max_new_tokens = m.default_new_tokens;
//   o.temperature = 0;                                                 // greedy
//   qkv::generate(*m.model, prompt, o, [&](int64_t id) {
//     std::cout << m.tokenizer->token_text(id) << std::flush;          // tokens as they come
//     return true;                                                     // false stops early
//   });
//
// The model (models/language_model.h) is what generation, training and the explorer use: ids in,
// logits out, with or without a KV cache, its state by name. The tokenizer (models/tokenizer.h)
// turns text into the model's ids and back. The rest of the library is reachable through the
// layers' own headers (qkv/core, qkv/kernels, qkv/modules, qkv/models, qkv/train, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/models/chat.h"
#include "qkv/models/generation.h"
#include "qkv/models/language_model.h"
#include "qkv/models/tokenizer.h"

namespace qkv {

struct LoadOptions {
  // Where GPT-2's encoder.json and vocab.bpe are, for models that read text ("": searched as
  // text/vocab_files.h says).
  std::string vocab_dir;
  // The attention blocks' products, f32 or bf16 (a GPT model's every product: its feed-forward's and
  // head's too); default: as the model was saved. A GPT model loaded in bf16 also keeps its weights
  // in bf16 for generation (GPTModel::keep_bf16_weights).
  std::optional<Dtype> dtype;
  // The head count of a GPT model's file that does not say it (config.json's n_head says it;
  // default GPT-2's for its widths).
  std::optional<int64_t> num_heads;
};

struct LoadedModel {
  std::unique_ptr<LanguageModel> model;
  // Text <-> the model's ids; null for a model that has none (trained on fixed batches of ids).
  std::unique_ptr<Tokenizer> tokenizer;
  // What was loaded, for people: "attention LM (2 layers x 4 heads, copy, step 500)".
  std::string description;
  // How many tokens a generation adds unless told otherwise: a task's answer length, else 50.
  int64_t default_new_tokens = 50;
  // The generator the model's dropouts draw from. A preset's weights were drawn from it, and the
  // book's generate continues it (torch.manual_seed(S); GPTModel(cfg); generate(...)): pass it as
  // SamplingOptions::generator for the book's tokens.
  std::unique_ptr<Generator> generator;
  // The end-of-text token, when the tokenizer has one (GPT-2's <|endoftext|>; Qwen3's <|im_end|>,
  // Llama 3's <|eot_id|>), and every token that ends a turn or the text (Qwen3: <|im_end|>,
  // <|endoftext|>; Llama 3: <|eot_id|>, <|eom_id|>, <|end_of_text|>): SamplingOptions::stop_ids.
  std::optional<int64_t> eos_id;
  std::vector<int64_t> end_ids;
  // The family's chat format (Llama 3's, Qwen3's: models/chat.h), when the model has one.
  std::optional<ChatFormat> chat_format;

  // tokenizer->encode(text), or a qkv::Error saying the model has no tokenizer.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
};

// A model from `path`, in eval mode:
//   - a checkpoint `qkv train` wrote (its options, weights and, for text models, the vocabulary of
//     the text it was trained on);
//   - GPT-2's weights (models/gpt_weights.h): Hugging Face's model.safetensors, or a directory
//     holding it with its config.json, or the book's state-dict names; GPT-2's tokenizer;
//   - a Llama 3 or Qwen3 directory as Hugging Face ships it (models/llama_weights.h): config.json,
//     the weights (one file or shards), tokenizer.json; products in the weights' precision (bf16
//     for BF16 files) unless LoadOptions::dtype says otherwise.
// Throws qkv::Error naming the file and what is wrong with it (not a model, a missing or misshapen
// tensor, non-finite weights, ...); nothing is half-built.
LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

// An untrained model of a preset (gpt2-small, gpt2-medium, gpt2-large, gpt2-xl: models/gpt.h),
// its weights drawn from Generator(seed) as torch.manual_seed(seed); GPTModel(cfg) draws them; or
// of the Llama 3 / Qwen3 presets (llama-3.2-1b, llama-3.2-3b, qwen3-0.6b, qwen3-1.7b:
// models/llama_config.h) with the installed vocabulary's tokenizer.
const std::vector<std::string>& model_preset_names();
LoadedModel make_model(const std::string& preset, uint64_t seed, const LoadOptions& options = {});

}  // namespace qkv
