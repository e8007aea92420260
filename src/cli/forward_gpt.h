// qkv forward --module gpt (forward_gpt.cc): the flags it adds to qkv forward's, and its run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "flags.h"

namespace qkv::cli {

struct GptForwardFlags {
  int64_t vocab_size = 50257, d_model = 0, num_layers = 2;
};

// qkv forward's files and text, as --module gpt reads and writes them.
struct ForwardOutputs {
  std::string input, output, save_weights, grad_output, grads_out, text, vocab_dir;
  std::string attn_weights;  // GPT: every block's softmax weights as trf_blocks.N.attn_weights (B, H, T, T)
};

void add_gpt_forward_flags(CLI::App* sub, GptForwardFlags& f);
int run_forward_gpt(const ModuleFlags& m, const GptForwardFlags& g, const ForwardOutputs& out, const CLI::App& sub);

}  // namespace qkv::cli
