// qkv/models/hf_folder.h - a model as Hugging Face ships it, for the families whose state names are
// the file's tensor names (Llama 3, Qwen3):
//
//   DIR/config.json                      the architecture: its model_type names the family
//                                        (models/family.h), whose read_config makes the spec
//   DIR/model.safetensors                one file, or shards listed by
//   DIR/model.safetensors.index.json     {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", ...}}
//   DIR/tokenizer.json                   the tokenizer (read by the family's loader)
//
// Tensors are F32, BF16 or F16 (others are refused), memory-mapped and decoded straight into the
// model's float32 tensors one at a time. A tied model's file may carry the head's weight too (some
// exporters write it): it is ignored, as are rotary tables (rotary_emb.inv_freq). Refused, naming
// the file and the tensor, before anything is loaded: a config.json qkv does not read (the
// family's errors), a shard the index names that is missing, a tensor in two shards or in a shard
// the index does not say, a tensor missing, one not of the model, a shape other than the model's,
// a dtype other than the three.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder_spec.h"
#include "qkv/models/language_model.h"

namespace qkv {

struct HfFolder {
  DecoderSpec spec;                                              // config.json's
  std::string dir;                                               // as given
  std::vector<std::shared_ptr<const MappedSafetensors>> files;   // one, or the shards in index order
  std::map<std::string, size_t> file_of;                         // tensor name -> files[i]
  std::string stored_dtype;                                      // "BF16", "F32", ... (a tensor's, for people)
};

// config.json's model_type in the directory `path`; none when it has no config.json or the file no
// "model_type" (GPT-2's folders may say nothing). Throws naming the file when config.json is not a
// JSON object or its model_type is not a string.
std::optional<std::string> hf_model_type(const std::string& path);
// The directory's configuration and files (the index's and the shards' names agreeing).
HfFolder read_hf_folder(const std::string& dir);
// A model holding the folder's weights, built without drawing, in eval mode, its products in
// `dtype` on `path`'s attention. bf16_only (bf16 products): the products' weights read as bf16
// straight into the model's bf16 copies and never as floats (DecoderModel::load_bf16_only: a
// BF16 checkpoint in about its file size). Every name, shape and dtype is checked first.
// draw: the weights drawn from gen first (then replaced), as torch.manual_seed(S); Model(cfg) does.
// quantize (with bf16_only): the products' weights quantized into that type's blocks as they are
// read (models/decoder.h: load_bf16_only's readq), or into Q8_0 where their rows are not whole
// blocks of it (core/quant_blocks.h: fitting_quant_type), bf16 where not even of Q8_0.
std::unique_ptr<LanguageModel> hf_model_from(const HfFolder& folder, Dtype dtype, AttentionPath path, Generator& gen,
                                             bool bf16_only = false, bool draw = false,
                                             const QuantType* quantize = nullptr);
// The folder's files for `model`: config.json (its family's, "torch_dtype" saying the weights'),
// model.safetensors (bf16: every tensor as BF16, as the families ship; else F32), and
// tokenizer_file's bytes as tokenizer.json when given; for the caller to write together.
std::vector<OutputFile> hf_folder_files(LanguageModel& model, const std::string& dir, const std::string& tokenizer_file,
                                        bool bf16 = false);
// The same, written now into the existing directory `dir` (each file atomically; no tokenizer).
void save_hf_folder(LanguageModel& model, const std::string& dir, bool bf16);

}  // namespace qkv
