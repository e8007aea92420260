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

// What MLA's decoding keeps of the tokens a batch of sequences has seen: their latents only,
// (B, capacity, L) with `length` filled - L numbers per token, where MultiHeadAttention's cache
// keeps 2 d_out (keys and values).
struct LatentCache {
  int64_t batch = 0, capacity = 0, latent_dim = 0, length = 0;
  std::vector<float> latents;
  int64_t bytes() const { return static_cast<int64_t>(latents.size() * sizeof(float)); }
};

class MultiHeadLatentAttention : public AttentionModule {
 public:
  MultiHeadLatentAttention(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "MultiHeadLatentAttention"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;  // (B, T, d_in) -> (B, T, d_out)
  Tensor backward(const Tensor& doutput) override;                            // (B, T, d_out) -> (B, T, d_in)

  // Inference with W_UK and W_UV absorbed: T new tokens after the cache's `length` (a prompt or one
  // decoding step), attending causally to every cached latent c_s and to each other, (B, T, d_in) ->
  // (B, T, d_out), equal to forward's rows for them. Per head h no key or value is made:
  //   scores(t, s) = (W_UK_h^T q_h(t)) . c_s / sqrt(D)   (W_UK's bias adds the same to a row's
  //                                                       scores: the softmax cancels it)
  //   context_h(t) = W_UV_h (sum_s w(t, s) c_s) + b_UV_h  (the weights of a row sum to 1)
  // so a step reads L numbers per cached token. The new latents are appended. Eval mode only (no
  // dropout); more tokens than the capacity left, or a cache of another shape, are errors naming
  // the sizes; nothing is kept for backward (a backward after it is refused).
  LatentCache new_cache(int64_t batch, int64_t capacity) const;
  Tensor forward_cached(const Tensor& x, LatentCache& cache);
  // A cache of x's length, then x's tokens one at a time through it.
  Tensor forward_token_by_token(const Tensor& x) override;

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
  std::vector<float> lse_; // fused path: (B, H, T), then its low parts (kernels::AttentionOptions::lse_low)
  float dropout_p_ = 0.0f;  // fused path: the kernel's dropout (p, and the Philox seed drawn for it)
  uint64_t dropout_seed_ = 0;
};

}  // namespace qkv
