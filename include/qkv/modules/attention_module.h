// qkv/modules/attention_module.h - what the five attention classes have in common, and a
// factory that builds one by its command-line name.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/kernels/attention_spec.h"
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

// What an attention module is built from. The attention itself is one AttentionSpec
// (kernels/attention_spec.h): heads H and their width D (head_dim), and for MultiHeadAttention the
// variants (kv_heads, rope, window, ALiBi, softcap); dropout and dtype for the causal classes.
// The book's constructor arguments map onto it by attention_config() below: d_out is H D for
// MultiHeadAttention, each head's D for MultiHeadAttentionWrapper, and D (one head) for the rest;
// every module's output is (..., H D) wide.
struct AttentionConfig {
  int64_t d_in = 0;
  int64_t context_length = 0;  // the causal classes only: the mask buffer's size
  bool qkv_bias = false;       // all but SelfAttentionV1
  AttentionPath path = AttentionPath::kAuto;  // the causal classes only
  // heads and head_dim; the causal classes: dropout (on the attention weights) and dtype (kBF16:
  // bf16 mode on the fused path, qkv/kernels/mha.h; the textbook path and the self-attention
  // classes compute in f32 only); MultiHeadAttention: kv_heads (W_key and W_value (G D, d_in)),
  // rope, window, alibi / alibi_slopes, softcap. causal is the class's own (set by
  // attention_config; true for the causal classes).
  kernels::AttentionSpec attention = {};
  // MultiHeadAttention's output projection (Llama's and Qwen3's o_proj): its width (0: d_out; Qwen3
  // maps H D = 2,048 back to 1,024) and whether it has a bias (the book's has).
  int64_t out_dim = 0;
  bool out_bias = true;
  // GatedMultiHeadAttention's sigmoid output gate: W_gate (d_out, d_in) (with qkv_bias), drawn
  // right after W_query; out_proj reads context * sigmoid(W_gate(x)). Set by attention_config for
  // gated-mha.
  bool output_gate = false;
  // With output_gate, Qwen3.5's layout: one parameter holds the queries' and the gate's rows
  // (MultiHeadAttention::q_and_gate, (2 d_out, d_in): head h's D query rows, then its D gate rows),
  // drawn as one Linear where W_query is drawn (the book's Qwen3.5 GroupedQueryAttention.W_query).
  bool gate_in_query = false;
  // QK-norm's RMSNorms scale by 1 + weight, zero-initialised (Qwen3.5's; layer_norm.h's unit_offset).
  bool qk_norm_unit_offset = false;
  // MultiHeadLatentAttention's latent width L (W_DKV (L, d_in), W_UK and W_UV (d_out, L)); 0 for the
  // other modules. attention_config sets the class's default, max(16, d_out / 8), for mla.
  int64_t latent_dim = 0;
  // Qwen3.5's linear-attention layer (gated-deltanet; modules/gated_deltanet_layer.h): its value
  // heads are attention.heads and its key width attention.head_dim; here the key heads (dividing
  // the value heads), the value width and the convolution's kernel. All 0 for the other modules.
  struct LinearSizes {
    int64_t key_heads = 0, value_dim = 0, conv_kernel = 0;
    double norm_eps = 1e-6;  // the gated RMSNorm's epsilon (config.json's rms_norm_eps)
  } linear;
  int64_t d_out() const { return attention.width(); }  // H D: the attention's width
  int64_t out_width() const { return out_dim > 0 ? out_dim : d_out(); }
};

// The config of `module` (its command-line name) from the book's constructor arguments:
// SelfAttention_v1/v2(d_in, d_out[, qkv_bias]), CausalAttention(d_in, d_out, context_length,
// dropout, qkv_bias), MultiHeadAttentionWrapper(..., num_heads, ...) and MultiHeadAttention(d_in,
// d_out, context_length, dropout, num_heads, qkv_bias). Throws qkv::Error naming the argument:
// sizes below 1, "MultiHeadAttention: d_out (10) must be divisible by num_heads (4)", num_heads
// other than 1 for the one-head classes.
AttentionConfig attention_config(const std::string& module, int64_t d_in, int64_t d_out, int64_t context_length = 0,
                                 double dropout = 0.0, int64_t num_heads = 1, bool qkv_bias = false);

// gated-deltanet's config: Qwen3_5GatedDeltaNet(hidden_size d_model, linear_num_value_heads,
// linear_num_key_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim), and
// qkv's limit on T. Throws qkv::Error naming the value: sizes below 1, value heads not a multiple
// of key heads, a kernel below 1.
AttentionConfig gated_deltanet_config(int64_t d_model, int64_t value_heads, int64_t key_heads, int64_t key_dim,
                                      int64_t value_dim, int64_t conv_kernel, int64_t context_length);

// The modules' names for the spec's fields in messages (num_heads, num_kv_heads, head_dim, window,
// rope, rope_base, alibi_slopes, softcap, dropout): the configs' keys.
std::string attention_config_name(kernels::SpecField field);

class AttentionModule : public Module {
 public:
  // SelfAttentionV1/V2: (T, d_in) -> (T, d_out); the others: (B, T, d_in) -> (B, T, out).
  // With `trace`, every intermediate of this call is kept there (per head for the multi-head ones).
  virtual Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) = 0;
  // The gradient of the input given dL/doutput (shaped as forward's output), for the last
  // forward call; adds every parameter's gradient into its d<name> member (see module.h).
  virtual Tensor backward(const Tensor& doutput) = 0;
  virtual int input_rank() const { return 3; }
  // The output computed through the module's inference cache, fed one token at a time as a
  // decoding loop feeds it (eval mode; nothing kept for backward): forward's rows within float
  // rounding. Modules with no cache (AttentionModuleInfo::cached false) throw naming the ones that
  // have one.
  virtual Tensor forward_token_by_token(const Tensor& x);

 protected:
  // What forward_token_by_token's overrides share. x (B, T, d_in) with B and T at least 1, or a clear error
  void check_token_input(const Tensor& x, int64_t d_in) const;
  // step(x[:, t : t + 1]) for t = 0, 1, ... (each a (B, 1, out) row through the caller's cache),
  // the rows concatenated: (B, T, out).
  static Tensor each_token(const Tensor& x, const std::function<Tensor(const Tensor&)>& step);
};

// Names as the command line spells them: self-attention-v1, self-attention-v2, causal-attention,
// mha-wrapper, mha, gated-mha, mla, deltanet, gated-deltanet. The constructor draws from `gen` exactly as the PyTorch class would.
std::unique_ptr<AttentionModule> make_attention_module(const std::string& name, const AttentionConfig& config,
                                                       Generator& gen);
const std::vector<std::string>& attention_module_names();

// What a module class takes and does, by its command-line name, so that callers ask the module
// rather than test its name.
struct AttentionModuleInfo {
  const char* name;        // as the command line spells it: "causal-attention"
  const char* class_name;  // as qkv's class is called (and in its messages): "CausalAttention"
  int input_rank;          // 2: (T, d_in); 3: (B, T, d_in)
  bool causal;             // has a causal mask (of context_length), dropout and an AttentionPath
  bool multi_head;         // takes num_heads
  bool bias;               // takes qkv_bias
  bool split_heads;        // d_out is split into num_heads heads (d_out % num_heads == 0)
  bool variants;           // takes the attention variants (num_kv_heads, rope, window, alibi, softcap)
  bool softmax;            // attends by softmax weights (a trace has them); false: a linear recurrence
  bool linear_sizes;       // sized by gated_deltanet_config (key heads, key and value widths, a conv kernel)
  bool cached;             // has an inference cache: forward_token_by_token runs through it
};
const std::vector<AttentionModuleInfo>& attention_modules();  // in attention_module_names() order
// The module called `name`; throws qkv::Error naming the known ones.
const AttentionModuleInfo& attention_module_info(const std::string& name);
// The names of the modules that have `what` ("mha, gated-mha" for &AttentionModuleInfo::variants),
// in table order, for messages and help texts; every name without a field.
std::string attention_module_list(bool AttentionModuleInfo::*what = nullptr);

}  // namespace qkv
