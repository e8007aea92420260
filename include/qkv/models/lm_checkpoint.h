// qkv/models/lm_checkpoint.h - what inference reads of a `qkv train` checkpoint: the attention LM's
// configuration, its tensors, and what it was trained on (its tokenizer). The whole file, optimizer
// state and the data's position included, is train/checkpoint.h's; this is the model's part of it.
//
//   metadata "qkv" = "train-checkpoint 1", "options" (the run's options as JSON: "model" holds
//   LMConfig's keys; "task", "task_length", "task_symbols", "text_file", "seed"), "step";
//   tensors: the model's state dict, "data.vocab" (text runs), and the trainer's own
//   ("optimizer.*", "train.*"), which are skipped here.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/attention_lm.h"

namespace qkv {

inline constexpr const char* kLmCheckpointKind = "train-checkpoint 1";

struct LmCheckpoint {
  LMConfig config;
  std::map<std::string, Tensor> model;  // the model's state dict (masks too)
  TrainTask task = TrainTask::kCopy;
  int64_t task_length = 16, task_symbols = 16;  // the built-in tasks'
  std::string text_file;                         // the text run's file, for people
  std::vector<int64_t> vocab;                    // text runs: the GPT-2 id of each model id, increasing
  uint64_t seed = 123;
  int64_t step = 0;
  Dtype weights_dtype = Dtype::kF32;             // as stored (bf16 mode's checkpoints: BF16)
};

// Whether a file's metadata says it is a qkv training checkpoint.
bool is_lm_checkpoint(const std::map<std::string, std::string>& metadata);
// The file read whole, checked to be one ("'f.st' is not a qkv training checkpoint: its metadata
// has no 'qkv'", "'f.st' is a gpt-weights 1 file, not a train-checkpoint 1"); and one of its
// metadata entries, a qkv::Error naming the file and the key when absent.
TensorFile open_lm_checkpoint(const std::string& path);
const std::string& checkpoint_metadata(const TensorFile& f, const std::string& path, const char* key);
// Its "step": a whole non-negative decimal integer ("3x", "", "-1", "+3" and " 3" are refused).
int64_t checkpoint_step(const TensorFile& f, const std::string& path);
// Runs `read` (which reads the file's parts), naming the file in what it throws: a qkv::Error as
// "<file>: <what>", anything else (a JSON type error) as "<file>: malformed checkpoint metadata: ...".
void reading_checkpoint(const std::string& path, const std::function<void()>& read);
// Throws qkv::Error "<file>: ..." when it is not a qkv training checkpoint or its model part is
// malformed (check_lm_tensors, read_lm_vocab, the configuration's rules).
LmCheckpoint read_lm_checkpoint(const std::string& path);

// The tensors of a model of `c`, against the model's own state dict: every name present with its
// shape, nothing else, every value finite. Throws qkv::Error naming the tensor.
void check_lm_tensors(const LMConfig& c, const std::map<std::string, Tensor>& tensors);
// data.vocab: whole ids, increasing (lookups bisect), below 2^24 (exact in float32).
std::vector<int64_t> read_lm_vocab(const Tensor& t);

}  // namespace qkv
