// What the explore page shows, from the walkthrough, one module's trace, or an attention LM.
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

// Key heads repeated so that query head h reads row h: (G, T, D) -> (H, T, D).
Tensor repeat_heads(const Tensor& k, int64_t H) {
  const int64_t G = k.size(0);
  if (G == H) return k;
  std::vector<Tensor> parts;
  for (int64_t h = 0; h < H; ++h) parts.push_back(k.select(0, h / (H / G)));
  return stack(parts, 0);
}

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

// The rollout and the model view's thumbnails of a page whose layers are filled in.
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
  }
}

ExploreStep step(std::string name, std::string caption, Tensor value, bool per_head = false,
                 std::vector<ExploreLink> links = {}, int64_t layer = -1) {
  return {std::move(name), std::move(caption), std::move(value), per_head, layer, std::move(links), ""};
}

}  // namespace

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
  ExploreStep out = step("output", has("out_proj.weight") ? "out_proj(context heads concatenated), (T, d_out)"
                                                          : "the module's output, (T, d_out)",
                         rank == 3 ? output.select(0, 0).contiguous() : output);
  out.index_prefix = batch;
  // output[i][j]: out_proj from context row i (every head's) and weight row j; without out_proj the
  // context itself (heads concatenated for the wrapper: column j is head j / D's column j mod D)
  if (has("out_proj.weight"))
    out.links = {{"context", "i", "*"}, {"out_proj.weight", "j", "*"}, {"out_proj.bias", "0", "j"}};
  else
    out.links = {{"context", "i", mh ? "jd" : "j"}};
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

namespace {

// A model's page before its blocks: title, tokens, and the text checked against the context.
ExplorePage model_page(std::string title, std::vector<std::string> tokens, int64_t T, int64_t context_length) {
  QKV_CHECK(T >= 1 && T <= context_length, "explore: ", T, " tokens but the model's context_length is ",
            context_length);
  ExplorePage p;
  p.source = "checkpoint";
  p.title = std::move(title);
  p.tokens = std::move(tokens);
  return p;
}

// Block l's input x (1, T, C), linked to the block before's output.
ExploreStep block_input(const std::string& prefix, size_t l, const Tensor& x) {
  const int64_t li = static_cast<int64_t>(l);
  ExploreStep in = step(prefix + std::to_string(l) + ".input",
                        "block " + std::to_string(l) + "'s input x (embeddings + earlier blocks), (T, C)",
                        x.select(0, 0).contiguous(), false, {}, li);
  if (l > 0) in.links = {{prefix + std::to_string(l - 1) + ".output", "i", "j"}};  // the block before's output
  in.index_prefix = "[0]";
  return in;
}

// One block's attention from its trace (the first sequence): the queries, keys and values (their
// steps made by `proj`, which links them to what they were projected from), the weights and the
// context; and the layer the model, head and neuron views read.
using ProjectionStep = std::function<ExploreStep(const std::string& name, const std::string& weight, const Tensor& t)>;
void add_attention(ExplorePage& p, const std::string& b, int64_t li, const AttentionTrace& trace,
                   const MultiHeadAttention& att, const ProjectionStep& proj) {
  const Tensor queries = trace.queries.select(0, 0).contiguous();
  const Tensor keys = trace.keys.select(0, 0).contiguous();
  p.pipeline.push_back(proj("queries", "W_query", queries));
  p.pipeline.push_back(proj("keys", "W_key", keys));
  p.pipeline.push_back(proj("values", "W_value", trace.values.select(0, 0).contiguous()));
  const Tensor weights = trace.weights.select(0, 0).contiguous();
  p.pipeline.push_back(step(b + "attn_weights",
                            "softmax(masked(queries @ keys.T) / sqrt(D)), per head (the neuron view shows the "
                            "scores)",
                            weights, true, {{b + "queries", "i", "*"}, {b + "keys", "j", "*"}}, li));
  p.pipeline.push_back(step(b + "context", "context = attn_weights @ values, per head",
                            trace.context.select(0, 0).contiguous(), true,
                            {{b + "attn_weights", "i", "*"}, {b + "values", "*", "j"}}, li));
  ExploreLayer layer;
  layer.weights = weights;
  layer.queries = queries;
  layer.keys = repeat_heads(keys, queries.size(0));
  layer.scale = std::sqrt(static_cast<float>(att.head_dim()));
  const kernels::AttentionSpec& spec = att.config.attention;
  layer.softcap = static_cast<float>(spec.softcap);
  layer.alibi = kernels::spec_alibi_slopes(spec);
  layer.window = spec.window;
  p.layers.push_back(layer);
}

// One attention LM block on x (1, T, C) as explore_lm shows it.
struct LmBlock {
  const Tensor& x;           // the block's input
  const AttentionTrace& trace;
  const Tensor& next;        // x + block(x)
};
// x = tok_emb.weight[ids] + pos_emb.weight[0:T]; for each block: x = x + block(x)  (1, T, C)
void walk_lm(AttentionLM& model, const std::vector<int64_t>& ids, const std::function<void(size_t, const LmBlock&)>& f) {
  const int64_t T = static_cast<int64_t>(ids.size());
  model.train(false);
  Tensor x = add(model.tok_emb.forward(ids, {1, T}), model.pos_emb.forward(T));
  for (size_t l = 0; l < model.blocks.size(); ++l) {
    AttentionTrace trace;
    const Tensor y = model.blocks[l].forward(x, &trace);
    const Tensor next = add(x, y);
    f(l, {x, trace, next});
    x = next;
  }
}

// One GPT block on x (1, T, E): x = x + att(norm1(x)); x = x + ff(norm2(x)), as
// TransformerBlock::forward computes it in eval mode (no dropout).
struct GptBlock {
  const Tensor& x;     // the block's input
  const Tensor& h1;    // norm1(x)
  const AttentionTrace& trace;
  const Tensor& att;   // att(norm1(x))
  const Tensor& ff;    // ff(norm2(x + att))
  const Tensor& next;  // x + att + ff
};
// x = tok_emb(ids) + pos_emb(arange(T)); every block; `embedded` sees x before the first.
void walk_gpt(GPTModel& model, const std::vector<int64_t>& ids, const std::function<void(size_t, const GptBlock&)>& f,
              const std::function<void(const Tensor&)>& embedded = nullptr) {
  const int64_t T = static_cast<int64_t>(ids.size());
  model.train(false);
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = t;
  Tensor x = add(model.tok_emb.forward(ids, {1, T}), model.pos_emb.forward(positions, {T}));
  if (embedded) embedded(x);
  for (size_t l = 0; l < model.blocks.size(); ++l) {
    TransformerBlock& block = model.blocks[l];
    const Tensor h1 = block.norm1.forward(x);
    AttentionTrace trace;
    const Tensor att = block.att.forward(h1, &trace);
    const Tensor mid = add(x, att);
    const Tensor ff = block.ff.forward(block.norm2.forward(mid));
    const Tensor next = add(mid, ff);
    f(l, {x, h1, trace, att, ff, next});
    x = next;
  }
}

// One Llama / Qwen3 block on x (1, T, E): x = x + self_attn(input_layernorm(x)); x = x +
// mlp(post_attention_layernorm(x)), as LlamaBlock::forward computes it.
struct LlamaBlockSteps {
  const Tensor& x;     // the block's input
  const Tensor& h1;    // input_layernorm(x)
  const AttentionTrace& trace;
  const Tensor& att;   // self_attn(h1)
  const Tensor& mlp;   // mlp(post_attention_layernorm(x + att))
  const Tensor& next;  // x + att + mlp
};
void walk_llama(LlamaModel& model, const std::vector<int64_t>& ids,
                const std::function<void(size_t, const LlamaBlockSteps&)>& f,
                const std::function<void(const Tensor&)>& embedded = nullptr) {
  const int64_t T = static_cast<int64_t>(ids.size());
  model.train(false);
  Tensor x = model.embed_tokens.forward(ids, {1, T});
  if (embedded) embedded(x);
  for (size_t l = 0; l < model.layers.size(); ++l) {
    LlamaBlock& block = model.layers[l];
    const Tensor h1 = block.input_layernorm.forward(x);
    AttentionTrace trace;
    const Tensor att = block.self_attn.forward(h1, &trace);
    const Tensor mid = add(x, att);
    const Tensor mlp = block.mlp.forward(block.post_attention_layernorm.forward(mid));
    const Tensor next = add(mid, mlp);
    f(l, {x, h1, trace, att, mlp, next});
    x = next;
  }
}

// The induction score of every head (ExploreHeadStats::induction): the weights of each layer,
// `weights_of(ids)`, on n random ids repeated once.
void measure_induction(ExplorePage& p, int64_t vocab, int64_t context_length, const ExploreModelOptions& o,
                       const std::function<std::vector<Tensor>(const std::vector<int64_t>&)>& weights_of) {
  const int64_t n = o.induction_tokens;
  if (n == 0) return;
  QKV_CHECK(n >= 2 && 2 * n <= context_length, "explore: the induction score's ", n,
            " random tokens repeated once must fit the context length ", context_length, " (and n >= 2)");
  std::vector<int64_t> ids(static_cast<size_t>(2 * n));
  uint64_t state = o.induction_seed;
  for (int64_t t = 0; t < n; ++t) {  // SplitMix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    ids[static_cast<size_t>(t)] = ids[static_cast<size_t>(t + n)] = static_cast<int64_t>(z % static_cast<uint64_t>(vocab));
  }
  const std::vector<Tensor> weights = weights_of(ids);
  QKV_CHECK(weights.size() == p.layers.size(), "explore: the induction pass saw ", weights.size(), " layers, not ",
            p.layers.size());
  for (size_t l = 0; l < weights.size(); ++l) {
    const Tensor w = weights[l].contiguous();  // (H, 2n, 2n)
    const int64_t H = w.size(0), T = 2 * n;
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0;
      for (int64_t i = n; i < T; ++i) sum += w.data()[(h * T + i) * T + (i - n + 1)];
      p.layers[l].stats[static_cast<size_t>(h)].induction = sum / static_cast<double>(n);
    }
  }
}

// The logit lens of x (1, T, E), one row of the lens: the model's final norm and head (`head`:
// x (1, T, E) -> logits (1, T, V)) -> softmax, top k.
void lens_row(ExploreLens& lens, const std::function<Tensor(const Tensor&)>& head, const Tensor& x,
              const Tokenizer* tokenizer) {
  const Tensor logits = head(x).select(0, 0).contiguous();  // (T, V)
  const int64_t T = logits.size(0), V = logits.size(1), k = std::min(lens.top, V);
  const size_t first = lens.ids.size();
  lens.ids.resize(first + static_cast<size_t>(T * lens.top));
  lens.probs.resize(first + static_cast<size_t>(T * lens.top));
  ThreadPool& pool = default_pool();
  std::vector<std::vector<int64_t>> orders(static_cast<size_t>(pool.num_threads()));  // one per worker
  pool.parallel_for(T, [&](int64_t t, int worker) {  // positions apart: each writes its own slots
    const float* z = logits.data() + t * V;
    float hi = -kInf;
    for (int64_t v = 0; v < V; ++v) hi = std::max(hi, z[v]);
    double total = 0;
    for (int64_t v = 0; v < V; ++v) total += std::exp(static_cast<double>(z[v]) - hi);
    std::vector<int64_t>& order = orders[static_cast<size_t>(worker)];
    order.resize(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) order[static_cast<size_t>(v)] = v;
    // the k largest logits, the first id on ties (as argmax)
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [z](int64_t a, int64_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    for (int64_t r = 0; r < lens.top; ++r) {
      const int64_t id = r < k ? order[static_cast<size_t>(r)] : -1;
      const size_t at = first + static_cast<size_t>(t * lens.top + r);
      lens.ids[at] = id;
      lens.probs[at] = id < 0 ? 0.0f : static_cast<float>(std::exp(static_cast<double>(z[id]) - hi) / total);
    }
  });
  for (size_t n = first; n < lens.ids.size(); ++n) {
    const int64_t id = lens.ids[n];
    if (id >= 0 && !lens.words.count(id)) lens.words[id] = tokenizer ? tokenizer->token_text(id) : std::to_string(id);
  }
}

}  // namespace

ExplorePage explore_lm(AttentionLM& model, const std::vector<int64_t>& ids, std::vector<std::string> tokens,
                       std::string title, const ExploreModelOptions& options) {
  const int64_t T = static_cast<int64_t>(ids.size());
  ExplorePage p = model_page(std::move(title), std::move(tokens), T, model.config.context_length);
  p.generated_from = options.generated_from;
  p.ids = ids;
  walk_lm(model, ids, [&](size_t l, const LmBlock& k) {
    MultiHeadAttention& block = model.blocks[l];
    const std::string b = "blocks." + std::to_string(l) + ".";
    const int64_t li = static_cast<int64_t>(l);
    p.pipeline.push_back(block_input("blocks.", l, k.x));
    for (const auto& [w, t] : {std::pair{"W_query", &block.W_query.weight}, {"W_key", &block.W_key.weight},
                               {"W_value", &block.W_value.weight}}) {
      p.pipeline.push_back(step(b + w + ".weight", std::string(w) + ".weight: head h uses rows h D .. h D + D - 1",
                                *t, false, {}, li));
      p.pipeline.back().parameter = true;
    }
    add_attention(p, b, li, k.trace, block, [&](const std::string& name, const std::string& w, const Tensor& t) {
      return step(b + name, name + " = x @ " + w + ".T, per head (T, D)", t, true,
                  {{b + "input", "i", "*"}, {b + w + ".weight", "hj", "*"}}, li);
    });
    p.pipeline.push_back(step(b + "out_proj.weight", "out_proj.weight (C, C)", block.out_proj.weight, false, {}, li));
    p.pipeline.back().parameter = true;
    ExploreStep out = step(b + "output", "x + out_proj(context): the residual stream after the block",
                           k.next.select(0, 0).contiguous(), false,
                           {{b + "input", "i", "j"}, {b + "context", "i", "*"}, {b + "out_proj.weight", "j", "*"}}, li);
    out.index_prefix = "[0]";
    p.pipeline.push_back(out);
  });
  summarise(p);
  measure_induction(p, model.vocab_size(), model.context_length(), options, [&](const std::vector<int64_t>& r) {
    std::vector<Tensor> w;
    walk_lm(model, r, [&](size_t, const LmBlock& k) { w.push_back(k.trace.weights.select(0, 0).contiguous()); });
    return w;
  });
  return p;
}

ExplorePage explore_gpt(GPTModel& model, const std::vector<int64_t>& ids, std::vector<std::string> tokens,
                        std::string title, const ExploreModelOptions& options) {
  const int64_t T = static_cast<int64_t>(ids.size());
  ExplorePage p = model_page(std::move(title), std::move(tokens), T, model.config.context_length);
  QKV_CHECK(!model.blocks.empty(), "explore: the GPT model has no blocks (n_layers 0): no attention to show");
  QKV_CHECK(options.lens_top >= 0, "explore: lens_top is ", options.lens_top, "; expected >= 0");
  p.generated_from = options.generated_from;
  p.ids = ids;
  p.lens.top = options.lens_top;
  auto rows = [](const Tensor& t) { return t.select(0, 0).contiguous(); };  // (1, T, E) -> (T, E)
  auto lens = [&](const std::string& name, const Tensor& x) {
    if (options.lens_top == 0) return;
    p.lens.rows.push_back(name);
    lens_row(p.lens, [&](const Tensor& h) { return model.out_head.forward(model.final_norm.forward(h)); }, x,
             options.tokenizer);
  };
  walk_gpt(model, ids, [&](size_t l, const GptBlock& k) {
    TransformerBlock& block = model.blocks[l];
    const std::string b = "trf_blocks." + std::to_string(l) + ".";
    const int64_t li = static_cast<int64_t>(l);
    p.pipeline.push_back(block_input("trf_blocks.", l, k.x));
    p.pipeline.push_back(step(b + "norm1", "norm1(x): each row normalised, times scale, plus shift", rows(k.h1), false,
                              {{b + "input", "i", "*"}}, li));
    add_attention(p, b, li, k.trace, block.att, [&](const std::string& name, const std::string& w, const Tensor& t) {
      return step(b + name, name + " = norm1(x) @ att." + w + ".T (+ bias), per head (T, D)", t, true,
                  {{b + "norm1", "i", "*"}}, li);
    });
    p.pipeline.push_back(step(b + "attention", "att(norm1(x)) = out_proj(heads' context concatenated), (T, E)",
                              rows(k.att), false, {{b + "context", "i", "*"}}, li));
    p.pipeline.push_back(step(b + "ff", "ff(norm2(x + att)): Linear(E, 4E) -> GELU -> Linear(4E, E), (T, E)",
                              rows(k.ff), false, {{b + "attention", "i", "*"}}, li));
    ExploreStep out = step(b + "output", "x + att + ff: the residual stream after the block", rows(k.next), false,
                           {{b + "input", "i", "j"}, {b + "attention", "i", "j"}, {b + "ff", "i", "j"}}, li);
    out.index_prefix = "[0]";
    p.pipeline.push_back(out);
    lens("block " + std::to_string(l), k.next);
  }, [&](const Tensor& x) { lens("embeddings", x); });
  summarise(p);
  measure_induction(p, model.vocab_size(), model.context_length(), options, [&](const std::vector<int64_t>& r) {
    std::vector<Tensor> w;
    walk_gpt(model, r, [&](size_t, const GptBlock& k) { w.push_back(k.trace.weights.select(0, 0).contiguous()); });
    return w;
  });
  return p;
}

ExplorePage explore_llama(LlamaModel& model, const std::vector<int64_t>& ids, std::vector<std::string> tokens,
                          std::string title, const ExploreModelOptions& options) {
  const int64_t T = static_cast<int64_t>(ids.size());
  ExplorePage p = model_page(std::move(title), std::move(tokens), T, model.context_length());
  QKV_CHECK(!model.layers.empty(), "explore: the model has no layers: no attention to show");
  QKV_CHECK(options.lens_top >= 0, "explore: lens_top is ", options.lens_top, "; expected >= 0");
  QKV_CHECK(!model.bf16_only(), "explore: the model holds its weights in bf16 only; load it with f32 products");
  p.generated_from = options.generated_from;
  p.ids = ids;
  p.lens.top = options.lens_top;
  auto rows = [](const Tensor& t) { return t.select(0, 0).contiguous(); };
  auto lens = [&](const std::string& name, const Tensor& x) {
    if (options.lens_top == 0) return;
    p.lens.rows.push_back(name);
    lens_row(p.lens, [&](const Tensor& h) { return model.lm_head.forward(model.norm.forward(h)); }, x,
             options.tokenizer);
  };
  const bool qk_norm = model.config.qk_norm();
  walk_llama(model, ids, [&](size_t l, const LlamaBlockSteps& k) {
    LlamaBlock& block = model.layers[l];
    const std::string b = "model.layers." + std::to_string(l) + ".";
    const int64_t li = static_cast<int64_t>(l);
    p.pipeline.push_back(block_input("model.layers.", l, k.x));
    p.pipeline.push_back(step(b + "input_layernorm", "input_layernorm(x): each row over its RMS, times weight",
                              rows(k.h1), false, {{b + "input", "i", "*"}}, li));
    add_attention(p, b, li, k.trace, block.self_attn, [&](const std::string& name, const std::string& w, const Tensor& t) {
      const std::string proj = w == "W_query" ? "q_proj" : w == "W_key" ? "k_proj" : "v_proj";
      const std::string extra = name == "values" || !qk_norm ? ", then RoPE" : ", RMS-normalised per head, then RoPE";
      return step(b + name, name + " = input_layernorm(x) @ self_attn." + proj + ".T" +
                                (name == "values" ? std::string() : extra) + ", per head (T, D)",
                  t, true, {{b + "input_layernorm", "i", "*"}}, li);
    });
    p.pipeline.push_back(step(b + "attention", "self_attn(h) = o_proj(heads' context concatenated), (T, E)",
                              rows(k.att), false, {{b + "context", "i", "*"}}, li));
    p.pipeline.push_back(step(b + "mlp", "mlp(post_attention_layernorm(x + att)): down(silu(gate(h)) * up(h)), (T, E)",
                              rows(k.mlp), false, {{b + "attention", "i", "*"}}, li));
    ExploreStep out = step(b + "output", "x + att + mlp: the residual stream after the block", rows(k.next), false,
                           {{b + "input", "i", "j"}, {b + "attention", "i", "j"}, {b + "mlp", "i", "j"}}, li);
    out.index_prefix = "[0]";
    p.pipeline.push_back(out);
    lens("layer " + std::to_string(l), k.next);
  }, [&](const Tensor& x) { lens("embeddings", x); });
  summarise(p);
  measure_induction(p, model.vocab_size(), model.context_length(), options, [&](const std::vector<int64_t>& r) {
    std::vector<Tensor> w;
    walk_llama(model, r, [&](size_t, const LlamaBlockSteps& k) { w.push_back(k.trace.weights.select(0, 0).contiguous()); });
    return w;
  });
  return p;
}

}  // namespace qkv
