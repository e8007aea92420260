// A model's page, for every family: one forward watched by an observer (models/observer.h),
// its steps named and captioned in the family's words (models/family.h). See
// include/qkv/explore/explore.h. Legend: T tokens, E width, H heads, G key/value heads, D head dim.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
#include "qkv/explore/explore.h"
#include "qkv/models/family.h"
#include "qkv/models/observer.h"
#include "explore/page_parts.h"

namespace qkv {
namespace {

using explore_detail::repeat_heads;
using explore_detail::step;

constexpr float kInfinity = std::numeric_limits<float>::infinity();

// "norm1." -> "norm1": a state prefix as a name in captions.
std::string bare(const std::string& prefix) {
  return !prefix.empty() && prefix.back() == '.' ? prefix.substr(0, prefix.size() - 1) : prefix;
}

Tensor rows(const Tensor& t) { return t.select(0, 0).contiguous(); }  // (1, T, X) -> (T, X)

// Block l's input x (1, T, E), linked to the block before's output.
ExploreStep block_input(const std::string& prefix, int64_t l, const Tensor& x) {
  ExploreStep in = step(prefix + std::to_string(l) + ".input",
                        "block " + std::to_string(l) + "'s input x (embeddings + earlier blocks), (T, C)", rows(x),
                        false, {}, l);
  if (l > 0) in.links = {{prefix + std::to_string(l - 1) + ".output", "i", "j"}};  // the block before's output
  in.index_prefix = "[0]";
  return in;
}

// Positions whose (rows, V) logits the lens holds at once: a long text's (T, V) logits are never
// made whole (a 35 KB text's are gigabytes for a 150,000-token vocabulary).
constexpr int64_t kLensRows = 256;

// The logit lens of x (1, T, E), one row of the lens: the model's end (head_logits) -> softmax, top k,
// kLensRows positions at a time.
void lens_row(ExploreLens& lens, LanguageModel& model, const Tensor& x, const Tokenizer* tokenizer) {
  const int64_t T = x.size(1), V = model.vocab_size(), k = std::min(lens.top, V);
  const size_t first = lens.ids.size();
  lens.ids.resize(first + static_cast<size_t>(T * lens.top));
  lens.probs.resize(first + static_cast<size_t>(T * lens.top));
  ThreadPool& pool = default_pool();
  std::vector<std::vector<int64_t>> orders(static_cast<size_t>(pool.num_threads()));  // one per worker
  for (int64_t t0 = 0; t0 < T; t0 += kLensRows) {
    const int64_t rows = std::min(kLensRows, T - t0);
    const Tensor logits = model.head_logits(x.slice(1, t0, t0 + rows)).select(0, 0).contiguous();  // (rows, V)
    pool.parallel_for(rows, [&](int64_t r0, int worker) {  // positions apart: each writes its own slots
      const int64_t t = t0 + r0;
      const float* z = logits.data() + r0 * V;
      float hi = -kInfinity;
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
  }
  for (size_t n = first; n < lens.ids.size(); ++n) {
    const int64_t id = lens.ids[n];
    if (id >= 0 && !lens.words.count(id)) lens.words[id] = tokenizer ? tokenizer->token_text(id) : std::to_string(id);
  }
}

// Writes the page's pipeline, layers and lens as the forward shows each block.
class PageWriter : public ForwardObserver {
 public:
  PageWriter(ExplorePage& p, LanguageModel& model, const ExploreModelOptions& o)
      : p_(p), model_(model), o_(o), spec_(model.spec()), names_(model.family().names),
        words_(model.family().words) {
    if (words_.show_weights)
      for (const StateEntry& e : model.state_dict())
        if (e.tensor) weights_[e.name] = *e.tensor;
  }

  void embedded(const Tensor& x) override { lens("embeddings", x); }

  void block(const BlockView& v) override {
    const int64_t l = v.layer;
    const std::string b = names_.blocks + std::to_string(l) + ".", a = b + names_.attention;
    const std::string n1 = bare(names_.norm1), o = bare(names_.o), ff = bare(names_.ff);
    p_.pipeline.push_back(block_input(names_.blocks, l, *v.input));
    if (v.normed)
      p_.pipeline.push_back(step(b + n1,
                                 n1 + "(x): " + (spec_.norm == NormKind::kRMSNorm
                                                     ? "each row over its RMS, times weight"
                                                     : "each row normalised, times scale, plus shift"),
                                 rows(*v.normed), false, {{b + "input", "i", "*"}}, l));
    if (words_.show_weights)
      for (const std::string* w : {&names_.q, &names_.k, &names_.v}) parameter(a + bare(*w) + ".weight",
                                                                               bare(*w) + ".weight: head h uses rows h D .. h D + D - 1", l);
    const bool linear = spec_.kind(l) == LayerKind::kLinear;
    add_attention(b, l, *v.trace, linear, [&](const std::string& name, const std::string& w) {
      if (linear)  // Qwen3.5's Gated DeltaNet (modules/gated_deltanet_layer.h)
        return std::pair{name + " = silu(conv1d(" + names_.linear + "in_proj_qkv(" + n1 + "(x))))" +
                             (name != "values" ? ", L2-normalised per head" : "") + ", per value head (T, D)",
                         std::vector<ExploreLink>{{b + (v.normed ? n1 : "input"), "i", "*"}}};
      const bool qk = name != "values";
      const kernels::AttentionSpec& s = spec_.attention;
      const std::string norm = qk && s.qk_norm ? ", RMS-normalised per head" : "";
      const std::string rope = qk && s.rope != kernels::RopeLayout::kNone ? ", then RoPE" : "";
      std::vector<ExploreLink> links = {{b + (v.normed ? n1 : "input"), "i", "*"}};
      if (words_.show_weights) links.push_back({a + w + ".weight", "hj", "*"});
      return std::pair{name + " = " + (v.normed ? n1 + "(x)" : "x") + " @ " + names_.attention + w + ".T" +
                           words_.projection_note + norm + rope + ", per head (T, D)",
                       links};
    });
    ExploreStep out = step(b + "output", "", rows(*v.output), false, {{b + "input", "i", "j"}}, l);
    if (words_.show_weights) {
      parameter(a + o + ".weight", o + ".weight (C, C)", l);
      out.caption = "x + " + o + "(context): the residual stream after the block";
      out.links.push_back({b + "context", "i", "*"});
      out.links.push_back({a + o + ".weight", "j", "*"});
    } else {
      p_.pipeline.push_back(step(b + "attention", words_.attention + " = " + o + "(heads' context concatenated), (T, E)",
                                 rows(*v.attention), false, {{b + "context", "i", "*"}}, l));
      out.caption = std::string("x + att") + (v.ff ? " + " + ff : "") + ": the residual stream after the block";
      out.links.push_back({b + "attention", "i", "j"});
    }
    if (v.ff) {
      const std::string what = spec_.ff == FeedForwardKind::kSwiGLU
                                   ? "down(silu(gate(h)) * up(h))"
                                   : spec_.ff_width == 4 * spec_.width ? "Linear(E, 4E) -> GELU -> Linear(4E, E)"
                                                                       : "Linear(E, F) -> GELU -> Linear(F, E)";
      p_.pipeline.push_back(step(b + ff, ff + "(" + bare(names_.norm2) + "(x + att)): " + what + ", (T, E)", rows(*v.ff),
                                 false, {{b + "attention", "i", "*"}}, l));
      out.links.push_back({b + ff, "i", "j"});
    }
    out.index_prefix = "[0]";
    p_.pipeline.push_back(out);
    lens(words_.layer + " " + std::to_string(l), *v.output);
  }

 private:
  void lens(const std::string& name, const Tensor& x) {
    if (o_.lens_top == 0) return;
    p_.lens.rows.push_back(name);
    lens_row(p_.lens, model_, x, o_.tokenizer);
  }

  void parameter(const std::string& name, const std::string& caption, int64_t l) {
    p_.pipeline.push_back(step(name, caption, weights_.at(name), false, {}, l));
    p_.pipeline.back().parameter = true;
  }

  // One block's attention from its trace (the first sequence): the queries, keys and values (their
  // captions and links from `projection`), the weights and the context; and the layer the model,
  // head and neuron views read.
  using Projection = std::function<std::pair<std::string, std::vector<ExploreLink>>(const std::string& name,
                                                                                     const std::string& weight)>;
  void add_attention(const std::string& b, int64_t l, const AttentionTrace& trace, bool linear,
                     const Projection& projection) {
    const Tensor queries = rows(trace.queries), keys = rows(trace.keys);
    const std::pair<const char*, const Tensor> qkv[] = {
        {"queries", queries}, {"keys", keys}, {"values", rows(trace.values)}};
    const std::string* w[] = {&names_.q, &names_.k, &names_.v};
    for (size_t i = 0; i < 3; ++i) {
      auto [caption, links] = projection(qkv[i].first, bare(*w[i]));
      p_.pipeline.push_back(step(b + qkv[i].first, caption, qkv[i].second, true, links, l));
    }
    const Tensor weights = rows(trace.weights);
    p_.pipeline.push_back(step(b + "attn_weights",
                               linear ? "A: the gated delta rule's exact map from values to context (context = A @ "
                                        "values), per head; A[i][j] = q_i . M_i ... M_{j+1} beta_j k_j, M = alpha (I - "
                                        "beta k k^T): not softmax weights (rows need not sum to 1, and may be negative)"
                                      : "softmax(masked(queries @ keys.T) / sqrt(D)), per head (the neuron view shows "
                                        "the scores)",
                               weights, true, {{b + "queries", "i", "*"}, {b + "keys", "j", "*"}}, l));
    p_.pipeline.push_back(step(b + "context", linear ? "context = A @ values, per head (before the gated norm)"
                                                     : "context = attn_weights @ values, per head",
                               rows(trace.context), true,
                               {{b + "attn_weights", "i", "*"}, {b + "values", "*", "j"}}, l));
    const kernels::AttentionSpec& s = spec_.attention;
    ExploreLayer layer;
    layer.weights = weights;
    layer.queries = queries;
    layer.keys = repeat_heads(keys, queries.size(0));
    layer.scale = std::sqrt(static_cast<float>(s.head_dim));
    layer.softcap = static_cast<float>(s.softcap);
    layer.alibi = kernels::spec_alibi_slopes(s);
    layer.window = s.window;
    layer.linear = linear;
    p_.layers.push_back(layer);
  }

  ExplorePage& p_;
  LanguageModel& model_;
  const ExploreModelOptions& o_;
  const DecoderSpec& spec_;
  const StateNames& names_;
  const FamilyWords& words_;
  std::map<std::string, Tensor> weights_;  // the state, when the page shows the projection matrices
};

// Each layer's (H, T, T) weights of a forward (the first sequence).
class WeightsOnly : public ForwardObserver {
 public:
  void block(const BlockView& v) override { weights.push_back(rows(v.trace->weights)); }
  std::vector<Tensor> weights;
};

// The induction score of every head (ExploreHeadStats::induction): each layer's weights on n random
// ids repeated once.
void measure_induction(ExplorePage& p, LanguageModel& model, const ExploreModelOptions& o) {
  const int64_t n = o.induction_tokens;
  if (n == 0) return;
  QKV_CHECK(n >= 2 && 2 * n <= model.context_length(), "explore: the induction score's ", n,
            " random tokens repeated once must fit the context length ", model.context_length(), " (and n >= 2)");
  std::vector<int64_t> ids(static_cast<size_t>(2 * n));
  uint64_t state = o.induction_seed;
  for (int64_t t = 0; t < n; ++t) {  // SplitMix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    ids[static_cast<size_t>(t)] = ids[static_cast<size_t>(t + n)] =
        static_cast<int64_t>(z % static_cast<uint64_t>(model.vocab_size()));
  }
  WeightsOnly watch;
  model.forward(ids, 1, 2 * n, &watch);
  QKV_CHECK(watch.weights.size() == p.layers.size(), "explore: the induction pass saw ", watch.weights.size(),
            " layers, not ", p.layers.size());
  for (size_t l = 0; l < watch.weights.size(); ++l) {
    const Tensor& w = watch.weights[l];  // (H, 2n, 2n)
    const int64_t H = w.size(0), T = 2 * n;
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0;
      for (int64_t i = n; i < T; ++i) sum += w.data()[(h * T + i) * T + (i - n + 1)];
      p.layers[l].stats[static_cast<size_t>(h)].induction = sum / static_cast<double>(n);
    }
  }
}

}  // namespace

ExplorePage explore_model(LanguageModel& model, const std::vector<int64_t>& ids, std::vector<std::string> tokens,
                          std::string title, const ExploreModelOptions& options) {
  const int64_t T = static_cast<int64_t>(ids.size());
  const std::string who = model.family().title + " model";
  QKV_CHECK(T >= 1 && T <= model.context_length(), "explore: ", T, " tokens but the model's context_length is ",
            model.context_length());
  QKV_CHECK(model.spec().layers > 0, "explore: the ", who, " has no blocks (0 layers): no attention to show");
  QKV_CHECK(options.lens_top >= 0, "explore: lens_top is ", options.lens_top, "; expected >= 0");
  QKV_CHECK(!model.bf16_only(), "explore: the ", who, " holds its weights in bf16 only; load it with f32 products");
  ExplorePage p;
  p.source = "checkpoint";
  p.title = std::move(title);
  p.tokens = std::move(tokens);
  p.generated_from = options.generated_from;
  p.ids = ids;
  p.lens.top = options.lens_top;
  model.eval();
  PageWriter writer(p, model, options);
  model.forward(ids, 1, T, &writer);
  explore_detail::summarise(p);
  measure_induction(p, model, options);
  return p;
}

}  // namespace qkv
