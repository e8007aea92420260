// What the explore page shows from the walkthrough and from one module's trace, and the steps every
// page is made of. A model's page is explore_model.cc's.
// See include/qkv/explore/explore.h. Legend: T tokens, H heads, G key/value heads, D head dim.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/core/thread_pool.h"
#include "qkv/explore/explore.h"
#include "qkv/modules/attention_variants.h"
#include "qkv/modules/multi_head_attention.h"
#include "explore/page_parts.h"

namespace qkv {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A float as the captions say it: its shortest decimal that reads back the same.
std::string number(float x) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}

// Per head (H, rows, cols) from a trace tensor: (B, H, T, X) with heads, else (B, T, X) or (T, X).
Tensor heads_of(const Tensor& t, bool multi_head, int input_rank) {
  if (!t.defined()) return t;
  if (multi_head) return t.select(0, 0).contiguous();               // (H, T, X)
  return (input_rank == 3 ? t.select(0, 0) : t).unsqueeze(0).contiguous();  // (1, T, X)
}

}  // namespace

namespace explore_detail {

Tensor repeat_heads(const Tensor& k, int64_t H) {
  const int64_t G = k.size(0);
  if (G == H) return k;
  std::vector<Tensor> parts;
  for (int64_t h = 0; h < H; ++h) parts.push_back(k.select(0, h / (H / G)));
  return stack(parts, 0);
}

}  // namespace explore_detail

namespace {

// Abnar & Zuidema's rollout: prod over layers of normalise(mean_h(W) + I), first layer rightmost.
Tensor rollout_of(const std::vector<ExploreLayer>& layers, int64_t T) {
  Tensor r;
  for (const ExploreLayer& l : layers) {
    Tensor a = add(mean(l.weights, 0), Tensor::zeros({T, T}));  // (T, T)
    for (int64_t i = 0; i < T; ++i) a.at({i, i}) += 1.0f;
    a = normalize_sum(a, -1);
    r = r.defined() ? matmul(a, r) : a;
  }
  return r;
}

// Each head's statistics from its (T, T) weights (ExploreHeadStats; induction left unmeasured).
std::vector<ExploreHeadStats> head_stats(const Tensor& weights) {
  const Tensor w = weights.contiguous();
  const int64_t H = w.size(0), T = w.size(1);
  std::vector<ExploreHeadStats> out(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) {
    ExploreHeadStats& s = out[static_cast<size_t>(h)];
    double entropy = 0, distance = 0, first = 0, previous = 0;
    for (int64_t i = 0; i < T; ++i) {
      const float* row = w.data() + (h * T + i) * T;
      for (int64_t j = 0; j < T; ++j) {
        const double a = row[j];
        if (a > 0) entropy -= a * std::log(a);
        distance += a * static_cast<double>(i - j);
      }
      if (i >= 1) {
        first += row[0];
        previous += row[i - 1];
      }
    }
    s.entropy = entropy / static_cast<double>(T);
    s.distance = distance / static_cast<double>(T);
    s.first = T > 1 ? first / static_cast<double>(T - 1) : 0.0;
    s.previous = T > 1 ? previous / static_cast<double>(T - 1) : 0.0;
  }
  return out;
}

}  // namespace

namespace explore_detail {

void summarise(ExplorePage& p) {
  const int64_t T = static_cast<int64_t>(p.tokens.size());
  p.rollout = rollout_of(p.layers, T);
  p.rollout_thumbnail = explore_thumbnail(p.rollout.unsqueeze(0)).select(0, 0).contiguous();
  for (ExploreLayer& l : p.layers) {
    const Tensor w = l.weights.contiguous();
    const int64_t H = w.size(0), cells = T * T;
    Tensor max_over = Tensor::zeros({1, T, T});
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < cells; ++n) max_over.data()[n] = std::max(max_over.data()[n], w.data()[h * cells + n]);
    l.thumbnails = explore_thumbnail(cat({w, mean(w, 0).unsqueeze(0), max_over}, 0));
    l.stats = head_stats(w);
    if (l.linear)  // A is no distribution over the keys: no entropy, no mean distance (A's cells stay)
      for (ExploreHeadStats& st : l.stats) st.entropy = st.distance = std::numeric_limits<double>::quiet_NaN();
  }
}

ExploreStep step(std::string name, std::string caption, Tensor value, bool per_head, std::vector<ExploreLink> links,
                 int64_t layer) {
  return {std::move(name), std::move(caption), std::move(value), per_head, layer, std::move(links), ""};
}

}  // namespace explore_detail

using explore_detail::repeat_heads;
using explore_detail::step;
using explore_detail::summarise;

Tensor explore_thumbnail(const Tensor& matrices) {
  const Tensor m = matrices.contiguous();
  QKV_CHECK(m.dim() == 3 && m.size(1) == m.size(2), "explore_thumbnail: expected (rows, T, T), got ", m.describe());
  const int64_t R = m.size(0), T = m.size(1), n = std::min(T, kExploreThumbnail);
  Tensor out = Tensor::empty({R, n, n});
  std::vector<int64_t> block(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) block[static_cast<size_t>(i)] = i * n / T;
  const float lowest = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < R * n * n; ++k) out.data()[k] = lowest;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < T; ++i) {
      float* row = out.data() + (r * n + block[static_cast<size_t>(i)]) * n;
      const float* src = m.data() + (r * T + i) * T;
      for (int64_t j = 0; j < T; ++j) {
        float& o = row[block[static_cast<size_t>(j)]];
        o = std::max(o, src[j]);
      }
    }
  return out;
}

ExplorePage explore_walkthrough(const Walkthrough& w) {
  ExplorePage p;
  p.source = "walkthrough";
  p.title = "Chapter 3 on \"" + w.text + "\"";
  p.tokens = w.words;
  const std::map<std::string, std::vector<ExploreLink>> links = {
      {"simple.attn_scores_2", {{"inputs", "1", "*"}, {"inputs", "j", "*"}}},
      {"simple.attn_weights_2_tmp", {{"simple.attn_scores_2", "0", "*"}}},
      {"simple.attn_weights_2_naive", {{"simple.attn_scores_2", "0", "*"}}},
      {"simple.attn_weights_2", {{"simple.attn_scores_2", "0", "*"}}},
      {"simple.context_vec_2", {{"simple.attn_weights_2", "0", "*"}, {"inputs", "*", "j"}}},
      {"simple.attn_scores", {{"inputs", "i", "*"}, {"inputs", "j", "*"}}},
      {"simple.attn_weights", {{"simple.attn_scores", "i", "*"}}},
      {"simple.all_context_vecs", {{"simple.attn_weights", "i", "*"}, {"inputs", "*", "j"}}},
      {"trainable.query_2", {{"inputs", "1", "*"}, {"trainable.W_query", "*", "j"}}},
      {"trainable.key_2", {{"inputs", "1", "*"}, {"trainable.W_key", "*", "j"}}},
      {"trainable.value_2", {{"inputs", "1", "*"}, {"trainable.W_value", "*", "j"}}},
      {"trainable.keys", {{"inputs", "i", "*"}, {"trainable.W_key", "*", "j"}}},
      {"trainable.values", {{"inputs", "i", "*"}, {"trainable.W_value", "*", "j"}}},
      {"trainable.attn_score_22", {{"trainable.query_2", "0", "*"}, {"trainable.keys", "1", "*"}}},
      {"trainable.attn_scores_2", {{"trainable.query_2", "0", "*"}, {"trainable.keys", "j", "*"}}},
      {"trainable.attn_weights_2", {{"trainable.attn_scores_2", "0", "*"}}},
      {"trainable.context_vec_2", {{"trainable.attn_weights_2", "0", "*"}, {"trainable.values", "*", "j"}}},
      {"causal.masked_simple", {{"causal.attn_weights_unmasked", "i", "j"}, {"causal.mask_simple", "i", "j"}}},
      {"causal.masked_simple_norm", {{"causal.masked_simple", "i", "*"}}},
      {"causal.attn_weights", {{"causal.masked_scores", "i", "*"}}},
      {"dropout.causal_weights_p05_seed123",
       {{"causal.attn_weights", "i", "j"}, {"dropout.ones_p05_seed123", "i", "j"}}},  // the same seed's mask
      // the modules' outputs and weights: a softmax row reads every key, so each cell reads all inputs
      {"sa_v1.seed123", {{"inputs", "*", "*"}}},
      {"sa_v2.seed789", {{"inputs", "*", "*"}}},
      {"causal.attn_weights_unmasked", {{"inputs", "*", "*"}}},
      {"causal.masked_scores", {{"inputs", "i", "*"}, {"inputs", "j", "*"}, {"causal.mask_simple", "i", "j"}}},
      {"causal_attention.seed123", {{"inputs", "*", "*"}}},
      {"mha_wrapper.seed123", {{"inputs", "*", "*"}}},
      {"mha.seed123", {{"inputs", "*", "*"}}},
      {"mha.attn_weights", {{"inputs", "*", "*"}}},
  };
  for (const WalkthroughStep& s : w.steps) {
    ExploreStep e = step(s.name, s.section + ": " + s.caption, s.value);
    if (s.value.dim() == 3) {  // (B, T, X): batch item 0
      e.value = s.value.select(0, 0).contiguous();
      e.index_prefix = "[0]";
    } else if (s.value.dim() == 4) {  // (B, H, T, T): batch item 0, per head
      e.value = s.value.select(0, 0).contiguous();
      e.per_head = true;
      e.index_prefix = "[0]";
    }
    if (auto it = links.find(s.name); it != links.end()) e.links = it->second;
    p.pipeline.push_back(std::move(e));
  }
  // The layer: the chapter's MultiHeadAttention (seed 123, d_in 3, d_out 2, 2 heads) on the
  // batch it ran on, again, for its queries and keys; its weights are the walkthrough's own.
  const Tensor* inputs = nullptr;
  const Tensor* weights = nullptr;
  for (const WalkthroughStep& s : w.steps) {
    if (s.name == "inputs") inputs = &s.value;
    if (s.name == "mha.attn_weights") weights = &s.value;
  }
  QKV_CHECK(inputs && weights, "explore: the walkthrough has no inputs or mha.attn_weights step");
  const int64_t T = inputs->size(0);
  Generator gen(123);
  MultiHeadAttention mha(attention_config("mha", 3, 2, T, 0.0, 2), gen);
  AttentionTrace trace;
  mha.forward(stack({*inputs, *inputs}, 0), &trace);
  ExploreLayer layer;
  layer.weights = weights->select(0, 0).contiguous();
  layer.queries = trace.queries.select(0, 0).contiguous();
  layer.keys = repeat_heads(trace.keys.select(0, 0).contiguous(), 2);
  layer.scale = std::sqrt(static_cast<float>(mha.head_dim()));
  p.layers.push_back(layer);
  summarise(p);
  return p;
}

namespace {

// A linear recurrence's steps (the book's GatedDeltaNet, Qwen3.5's layer) and its layer: queries,
// keys and values as the delta rule reads them; in place of softmax weights the exact map A the
// recurrence applies to the values (modules/delta_rule.h's delta_rule_map: context = A @ values);
// the context. The layer's heads are A's maps: the value heads (beta per head), or the book's
// (head, value channel) pairs (beta per channel: each channel has its own map).
void add_linear_steps(ExplorePage& p, const AttentionModuleInfo& info, const AttentionTrace& trace) {
  const bool book = !info.linear_sizes;
  auto first = [](const Tensor& t) { return t.select(0, 0).contiguous(); };  // batch item 0
  const Tensor q = first(trace.queries), k = first(trace.keys), v = first(trace.values), A = first(trace.weights);
  const int64_t Dv = v.size(2), maps = A.size(0);
  if (book) {  // head h's rows h D .. h D + D - 1 of each projection
    auto projection = [&](const std::string& name, const std::string& weight, const std::string& what, const Tensor& t) {
      p.pipeline.push_back(step(name, name + " = " + what + ", per head (T, D)", t, true,
                                {{"inputs", "i", "*"}, {weight + ".weight", "hj", "*"}}));
    };
    projection("queries", "W_query", "l2norm(W_query(x)) / sqrt(D)", q);
    projection("keys", "W_key", "l2norm(W_key(x))", k);
    projection("values", "W_value", "W_value(x)", v);
  } else {  // the convolution reads rows i - K + 1 .. i of the projection
    const std::string conv = " of silu(conv1d(in_proj_qkv(x))) (causal, over the K - 1 rows before too)";
    const std::vector<ExploreLink> from_x = {{"inputs", "*", "*"}};
    p.pipeline.push_back(step("queries", "queries = l2norm(q" + conv + ") / sqrt(Dk), per value head (T, Dk)", q,
                              true, from_x));
    p.pipeline.push_back(step("keys", "keys = l2norm(k" + conv + "), per value head (T, Dk)", k, true, from_x));
    p.pipeline.push_back(step("values", "values = v" + conv + ", per value head (T, Dv)", v, true, from_x));
  }
  p.pipeline.push_back(step("A",
                            std::string("A: the delta rule's exact map from values to context, from the queries, keys, "
                                        "beta and the decays; lower-triangular, not softmax weights (a row need not "
                                        "sum to 1, and may be negative). ") +
                                (book ? "One map per head and value channel (beta corrects each channel by its own "
                                        "amount): map h D + c is head h's channel c"
                                      : "One map per value head"),
                            A, true, {{"queries", "i", "*"}, {"keys", "*", "*"}}));
  p.pipeline.push_back(step("context",
                            book ? "context[:, c] = A[h D + c] @ values[:, c], per head (T, D)"
                                 : "context = A @ values, per value head (T, Dv)",
                            first(trace.context), true, {{"A", "i", "*"}, {"values", "*", "j"}}));
  ExploreLayer layer;
  layer.weights = A;
  layer.queries = repeat_heads(q, maps);  // map m reads head m / (maps / heads)
  layer.keys = repeat_heads(k, maps);
  layer.linear = true;
  if (book)
    for (int64_t m = 0; m < maps; ++m)
      layer.head_names.push_back("head " + std::to_string(m / Dv) + " ch " + std::to_string(m % Dv));
  p.layers.push_back(std::move(layer));
}

}  // namespace

ExplorePage explore_module(AttentionModule& module, const AttentionModuleInfo& info, const AttentionConfig& config,
                           const Tensor& inputs, const AttentionTrace& trace, const Tensor& output,
                           std::vector<std::string> tokens, std::string title) {
  ExplorePage p;
  p.source = "module";
  p.title = std::move(title);
  p.tokens = std::move(tokens);
  p.causal = info.causal;
  const kernels::AttentionSpec& spec = config.attention;
  p.dropout = trace.dropped_weights.defined() ? spec.dropout : 0.0;
  const bool mh = info.multi_head;
  const int rank = info.input_rank;
  const std::string batch = rank == 3 ? "[0]" : "";
  auto H = [&](const Tensor& t) { return heads_of(t, mh, rank); };

  ExploreStep in = step("inputs", "the module's input x, (T, d_in)", inputs);
  in.index_prefix = batch;
  p.pipeline.push_back(in);
  // The projections: which state-dict name holds W_query and how a head's column maps to its rows.
  std::string wq_row = "j", wq_col = "*";
  std::string prefix;
  for (const StateEntry& e : module.state_dict())
    if (e.is_parameter) {
      p.pipeline.push_back(step(e.name, "parameter " + e.name + " " + shape_str(e.shape()), e.value()));
      p.pipeline.back().parameter = true;
    }
  const std::vector<StateEntry> state = module.state_dict();
  auto has = [&](const std::string& name) {
    for (const StateEntry& e : state)
      if (e.name == name) return true;
    return false;
  };
  // output[i][j]: out_proj from context row i (every head's) and weight row j; without out_proj the
  // context itself (heads concatenated for the wrapper: column j is head j / D's column j mod D)
  ExploreStep out = step("output", has("out_proj.weight") ? "out_proj(context heads concatenated), (T, d_out)"
                                                          : "the module's output, (T, d_out)",
                         rank == 3 ? output.select(0, 0).contiguous() : output);
  out.index_prefix = batch;
  if (has("out_proj.weight"))
    out.links = {{"context", "i", "*"}, {"out_proj.weight", "j", "*"}, {"out_proj.bias", "0", "j"}};
  else
    out.links = {{"context", "i", mh ? "jd" : "j"}};
  if (!info.softmax) {
    add_linear_steps(p, info, trace);
    if (info.linear_sizes) {  // Qwen3.5's layer: out_proj without a bias
      out.caption = "out_proj(rmsnorm(context) * norm.weight * silu(in_proj_z(x))), (T, d_model)";
      out.links = {{"context", "i", "*"}, {"out_proj.weight", "j", "*"}};
    } else {
      out.caption = "out_proj(dropout(rmsnorm(context) * norm.weight * silu(W_gate(x)))), (T, d_out)";
      out.links = {{"context", "i", "*"}, {"out_proj.weight", "j", "*"}, {"out_proj.bias", "0", "j"}};
    }
    p.pipeline.push_back(out);
    summarise(p);
    return p;
  }
  std::string w_suffix = ".weight";
  if (has("W_query")) {  // SelfAttention_v1: x @ W_query, W (d_in, d_out)
    w_suffix = "";
    wq_row = "*";
    wq_col = "j";
  } else if (has("heads.0.W_query.weight")) {  // the wrapper: one CausalAttention per head
    prefix = "heads.{h}.";
  } else if (mh) {  // MultiHeadAttention: head h uses rows h D .. h D + D - 1
    wq_row = "hj";
  }
  auto projection = [&](const char* name, const char* w, const Tensor& t, const char* what) {
    return step(name, what, H(t), true, {{"inputs", "i", "*"}, {prefix + w + w_suffix, wq_row, wq_col}});
  };
  p.pipeline.push_back(projection("queries", "W_query", trace.queries, "queries = x @ W_query, per head (T, D)"));
  p.pipeline.push_back(projection("keys", "W_key", trace.keys, "keys = x @ W_key, per head (T, D)"));
  p.pipeline.push_back(projection("values", "W_value", trace.values, "values = x @ W_value, per head (T, D)"));
  const Tensor queries = H(trace.queries), keys = H(trace.keys);
  const int64_t heads = queries.size(0), T = queries.size(1);
  const float scale = std::sqrt(static_cast<float>(keys.size(-1)));
  p.pipeline.push_back(step("scores", "attn_scores = queries @ keys.T", H(trace.scores), true,
                            {{"queries", "i", "*"}, {"keys", "j", "*"}}));
  // The module's mask (causal, and the window), as 1 where a key is hidden: where the masked
  // scores are -inf and the scores are not.
  Tensor mask;
  if (trace.masked_scores.defined()) {
    const Tensor ms = H(trace.masked_scores).select(0, 0).contiguous(), sc = H(trace.scores).select(0, 0).contiguous();
    mask = Tensor::zeros({T, T});
    for (int64_t n = 0; n < T * T; ++n)
      mask.data()[n] = ms.data()[n] == -kInf && sc.data()[n] != -kInf ? 1.0f : 0.0f;
    p.pipeline.push_back(step("mask", spec.window > 0 ? "the mask: 1 where key j is hidden from query i (j > i, or j <= i - window)"
                                                        : "mask.bool()[:T, :T]: 1 where key j is hidden from query i (j > i)",
                              mask));
  }
  // What softmax reads, in the order the module computes it: the book's MultiHeadAttention masks
  // the scores and then scales them; with a softcap or ALiBi (attention_variants.h) the scores are
  // scaled, capped, biased and then masked.
  const std::vector<float> alibi = kernels::spec_alibi_slopes(spec);
  const auto softcap = static_cast<float>(spec.softcap);
  std::string softmax_input;
  if (softcap > 0.0f || !alibi.empty()) {
    Tensor logits = div(H(trace.scores), scale);
    p.pipeline.push_back(step("scaled_scores", "attn_scores / keys.shape[-1] ** 0.5", logits, true, {{"scores", "i", "j"}}));
    std::string last = "scaled_scores";
    if (softcap > 0.0f) {  // capped = softcap * tanh(scaled / softcap)
      Tensor capped = Tensor::empty(logits.shape());
      for (int64_t n = 0; n < logits.numel(); ++n) capped.data()[n] = std::tanh(logits.data()[n] / softcap) * softcap;
      logits = capped;
      p.pipeline.push_back(step("capped_scores", "softcap * tanh(scaled / softcap), softcap = " + number(softcap),
                                logits, true, {{last, "i", "j"}}));
      last = "capped_scores";
    }
    if (!alibi.empty()) {  // biased = capped - slope[h] * (i - j)
      Tensor biased = Tensor::empty(logits.shape());
      std::string slopes;
      for (int64_t h = 0; h < heads; ++h) {
        const float slope = alibi[static_cast<size_t>(h)];
        slopes += (h ? ", " : "") + number(slope);
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) {
            const int64_t n = (h * T + i) * T + j;
            biased.data()[n] = logits.data()[n] + -slope * static_cast<float>(i - j);
          }
      }
      logits = biased;
      p.pipeline.push_back(step("alibi_scores", last + " - slope[h] * (i - j) (ALiBi), slopes " + slopes, logits, true,
                                {{last, "i", "j"}}));
      last = "alibi_scores";
    }
    if (mask.defined()) {
      logits = masked_fill(logits, mask, -kInf);
      p.pipeline.push_back(step("masked_scores", last + ".masked_fill(mask, -inf): softmax's input", logits, true,
                                {{last, "i", "j"}, {"mask", "i", "j"}}));
      last = "masked_scores";
    }
    softmax_input = last;
  } else {
    std::string before_scale = "scores";
    if (mask.defined()) {
      p.pipeline.push_back(step("masked_scores", "attn_scores.masked_fill(mask.bool()[:T, :T], -inf)",
                                H(trace.masked_scores), true, {{"scores", "i", "j"}, {"mask", "i", "j"}}));
      before_scale = "masked_scores";
    }
    p.pipeline.push_back(step("scaled_scores", "attn_scores / keys.shape[-1] ** 0.5: softmax's input",
                              div(H(trace.masked_scores.defined() ? trace.masked_scores : trace.scores), scale), true,
                              {{before_scale, "i", "j"}}));
    softmax_input = "scaled_scores";
  }
  const Tensor weights = H(trace.weights);
  p.pipeline.push_back(step("attn_weights", "torch.softmax(" + softmax_input + ", dim=-1)", weights, true,
                            {{softmax_input, "i", "*"}}));
  p.pipeline.push_back(
      step("row_sums", "attn_weights.sum(dim=-1): each row sums to 1", sum(weights, -1, true), true,
           {{"attn_weights", "i", "*"}}));
  std::string context_from = "attn_weights";
  if (trace.dropped_weights.defined()) {
    const Tensor dropped = H(trace.dropped_weights);
    Tensor factor = Tensor::zeros(dropped.shape());  // dropped / weights where the weight is not 0
    const float* d = dropped.data();
    const float* wt = weights.data();
    for (int64_t n = 0; n < factor.numel(); ++n) factor.data()[n] = wt[n] != 0.0f ? d[n] / wt[n] : 0.0f;
    p.pipeline.push_back(step("dropout_mask",
                              "nn.Dropout's mask times 1 / (1 - p) = " + std::to_string(1.0 / (1.0 - spec.dropout)) +
                                  " (0 where dropped, and where the weight is already 0)",
                              factor, true));
    p.pipeline.push_back(step("attn_weights_dropped", "dropout(attn_weights) = attn_weights * mask / (1 - p)",
                              dropped, true, {{"attn_weights", "i", "j"}, {"dropout_mask", "i", "j"}}));
    context_from = "attn_weights_dropped";
  }
  p.pipeline.push_back(step("context", "context_vec = attn_weights @ values, per head", H(trace.context), true,
                            {{context_from, "i", "*"}, {"values", "*", "j"}}));
  p.pipeline.push_back(out);

  ExploreLayer layer;
  layer.weights = weights;
  layer.queries = queries;
  layer.keys = repeat_heads(keys, heads);
  layer.scale = scale;
  layer.softcap = softcap;
  layer.alibi = alibi;
  layer.window = spec.window;
  p.layers.push_back(layer);
  summarise(p);
  return p;
}

}  // namespace qkv
