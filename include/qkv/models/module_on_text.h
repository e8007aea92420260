// qkv/models/module_on_text.h - one of the book's attention modules on text: chapter 2's input
// pipeline in front of chapter 3's module, as `qkv forward --text` and `qkv explore --module` run it.
//
//   ids (T) -> token_emb.weight[ids] + pos_emb.weight[0:T]       (1, T, d_in)   ((T, d_in) for the
//           -> module                                            (1, T, H D)     self-attention classes)
//
// Built from a seed it holds what torch.manual_seed(seed); nn.Embedding(vocab_size, d_in);
// nn.Embedding(context_length, d_in); Class(...) hold, drawn in that order, and the module's
// dropout draws from the same generator afterwards (as PyTorch's global one). State names: the
// embeddings' token_emb.weight and pos_emb.weight, and the module's own (W_query.weight, ...).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/io/safetensors.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/token_embedding.h"

namespace qkv {

class ModuleOnText {
 public:
  // module: its command-line name (attention_module_info); config.context_length is the
  // positional table's size (and the causal mask's). Throws qkv::Error as the module does.
  ModuleOnText(const std::string& module, const AttentionConfig& config, int64_t vocab_size, uint64_t seed);

  // Loads a state dict holding the module's tensors and, optionally, the embeddings' (by name):
  // every tensor the module has must be there; the embeddings keep their drawn values when their
  // names are absent. A name that is neither's is an error. Nothing changes unless everything checks.
  void load_state_dict(const std::map<std::string, Tensor>& state);
  // The module's entries, then the embeddings'.
  std::vector<StateEntry> state_dict();

  // ids (T), 1 <= T <= context_length -> the module's input: (1, T, d_in), or (T, d_in) for the
  // modules that take (T, d_in).
  Tensor embed(const std::vector<int64_t>& ids);
  // embed(ids) through the module (the trace, when given, holds its intermediates).
  Tensor forward(const std::vector<int64_t>& ids, AttentionTrace* trace = nullptr);
  // dL/doutput of the last forward -> dL/dx (the module's input), after adding every parameter's
  // gradient, the embeddings' included.
  Tensor backward(const Tensor& doutput);

  AttentionModule& module() { return *module_; }
  const AttentionModuleInfo& info() const { return info_; }
  TokenPositionEmbedding& embedding() { return *embedding_; }

 private:
  const AttentionModuleInfo& info_;
  AttentionConfig config_;
  Generator gen_;  // the modules' dropout keeps drawing from it
  std::unique_ptr<TokenPositionEmbedding> embedding_;
  std::unique_ptr<AttentionModule> module_;
  int64_t tokens_ = 0;  // T of the last embed
};

// One module's forward (and backward) as `qkv forward --module M` runs it: on a tensor, or on text's
// ids through ModuleOnText; torch.manual_seed(seed); [embeddings;] Class(...); [load_state_dict];
// module.train(train); module(x) [; backward].
struct ModuleRun {
  std::string module;            // its command-line name
  AttentionConfig config;
  uint64_t seed = Generator::kDefaultSeed;
  bool train = false;
  const std::map<std::string, Tensor>* state = nullptr;  // a state dict to load, or none
  const Tensor* input = nullptr;                          // (B, T, d_in) or (T, d_in); or
  const std::vector<int64_t>* ids = nullptr;              // text's ids, through embeddings of
  int64_t vocab_size = 0;                                 //   this vocabulary
  std::string input_name = "the input";                   // in messages: "the tensor 'input' in 'x.st'"
  bool attention_weights = false;
  bool cached = false;                                    // forward_token_by_token (eval, forward only)
  const Tensor* doutput = nullptr;                        // dL/doutput, the output's shape: run the backward
  std::string doutput_name = "the gradient";
};
struct ModuleResult {
  Tensor output;
  NamedTensors attention_weights;  // "attn_weights" (per head), "attn_weights_dropped" when dropout acted
  NamedTensors state;              // the module's state dict (with text, the embeddings' too)
  NamedTensors gradients;          // with doutput: "input" (dL/dx), then each parameter's by state name
};
// Throws qkv::Error naming the input that does not fit (its rank, width, length against the mask).
ModuleResult run_module(const ModuleRun& r);

}  // namespace qkv
