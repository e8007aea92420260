// The attention-only language model. See include/qkv/models/attention_lm.h.
#include "qkv/models/attention_lm.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "models/model_shape.h"

namespace qkv {
namespace {

const LMConfig& validate(const LMConfig& c) {
  validate_lm_config(c);
  return c;
}

std::vector<MultiHeadAttention> build_blocks(const LMConfig& c, Generator& gen) {
  AttentionConfig a;
  a.d_in = c.d_model;
  a.context_length = c.context_length;
  a.qkv_bias = c.qkv_bias;
  a.path = c.path;
  a.attention = c.attention;  // d_out = heads * head_dim = d_model (validate_lm_config)
  std::vector<MultiHeadAttention> blocks;
  blocks.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) blocks.emplace_back(a, gen);  // in order, as nn.ModuleList
  return blocks;
}

bool finite(const Tensor& t) {
  for (float v : t.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

models_detail::ModelShape shape_of(const LMConfig& c) {
  return {"AttentionLM", c.vocab_size, c.context_length, c.d_model, "d_model", c.num_layers, "num_layers",
          attention_config_name};
}

void set_head_dim(LMConfig& c) { models_detail::set_head_dim(c.attention, shape_of(c)); }

void validate_lm_config(const LMConfig& c) {
  const kernels::AttentionSpec& a = c.attention;
  models_detail::validate_model_shape(a, shape_of(c));
  QKV_CHECK(a.window <= c.context_length, "AttentionLM: window (", a.window, ") must be in [0, context_length = ",
            c.context_length, "] (0: no window)");
  QKV_CHECK(a.dtype == Dtype::kF32 || c.path != AttentionPath::kTextbook,
            "AttentionLM: dtype bf16 runs on the fused attention; attention textbook computes in f32 only");
  QKV_CHECK(a.dtype == Dtype::kF32 || a.dropout == 0.0 || c.path == AttentionPath::kFused,
            "AttentionLM: dtype bf16 with dropout (", a.dropout, ") needs attention fused (auto runs the textbook "
            "path while dropout is on, for PyTorch's masks, in f32)");
}

nlohmann::json to_json(const LMConfig& c) { return fields_to_json(c); }

LMConfig lm_config_from_json(const nlohmann::json& j) {
  LMConfig c;
  fields_from_json(j, c, "the model configuration");
  set_head_dim(c);
  return c;
}

nlohmann::json AttentionLM::config_json() const { return to_json(config); }

std::string AttentionLM::describe() const {
  const kernels::AttentionSpec& a = config.attention;
  return str("attention LM: ", config.num_layers, " layers x ", a.heads, " heads, d_model ", config.d_model,
             ", vocab ", config.vocab_size, ", context ", config.context_length);
}

AttentionLM::AttentionLM(const LMConfig& c, Generator& gen)
    : config(validate(c)),
      tok_emb(c.vocab_size, c.d_model, gen),
      pos_emb(c.context_length, c.d_model, gen),
      blocks(build_blocks(c, gen)),
      out_head(c.d_model, c.vocab_size, true, gen) {}

void AttentionLM::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  tok_emb.collect_state(prefix + "tok_emb.", out);
  pos_emb.collect_state(prefix + "pos_emb.", out);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].collect_state(prefix + "blocks." + std::to_string(i) + ".", out);
  out_head.collect_state(prefix + "out_head.", out);
}

void AttentionLM::train(bool on) {
  Module::train(on);
  for (MultiHeadAttention& b : blocks) b.train(on);
}

Tensor AttentionLM::forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) {
  QKV_CHECK(batch >= 1 && tokens >= 1 && static_cast<int64_t>(ids.size()) == batch * tokens, "AttentionLM: ",
            ids.size(), " ids for a (", batch, ", ", tokens, ") batch");
  QKV_CHECK(tokens <= config.context_length, "AttentionLM: ", tokens, " tokens but context_length is ",
            config.context_length);
  Tensor x = add(tok_emb.forward(ids, {batch, tokens}), pos_emb.forward(tokens));  // (B, T, C)
  for (MultiHeadAttention& block : blocks) x = add(x, block.forward(x));          // residual
  x_shape_ = x.shape();
  return out_head.forward(x);  // (B, T, V)
}

void AttentionLM::backward(const Tensor& dlogits) {
  QKV_CHECK(x_shape_.size() == 3, "AttentionLM: backward before forward");
  // return out_head.forward(x)
  Tensor dx = out_head.backward(dlogits);  // (B, T, C)
  // x = add(x, block.forward(x)): the gradient reaches x both directly and through the block
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) dx = add(dx, it->backward(dx));
  // x = add(tok_emb.forward(ids, {B, T}), pos_emb.forward(T)): pos_emb was broadcast over B
  tok_emb.backward(dx);
  pos_emb.backward(sum_to(dx, {x_shape_[1], x_shape_[2]}));
}

void AttentionLM::set_batch_slice(int64_t begin, int64_t total) {
  for (MultiHeadAttention& b : blocks) b.dropout.set_batch_slice(begin, total);
}

kernels::KvCache AttentionLM::make_cache(int64_t batch, kernels::CacheDtype dtype, int64_t capacity) const {
  QKV_CHECK(!blocks.empty(), "AttentionLM: a model without attention blocks (num_layers 0) has no keys or ",
            "values to cache");
  QKV_CHECK(batch >= 1, "AttentionLM: the cache's batch (", batch, ") must be at least 1");
  const MultiHeadAttention& b = blocks.front();
  return kernels::KvCache(static_cast<int64_t>(blocks.size()), batch, b.num_kv_heads(),
                          models_detail::cache_capacity(capacity, config.context_length), b.head_dim(), b.head_dim(),
                          dtype);
}

Tensor AttentionLM::forward_cached(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                                   kernels::KvCache& cache) {
  const int64_t P = models_detail::check_cached_step("AttentionLM", ids, batch, tokens, cache,
                                                     static_cast<int64_t>(blocks.size()), config.context_length);
  // x = tok_emb.weight[ids] + pos_emb.weight[P:P+Tn]                (B, Tn, C)
  // (gathered here: Embedding::forward would replace the ids it keeps for backward)
  Tensor x = models_detail::embed_at("AttentionLM", ids, batch, tokens, P, tok_emb.weight.contiguous(),
                                     pos_emb.table.weight.contiguous());
  for (size_t l = 0; l < blocks.size(); ++l)
    x = add(x, blocks[l].forward_cached(x, cache, static_cast<int64_t>(l)));  // residual
  cache.commit();
  // logits = out_head(x[:, -1])                                     (B, V); not out_head.forward:
  // that would replace the input it keeps for backward
  const Tensor last = x.select(1, tokens - 1);  // (B, C)
  return linear(last, out_head.weight, out_head.has_bias ? &out_head.bias : nullptr);
}

std::string AttentionLM::first_non_finite(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) {
  for (const StateEntry& e : state_dict())
    if (e.tensor && !finite(*e.tensor)) return e.name;  // (a mask buffer is not a value of the model)
  const bool was_training = is_training();
  eval();
  std::string where;
  Tensor x = add(tok_emb.forward(ids, {batch, tokens}), pos_emb.forward(tokens));
  if (!finite(x)) where = "embeddings (tok_emb + pos_emb)";
  for (size_t i = 0; i < blocks.size() && where.empty(); ++i) {
    const std::string name = "blocks." + std::to_string(i) + ".";
    AttentionTrace t;
    Tensor y = blocks[i].forward(x, &t);
    const std::pair<const char*, const Tensor*> steps[] = {
        {"queries", &t.queries},        {"keys", &t.keys},       {"values", &t.values},
        {"attn_scores", &t.scores},     {"attn_weights", &t.weights}, {"context", &t.context},
        {"output (out_proj)", &y}};
    for (const auto& [what, tensor] : steps)
      if (where.empty() && !finite(*tensor)) where = name + what;
    x = add(x, y);
    if (where.empty() && !finite(x)) where = name + "residual sum";
  }
  if (where.empty() && !finite(out_head.forward(x))) where = "logits";
  train(was_training);
  return where;
}

}  // namespace qkv
