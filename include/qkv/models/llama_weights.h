// qkv/models/llama_weights.h - the Llama 3 and Qwen3 families' checkpoints as Hugging Face ships them.
//
//   DIR/config.json                      the architecture (llama_config.h)
//   DIR/model.safetensors                one file, or shards listed by
//   DIR/model.safetensors.index.json     {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", ...}}
//   DIR/tokenizer.json                   the tokenizer (read by the front door, qkv/qkv.h)
//
// Tensor names are the model's state names (llama.h). Tensors are F32, BF16 or F16 (others are
// refused), memory-mapped and decoded straight into the model's float32 tensors one at a time. A
// tied model's file may carry lm_head.weight too (some exporters write it): it is ignored.
// Refused, naming the file and the tensor, before anything is loaded: a config.json qkv does not
// read (llama_config.h's errors), a shard the index names that is missing, a tensor in two shards or
// in a shard the index does not say, a tensor missing, one not of the model, a shape other than the
// model's, a dtype other than the three.
#pragma once

#include <memory>
#include <map>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/llama.h"

namespace qkv {

struct LlamaWeights {
  LlamaConfig config;
  std::string dir;                                               // as given
  std::vector<std::shared_ptr<const MappedSafetensors>> files;   // one, or the shards in index order
  std::map<std::string, size_t> file_of;                         // tensor name -> files[i]
  std::string stored_dtype;                                      // "BF16", "F32", ... (a tensor's, for people)
};

// Whether `path` is a directory whose config.json names a model_type of these families.
bool is_llama_directory(const std::string& path);
// The directory's configuration and files (the index's and the shards' names agreeing).
LlamaWeights read_llama_weights(const std::string& dir);
// Loads `w` into `model` (built from w.config; dtype and path may differ): every name, shape and
// dtype checked against the model before the first tensor is read.
void load_llama_weights(LlamaModel& model, const LlamaWeights& w);
// A model holding the weights (built without drawing, then loaded), in eval mode. bf16_only (with
// bf16 products): the projections, embedding and head read as bf16 straight into the model's bf16
// copies and never as floats (LlamaModel::load_bf16_only: a BF16 checkpoint in about its file size).
std::unique_ptr<LlamaModel> llama_model_from(const LlamaWeights& w, Dtype dtype, AttentionPath path, Generator& gen,
                                             bool bf16_only = false);
// Writes `model` as Hugging Face's directory: config.json and model.safetensors (bf16: every tensor
// as BF16, as the families ship; else F32), each atomically. The tokenizer is the caller's.
void save_llama_directory(LlamaModel& model, const std::string& dir, bool bf16);

}  // namespace qkv
