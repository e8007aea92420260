// The attention-module factory. See include/qkv/modules/attention_module.h.
#include "qkv/modules/attention_module.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/gated_deltanet.h"
#include "qkv/modules/gated_deltanet_layer.h"
#include "qkv/modules/latent_attention.h"
#include "qkv/modules/multi_head_attention.h"
#include "qkv/modules/self_attention.h"

namespace qkv {

AttentionPath parse_attention_path(const std::string& name) {
  if (name == "auto") return AttentionPath::kAuto;
  if (name == "fused") return AttentionPath::kFused;
  if (name == "textbook") return AttentionPath::kTextbook;
  fail("unknown attention path ", excerpt(name), "; expected one of: auto, fused, textbook");
}

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::kAuto: return "auto";
    case AttentionPath::kFused: return "fused";
    case AttentionPath::kTextbook: return "textbook";
  }
  return "?";
}

const std::vector<AttentionModuleInfo>& attention_modules() {
  //  name, class, input rank, causal, multi_head, bias, split_heads, variants, softmax, linear_sizes, cached
  static const std::vector<AttentionModuleInfo> modules = {
      {"self-attention-v1", "SelfAttentionV1", 2, false, false, false, false, false, true, false, false},
      {"self-attention-v2", "SelfAttentionV2", 2, false, false, true, false, false, true, false, false},
      {"causal-attention", "CausalAttention", 3, true, false, true, false, false, true, false, false},
      {"mha-wrapper", "MultiHeadAttentionWrapper", 3, true, true, true, false, false, true, false, false},
      {"mha", "MultiHeadAttention", 3, true, true, true, true, true, true, false, true},
      {"gated-mha", "GatedMultiHeadAttention", 3, true, true, true, true, true, true, false, true},
      {"mla", "MultiHeadLatentAttention", 3, true, true, true, true, false, true, false, true},
      {"deltanet", "GatedDeltaNet", 3, true, true, true, true, false, false, false, false},
      {"gated-deltanet", "Qwen3_5GatedDeltaNet", 3, true, true, false, false, false, false, true, true},
  };
  return modules;
}

const std::vector<std::string>& attention_module_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const AttentionModuleInfo& m : attention_modules()) n.push_back(m.name);
    return n;
  }();
  return names;
}

Tensor AttentionModule::forward_token_by_token(const Tensor&) {
  fail(type_name(), " has no inference cache to run token by token (modules with one: ",
       attention_module_list(&AttentionModuleInfo::cached), ")");
}

void AttentionModule::check_token_input(const Tensor& x, int64_t d_in) const {
  QKV_CHECK(x.dim() == 3 && x.size(0) >= 1 && x.size(1) >= 1 && x.size(2) == d_in, type_name(),
            ": forward_token_by_token takes (batch >= 1, T >= 1, d_in = ", d_in, "), got ", x.describe());
}

Tensor AttentionModule::each_token(const Tensor& x, const std::function<Tensor(const Tensor&)>& step) {
  std::vector<Tensor> rows;
  for (int64_t t = 0; t < x.size(1); ++t) rows.push_back(step(x.slice(1, t, t + 1).contiguous()));
  return cat(rows, 1);
}

std::string attention_module_list(bool AttentionModuleInfo::*what) {
  std::string list;
  for (const AttentionModuleInfo& m : attention_modules())
    if (what == nullptr || m.*what) list += std::string(list.empty() ? "" : ", ") + m.name;
  return list;
}

const AttentionModuleInfo& attention_module_info(const std::string& name) {
  for (const AttentionModuleInfo& m : attention_modules())
    if (name == m.name) return m;
  fail("unknown module '", name, "'; expected one of: ", attention_module_list());
}

std::string attention_config_name(kernels::SpecField field) {
  switch (field) {
    case kernels::SpecField::kHeads: return "num_heads";
    case kernels::SpecField::kKvHeads: return "num_kv_heads";
    default: return kernels::spec_field_name(field);
  }
}

AttentionConfig attention_config(const std::string& module, int64_t d_in, int64_t d_out, int64_t context_length,
                                 double dropout, int64_t num_heads, bool qkv_bias) {
  const AttentionModuleInfo& info = attention_module_info(module);
  QKV_CHECK(!info.linear_sizes, module, "'s sizes are Qwen3.5's, not the book constructor's: use gated_deltanet_config");
  const std::string who = info.class_name;
  QKV_CHECK(d_in > 0, who, ": d_in (", d_in, ") must be positive");
  QKV_CHECK(d_out > 0, who, ": d_out (", d_out, ") must be positive");
  QKV_CHECK(num_heads > 0, who, ": num_heads (", num_heads, ") must be positive");
  QKV_CHECK(info.multi_head || num_heads == 1, who, " has one head; num_heads (", num_heads, ") must be 1");
  AttentionConfig c;
  c.d_in = d_in;
  c.context_length = context_length;
  c.qkv_bias = qkv_bias;
  c.attention.heads = num_heads;
  c.attention.causal = info.causal;
  c.attention.dropout = dropout;
  c.output_gate = module == "gated-mha";
  if (module == "mla") c.latent_dim = mla_default_latent_dim(d_out);
  if (info.split_heads) {
    QKV_CHECK(d_out % num_heads == 0, who, ": d_out (", d_out, ") must be divisible by num_heads (", num_heads, ")");
    c.attention.head_dim = d_out / num_heads;
  } else {
    c.attention.head_dim = d_out;  // the wrapper's heads are each d_out wide
  }
  return c;
}

std::unique_ptr<AttentionModule> make_attention_module(const std::string& name, const AttentionConfig& c,
                                                       Generator& gen) {
  const AttentionModuleInfo& info = attention_module_info(name);
  QKV_CHECK(info.variants || !c.attention.has_variants(), "the attention module ", name,
            " takes no variants (num_kv_heads, rope, window, alibi, softcap): only ",
            attention_module_list(&AttentionModuleInfo::variants), " do");
  QKV_CHECK(c.attention.dtype == Dtype::kF32 || info.causal, "the attention module ", name,
            " computes in f32 only: dtype bf16 runs the fused path of causal-attention, mha-wrapper, mha and ",
            "gated-mha");
  QKV_CHECK(c.output_gate == (name == "gated-mha"), "the attention module ", name,
            c.output_gate ? " has no output gate (output_gate is gated-mha's)" : " needs output_gate");
  QKV_CHECK((c.latent_dim != 0) == (name == "mla"), "the attention module ", name,
            c.latent_dim != 0 ? " has no latent (latent_dim is mla's)" : " needs latent_dim");
  QKV_CHECK((c.linear.conv_kernel != 0) == info.linear_sizes, "the attention module ", name,
            c.linear.conv_kernel != 0 ? " has no convolution (the linear sizes are gated-deltanet's)"
                                      : " needs its linear sizes (gated_deltanet_config)");
  const int64_t d_out = c.attention.head_dim;
  if (name == "self-attention-v1") {
    QKV_CHECK(!c.qkv_bias, "self-attention-v1 has no bias (its weights are plain matrices); qkv_bias must be false");
    return std::make_unique<SelfAttentionV1>(c.d_in, d_out, gen);
  }
  if (name == "self-attention-v2") return std::make_unique<SelfAttentionV2>(c.d_in, d_out, c.qkv_bias, gen);
  if (name == "causal-attention") return std::make_unique<CausalAttention>(c, gen);
  if (name == "mha-wrapper") return std::make_unique<MultiHeadAttentionWrapper>(c, gen);
  if (name == "mha") return std::make_unique<MultiHeadAttention>(c, gen);
  if (name == "gated-mha") return std::make_unique<GatedMultiHeadAttention>(c, gen);
  if (name == "mla") return std::make_unique<MultiHeadLatentAttention>(c, gen);
  if (name == "deltanet") return std::make_unique<GatedDeltaNet>(c, gen);
  if (name == "gated-deltanet") return std::make_unique<GatedDeltaNetLayer>(c, gen);
  fail("unknown module '", name, "'; expected one of: ", attention_module_list());
}

}  // namespace qkv
