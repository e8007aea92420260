// qkv forward --module gpt (forward_gpt.cc): the flags it adds to qkv forward's, and its run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include <functional>
#include <vector>

#include "flags.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/language_model.h"
#include "qkv/modules/attention_core.h"

namespace qkv::cli {

struct GptForwardFlags {
  int64_t vocab_size = 50257, d_model = 0, num_layers = 2;
};

// qkv forward's files and text, as --module gpt reads and writes them.
struct ForwardOutputs {
  std::string input, output, save_weights, grad_output, grads_out, text, vocab_dir;
  std::string attn_weights;  // GPT: every block's softmax weights as trf_blocks.N.attn_weights (B, H, T, T)
};

// A language model's forward as qkv forward runs it: the ids of --input's tensor 'input' (B, T) or
// of --text, the logits to --output, the attention weights to --attn-weights (as
// <trace_prefix>N.attn_weights), the state to --save-weights, and with --grad-output the backward's
// gradients under the state's names to --grads-out; every file written atomically, or none.
struct ModelForward {
  LanguageModel& model;
  std::string module;                                              // "gpt", "llama", "qwen3": in messages
  std::function<std::vector<int64_t>(const std::string&)> encode = {};  // --text's ids, or null
  std::function<void(bool)> record_traces = {};                    // null: no --attn-weights
  std::function<const std::vector<AttentionTrace>&()> traces = {};
  std::string trace_prefix = {};
  std::function<NamedTensors()> state = {};                         // --save-weights' tensors
};
void check_forward_outputs(const ForwardOutputs& out);  // before anything is built
int run_model_forward(const ModelForward& run, const ForwardOutputs& out, const CLI::App& sub);

void add_gpt_forward_flags(CLI::App* sub, GptForwardFlags& f);
int run_forward_gpt(const ModuleFlags& m, const GptForwardFlags& g, const ForwardOutputs& out, const CLI::App& sub);
// --module llama | qwen3 --weights DIR (forward_llama.cc).
int run_forward_llama(const ModuleFlags& m, const ForwardOutputs& out, const CLI::App& sub);

}  // namespace qkv::cli
