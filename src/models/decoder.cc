// The one decoder every family is. See include/qkv/models/decoder.h.
// Legend: B batch, T tokens, Tn new tokens, N = B Tn rows, E width, F ff_width, V vocab_size.
#include "qkv/models/decoder.h"

#include <cmath>
#include <cstring>
#include <set>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/linear.h"
#include "qkv/core/ops.h"
#include "qkv/core/pointwise.h"
#include "qkv/core/quant_panels.h"
#include "qkv/models/family.h"
#include "models/cached_rows.h"
#include "models/model_shape.h"

namespace qkv {
namespace {

using models_detail::add_into;
using models_detail::bf16_copy;
using models_detail::linear_rows;
using models_detail::rows_of;

constexpr const char* kWho = "DecoderModel";

const DecoderSpec& validated(const DecoderSpec& s) {
  validate_decoder_spec(s, model_family(s.family).title + " model", model_family(s.family).keys);
  check_decoder_fits(s);  // nothing allocated beyond the memory limit
  return s;
}

// A block's attention: H heads of D over E, G key/value heads, the spec's variants, causal, the
// output projection back to E.
AttentionConfig attention_of(const DecoderSpec& s) {
  AttentionConfig a;
  a.d_in = s.width;
  a.context_length = s.context_length;
  a.qkv_bias = s.qkv_bias;
  a.out_bias = s.out_bias;
  a.out_dim = s.width;
  a.path = s.path;
  a.attention = s.attention;
  a.output_gate = a.gate_in_query = s.attention_gate;
  a.qk_norm_unit_offset = s.norm_unit_offset;
  return a;
}

// A linear block's Gated DeltaNet (in f32, whatever the model's products).
AttentionConfig linear_of(const DecoderSpec& s) {
  const LinearAttentionSizes& l = s.linear;
  AttentionConfig c = gated_deltanet_config(s.width, l.value_heads, l.key_heads, l.key_dim, l.value_dim, l.conv_kernel,
                                            s.context_length);
  c.linear.norm_eps = s.norm_eps;
  return c;
}

std::optional<MultiHeadAttention> attention_of(const DecoderSpec& s, int64_t layer, Generator& gen) {
  if (s.kind(layer) != LayerKind::kAttention) return std::nullopt;
  return std::optional<MultiHeadAttention>(std::in_place, attention_of(s), gen);
}

std::optional<GatedDeltaNetLayer> linear_of(const DecoderSpec& s, int64_t layer, Generator& gen) {
  if (s.kind(layer) != LayerKind::kLinear) return std::nullopt;
  return std::optional<GatedDeltaNetLayer>(std::in_place, linear_of(s), gen);
}

double shortcut_rate(const DecoderSpec& s) { return s.shortcut_dropout ? s.attention.dropout : 0.0; }

std::vector<DecoderBlock> build_blocks(const DecoderSpec& s, const StateNames& names, Generator& gen) {
  std::vector<DecoderBlock> blocks;
  blocks.reserve(static_cast<size_t>(s.layers));
  for (int64_t i = 0; i < s.layers; ++i) blocks.emplace_back(s, names, gen, i);  // in order, as nn.Sequential
  return blocks;
}

std::optional<Embedding> positions_of(const DecoderSpec& s, Generator& gen) {
  if (!s.learned_positions) return std::nullopt;
  return std::optional<Embedding>(std::in_place, s.context_length, s.width, gen);
}

}  // namespace

// --- DecoderBlock --------------------------------------------------------------------------------

DecoderBlock::DecoderBlock(const DecoderSpec& s, const StateNames& names, Generator& gen, int64_t layer)
    : norm1(s.norm, s.width, s.norm_eps, s.norm_unit_offset),
      att(attention_of(s, layer, gen)),
      linear(linear_of(s, layer, gen)),
      norm2(s.ff == FeedForwardKind::kNone ? NormKind::kNone : s.norm, s.width, s.norm_eps, s.norm_unit_offset),
      ff(s.ff, s.width, s.ff_width, gen),
      drop_att(shortcut_rate(s), gen),
      drop_ff(shortcut_rate(s), gen),
      names_(&names),
      width_(s.width),
      dtype_(s.attention.dtype) {
  // bf16 mode: every product of the block in it, the feed-forward's as the attention's
  for (Linear* l : ff.linears()) l->dtype = s.attention.dtype;
}

void DecoderBlock::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  const StateNames& n = *names_;
  auto attention = [&] {
    if (linear) {
      linear->collect_state(prefix + n.linear, out);
      return;
    }
    const std::string a = prefix + n.attention;
    if (n.mask) out.push_back({a + "mask", nullptr, false, nullptr, &att->mask});  // the module's buffer first
    if (att->q_and_gate) att->q_and_gate->collect_state(a + n.q, out);  // the queries' and the gate's rows
    else att->W_query.collect_state(a + n.q, out);
    att->W_key.collect_state(a + n.k, out);
    att->W_value.collect_state(a + n.v, out);
    att->out_proj.collect_state(a + n.o, out);
    if (att->config.attention.qk_norm) {
      att->q_norm.collect_state(a + n.q_norm, out);
      att->k_norm.collect_state(a + n.k_norm, out);
    }
  };
  if (n.norms_last) {  // the book's TransformerBlock registers att, ff, norm1, norm2
    attention();
    ff.collect_state(prefix + n.ff, out);
    norm1.collect_state(prefix + n.norm1, out);
    norm2.collect_state(prefix + n.norm2, out);
  } else {
    norm1.collect_state(prefix + n.norm1, out);
    attention();
    norm2.collect_state(prefix + n.norm2, out);
    ff.collect_state(prefix + n.ff, out);
  }
}

void DecoderBlock::train(bool on) {
  Module::train(on);
  if (att) att->train(on);
  if (linear) linear->train(on);
  drop_att.train(on);
  drop_ff.train(on);
}

Tensor DecoderBlock::forward(const Tensor& x, ForwardObserver* observer, int64_t layer) {
  AttentionTrace trace;
  AttentionTrace* t = observer != nullptr && observer->wants_trace() ? &trace : nullptr;
  // shortcut = x; x = drop_shortcut(att(norm1(x))); x = x + shortcut
  const Tensor h = norm1.forward(x);
  const Tensor a = att ? att->forward(h, t) : linear->forward(h, t);
  Tensor out = add(x, drop_att.forward(a));
  Tensor f;
  if (ff.on()) {  // shortcut = x; x = drop_shortcut(ff(norm2(x))); x = x + shortcut
    f = ff.forward(norm2.forward(out));
    out = add(out, drop_ff.forward(f));
  }
  if (observer)
    observer->block({layer, &x, norm1.on() ? &h : nullptr, t, &a, ff.on() ? &f : nullptr, &out});
  return out;
}

Tensor DecoderBlock::backward(const Tensor& doutput) {
  Tensor dmid = doutput;
  // out = mid + drop_ff(ff(norm2(mid))): the gradient reaches mid directly and through the branch
  if (ff.on()) dmid = add(doutput, norm2.backward(ff.backward(drop_ff.backward(doutput))));
  // mid = x + drop_att(att(norm1(x)))
  const Tensor da = drop_att.backward(dmid);
  return add(dmid, norm1.backward(att ? att->backward(da) : linear->backward(da)));
}

// Up to this many rows (a decoding step's, a batch's) take SwiGLU's gate and up as one product.
constexpr int64_t kDecodeRows = 16;

void DecoderBlock::forward_cached(float* x, int64_t B, int64_t Tn, kernels::KvCache& cache, int64_t layer,
                                  const Weights16* w16, const Scratch& s) {
  const bool bf16 = w16 != nullptr && dtype_ == Dtype::kBF16;
  auto bits = [](const WeightVector<uint16_t>& v) { return v.empty() ? nullptr : v.data(); };
  const FusedWeights16 att16 =
      bf16 ? FusedWeights16{bits(w16->qkv), bits(w16->out), w16->qkv_q.view(), w16->out_q.view(), bits(w16->gate),
                            w16->gate_q.view()}
           : FusedWeights16{};
  const int64_t N = B * Tn, E = width_;
  auto w = [&](size_t i) { return bf16 ? bits(w16->ff[i]) : nullptr; };
  auto wq = [&](size_t i) { return bf16 && i < w16->ff_q.size() ? w16->ff_q[i].view() : QuantView{}; };
  // x = x + att(norm1(x))
  const float* h = x;
  if (norm1.on()) {
    norm1.rows(x, N, s.h);
    h = s.h;
  }
  if (att) {
    att->forward_cached(h, B, Tn, s.a, cache, layer, att16, s.att);
  } else {  // the recurrence's state and the convolution's last inputs: the cache's state layer
    GatedDeltaNetLayer::Weights16 lw;
    const bool linear16 = bf16 && w16->linear.size() == 5;
    if (linear16) {
      auto q = [&](size_t k) { return k < w16->linear_q.size() ? w16->linear_q[k].view() : QuantView{}; };
      lw = {bits(w16->linear[0]), bits(w16->linear[1]), bits(w16->linear[2]), bits(w16->linear[3]),
            bits(w16->linear[4]), q(0), q(1), q(2), q(3), q(4)};
    }
    QKV_CHECK(cache.state_size(layer) == linear->cache_floats(B), kWho, ": layer ", layer, " of the cache holds ",
              cache.state_size(layer), " state numbers; its linear-attention block keeps ", linear->cache_floats(B),
              " for a batch of ", B);
    QKV_CHECK(!cache.appended(layer), kWho, ": layer ", layer, " already took part in the cache's step in progress");
    linear->forward_cached(h, B, Tn, s.a, cache.state(layer), linear16 ? &lw : nullptr);
    cache.advance(layer, Tn);
  }
  add_into(x, s.a, N * E);
  if (!ff.on()) return;
  // x = x + ff(norm2(x))
  norm2.rows(x, N, s.h);
  if (ff.kind() == FeedForwardKind::kGelu) {  // layers.2(gelu(layers.0(h)))
    const FeedForward& g = ff.gelu_net();
    linear_rows(kWho, s.h, N, g.fc, w(0), s.hidden, wq(0));
    gelu_tanh(s.hidden, s.hidden, N * g.fc.weight.size(0));
    linear_rows(kWho, s.hidden, N, g.proj, w(1), s.a, wq(1));
  } else if (bf16 && !w16->gate_up_q.empty()) {  // the same with gate_proj and up_proj as one product
    const SwiGLUFeedForward& g = ff.swiglu_net();
    const int64_t F = g.gate_proj.weight.size(0);
    // [gate | up] (N, 2 F) = h [W_gate; W_up]^T into hidden and up (one region: up = hidden + N F)
    QKV_CHECK(s.up == s.hidden + N * F, kWho, ": the fused gate and up rows need up right after hidden");
    const QuantView both = w16->gate_up_q.view();
    const int64_t row_bytes = quant_bytes(*both.type, E, "the gate and up rows");
    if (N > kDecodeRows && (!both.panels || F % kQuantPanelRows == 0)) {
      // a prompt's many rows: gate and up apart (each half whole panels), the wide products' shapes,
      // and SwiGLU over all rows at once on the pool (one product of both was 1.035-1.05x as long)
      qkv::linear(s.h, N, E, nullptr, nullptr, F, s.hidden, nullptr, Dtype::kBF16, nullptr, both);
      qkv::linear(s.h, N, E, nullptr, nullptr, F, s.up, nullptr, Dtype::kBF16, nullptr,
                  QuantView{both.type, both.blocks + F * row_bytes, both.panels});
      swiglu(s.hidden, s.up, s.hidden, N * F);
    } else {
      qkv::linear(s.h, N, E, nullptr, nullptr, 2 * F, s.hidden, nullptr, Dtype::kBF16, nullptr, both);
      // row r's silu(gate) * up into hidden's row r, rows in order: row r's result ends at (r + 1) F,
      // at or before its own gate (2 r F) from r = 1 on, over rows already used (row 0: onto its gate)
      for (int64_t r = 0; r < N; ++r) swiglu(s.hidden + 2 * r * F, s.hidden + (2 * r + 1) * F, s.hidden + r * F, F);
    }
    linear_rows(kWho, s.hidden, N, g.down_proj, w(2), s.a, wq(2));
  } else {  // down_proj(silu(gate_proj(h)) * up_proj(h))
    const SwiGLUFeedForward& g = ff.swiglu_net();
    linear_rows(kWho, s.h, N, g.gate_proj, w(0), s.hidden, wq(0));
    linear_rows(kWho, s.h, N, g.up_proj, w(1), s.up, wq(1));
    swiglu(s.hidden, s.up, s.hidden, N * g.gate_proj.weight.size(0));
    linear_rows(kWho, s.hidden, N, g.down_proj, w(2), s.a, wq(2));
  }
  add_into(x, s.a, N * E);
}

// --- DecoderModel --------------------------------------------------------------------------------

DecoderModel::DecoderModel(const DecoderSpec& s, Generator& gen)
    : tok_emb(validated(s).vocab_size, s.width, gen),
      pos_emb(positions_of(s, gen)),
      drop_emb(shortcut_rate(s), gen),
      blocks(build_blocks(s, model_family(s.family).names, gen)),
      final_norm(s.norm, s.width, s.norm_eps, s.norm_unit_offset),
      head(s.width, s.vocab_size, s.head_bias, gen),
      spec_(s),
      names_(&model_family(s.family).names),
      who_(model_family(s.family).title + " model") {
  if (s.tied_head) {  // one tensor: the head's values and gradients are the embedding's
    head.weight = tok_emb.weight;
    head.dweight = tok_emb.dweight;
  }
  head.dtype = s.head_f32 ? Dtype::kF32 : s.attention.dtype;
  // the linear blocks' cached calls share their working rows (one prompt's, not one per layer)
  auto work = std::make_shared<GatedDeltaNetLayer::CachedWork>();
  for (DecoderBlock& b : blocks)
    if (b.linear) b.linear->share_cached_work(work);
}

void DecoderModel::check_floats(const char* what) const {
  QKV_CHECK(!bf16_only_, family().title, " model: ", what, " needs the float weights, but this model holds its ",
            "weights in bf16 only (loaded for generation): load it with f32 products (--dtype f32, ",
            "LoadOptions::dtype) for that");
}

void DecoderModel::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  check_floats("the state dict");
  const StateNames& n = *names_;
  tok_emb.collect_state(prefix + n.embed, out);
  if (pos_emb) pos_emb->collect_state(prefix + n.positions, out);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].collect_state(prefix + n.blocks + std::to_string(i) + ".", out);
  final_norm.collect_state(prefix + n.final_norm, out);
  if (!spec_.tied_head) head.collect_state(prefix + n.head, out);
}

void DecoderModel::train(bool on) {
  if (on) check_floats("training");
  if (on) keep_bf16_weights(false);  // the weights are about to change
  Module::train(on);
  drop_emb.train(on);
  for (DecoderBlock& b : blocks) b.train(on);
}

void DecoderModel::set_batch_slice(int64_t begin, int64_t total) {
  drop_emb.set_batch_slice(begin, total);
  for (DecoderBlock& b : blocks) {
    if (b.att) b.att->dropout.set_batch_slice(begin, total);
    b.drop_att.set_batch_slice(begin, total);
    b.drop_ff.set_batch_slice(begin, total);
  }
}

nlohmann::json DecoderModel::config_json() const {
  nlohmann::json j = family().write_config(spec_);
  j["dtype"] = dtype_name(spec_.attention.dtype);
  return j;
}

std::string DecoderModel::describe() const { return family().describe(spec_); }

int64_t DecoderModel::step_weight_bytes() const {
  if (blocks16_.empty())
    return 4 * product_parameters(spec_);  // the floats: every product weight, the head's too
  auto bytes = [](const WeightVector<uint16_t>& w16, const QuantMatrix& q) {
    return q.empty() ? 2 * static_cast<int64_t>(w16.size()) : static_cast<int64_t>(q.blocks.size());
  };
  int64_t n = head_q_.empty() ? (spec_.head_f32 ? 4 * head.weight.numel() : 2 * static_cast<int64_t>(head16_.size()))
                              : static_cast<int64_t>(head_q_.blocks.size());
  for (size_t b = 0; b < blocks16_.size(); ++b) {
    const DecoderBlock::Weights16& w = blocks16_[b];
    n += bytes(w.qkv, w.qkv_q) + bytes(w.out, w.out_q) + bytes(w.gate, w.gate_q);
    n += static_cast<int64_t>(w.gate_up_q.blocks.size());
    for (size_t i = 0; i < w.ff.size(); ++i) n += bytes(w.ff[i], i < w.ff_q.size() ? w.ff_q[i] : QuantMatrix{});
    for (size_t i = 0; i < w.linear.size(); ++i)
      n += bytes(w.linear[i], i < w.linear_q.size() ? w.linear_q[i] : QuantMatrix{});
  }
  return n;
}

void DecoderModel::keep_bf16_weights(bool on) {
  check_floats("keep_bf16_weights");
  blocks16_.clear();
  head16_.clear();
  if (!on) return;
  for (DecoderBlock& b : blocks) {
    DecoderBlock::Weights16 w;
    if (b.att) {  // (a linear block computes in f32 from its floats)
      b.att->unpack_query_and_gate();
      w.qkv = bf16_copy(b.att->fused_qkv_weight());
      w.out = bf16_copy(b.att->out_proj.weight);
      if (b.att->W_gate) w.gate = bf16_copy(b.att->W_gate->weight);
    } else {
      for (const Linear* p : b.linear->products()) w.linear.push_back(bf16_copy(p->weight));
    }
    for (const Linear* l : b.ff.linears()) w.ff.push_back(bf16_copy(l->weight));
    blocks16_.push_back(std::move(w));
  }
  if (!spec_.head_f32) head16_ = bf16_copy(head.weight);
}

std::vector<std::string> DecoderModel::linear_product_names(size_t block) {
  const std::string prefix = names_->blocks + std::to_string(block) + "." + names_->linear;
  std::vector<StateEntry> entries;
  blocks[block].linear->collect_state(prefix, entries);
  std::vector<std::string> names;
  for (const Linear* p : blocks[block].linear->products())
    for (const StateEntry& e : entries)
      if (e.tensor == &p->weight) names.push_back(e.name);
  QKV_CHECK(names.size() == 5, who_, ": a linear block's products are not in its state");
  return names;
}

void DecoderModel::load_bf16_only(const std::function<void(const std::string&, uint16_t*)>& read16,
                                  const std::function<void(const std::string&, float*)>& read32,
                                  const std::function<std::optional<QuantMatrix>(const std::string&)>& readq) {
  QKV_CHECK(spec_.attention.dtype == Dtype::kBF16, family().title,
            " model: weights in bf16 only need bf16 products (the spec's attention.dtype)");
  QKV_CHECK(!spec_.head_f32, family().title, " model: its head computes in f32; it cannot hold bf16 weights only");
  std::vector<StateEntry> entries;
  collect_state("", entries);  // (before bf16_only_ is set)
  const StateNames& n = *names_;
  // The products' weights, read as bf16 or blocks below; every other tensor (norms, biases,
  // positions) is read first, as floats: a reader that gives a mapped file's pages back once a
  // tensor is copied then never maps a product's pages again by reading a small tensor beside it
  // (a file's pages come in folios of up to 2 MB).
  std::set<std::string> products = {n.embed + "weight"};
  if (!spec_.tied_head) products.insert(n.head + "weight");
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string a = n.blocks + std::to_string(i) + "." + n.attention;
    if (blocks[i].att)
      for (const std::string* p : {&n.q, &n.k, &n.v, &n.o}) products.insert(a + *p + "weight");
    else
      for (const std::string& name : linear_product_names(i)) products.insert(name);
    std::vector<StateEntry> ff;
    const_cast<FeedForwardNet&>(blocks[i].ff).collect_state(n.blocks + std::to_string(i) + "." + n.ff, ff);
    for (const StateEntry& e : ff)
      if (e.shape().size() == 2) products.insert(e.name);
  }
  for (const StateEntry& e : entries)
    if (e.tensor != nullptr && !products.count(e.name)) read32(e.name, e.tensor->data());
  auto bits = [](int64_t count) { return WeightVector<uint16_t>(static_cast<size_t>(count)); };
  auto read_bits = [&](const std::string& name, uint16_t* out) { read16(name, out); };
  auto read_q = [&](const std::string& name) -> std::optional<QuantMatrix> {
    if (!readq) return std::nullopt;
    return readq(name);
  };
  std::vector<DecoderBlock::Weights16> blocks16;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const DecoderBlock& b = blocks[i];
    const std::string a = n.blocks + std::to_string(i) + "." + n.attention;
    DecoderBlock::Weights16 w;
    if (!b.att) {  // a linear block: its five products in bf16 or blocks (its other tensors are floats, read above)
      const std::vector<std::string> names = linear_product_names(i);
      const std::vector<const Linear*> ps = b.linear->products();
      w.linear_q.resize(ps.size());
      for (size_t k = 0; k < ps.size(); ++k) {
        if (std::optional<QuantMatrix> m = read_q(names[k])) {
          w.linear.emplace_back();
          w.linear_q[k] = std::move(*m);
          continue;
        }
        w.linear.push_back(bits(ps[k]->weight.numel()));
        read_bits(names[k], w.linear.back().data());
      }
    }
    if (b.att) {
      const int64_t E = spec_.width, Q = b.att->W_query.weight.size(0), KV = b.att->W_key.weight.size(0);
      // rows [0, Q): W_query, then W_key, W_value: one matrix of blocks when all three are of one type
      // (the packed queries and gate in bf16: unpacked below)
      const bool packed = b.att->q_and_gate.has_value();
      std::optional<QuantMatrix> q = read_q(a + n.q + "weight"), k = read_q(a + n.k + "weight"),
                                 v = read_q(a + n.v + "weight");
      const bool quantized = q && k && v && q->type == k->type && k->type == v->type;
      if (packed && quantized) {  // the packed rows' blocks split: queries to qkv_q, gates to gate_q
        const int64_t D = spec_.attention.head_dim, H = spec_.attention.heads;
        const size_t rows = static_cast<size_t>(D * quant_bytes(*q->type, E, "the packed queries"));
        w.qkv_q.type = w.gate_q.type = q->type;
        for (int64_t h = 0; h < H; ++h) {
          const auto rows_h = q->blocks.begin() + static_cast<std::ptrdiff_t>(2 * static_cast<size_t>(h) * rows);
          w.qkv_q.blocks.insert(w.qkv_q.blocks.end(), rows_h, rows_h + static_cast<std::ptrdiff_t>(rows));
          w.gate_q.blocks.insert(w.gate_q.blocks.end(), rows_h + static_cast<std::ptrdiff_t>(rows),
                                 rows_h + static_cast<std::ptrdiff_t>(2 * rows));
        }
        w.qkv_q.blocks.insert(w.qkv_q.blocks.end(), k->blocks.begin(), k->blocks.end());
        w.qkv_q.blocks.insert(w.qkv_q.blocks.end(), v->blocks.begin(), v->blocks.end());
      } else if (packed) {  // (2 Q, E): head h's D query rows, then its D gate rows
        const int64_t D = spec_.attention.head_dim, H = spec_.attention.heads;
        WeightVector<uint16_t> both = bits(2 * Q * E);
        read_bits(a + n.q + "weight", both.data());
        w.qkv = bits((Q + 2 * KV) * E);
        w.gate = bits(Q * E);
        for (int64_t h = 0; h < H; ++h) {
          std::copy_n(both.data() + 2 * h * D * E, D * E, w.qkv.data() + h * D * E);
          std::copy_n(both.data() + (2 * h + 1) * D * E, D * E, w.gate.data() + h * D * E);
        }
        read_bits(a + n.k + "weight", w.qkv.data() + Q * E);
        read_bits(a + n.v + "weight", w.qkv.data() + (Q + KV) * E);
      } else if (quantized) {
        w.qkv_q.type = q->type;
        w.qkv_q.blocks = std::move(q->blocks);
        w.qkv_q.blocks.insert(w.qkv_q.blocks.end(), k->blocks.begin(), k->blocks.end());
        w.qkv_q.blocks.insert(w.qkv_q.blocks.end(), v->blocks.begin(), v->blocks.end());
      } else {
        w.qkv = bits((Q + 2 * KV) * E);
        read_bits(a + n.q + "weight", w.qkv.data());
        read_bits(a + n.k + "weight", w.qkv.data() + Q * E);
        read_bits(a + n.v + "weight", w.qkv.data() + (Q + KV) * E);
      }
      if (std::optional<QuantMatrix> o = read_q(a + n.o + "weight")) {
        w.out_q = std::move(*o);
      } else {
        w.out = bits(b.att->out_proj.weight.numel());
        read_bits(a + n.o + "weight", w.out.data());
      }
    }
    std::vector<StateEntry> ff;
    const_cast<FeedForwardNet&>(b.ff).collect_state(n.blocks + std::to_string(i) + "." + n.ff, ff);
    for (const StateEntry& e : ff) {
      if (e.shape().size() != 2) continue;  // the linears' weights; their biases as floats below
      if (std::optional<QuantMatrix> m = read_q(e.name)) {
        w.ff.emplace_back();
        w.ff_q.resize(w.ff.size());
        w.ff_q.back() = std::move(*m);
      } else {
        w.ff.push_back(bits(e.tensor->numel()));
        read_bits(e.name, w.ff.back().data());
      }
    }
    // SwiGLU's gate and up (its linears' first two) of one type of blocks, without biases: one matrix
    if (b.ff.kind() == FeedForwardKind::kSwiGLU && w.ff_q.size() >= 2 && !w.ff_q[0].empty() && !w.ff_q[1].empty() &&
        w.ff_q[0].type == w.ff_q[1].type && !b.ff.swiglu_net().gate_proj.has_bias &&
        !b.ff.swiglu_net().up_proj.has_bias) {
      w.gate_up_q.type = w.ff_q[0].type;
      w.gate_up_q.blocks = std::move(w.ff_q[0].blocks);
      w.gate_up_q.blocks.insert(w.gate_up_q.blocks.end(), w.ff_q[1].blocks.begin(), w.ff_q[1].blocks.end());
      w.ff_q[0] = QuantMatrix{};
      w.ff_q[1] = QuantMatrix{};
    }
    blocks16.push_back(std::move(w));
  }
  const int64_t VE = spec_.vocab_size * spec_.width;
  WeightVector<uint16_t> embed, head_bits;
  std::optional<QuantMatrix> embed_q = read_q(n.embed + "weight"), head_q;
  if (!embed_q) {
    embed = bits(VE);
    read_bits(n.embed + "weight", embed.data());
  }
  if (!spec_.tied_head) {
    head_q = read_q(n.head + "weight");
    if (!head_q) {
      head_bits = bits(VE);
      read_bits(n.head + "weight", head_bits.data());
    }
  }
  // The Q8_0 and Q4_0 products stored in panels of 16 rows (core/quant_panels.h), in place: a
  // decoding step reads each as one stream (where the products read panels as stored: panels_pay()).
  // Each matrix's K: the rows' width.
  if (panels_pay()) {
    for (size_t i = 0; i < blocks16.size(); ++i) {
      DecoderBlock::Weights16& w = blocks16[i];
      if (blocks[i].att) {
        to_panels(w.qkv_q, spec_.width);
        to_panels(w.gate_q, spec_.width);
        to_panels(w.out_q, blocks[i].att->out_proj.weight.size(1));
      } else {
        const std::vector<const Linear*> ps = blocks[i].linear->products();
        for (size_t k = 0; k < ps.size() && k < w.linear_q.size(); ++k) to_panels(w.linear_q[k], ps[k]->weight.size(1));
      }
      to_panels(w.gate_up_q, spec_.width);
      std::vector<StateEntry> ff;
      const_cast<FeedForwardNet&>(blocks[i].ff).collect_state("", ff);
      size_t k = 0;
      for (const StateEntry& e : ff)
        if (e.shape().size() == 2 && k < w.ff_q.size()) to_panels(w.ff_q[k++], e.shape()[1]);
    }
    if (embed_q) to_panels(*embed_q, spec_.width);
    if (head_q) to_panels(*head_q, spec_.width);
  }
  blocks16_ = std::move(blocks16);
  QuantMatrix none;
  if (spec_.tied_head) {
    head16_ = std::move(embed);
    embed16_.clear();
    head_q_ = embed_q ? std::move(*embed_q) : none;
    embed_q_ = none;
  } else {
    head16_ = std::move(head_bits);
    embed16_ = std::move(embed);
    head_q_ = head_q ? std::move(*head_q) : none;
    embed_q_ = embed_q ? std::move(*embed_q) : none;
  }
  bf16_only_ = true;
}

Tensor DecoderModel::forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, ForwardObserver* observer) {
  const std::string& who = who_;
  QKV_CHECK(batch >= 1 && tokens >= 1 && static_cast<int64_t>(ids.size()) == batch * tokens, who, ": ", ids.size(),
            " ids for a (", batch, ", ", tokens, ") batch");
  QKV_CHECK(tokens <= spec_.context_length, who, ": ", tokens, " tokens but its context_length is ",
            spec_.context_length);
  if (bf16_only_) {  // the cached computation over a fresh cache: every position's logits
    QKV_CHECK(observer == nullptr, who, ": watching the layers needs the float weights; this model holds its ",
              "weights in bf16 only (load it with f32 products to watch it)");
    kernels::KvCache cache = make_cache(batch, kernels::CacheDtype::kF32, tokens);
    Tensor logits = Tensor::empty({batch, tokens, spec_.vocab_size});
    cached_pass(ids, batch, tokens, cache, logits.data(), /*all_rows=*/true);
    x_shape_ = Shape{};
    return logits;
  }
  // x = drop_emb(tok_emb(ids) [+ pos_emb(arange(T))])
  Tensor x = tok_emb.forward(ids, {batch, tokens});  // (B, T, E)
  if (pos_emb) {
    std::vector<int64_t> positions(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) positions[static_cast<size_t>(t)] = t;
    x = add(x, pos_emb->forward(positions, {tokens}));
  }
  x = drop_emb.forward(x);
  if (observer) observer->embedded(x);
  for (size_t l = 0; l < blocks.size(); ++l) x = blocks[l].forward(x, observer, static_cast<int64_t>(l));
  x_shape_ = x.shape();
  Tensor y = head.forward(final_norm.forward(x));  // (B, T, V)
  if (observer) observer->logits(y);
  return y;
}

Tensor DecoderModel::head_logits(const Tensor& x) { return head.forward(final_norm.forward(x)); }

void DecoderModel::backward(const Tensor& dlogits) {
  check_floats("backward");
  QKV_CHECK(x_shape_.size() == 3, family().title, " model: backward before forward");
  // logits = head(final_norm(x))
  Tensor dx = final_norm.backward(head.backward(dlogits));
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) dx = it->backward(dx);
  // x = drop_emb(tok_emb(ids) + pos_emb(arange(T))): pos_emb broadcast over the batch
  dx = drop_emb.backward(dx);
  tok_emb.backward(dx);
  if (pos_emb) pos_emb->backward(sum_to(dx, {x_shape_[1], x_shape_[2]}));
}

kernels::KvCache DecoderModel::make_cache(int64_t batch, kernels::CacheDtype dtype, int64_t capacity) const {
  QKV_CHECK(!blocks.empty(), family().title, " model: a model without blocks (0 layers) has no keys or values to cache");
  QKV_CHECK(batch >= 1, family().title, " model: the cache's batch (", batch, ") must be at least 1");
  return decoder_cache(spec_, batch, dtype, capacity);
}

kernels::KvCache decoder_cache(const DecoderSpec& spec, int64_t batch, kernels::CacheDtype dtype, int64_t capacity) {
  const kernels::AttentionSpec& a = spec.attention;
  std::vector<int64_t> states;  // a linear block's fixed-size state instead of keys and values
  if (spec.linear_layers() > 0)
    for (int64_t l = 0; l < spec.layers; ++l)
      states.push_back(spec.kind(l) == LayerKind::kLinear ? gated_deltanet_cache_floats(linear_of(spec), batch) : 0);
  return kernels::KvCache(spec.layers, batch, a.groups(), models_detail::cache_capacity(capacity, spec.context_length),
                          a.head_dim, a.head_dim, dtype, std::move(states));
}

void DecoderModel::forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                                       kernels::KvCache& cache, float* logits) {
  cached_pass(ids, batch, tokens, cache, logits, false);
}

void DecoderModel::embed_rows(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, int64_t P,
                              float* x) const {
  const int64_t N = batch * tokens, E = spec_.width, V = spec_.vocab_size;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t id = ids[static_cast<size_t>(i)];
    QKV_CHECK(id >= 0 && id < V, who_, ": id ", id, " at position ", i,
              " is outside the vocabulary of ", V);
  }
  if (bf16_only_) {
    const WeightVector<uint16_t>& table = spec_.tied_head ? head16_ : embed16_;
    const QuantMatrix& table_q = spec_.tied_head ? head_q_ : embed_q_;
    if (!table_q.empty()) {  // a row of blocks per id (gathered from its panel), decoded
      std::vector<uint8_t> row(static_cast<size_t>(quant_bytes(*table_q.type, E, "the embedding's rows")));
      for (int64_t i = 0; i < N; ++i) {
        quant_row(table_q.view(), V, E, ids[static_cast<size_t>(i)], row.data());
        dequantize(*table_q.type, row.data(), E, x + i * E);
      }
    } else {
      for (int64_t i = 0; i < N; ++i)
        bf16_to_floats(table.data() + ids[static_cast<size_t>(i)] * E, x + i * E, static_cast<size_t>(E));
    }
    if (pos_emb) {
      const float* pos = pos_emb->weight.data();
      for (int64_t i = 0; i < N; ++i) add_into(x + i * E, pos + (P + i % tokens) * E, E);
    }
    return;
  }
  QKV_CHECK(tok_emb.weight.is_contiguous() && (!pos_emb || pos_emb->weight.is_contiguous()), who_,
            ": the embeddings must be contiguous");
  if (pos_emb) {  // x = tok_emb.weight[ids] + pos_emb.weight[P:P+Tn]
    models_detail::embed_at(who_.c_str(), ids, batch, tokens, P, tok_emb.weight, pos_emb->weight, x);
    return;
  }
  for (int64_t i = 0; i < N; ++i)
    std::memcpy(x + i * E, tok_emb.weight.data() + ids[static_cast<size_t>(i)] * E, static_cast<size_t>(E) * sizeof(float));
}

void DecoderModel::cached_pass(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache,
                               float* logits, bool all_rows) {
  const std::string& who = who_;
  QKV_CHECK(!drop_emb.active(), who, ": forward_cached is inference, but dropout is active: call eval() first");
  const int64_t P = models_detail::check_cached_step(who.c_str(), ids, batch, tokens, cache,
                                                     static_cast<int64_t>(blocks.size()), spec_.context_length);
  const int64_t N = batch * tokens, E = spec_.width, F = std::max<int64_t>(spec_.ff_width, 1);
  float* x = rows_of(step_x_, N * E);
  // SwiGLU's up rows right after the hidden ones: a fused gate and up product writes both at once
  const bool gated_ff = spec_.ff == FeedForwardKind::kSwiGLU;
  float* hidden = rows_of(step_hidden_, (gated_ff ? 2 : 1) * N * F);
  const DecoderBlock::Scratch s{rows_of(step_h_, N * E), rows_of(step_a_, N * E), hidden,
                                gated_ff ? hidden + N * F : nullptr, &step_att_};
  // x = tok_emb.weight[ids] (+ pos_emb.weight[P:P+Tn])                 (B, Tn, E), nothing recorded
  embed_rows(ids, batch, tokens, P, x);
  const bool bf16 = !blocks16_.empty() && spec_.attention.dtype == Dtype::kBF16;
  for (size_t l = 0; l < blocks.size(); ++l)
    blocks[l].forward_cached(x, batch, tokens, cache, static_cast<int64_t>(l), bf16 ? &blocks16_[l] : nullptr, s);
  cache.commit();
  const uint16_t* head16 = bf16 && !head16_.empty() ? head16_.data() : nullptr;
  const QuantView head_q = bf16 ? head_q_.view() : QuantView{};
  if (all_rows) {  // logits = head(final_norm(x))                      (B, Tn, V)
    const float* h = x;
    if (final_norm.on()) {
      final_norm.rows(x, N, s.h);
      h = s.h;
    }
    linear_rows(kWho, h, N, head, head16, logits, head_q);
    return;
  }
  // logits = head(final_norm(x[:, -1]))                               (B, V)
  float* last = rows_of(step_last_, batch * E);
  for (int64_t b = 0; b < batch; ++b)
    std::memcpy(last + b * E, x + (b * tokens + tokens - 1) * E, static_cast<size_t>(E) * sizeof(float));
  if (final_norm.on()) final_norm.rows(last, batch, last);
  linear_rows(kWho, last, batch, head, head16, logits, head_q);
}

size_t DecoderModel::step_scratch_bytes() const {
  size_t floats = 0;
  for (const std::vector<float>* v : {&step_x_, &step_h_, &step_a_, &step_hidden_, &step_last_})
    floats += v->size();
  return floats * sizeof(float) + step_att_.bytes();
}

// --- building and watching -----------------------------------------------------------------------

std::unique_ptr<LanguageModel> build_model(const DecoderSpec& spec, Generator& gen) {
  return std::make_unique<DecoderModel>(spec, gen);
}

std::unique_ptr<DecoderModel> build_model_to_load(const DecoderSpec& spec, Generator& gen) {
  gen.set_init_draws(false);  // every weight is about to be loaded
  try {
    auto model = std::make_unique<DecoderModel>(spec, gen);
    gen.set_init_draws(true);
    return model;
  } catch (...) {
    gen.set_init_draws(true);
    throw;
  }
}

namespace {

bool finite(const Tensor& t) {
  if (!t.defined()) return true;
  for (float v : t.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

// The first non-finite value a forward makes, by where it is made.
class NonFiniteHunt : public ForwardObserver {
 public:
  explicit NonFiniteHunt(const StateNames& names) : names_(names) {}
  void embedded(const Tensor& x) override { note(x, "embeddings"); }
  void block(const BlockView& v) override {
    const std::string b = names_.blocks + std::to_string(v.layer) + ".";
    note(v.normed, b + "norm1");
    if (v.trace) {
      const AttentionTrace& t = *v.trace;
      const std::pair<const char*, const Tensor*> steps[] = {{"queries", &t.queries}, {"keys", &t.keys},
                                                             {"values", &t.values},   {"attn_scores", &t.scores},
                                                             {"attn_weights", &t.weights}, {"context", &t.context}};
      for (const auto& [what, tensor] : steps) note(tensor, b + what);
    }
    note(v.attention, b + "attention (out_proj)");
    note(v.ff, b + "ff");
    note(v.output, b + "output (residual sum)");
  }
  void logits(const Tensor& y) override { note(y, "logits"); }
  std::string where;

 private:
  void note(const Tensor* t, const std::string& what) {
    if (t) note(*t, what);
  }
  void note(const Tensor& t, const std::string& what) {
    if (where.empty() && !finite(t)) where = what;
  }
  const StateNames& names_;
};

}  // namespace

std::string first_non_finite(LanguageModel& model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) {
  for (const StateEntry& e : model.state_dict())
    if (e.tensor && !finite(*e.tensor)) return e.name;  // (a mask buffer is not a value of the model)
  const bool was_training = model.is_training();
  model.eval();
  NonFiniteHunt hunt(model.family().names);
  model.forward(ids, batch, tokens, &hunt);
  model.train(was_training);
  return hunt.where;
}

}  // namespace qkv
