// qkv train --model gpt (train_gpt.cc): chapter 5's training of the book's GPT model on a text.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "qkv/train/book_training.h"
#include "qkv/train/train_options.h"
#include "train_ranks.h"

namespace qkv::cli {

struct GptTrainFlags {
  std::string model = "attention-lm";  // or "gpt"
  std::string preset = "gpt2-small";
  std::string init;                    // pretrained weights to start from (fine-tuning)
  BookTrainingOptions book;
};

void add_gpt_train_flags(CLI::App* sub, GptTrainFlags& g);
// The run: `o` holds the shared flags' values (--d-model, --lr, --text-file, ...), taken only where
// given; checkpoint and svg are the outputs (the model's weights in the book's layout, the curve).
// Under mpirun (ranks): data-parallel (train_like_the_book's ranks); rank 0 prints and writes.
int run_train_gpt(const GptTrainFlags& g, const TrainOptions& o, const CLI::App& sub, std::string checkpoint,
                  std::string svg, const std::string& vocab_dir, bool json, bool quiet, TrainRanks* ranks = nullptr);

}  // namespace qkv::cli
