// qkv/models/decoder.h - the one decoder every family is (models/decoder_spec.h says which choices
// it makes), with the family's state names (models/family.h's StateNames).
//
// Legend: B batch, T tokens, Tn new tokens, P positions already cached, E width, F ff_width,
// V vocab_size, H heads, G key/value heads, D head_dim, L layers.
//
//   ids (B, T) -> x = tok_emb.weight[ids] (+ pos_emb.weight[0:T])             (B, T, E)
//              -> x = drop_emb(x)
//              -> L x DecoderBlock:
//                   x = x + drop_att(att(norm1(x)))        att: MultiHeadAttention(E -> H D -> E), or a
//                                                          linear block's GatedDeltaNetLayer (E -> E)
//                   x = x + drop_ff(ff(norm2(x)))          (without a feed-forward: nothing)
//              -> final_norm(x) -> head: x @ head.weight^T (+ head.bias)      (B, T, V)
//
// Built from Generator(s) it draws what torch.manual_seed(s) followed by the family's PyTorch
// constructor draws, in that order: tok_emb, pos_emb, each block's attention (W_query, W_key,
// W_value, out_proj) then feed-forward, the head (drawn even when it is then tied). In training
// mode its dropouts draw PyTorch's masks from that generator in the forward's order.
//
// Inference paths: forward_cached runs the KV cache's steps on raw rows without allocating
// (once its working rows have grown); keep_bf16_weights keeps bf16 copies of every product's
// weight for bf16 decoding; load_bf16_only holds them in bf16 alone (a BF16 checkpoint in about
// its file size), the float tensors never filled.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/weight_memory.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/models/decoder_spec.h"
#include "qkv/models/language_model.h"
#include "qkv/modules/feed_forward.h"
#include "qkv/modules/gated_deltanet_layer.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/multi_head_attention.h"
#include "qkv/modules/norm.h"

namespace qkv {

struct StateNames;

class DecoderBlock : public Module {
 public:
  // names: the family's (it outlives the block: the registry's). layer: the block's index (its kind).
  DecoderBlock(const DecoderSpec& s, const StateNames& names, Generator& gen, int64_t layer = 0);
  const char* type_name() const override { return "DecoderBlock"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  // (B, T, E) -> (B, T, E); the observer, when given, is shown the block's values as `layer`.
  Tensor forward(const Tensor& x, ForwardObserver* observer = nullptr, int64_t layer = 0);
  Tensor backward(const Tensor& doutput);

  // The block's product weights in bf16, read by cached steps in bf16 mode.
  struct Weights16 {
    WeightVector<uint16_t> qkv, out;        // att's fused (H D + 2 G D, E), out_proj (E, H D)
    WeightVector<uint16_t> gate;            // att's W_gate (H D, E), with the output gate
    std::vector<WeightVector<uint16_t>> linear;  // a linear block's products, GatedDeltaNetLayer::products() order
    std::vector<WeightVector<uint16_t>> ff;  // the feed-forward's linears, FeedForwardNet::linears() order
    // Loaded quantized (load_bf16_only's readq): each product read from its blocks instead where
    // these are not empty (ff_q parallel to ff: one of the two holds each linear).
    QuantMatrix qkv_q = {}, out_q = {}, gate_q = {};
    std::vector<QuantMatrix> ff_q = {};
    // SwiGLU's gate_proj and up_proj rows in one matrix (2 F, E) when both are blocks of one type
    // (ff_q[0] and ff_q[1] then empty): one product, one quantization of its input, a step.
    QuantMatrix gate_up_q = {};
    std::vector<QuantMatrix> linear_q = {};  // parallel to linear
  };
  // Working rows from the caller: h, a (N, E); hidden, up (N, F); N = B Tn; and the attention's
  // scratch, one for every block of the model (null: the block's own).
  struct Scratch {
    float *h, *a, *hidden, *up;
    CachedScratch* att = nullptr;
  };
  // x (B, Tn, E) at the cache's next positions, updated in place; records nothing for backward;
  // allocates nothing once the attention's buffers have grown. w16: read in bf16 mode, or null.
  // A linear-attention block updates its state layer of the cache (f32, whatever the mode).
  void forward_cached(float* x, int64_t B, int64_t Tn, kernels::KvCache& cache, int64_t layer, const Weights16* w16,
                      const Scratch& scratch);

  Norm norm1;
  std::optional<MultiHeadAttention> att;     // the block's token mixer: attention (LayerKind::kAttention)
  std::optional<GatedDeltaNetLayer> linear;  // or Qwen3.5's Gated DeltaNet (kLinear)
  Norm norm2;
  FeedForwardNet ff;
  Dropout drop_att, drop_ff;  // the shortcuts' (the book's one drop_shortcut, applied twice: two records)

 private:
  const StateNames* names_;
  int64_t width_;  // E
  Dtype dtype_;    // the products'
};

class DecoderModel : public LanguageModel {
 public:
  // The spec validated; gen draws the weights, then the dropouts (it must outlive the model).
  DecoderModel(const DecoderSpec& spec, Generator& gen);
  const char* type_name() const override { return "DecoderModel"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;

  const DecoderSpec& spec() const override { return spec_; }
  nlohmann::json config_json() const override;
  std::string describe() const override;

  Tensor forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                 ForwardObserver* observer = nullptr) override;  // (B, T, V)
  Tensor head_logits(const Tensor& x) override;
  void backward(const Tensor& dlogits) override;
  kernels::KvCache make_cache(int64_t batch, kernels::CacheDtype dtype = kernels::CacheDtype::kF32,
                              int64_t capacity = 0) const override;
  using LanguageModel::forward_cached;  // (B, V) of the last new token, through forward_cached_into
  void forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache,
                           float* logits) override;
  bool has_cache() const override { return !blocks.empty(); }
  void set_batch_slice(int64_t begin, int64_t total) override;
  void keep_bf16_weights(bool on = true) override;
  bool has_bf16_weights() const override { return !blocks16_.empty(); }
  bool bf16_only() const override { return bf16_only_; }
  int64_t step_weight_bytes() const override;
  // The bytes of the working rows cached passes have grown: the model's, and its blocks' attention
  // scratch (one for all of them).
  size_t step_scratch_bytes() const;
  // Inference with the weights in bf16 only: every product's weight - the projections, the
  // feed-forward's, the embedding, the head - read as bf16 bits by read16(state name, out) straight
  // into the bf16 copies, the float tensors never filled (built with the generator's init draws
  // off, their memory is never mapped); every other tensor (norms, biases, positions) by read32.
  // Needs bf16 products (spec.attention.dtype). Afterwards forward() runs the cached computation
  // over a fresh cache (every position's logits), and the state dict, backward, train(true) and
  // keep_bf16_weights(false) are refused with a qkv::Error saying to load with f32 products.
  // readq (optional): a product's weight in a ggml type (core/quant_blocks.h), read from its blocks
  // at every step instead of bf16 (core/quant_matvec.h), or none (then read16 reads it). Q, K and V
  // are one product: quantized only when all three come in one type.
  void load_bf16_only(const std::function<void(const std::string&, uint16_t*)>& read16,
                      const std::function<void(const std::string&, float*)>& read32,
                      const std::function<std::optional<QuantMatrix>(const std::string&)>& readq = nullptr);

  Embedding tok_emb;                  // weight (V, E)
  std::optional<Embedding> pos_emb;   // weight (context_length, E), with learned positions
  Dropout drop_emb;
  std::vector<DecoderBlock> blocks;
  Norm final_norm;
  Linear head;                        // weight (V, E) (tok_emb's tensors when tied), bias (V) with head_bias

 private:
  DecoderSpec spec_;
  const StateNames* names_;
  std::string who_;  // "GPT model": starts its messages
  Shape x_shape_;  // (B, T, E) of the last forward
  std::vector<DecoderBlock::Weights16> blocks16_;  // keep_bf16_weights / load_bf16_only, one per block
  WeightVector<uint16_t> head16_;              // (V, E)
  WeightVector<uint16_t> embed16_;             // (V, E): bf16-only and untied (tied: head16_)
  QuantMatrix head_q_, embed_q_;                   // the same, loaded quantized (then the bf16 ones are empty)
  bool bf16_only_ = false;
  void check_floats(const char* what) const;
  // The state names of linear block `block`'s five products (GatedDeltaNetLayer::products()).
  std::vector<std::string> linear_product_names(size_t block);
  // The cached computation: the logits of the last position of each sequence (B, V), or of every
  // position (B, Tn, V) with all_rows.
  void cached_pass(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache,
                   float* logits, bool all_rows);
  void embed_rows(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, int64_t P, float* x) const;
  std::vector<float> step_x_, step_h_, step_a_, step_hidden_, step_last_;  // step_hidden_: SwiGLU's up rows too
  CachedScratch step_att_;  // every block's attention works here in a cached pass
};

// A model of `spec` (its family's names), drawn from gen as the family's PyTorch constructor draws.
// The cache generation makes for a model of `spec` (DecoderModel::make_cache, without the model):
// keys and values of up to `capacity` positions (0: the context length) per attention layer, a
// fixed-size state per linear-attention layer.
kernels::KvCache decoder_cache(const DecoderSpec& spec, int64_t batch, kernels::CacheDtype dtype, int64_t capacity);

std::unique_ptr<LanguageModel> build_model(const DecoderSpec& spec, Generator& gen);
// The same with the init draws off, for loaders (every weight is about to be loaded): nothing is drawn.
std::unique_ptr<DecoderModel> build_model_to_load(const DecoderSpec& spec, Generator& gen);

// Where a forward on `ids` first produces a NaN or an infinity: a parameter (by state-dict name),
// or an intermediate ("embeddings", "blocks.1.attn_scores", "blocks.1.output", "logits", ...).
// "" when everything is finite. Runs in eval mode (restoring the mode) and draws nothing.
std::string first_non_finite(LanguageModel& model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens);

}  // namespace qkv
