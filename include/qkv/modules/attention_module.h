// qkv/modules/attention_module.h - what the five attention classes have in common, and a
// factory that builds one by its command-line name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/kernels/rope.h"
#include "qkv/modules/attention_core.h"
#include "qkv/modules/module.h"

namespace qkv {

// Which computation the causal classes (CausalAttention, the wrapper's heads, MultiHeadAttention)
// run. The fused path (kernels/mha.h: one QKV product, the tiled attention kernel, out_proj)
// never builds the (T, T) matrices; the textbook path (attention_core.h) does it as the book does.
//   kAuto      fused, except while dropout is active (training mode, p > 0): then textbook, so
//              the dropout masks are PyTorch's (nn.Dropout's, from the same seed)
//   kFused     fused always; under dropout the mask comes from Philox inside the kernel, keyed by
//              a seed drawn from the module's generator (reproducible, but not PyTorch's mask)
//   kTextbook  the book's computation always
// Both agree within 1e-5 (relative) where they draw no dropout, forward and backward.
enum class AttentionPath { kAuto, kFused, kTextbook };
AttentionPath parse_attention_path(const std::string& name);  // "auto" | "fused" | "textbook"
const char* attention_path_name(AttentionPath path);

struct AttentionConfig {
  int64_t d_in = 0;
  int64_t d_out = 0;
  int64_t context_length = 0;  // the causal classes only
  double dropout = 0.0;        // the causal classes only
  int64_t num_heads = 1;       // the multi-head classes only
  bool qkv_bias = false;       // all but SelfAttentionV1
  AttentionPath path = AttentionPath::kAuto;  // the causal classes only
  // MultiHeadAttention's variants, all off by default (see attention_variants.h for the formula):
  int64_t num_kv_heads = 0;        // G key/value heads, dividing num_heads; 0: num_heads (G = H)
  kernels::RopeLayout rope = kernels::RopeLayout::kNone;  // RoPE on queries and keys per head
  double rope_base = 10000.0;      // RoPE's base (frequencies base^(-2i / D))
  int64_t window = 0;              // > 0: key j hidden from query i when j <= i - window; 0: none
  bool alibi = false;              // ALiBi with the paper's slopes (kernels::alibi_default_slopes)
  std::vector<float> alibi_slopes = {};  // (num_heads) given ALiBi slopes (implies alibi), or empty
  float softcap = 0.0f;            // > 0: scaled scores capped as softcap * tanh(x / softcap); 0: none
  // The causal classes' fused path: kF32, or kBF16 (bf16 mode, qkv/kernels/mha.h: bf16 products
  // and q, k, v; fp32 weights, sums, softmax and gradients - mixed precision when training). The
  // textbook path and the self-attention classes compute in f32 only (an error otherwise).
  Dtype dtype = Dtype::kF32;
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

// What a module class takes and does, by its command-line name, so that callers ask the module
// rather than test its name.
struct AttentionModuleInfo {
  const char* name;        // as the command line spells it: "causal-attention"
  int input_rank;          // 2: (T, d_in); 3: (B, T, d_in)
  bool causal;             // has a causal mask (of context_length), dropout and an AttentionPath
  bool multi_head;         // takes num_heads
  bool bias;               // takes qkv_bias
};
const std::vector<AttentionModuleInfo>& attention_modules();  // in attention_module_names() order
// The module called `name`; throws qkv::Error naming the known ones.
const AttentionModuleInfo& attention_module_info(const std::string& name);

}  // namespace qkv
