// qkv/modules/attention_module.h - what the five attention classes have in common, and a
// factory that builds one by its command-line name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/modules/attention_core.h"
#include "qkv/modules/module.h"

namespace qkv {

struct AttentionConfig {
  int64_t d_in = 0;
  int64_t d_out = 0;
  int64_t context_length = 0;  // the causal classes only
  double dropout = 0.0;        // the causal classes only
  int64_t num_heads = 1;       // the multi-head classes only
  bool qkv_bias = false;       // all but SelfAttentionV1
};

class AttentionModule : public Module {
 public:
  // SelfAttentionV1/V2: (T, d_in) -> (T, d_out); the others: (B, T, d_in) -> (B, T, out).
  // With `trace`, every intermediate of this call is kept there (per head for the multi-head ones).
  virtual Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) = 0;
  // The gradient of the input given dL/doutput (shaped as forward's output), for the last
  // forward call; adds every parameter's gradient into its d<name> member (see module.h).
  virtual Tensor backward(const Tensor& doutput) = 0;
  virtual int input_rank() const { return 3; }
};

// Names as the command line spells them: self-attention-v1, self-attention-v2, causal-attention,
// mha-wrapper, mha. The constructor draws from `gen` exactly as the PyTorch class would.
std::unique_ptr<AttentionModule> make_attention_module(const std::string& name, const AttentionConfig& config,
                                                       Generator& gen);
const std::vector<std::string>& attention_module_names();

}  // namespace qkv
