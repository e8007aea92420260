// qkv/train/checkpoint.h - training checkpoints as safetensors files.
//
// One file, written atomically (a crash leaves the previous checkpoint whole):
//   <model state dict>            PyTorch's names ("tok_emb.weight", "blocks.0.W_query.weight", ...,
//                                 "blocks.0.mask"): filter out the names below and the rest loads
//                                 into tests/pytorch/attention_lm.py's AttentionLM(strict=True)
//   optimizer.<state>.<param>     "optimizer.exp_avg.out_head.weight", "optimizer.exp_avg_sq...",
//                                 "optimizer.momentum_buffer..." (SGD with momentum)
//   train.losses                  (steps) the loss of every step taken
//   data.vocab                    (V) text runs only: the GPT-2 id of each model token id
// and metadata: "format" = "pt", "qkv" = "train-checkpoint 1", "options" (TrainOptions as JSON),
// "step", "rng.model" (generator state, hex), "data.state" (JSON), "evals" (JSON).
#pragma once

#include <string>

#include "qkv/train/trainer.h"

namespace qkv {

void save_checkpoint(const std::string& path, const Checkpoint& c);
// Throws qkv::Error naming the file when it is not a qkv training checkpoint or is malformed.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace qkv
