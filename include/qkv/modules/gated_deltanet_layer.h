// qkv/modules/gated_deltanet_layer.h - Qwen3.5's linear-attention layer (Hugging Face's
// Qwen3_5GatedDeltaNet; the book's ch05/16_qwen3.5): the gated delta rule of GatedDeltaNet with a
// causal depthwise convolution before it, key heads that value heads share, and beta per head.
//
// Legend: B batch, T tokens, M = d_model, Hk key heads, Hv value heads (a multiple of Hk), Dk key
// width, Dv value width, K the convolution's kernel; Kd = Hk Dk, Vd = Hv Dv.
//   qkv   = in_proj_qkv(x)                                  (B, T, 2 Kd + Vd), no bias
//   qkv   = silu(conv1d(qkv))   causal, depthwise: c_t = sum_i w[c, i] qkv[t - K + 1 + i, c]
//   q, k, v = split(qkv)                                    (B, T, Hk, Dk) x 2, (B, T, Hv, Dv)
//   q, k  = l2norm(q) / sqrt(Dk), l2norm(k)                 value head h reads key head h / (Hv / Hk)
//   beta  = sigmoid(in_proj_b(x))                           (B, T, Hv): one per head
//   alpha = exp(-exp(A_log) * softplus(in_proj_a(x) + dt_bias))   (B, T, Hv)
//   y     = the gated delta rule (modules/delta_rule.h)     (B, T, Hv, Dv)
//   out   = out_proj(rmsnorm(y) * norm.weight * silu(in_proj_z(x)))   per head over Dv, eps 1e-6
// The state dict is Hugging Face's: conv1d.weight (2 Kd + Vd, 1, K), dt_bias (Hv), A_log (Hv),
// norm.weight (Dv), out_proj.weight (M, Vd), in_proj_qkv.weight (2 Kd + Vd, M), in_proj_z.weight
// (Vd, M), in_proj_b.weight and in_proj_a.weight (Hv, M), drawn in that order as the class does
// (conv1d as nn.Conv1d: uniform(+-1/sqrt(K)); A_log = log(uniform(0, 16)); dt_bias, norm ones).
// The computation: the gated delta rule in chunks (modules/delta_rule_chunked.h: float32 products,
// keeping each chunk's starting state for the backward), or with config.path kTextbook the
// token-by-token recurrence it is tested against (double states, every token's kept). A cached
// step of one token runs the recurrence on the cache's float state, in float
// (kernels/delta_rule_step.h); a prompt of more runs in chunks on that state. config.context_length
// is qkv's limit on T only.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "qkv/core/quant_blocks.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/delta_rule.h"
#include "qkv/modules/delta_rule_chunked.h"
#include "qkv/modules/layers.h"

namespace qkv {

// What a batch of sequences' later tokens need of their earlier ones, fixed in size whatever their
// length: the convolution's last K - 1 inputs (B, K - 1, 2 Kd + Vd) and the recurrence's state
// (B, Hv, Dk, Dv). From GatedDeltaNetLayer::new_cache: zeros, a sequence's start.
struct GatedDeltaNetCache {
  int64_t batch = 0;
  std::vector<float> conv;
  std::vector<float> state;
};

// The floats of a cache for `batch` sequences of a layer of config c (GatedDeltaNetLayer::cache_floats
// without the layer).
int64_t gated_deltanet_cache_floats(const AttentionConfig& c, int64_t batch);

class GatedDeltaNetLayer : public AttentionModule {
 public:
  GatedDeltaNetLayer(const AttentionConfig& config, Generator& gen);
  const char* type_name() const override { return "Qwen3_5GatedDeltaNet"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  // (B, T, M) -> (B, T, M); a trace keeps the normalised queries and keys (per value head), the
  // values and the context y, (B, Hv, T, D) each, and as `weights` the exact linear map the
  // recurrence applies to the values: y = A v per head, A (B, Hv, T, T) lower-triangular (not
  // softmax weights: its rows need not sum to 1 and may be negative).
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) override;
  Tensor backward(const Tensor& doutput) override;  // (B, T, M) -> (B, T, M)

  // Inference, T new tokens (a prompt, or one decoding step) after those the cache holds: (B, T, M)
  // -> (B, T, M), equal to forward's rows for them; the cache becomes the state after them. Keeps
  // nothing for backward (a backward after it is refused). A cache of another size is an error.
  GatedDeltaNetCache new_cache(int64_t batch) const;
  Tensor forward_cached(const Tensor& x, GatedDeltaNetCache& cache);
  // A fresh cache, then x's tokens one at a time through it (each a recurrent step on the state).
  Tensor forward_token_by_token(const Tensor& x) override;
  // The same on raw rows x (B, T, M) -> y (B, T, M) with the cache in the caller's floats (a
  // hybrid model's KvCache state layer): the recurrence's state (B, Hv, Dk, Dv), then the
  // convolution's last K - 1 inputs (B, K - 1, 2 Kd + Vd); cache_floats(B) of them, zeros at a
  // sequence's start.
  int64_t cache_floats(int64_t batch) const;
  // w16 (optional): the five products' weights in bf16 (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a,
  // out_proj; bf16 products, read instead of the float weights, which need not be filled), or as a
  // ggml type's blocks (x quantized per block, integer products: core/linear.h), read instead of both.
  struct Weights16 {
    const uint16_t *qkv = nullptr, *z = nullptr, *b = nullptr, *a = nullptr, *out = nullptr;
    QuantView qkv_q = {}, z_q = {}, b_q = {}, a_q = {}, out_q = {};
  };
  void forward_cached(const float* x, int64_t B, int64_t T, float* y, float* cache, const Weights16* w16 = nullptr);
  // The five products in that order (their weights' names and shapes; bf16 copies are made of them).
  std::vector<const Linear*> products() const;
  // The working rows of a cached call (the projections, the convolution, q, k, v, z, the decays,
  // y: about 150 floats a token for Qwen3.5-0.8B's layer), moved in from `work` for the call and
  // back after it, so that the layers of a model share one set: a prompt's rows are then held
  // once, not once per layer, and their pages are touched once (DecoderModel gives its linear
  // layers one). Without one, or while another thread holds it, a layer works in its own.
  struct CachedWork {
    std::mutex busy;
    std::vector<float> rows[17];
  };
  void share_cached_work(std::shared_ptr<CachedWork> work) { cached_work_ = std::move(work); }

  int64_t key_width() const;    // Kd
  int64_t value_width() const;  // Vd

  // (declared in the class's draw order)
  AttentionConfig config;
  Tensor conv_weight, dconv_weight;  // conv1d.weight (2 Kd + Vd, 1, K)
  Tensor dt_bias, ddt_bias;          // (Hv), ones
  Tensor A_log, dA_log;              // (Hv), log(uniform(0, 16))
  Tensor norm_weight, dnorm_weight;  // norm.weight (Dv), ones
  Linear out_proj;                   // (M, Vd), no bias
  Linear in_proj_qkv;                // (2 Kd + Vd, M), no bias
  Linear in_proj_z;                  // (Vd, M)
  Linear in_proj_b, in_proj_a;       // (Hv, M)

 private:
  DeltaRuleShape rule_shape(int64_t B, int64_t T) const;
  bool chunked() const { return config.path != AttentionPath::kTextbook; }
  DeltaRuleLogInputs log_inputs() const {
    return {qn_.data(), kn_.data(), v_.data(), beta_.data(), log_alpha_.data()};
  }
  // x's projections, convolution (after `history`, (B, K - 1, 2 Kd + Vd), or zeros if null), split,
  // normalised q and k, beta and the decay, into the members below; then y_ through the gated norm
  // and out_proj.
  void project(const Tensor& x, const float* history, const Weights16* w16 = nullptr);
  Tensor output(int64_t B, int64_t T, const Weights16* w16 = nullptr);
  // A cached step: project x after `history` (B, K - 1, C), run the recurrence from `state` (updated),
  // write the convolution's new last K - 1 inputs to `next_history` (may be history) -> out_proj's rows.
  Tensor cached_step(const Tensor& x, const float* history, float* state, float* next_history,
                     const Weights16* w16 = nullptr);
  Shape x_shape_;
  // The last forward's values: the projection before the convolution and after it (before silu)
  // (B, T, 2 Kd + Vd), the values (after it) (B, T, Hv, Dv); z (B, T, Vd); beta, alpha, log alpha, a + dt_bias (B, T, Hv); q and k
  // normalised and repeated to the value heads (B, T, Hv, Dk) with the key heads' 1 / norms
  // (B, T, Hk); the recurrence's states (textbook) or the chunks' starting states, and the output y
  // (B, T, Hv, Dv).
  std::vector<float> mixed_, conv_, v_, z_, beta_, alpha_, log_alpha_, a_, qn_, kn_, rq_, rk_, y_, chunk_states_;
  std::vector<double> states_;
  std::vector<float> q_, k_, qh_, kh_;  // project()'s q and k before and after their norms
  std::vector<float> taps_;  // project()'s convolution kernel by tap (K, 2 Kd + Vd), its capacity kept
  std::shared_ptr<CachedWork> cached_work_;
};

}  // namespace qkv
