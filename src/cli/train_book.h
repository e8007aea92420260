// qkv train --model gpt|llama|qwen3 (train_book.cc): chapter 5's training of a language model of any
// family on a text.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "qkv/train/book_training.h"
#include "qkv/train/train_options.h"
#include "qkv/train/ranks.h"

namespace qkv::cli {

struct BookTrainFlags {
  std::string model = "attention-lm";  // a family (models/family.h); attention-lm trains as train_command.cc does
  std::string preset = "gpt2-small";
  std::string init;                    // pretrained weights to start from (fine-tuning)
  BookTrainingOptions book;
};

void add_book_train_flags(CLI::App* sub, BookTrainFlags& g);
// The run: `o` holds the shared flags' values (--d-model, --lr, --text-file, ...), taken only where
// given; checkpoint (--checkpoint's value when given, "" none; not given: the family's default name)
// and svg are the outputs (the model's weights in its family's format, the curve). Under mpirun
// (ranks): data-parallel (train_like_the_book's ranks); rank 0 prints and writes.
int run_train_book(const BookTrainFlags& g, const TrainOptions& o, const CLI::App& sub,
                   std::optional<std::string> checkpoint,
                   std::string svg, const std::string& vocab_dir, bool json, bool quiet, TrainRanks* ranks = nullptr);

}  // namespace qkv::cli
