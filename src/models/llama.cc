// The Llama 3 and Qwen3 families. See include/qkv/models/llama.h.
#include "qkv/models/llama.h"

#include <cmath>
#include <cstring>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/linear.h"
#include "qkv/core/ops.h"
#include "qkv/core/pointwise.h"
#include "qkv/kernels/norm_rows.h"
#include "models/cached_rows.h"
#include "models/model_shape.h"

namespace qkv {
namespace {

using models_detail::add_into;
using models_detail::bf16_copy;
using models_detail::linear_rows;
using models_detail::rows_of;

const LlamaConfig& validated(const LlamaConfig& c) {
  validate_llama_config(c, "LlamaModel");
  return c;
}

// The attention of a block: H heads of D over E, G key/value heads, QK-norm (Qwen3), RoPE "half"
// with rope_theta and the scaling, causal, o_proj (E, H D) without bias, no dropout.
AttentionConfig attention_of(const LlamaConfig& c) {
  AttentionConfig a;
  a.d_in = c.hidden_size;
  a.context_length = c.max_position_embeddings;
  a.qkv_bias = false;
  a.out_bias = false;
  a.out_dim = c.hidden_size;
  a.path = c.path;
  kernels::AttentionSpec& s = a.attention;
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.rope = kernels::RopeLayout::kHalf;
  s.rope_base = c.rope_theta;
  s.rope_scaling = c.rope_scaling;
  s.qk_norm = c.qk_norm();
  s.qk_norm_eps = c.rms_norm_eps;
  s.dtype = c.dtype;
  return a;
}

std::vector<LlamaBlock> build_layers(const LlamaConfig& c, Generator& gen) {
  std::vector<LlamaBlock> layers;
  layers.reserve(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.emplace_back(c, gen);
  return layers;
}

void norm_rows(const RMSNorm& n, const float* x, int64_t N, float* y) {
  kernels::rms_norm_rows(x, N, n.weight.size(0), n.weight.data(), n.eps, y);
}

}  // namespace

// --- LlamaBlock ----------------------------------------------------------------------------------

LlamaBlock::LlamaBlock(const LlamaConfig& c, Generator& gen)
    : input_layernorm(c.hidden_size, c.rms_norm_eps),
      self_attn(attention_of(c), gen),
      post_attention_layernorm(c.hidden_size, c.rms_norm_eps),
      mlp(c.hidden_size, c.intermediate_size, gen) {
  for (Linear* l : {&mlp.gate_proj, &mlp.up_proj, &mlp.down_proj}) l->dtype = c.dtype;
}

void LlamaBlock::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  input_layernorm.collect_state(prefix + "input_layernorm.", out);
  const std::string a = prefix + "self_attn.";
  self_attn.W_query.collect_state(a + "q_proj.", out);
  self_attn.W_key.collect_state(a + "k_proj.", out);
  self_attn.W_value.collect_state(a + "v_proj.", out);
  self_attn.out_proj.collect_state(a + "o_proj.", out);
  if (self_attn.config.attention.qk_norm) {
    self_attn.q_norm.collect_state(a + "q_norm.", out);
    self_attn.k_norm.collect_state(a + "k_norm.", out);
  }
  post_attention_layernorm.collect_state(prefix + "post_attention_layernorm.", out);
  mlp.collect_state(prefix + "mlp.", out);
}

Tensor LlamaBlock::forward(const Tensor& x, AttentionTrace* trace) {
  // x = x + self_attn(input_layernorm(x))
  const Tensor mid = add(x, self_attn.forward(input_layernorm.forward(x), trace));
  // x = x + mlp(post_attention_layernorm(x))
  return add(mid, mlp.forward(post_attention_layernorm.forward(mid)));
}

Tensor LlamaBlock::backward(const Tensor& doutput) {
  const Tensor dmid = add(doutput, post_attention_layernorm.backward(mlp.backward(doutput)));
  return add(dmid, input_layernorm.backward(self_attn.backward(dmid)));
}

void LlamaBlock::forward_cached(float* x, int64_t B, int64_t Tn, kernels::KvCache& cache, int64_t layer,
                                const Weights16* w16, const Scratch& s) {
  const bool bf16 = w16 != nullptr && self_attn.config.attention.dtype == Dtype::kBF16;
  const FusedWeights16 att16 = bf16 ? FusedWeights16{w16->qkv.data(), w16->out.data()} : FusedWeights16{};
  const int64_t N = B * Tn, E = input_layernorm.weight.size(0), F = mlp.gate_proj.weight.size(0);
  // x = x + self_attn(input_layernorm(x))
  norm_rows(input_layernorm, x, N, s.h);
  self_attn.forward_cached(s.h, B, Tn, s.a, cache, layer, att16);
  add_into(x, s.a, N * E);
  // x = x + down_proj(silu(gate_proj(h)) * up_proj(h)), h = post_attention_layernorm(x)
  norm_rows(post_attention_layernorm, x, N, s.h);
  linear_rows("LlamaModel", s.h, N, mlp.gate_proj, bf16 ? w16->gate.data() : nullptr, s.gate);
  linear_rows("LlamaModel", s.h, N, mlp.up_proj, bf16 ? w16->up.data() : nullptr, s.up);
  swiglu(s.gate, s.up, s.gate, N * F);  // silu(gate) * up
  linear_rows("LlamaModel", s.gate, N, mlp.down_proj, bf16 ? w16->down.data() : nullptr, s.a);
  add_into(x, s.a, N * E);
}

// --- LlamaModel ----------------------------------------------------------------------------------

LlamaModel::LlamaModel(const LlamaConfig& c, Generator& gen)
    : config(validated(c)),
      embed_tokens(c.vocab_size, c.hidden_size, gen),
      layers(build_layers(c, gen)),
      norm(c.hidden_size, c.rms_norm_eps),
      lm_head(c.hidden_size, c.vocab_size, false, gen) {
  if (c.tie_word_embeddings) {  // one tensor: the head's values and gradients are the embedding's
    lm_head.weight = embed_tokens.weight;
    lm_head.dweight = embed_tokens.dweight;
  }
  lm_head.dtype = c.dtype;
}

void LlamaModel::check_floats(const char* what) const {
  QKV_CHECK(!bf16_only_, "LlamaModel: ", what, " needs the float weights, but this model holds its weights in bf16 ",
            "only (loaded for generation): load it with f32 products (--dtype f32, LoadOptions::dtype) for that");
}

void LlamaModel::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  check_floats("the state dict");
  embed_tokens.collect_state(prefix + "model.embed_tokens.", out);
  for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_state(prefix + "model.layers." + std::to_string(i) + ".", out);
  norm.collect_state(prefix + "model.norm.", out);
  if (!config.tie_word_embeddings) lm_head.collect_state(prefix + "lm_head.", out);
}

void LlamaModel::train(bool on) {
  if (on) check_floats("training");
  if (on) keep_bf16_weights(false);  // the weights are about to change
  Module::train(on);
  for (LlamaBlock& b : layers) {
    b.train(on);
    b.self_attn.train(on);
  }
}

void LlamaModel::keep_bf16_weights(bool on) {
  check_floats("keep_bf16_weights");
  layers16_.clear();
  head16_.clear();
  if (!on) return;
  for (const LlamaBlock& b : layers)
    layers16_.push_back({bf16_copy(b.self_attn.fused_qkv_weight()), bf16_copy(b.self_attn.out_proj.weight),
                         bf16_copy(b.mlp.gate_proj.weight), bf16_copy(b.mlp.up_proj.weight),
                         bf16_copy(b.mlp.down_proj.weight)});
  head16_ = bf16_copy(lm_head.weight);
}

nlohmann::json LlamaModel::config_json() const {
  nlohmann::json j = llama_config_json(config);
  j["dtype"] = dtype_name(config.dtype);
  return j;
}

std::string LlamaModel::describe() const {
  const LlamaConfig& c = config;
  return str(c.family == LlamaFamily::kQwen3 ? "Qwen3" : "Llama", " model: ", c.num_hidden_layers, " layers x ",
             c.num_attention_heads, " heads (", c.num_key_value_heads, " key/value) of ", c.head_dim,
             ", hidden ", c.hidden_size, ", intermediate ", c.intermediate_size, ", vocab ", c.vocab_size,
             ", context ", c.max_position_embeddings, c.tie_word_embeddings ? ", head tied to the embedding" : "");
}

void LlamaModel::load_bf16_only(const std::function<void(const std::string&, uint16_t*)>& read16,
                                const std::function<void(const std::string&, float*)>& read32) {
  QKV_CHECK(config.dtype == Dtype::kBF16, "LlamaModel: weights in bf16 only need bf16 products (config.dtype)");
  const int64_t E = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const int64_t HD = config.num_attention_heads * config.head_dim, GD = config.num_key_value_heads * config.head_dim;
  auto bits = [](int64_t n) { return std::vector<uint16_t>(static_cast<size_t>(n)); };
  std::vector<LlamaBlock::Weights16> layers16;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaBlock::Weights16 w{bits((HD + 2 * GD) * E), bits(E * HD), bits(F * E), bits(F * E), bits(E * F)};
    read16(p + "self_attn.q_proj.weight", w.qkv.data());  // rows [0, HD): W_query, then W_key, W_value
    read16(p + "self_attn.k_proj.weight", w.qkv.data() + HD * E);
    read16(p + "self_attn.v_proj.weight", w.qkv.data() + (HD + GD) * E);
    read16(p + "self_attn.o_proj.weight", w.out.data());
    read16(p + "mlp.gate_proj.weight", w.gate.data());
    read16(p + "mlp.up_proj.weight", w.up.data());
    read16(p + "mlp.down_proj.weight", w.down.data());
    LlamaBlock& b = layers[i];
    read32(p + "input_layernorm.weight", b.input_layernorm.weight.data());
    read32(p + "post_attention_layernorm.weight", b.post_attention_layernorm.weight.data());
    if (config.qk_norm()) {
      read32(p + "self_attn.q_norm.weight", b.self_attn.q_norm.weight.data());
      read32(p + "self_attn.k_norm.weight", b.self_attn.k_norm.weight.data());
    }
    layers16.push_back(std::move(w));
  }
  read32("model.norm.weight", norm.weight.data());
  std::vector<uint16_t> embed = bits(V * E), head;
  read16("model.embed_tokens.weight", embed.data());
  if (!config.tie_word_embeddings) {
    head = bits(V * E);
    read16("lm_head.weight", head.data());
  }
  layers16_ = std::move(layers16);
  if (config.tie_word_embeddings) {
    head16_ = std::move(embed);
    embed16_.clear();
  } else {
    head16_ = std::move(head);
    embed16_ = std::move(embed);
  }
  bf16_only_ = true;
}

Tensor LlamaModel::forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) {
  QKV_CHECK(batch >= 1 && tokens >= 1 && static_cast<int64_t>(ids.size()) == batch * tokens, "LlamaModel: ",
            ids.size(), " ids for a (", batch, ", ", tokens, ") batch");
  QKV_CHECK(tokens <= context_length(), "LlamaModel: ", tokens, " tokens but max_position_embeddings is ",
            context_length());
  if (bf16_only_) {  // the cached computation over a fresh cache: every position's logits
    QKV_CHECK(traces_.empty(), "LlamaModel: attention traces need the float weights; this model holds its weights in ",
              "bf16 only (load it with f32 products to trace it)");
    kernels::KvCache cache = make_cache(batch, kernels::CacheDtype::kF32, tokens);
    Tensor logits = Tensor::empty({batch, tokens, config.vocab_size});
    cached_pass(ids, batch, tokens, cache, logits.data(), /*all_rows=*/true);
    x_shape_ = Shape{};
    return logits;
  }
  Tensor x = embed_tokens.forward(ids, {batch, tokens});  // (B, T, E)
  for (size_t l = 0; l < layers.size(); ++l) x = layers[l].forward(x, traces_.empty() ? nullptr : &traces_[l]);
  x_shape_ = x.shape();
  return lm_head.forward(norm.forward(x));  // (B, T, V)
}

void LlamaModel::backward(const Tensor& dlogits) {
  check_floats("backward");
  QKV_CHECK(x_shape_.size() == 3, "LlamaModel: backward before forward");
  Tensor dx = norm.backward(lm_head.backward(dlogits));
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) dx = it->backward(dx);
  embed_tokens.backward(dx);
}

kernels::KvCache LlamaModel::make_cache(int64_t batch, kernels::CacheDtype dtype, int64_t capacity) const {
  QKV_CHECK(!layers.empty(), "LlamaModel: a model without layers has no keys or values to cache");
  QKV_CHECK(batch >= 1, "LlamaModel: the cache's batch (", batch, ") must be at least 1");
  return kernels::KvCache(static_cast<int64_t>(layers.size()), batch, config.num_key_value_heads,
                          models_detail::cache_capacity(capacity, context_length()), config.head_dim, config.head_dim,
                          dtype);
}

void LlamaModel::forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                                     kernels::KvCache& cache, float* logits) {
  cached_pass(ids, batch, tokens, cache, logits, false);
}

void LlamaModel::cached_pass(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache,
                             float* logits, bool all_rows) {
  models_detail::check_cached_step("LlamaModel", ids, batch, tokens, cache, static_cast<int64_t>(layers.size()),
                                   context_length());
  const int64_t N = batch * tokens, E = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t id = ids[static_cast<size_t>(i)];
    QKV_CHECK(id >= 0 && id < V, "LlamaModel: id ", id, " at position ", i, " is outside the vocabulary of ", V);
  }
  float* x = rows_of(step_x_, N * E);
  const LlamaBlock::Scratch s{rows_of(step_h_, N * E), rows_of(step_a_, N * E), rows_of(step_gate_, N * F),
                              rows_of(step_up_, N * F)};
  // x = embed_tokens.weight[ids]                                       (B, Tn, E)
  if (bf16_only_) {
    const std::vector<uint16_t>& table = config.tie_word_embeddings ? head16_ : embed16_;
    for (int64_t i = 0; i < N; ++i)
      bf16_to_floats(table.data() + ids[static_cast<size_t>(i)] * E, x + i * E, static_cast<size_t>(E));
  } else {
    const Tensor& table = embed_tokens.weight;
    QKV_CHECK(table.is_contiguous(), "LlamaModel: embed_tokens.weight must be contiguous");
    for (int64_t i = 0; i < N; ++i)
      std::memcpy(x + i * E, table.data() + ids[static_cast<size_t>(i)] * E, static_cast<size_t>(E) * sizeof(float));
  }
  const bool bf16 = !layers16_.empty() && config.dtype == Dtype::kBF16;
  for (size_t l = 0; l < layers.size(); ++l)
    layers[l].forward_cached(x, batch, tokens, cache, static_cast<int64_t>(l), bf16 ? &layers16_[l] : nullptr, s);
  cache.commit();
  if (all_rows) {  // logits = lm_head(norm(x))                         (B, Tn, V)
    float* h = rows_of(step_h_, N * E);
    norm_rows(norm, x, N, h);
    linear_rows("LlamaModel", h, N, lm_head, bf16 ? head16_.data() : nullptr, logits);
    return;
  }
  // logits = lm_head(norm(x[:, -1]))                                  (B, V)
  float* last = rows_of(step_last_, batch * E);
  for (int64_t b = 0; b < batch; ++b)
    std::memcpy(last + b * E, x + (b * tokens + tokens - 1) * E, static_cast<size_t>(E) * sizeof(float));
  norm_rows(norm, last, batch, last);
  linear_rows("LlamaModel", last, batch, lm_head, bf16 ? head16_.data() : nullptr, logits);
}

}  // namespace qkv
