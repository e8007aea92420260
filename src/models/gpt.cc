// The book's GPT model. See include/qkv/models/gpt.h.
#include "qkv/models/gpt.h"

#include <cmath>
#include <cstring>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/linear.h"
#include "qkv/core/excerpt.h"
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

const GPTConfig& validated(const GPTConfig& c) {
  validate_gpt_config(c);
  return c;
}

// The blocks' MultiHeadAttention(E, E, context_length, drop_rate, n_heads, qkv_bias) and its variants.
AttentionConfig attention_of(const GPTConfig& c) {
  AttentionConfig a;
  a.d_in = c.emb_dim;
  a.context_length = c.context_length;
  a.qkv_bias = c.qkv_bias;
  a.path = c.path;
  a.attention = c.attention;
  return a;
}

std::vector<TransformerBlock> build_blocks(const GPTConfig& c, Generator& gen) {
  std::vector<TransformerBlock> blocks;
  blocks.reserve(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) blocks.emplace_back(c, gen);  // in order, as nn.Sequential
  return blocks;
}

const std::vector<std::pair<std::string, GPTConfig>>& presets() {
  static const std::vector<std::pair<std::string, GPTConfig>> all = [] {
    std::vector<std::pair<std::string, GPTConfig>> p;
    const struct { const char* name; int64_t E, L, H; } sizes[] = {
        {"gpt2-small", 768, 12, 12}, {"gpt2-medium", 1024, 24, 16}, {"gpt2-large", 1280, 36, 20}, {"gpt2-xl", 1600, 48, 25}};
    for (const auto& s : sizes) {
      GPTConfig c;
      c.emb_dim = s.E;
      c.n_layers = s.L;
      c.attention.heads = s.H;
      set_head_dim(c);
      p.emplace_back(s.name, c);
    }
    return p;
  }();
  return all;
}

}  // namespace

const std::vector<std::string>& gpt_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, c] : presets()) n.push_back(name);
    return n;
  }();
  return names;
}

GPTConfig gpt_preset(const std::string& name) {
  for (const auto& [n, c] : presets())
    if (n == name) return c;
  std::string known;
  for (const std::string& n : gpt_preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown GPT preset ", excerpt(name), "; expected one of: ", known);
}

namespace {
// The attention's fields as the book's GPT_CONFIG names them.
std::string gpt_field_name(kernels::SpecField f) {
  return f == kernels::SpecField::kHeads ? "n_heads" : f == kernels::SpecField::kDropout ? "drop_rate"
                                                                                       : kernels::spec_field_name(f);
}

models_detail::ModelShape shape_of(const GPTConfig& c) {
  return {"GPTModel", c.vocab_size, c.context_length, c.emb_dim, "emb_dim", c.n_layers, "n_layers", gpt_field_name};
}
}  // namespace

void set_head_dim(GPTConfig& c) { models_detail::set_head_dim(c.attention, shape_of(c)); }

void validate_gpt_config(const GPTConfig& c) { models_detail::validate_model_shape(c.attention, shape_of(c)); }

nlohmann::json to_json(const GPTConfig& c) { return fields_to_json(c); }

GPTConfig gpt_config_from_json(const nlohmann::json& j) {
  GPTConfig c;
  fields_from_json(j, c, "the GPT configuration");
  set_head_dim(c);
  return c;
}

// --- TransformerBlock --------------------------------------------------------------------------

TransformerBlock::TransformerBlock(const GPTConfig& c, Generator& gen)
    : att(attention_of(c), gen),
      ff(c.emb_dim, 4 * c.emb_dim, gen),
      norm1(c.emb_dim),
      norm2(c.emb_dim),
      drop_att(c.attention.dropout, gen),
      drop_ff(c.attention.dropout, gen) {}

void TransformerBlock::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  att.collect_state(prefix + "att.", out);
  ff.collect_state(prefix + "ff.", out);
  norm1.collect_state(prefix + "norm1.", out);
  norm2.collect_state(prefix + "norm2.", out);
}

void TransformerBlock::train(bool on) {
  Module::train(on);
  att.train(on);
  drop_att.train(on);
  drop_ff.train(on);
}

Tensor TransformerBlock::forward(const Tensor& x, AttentionTrace* trace) {
  // shortcut = x; x = drop_shortcut(att(norm1(x))); x = x + shortcut
  const Tensor mid = add(x, drop_att.forward(att.forward(norm1.forward(x), trace)));
  // shortcut = x; x = drop_shortcut(ff(norm2(x))); x = x + shortcut
  return add(mid, drop_ff.forward(ff.forward(norm2.forward(mid))));
}

Tensor TransformerBlock::backward(const Tensor& doutput) {
  // out = mid + drop_ff(ff(norm2(mid))): the gradient reaches mid directly and through the branch
  const Tensor dmid = add(doutput, norm2.backward(ff.backward(drop_ff.backward(doutput))));
  // mid = x + drop_att(att(norm1(x)))
  return add(dmid, norm1.backward(att.backward(drop_att.backward(dmid))));
}

namespace {

void norm_rows(const LayerNorm& n, const float* x, int64_t N, float* y) {
  kernels::layer_norm_rows(x, N, n.scale.size(0), n.scale.data(), n.shift.data(), n.eps, y);
}

}  // namespace

void TransformerBlock::forward_cached(float* x, int64_t B, int64_t Tn, kernels::KvCache& cache, int64_t layer,
                                      const Weights16* w16, const Scratch& s) {
  const bool bf16 = w16 != nullptr && att.config.attention.dtype == Dtype::kBF16;
  const FusedWeights16 att16 = bf16 ? FusedWeights16{w16->qkv.data(), w16->out.data()} : FusedWeights16{};
  const int64_t N = B * Tn, E = norm1.scale.size(0);
  // x = x + att(norm1(x))
  norm_rows(norm1, x, N, s.h);
  att.forward_cached(s.h, B, Tn, s.a, cache, layer, att16);
  add_into(x, s.a, N * E);
  // x = x + layers.2(gelu(layers.0(norm2(x))))
  norm_rows(norm2, x, N, s.h);
  linear_rows("GPTModel", s.h, N, ff.fc, bf16 ? w16->fc.data() : nullptr, s.hidden);
  gelu_tanh(s.hidden, s.hidden, N * ff.fc.weight.size(0));
  linear_rows("GPTModel", s.hidden, N, ff.proj, bf16 ? w16->proj.data() : nullptr, s.a);
  add_into(x, s.a, N * E);
}

// --- GPTModel ----------------------------------------------------------------------------------

GPTModel::GPTModel(const GPTConfig& c, Generator& gen)
    : config(validated(c)),
      tok_emb(c.vocab_size, c.emb_dim, gen),
      pos_emb(c.context_length, c.emb_dim, gen),
      drop_emb(c.attention.dropout, gen),
      blocks(build_blocks(c, gen)),
      final_norm(c.emb_dim),
      out_head(c.emb_dim, c.vocab_size, false, gen) {
  if (c.tied_head) {  // one tensor: the head's values and gradients are the embedding's
    out_head.weight = tok_emb.weight;
    out_head.dweight = tok_emb.dweight;
  }
  // bf16 mode: every product of the model in it, the feed-forward's and the head's as the attention's
  for (TransformerBlock& b : blocks) b.ff.fc.dtype = b.ff.proj.dtype = c.attention.dtype;
  out_head.dtype = c.attention.dtype;
}

void GPTModel::set_batch_slice(int64_t begin, int64_t total) {
  drop_emb.set_batch_slice(begin, total);
  for (TransformerBlock& b : blocks) {
    b.att.dropout.set_batch_slice(begin, total);
    b.drop_att.set_batch_slice(begin, total);
    b.drop_ff.set_batch_slice(begin, total);
  }
}

void GPTModel::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  tok_emb.collect_state(prefix + "tok_emb.", out);
  pos_emb.collect_state(prefix + "pos_emb.", out);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].collect_state(prefix + "trf_blocks." + std::to_string(i) + ".", out);
  final_norm.collect_state(prefix + "final_norm.", out);
  if (!config.tied_head) out_head.collect_state(prefix + "out_head.", out);
}

void GPTModel::keep_bf16_weights(bool on) {
  blocks16_.clear();
  head16_.clear();
  if (!on) return;
  for (const TransformerBlock& b : blocks)
    blocks16_.push_back({bf16_copy(b.att.fused_qkv_weight()), bf16_copy(b.att.out_proj.weight), bf16_copy(b.ff.fc.weight),
                         bf16_copy(b.ff.proj.weight)});
  head16_ = bf16_copy(out_head.weight);
}

void GPTModel::train(bool on) {
  if (on) keep_bf16_weights(false);  // the weights are about to change
  Module::train(on);
  drop_emb.train(on);
  for (TransformerBlock& b : blocks) b.train(on);
}

std::string GPTModel::describe() const {
  return str("GPT model: ", config.n_layers, " layers x ", config.attention.heads, " heads, emb_dim ", config.emb_dim,
             ", vocab ", config.vocab_size, ", context ", config.context_length,
             config.tied_head ? ", head tied to the token embedding" : "");
}

Tensor GPTModel::forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) {
  QKV_CHECK(batch >= 1 && tokens >= 1 && static_cast<int64_t>(ids.size()) == batch * tokens, "GPTModel: ",
            ids.size(), " ids for a (", batch, ", ", tokens, ") batch");
  QKV_CHECK(tokens <= config.context_length, "GPTModel: ", tokens, " tokens but context_length is ",
            config.context_length);
  // x = tok_emb(in_idx) + pos_emb(arange(seq_len)); x = drop_emb(x)
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[static_cast<size_t>(t)] = t;
  Tensor x = drop_emb.forward(add(tok_emb.forward(ids, {batch, tokens}), pos_emb.forward(positions, {tokens})));
  for (size_t l = 0; l < blocks.size(); ++l) x = blocks[l].forward(x, traces_.empty() ? nullptr : &traces_[l]);
  x_shape_ = x.shape();
  return out_head.forward(final_norm.forward(x));  // (B, T, V)
}

void GPTModel::backward(const Tensor& dlogits) {
  QKV_CHECK(x_shape_.size() == 3, "GPTModel: backward before forward");
  // logits = out_head(final_norm(x))
  Tensor dx = final_norm.backward(out_head.backward(dlogits));
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) dx = it->backward(dx);
  // x = drop_emb(tok_emb(ids) + pos_emb(arange(T))): pos_emb broadcast over the batch
  dx = drop_emb.backward(dx);
  tok_emb.backward(dx);
  pos_emb.backward(sum_to(dx, {x_shape_[1], x_shape_[2]}));
}

kernels::KvCache GPTModel::make_cache(int64_t batch, kernels::CacheDtype dtype, int64_t capacity) const {
  QKV_CHECK(!blocks.empty(), "GPTModel: a model without blocks (n_layers 0) has no keys or values to cache");
  QKV_CHECK(batch >= 1, "GPTModel: the cache's batch (", batch, ") must be at least 1");
  const kernels::AttentionSpec& a = config.attention;
  return kernels::KvCache(static_cast<int64_t>(blocks.size()), batch, a.groups(),
                          models_detail::cache_capacity(capacity, config.context_length), a.head_dim, a.head_dim, dtype);
}

void GPTModel::forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                                   kernels::KvCache& cache, float* logits) {
  QKV_CHECK(!drop_emb.active(), "GPTModel: forward_cached is inference, but dropout is active: call eval() first");
  const int64_t P = models_detail::check_cached_step("GPTModel", ids, batch, tokens, cache,
                                                     static_cast<int64_t>(blocks.size()), config.context_length);
  const int64_t N = batch * tokens, E = config.emb_dim;
  float* x = rows_of(step_x_, N * E);
  const TransformerBlock::Scratch s{rows_of(step_h_, N * E), rows_of(step_a_, N * E),
                                    rows_of(step_hidden_, N * 4 * E)};
  // x = tok_emb.weight[ids] + pos_emb.weight[P:P+Tn]                  (B, Tn, E), nothing recorded
  models_detail::embed_at("GPTModel", ids, batch, tokens, P, tok_emb.weight.contiguous(), pos_emb.weight.contiguous(),
                          x);
  const bool bf16 = !blocks16_.empty() && config.attention.dtype == Dtype::kBF16;
  for (size_t l = 0; l < blocks.size(); ++l)
    blocks[l].forward_cached(x, batch, tokens, cache, static_cast<int64_t>(l), bf16 ? &blocks16_[l] : nullptr, s);
  cache.commit();
  // logits = out_head(final_norm(x[:, -1]))                           (B, V)
  float* last = rows_of(step_last_, batch * E);
  for (int64_t b = 0; b < batch; ++b)
    std::memcpy(last + b * E, x + (b * tokens + tokens - 1) * E, static_cast<size_t>(E) * sizeof(float));
  norm_rows(final_norm, last, batch, last);
  linear_rows("GPTModel", last, batch, out_head, bf16 ? head16_.data() : nullptr, logits);
}

}  // namespace qkv
