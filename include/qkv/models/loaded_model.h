// qkv/models/loaded_model.h - a model with what it needs to be used: its tokenizer, end tokens,
// chat format and generator, as the front door (qkv/qkv.h) and each family's loader
// (models/family.h) hand it out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/models/chat.h"
#include "qkv/models/language_model.h"
#include "qkv/models/tokenizer.h"
#include "qkv/modules/attention_module.h"

namespace qkv {

struct LoadOptions {
  // Where GPT-2's encoder.json and vocab.bpe are, for models that read text ("": searched as
  // text/vocab_files.h says).
  std::string vocab_dir;
  // Every product's precision, f32 or bf16; default: as the model was saved (bf16 for a BF16
  // Hugging Face folder, whose weights are then kept in bf16 only). A model loaded in bf16 keeps
  // its weights in bf16 for generation (LanguageModel::keep_bf16_weights).
  std::optional<Dtype> dtype;
  // The head count of a GPT model's file that does not say it (config.json's n_head says it;
  // default GPT-2's for its widths).
  std::optional<int64_t> num_heads;
  // Keep the float weights even when the products are bf16 (a BF16 folder otherwise keeps its
  // weights in bf16 only): for tools that read the weights or train (the explorer, fine-tuning).
  bool float_weights = false;
  // A GGUF file's quantized weights decoded into bf16 weights instead of kept as their blocks (read
  // by integer products: core/quant_matvec.h), for comparing the two.
  bool dequantize = false;
  // Quantize the products' weights at load ("q8_0", "q4_0", "q4_k", "q6_k"; "" none): a Llama 3 /
  // Qwen3 folder's or a GGUF file's float weights (F32, F16, BF16) into that type's blocks, read by
  // the integer products; a matrix whose rows are not whole blocks of it stays bf16.
  std::string quantize;
  // The generator's seed (LoadedModel::generator: the dropouts' draws, a training run's shuffles);
  // unset: PyTorch's default seed (a qkv train checkpoint: its own). With `draw`, the weights are
  // drawn from it first and then replaced by the file's, as torch.manual_seed(S); Model(cfg);
  // model.load_state_dict(...) does, so the dropouts continue that generator.
  std::optional<uint64_t> seed;
  bool draw = false;
  // The attention's computation (modules/attention_module.h); unset: the family loader's.
  std::optional<AttentionPath> path;
  // Read the model's tokenizer too (false: the model alone, for ids in and logits out).
  bool tokenizer = true;
  // The dropout rate (DecoderSpec: attention.dropout, and the shortcuts' with shortcut_dropout);
  // unset: the file's (none in GPT-2's and the Hugging Face folders).
  std::optional<double> dropout;
};

struct LoadedModel {
  std::unique_ptr<LanguageModel> model;
  // Text <-> the model's ids; null for a model that has none (no_tokenizer says why).
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
  // Llama 3's <|eot_id|>), and every token that ends a turn or the text (the family's end tokens
  // that the tokenizer has: Qwen3 <|im_end|>, <|endoftext|>; Llama 3 <|eot_id|>, <|eom_id|>,
  // <|end_of_text|>; a GGUF file's eos/eot/eom ids after them, gguf_end_ids): SamplingOptions::stop_ids.
  std::optional<int64_t> eos_id;
  std::vector<int64_t> end_ids;
  // The family's chat format (Llama 3's, Qwen3's: models/chat.h), when it has one and a tokenizer.
  std::optional<ChatFormat> chat_format;
  // Where the tokenizer was read from (a tokenizer.json, GPT-2's vocabulary folder), for writers
  // that copy it beside a checkpoint; "" when it has none or nothing to copy.
  std::string tokenizer_file;
  // Why there is no tokenizer, for the error when text is asked for ("its folder has no tokenizer.json").
  std::string no_tokenizer = "none was loaded";

  // The text as the model reads it: tokenizer->prompt_prefix() (Llama 3's <|begin_of_text|> where its
  // tokenizer says so), then tokenizer->encode(text); or a qkv::Error saying the model has no
  // tokenizer, and why.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
};

}  // namespace qkv
