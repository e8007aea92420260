// qkv forward --module <family> (forward_model.cc): a whole model on ids, forward and backward.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "flags.h"

namespace qkv::cli {

// The book's cfg dict as flags (--module gpt with --seed and no --weights).
struct ModelSizeFlags {
  int64_t vocab_size = 50257, d_model = 0, num_layers = 2;
};
void add_model_size_flags(CLI::App* sub, ModelSizeFlags& f);

// qkv forward's files and text.
struct ForwardFiles {
  std::string input, output, save_weights, grad_output, grads_out, text, vocab_dir, attn_weights;
  std::string text_file;  // where `text` came from, if a file (an input the outputs may not replace)
};
int run_forward_model(const ModuleFlags& m, const ModelSizeFlags& g, const ForwardFiles& out, const CLI::App& sub);

}  // namespace qkv::cli
