// qkv/modules/latent_attention.h - the book's bonus MultiHeadLatentAttention (ch04/05_mla; DeepSeek
// V2/V3's attention, Kimi Linear's full-attention layers): keys and values made from a small latent.
//
// Legend: B batch, T tokens, H heads, D = d_out / H, L = latent_dim.
//   queries = W_query(x)                      (B, T, H D) -> (B, H, T, D)
//   latent  = W_DKV(x)                        (B, T, L)     the only per-token state a cache keeps
//   keys    = W_UK(latent)                    (B, T, H D) -> (B, H, T, D)
//   values  = W_UV(latent)                    (B, T, H D) -> (B, H, T, D)
//   context = causal attention per head       softmax(q k^T / sqrt(D)) (dropout) v, (B, H, T, D)
//   out     = out_proj(context merged)        (B, T, d_out)
// The state dict is the book class's: W_query, W_DKV, W_UK, W_UV (bias with qkv_bias), out_proj
// (with bias); no mask buffer (the class masks by positions). Drawn in that order, so a generator
// seeded as torch.manual_seed(S) gives the class's weights. config.context_length is qkv's limit
// on T only (the class takes none). latent_dim: config.latent_dim (the class's default,
// max(16, d_out / 8), when 0 is given to attention_config's caller; see mla_default_latent_dim).
// Paths as MultiHeadAttention's (AttentionPath): the fused kernel on the heads, or the textbook
// computation (the book's, PyTorch's dropout masks); both agree within 1e-5.
#pragma once

#include <vector>

#include "qkv/modules/attention_module.h"
#include "qkv/modules/causal_attention.h"

namespace qkv {

// The book class's default latent_dim: max(16, d_out / 8).
int64_t mla_default_latent_dim(int64_t d_out);

class MultiHeadLatentAttention : public AttentionModule {
 public:
  MultiHeadLatentAttention(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "MultiHeadLatentAttention"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;  // (B, T, d_in) -> (B, T, d_out)
  Tensor backward(const Tensor& doutput) override;                            // (B, T, d_out) -> (B, T, d_in)

  AttentionConfig config;
  Linear W_query;     // (d_out, d_in)
  Linear W_DKV;       // (L, d_in)
  Linear W_UK, W_UV;  // (d_out, L)
  Linear out_proj;    // (d_out, d_out), with bias
  Dropout dropout;

 private:
  Shape x_shape_;          // (B, T, d_in) of the last forward
  bool fused_last_ = false;
  AttentionSaved saved_;   // textbook path
  Tensor q_, k_, v_, o_;   // fused path: (B, H, T, D) contiguous heads and the context
  std::vector<float> lse_; // fused path: (B, H, T)
  float dropout_p_ = 0.0f;  // fused path: the kernel's dropout (p, and the Philox seed drawn for it)
  uint64_t dropout_seed_ = 0;
};

}  // namespace qkv
