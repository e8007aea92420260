// Chapter 3, step by step. See include/qkv/chapter/walkthrough.h.
#include "qkv/chapter/walkthrough.h"

#include <cmath>
#include <limits>
#include <map>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/multi_head_attention.h"
#include "qkv/modules/self_attention.h"
#include "qkv/text/tiny_vocab.h"

namespace qkv {
namespace {

// The 3-d embeddings the book gives the words of its sentence.
const std::map<std::string, std::vector<float>>& book_embeddings() {
  static const std::map<std::string, std::vector<float>> table = {
      {"your", {0.43f, 0.15f, 0.89f}}, {"journey", {0.55f, 0.87f, 0.66f}},
      {"starts", {0.57f, 0.85f, 0.64f}}, {"with", {0.22f, 0.58f, 0.33f}},
      {"one", {0.77f, 0.25f, 0.10f}},    {"step", {0.05f, 0.80f, 0.55f}}};
  return table;
}

class Recorder {
 public:
  explicit Recorder(Walkthrough& w) : w_(w) {}
  void section(std::string s) { section_ = std::move(s); }
  const Tensor& add(std::string name, std::string caption, Tensor value) {
    w_.steps.push_back({section_, std::move(name), std::move(caption), std::move(value)});
    return w_.steps.back().value;
  }

 private:
  Walkthrough& w_;
  std::string section_;
};

// One picture per head of batch item 0; weights (B, H, T, T).
// torch.manual_seed(123); Module(...)(batch): the module drawn from the seed, its output recorded
// as `name`; returns what it computed on the way.
template <typename Module>
AttentionTrace record_seeded(Recorder& r, Generator& gen, const AttentionConfig& c, const Tensor& batch,
                             const char* name, const char* python) {
  gen.manual_seed(123);
  Module m(c, gen);
  AttentionTrace trace;
  r.add(name, python, m.forward(batch, &trace));
  return trace;
}

void add_head_pictures(Walkthrough& w, const std::string& file, const std::string& module, const Tensor& weights) {
  for (int64_t h = 0; h < weights.size(1); ++h)
    w.pictures.push_back({file + ".head" + std::to_string(h) + ".svg",
                          module + " (seed 123): head " + std::to_string(h) + ", batch item 0",
                          weights.select(0, 0).select(0, h)});
}

}  // namespace

Walkthrough run_walkthrough(const std::string& text) {
  Walkthrough w;
  w.text = text;
  w.words = tiny_words(text);
  QKV_CHECK(w.words.size() >= 2, "walkthrough: the text needs at least 2 words (the chapter ",
            "attends from the second one), got ", w.words.size(), " in ", excerpt(text));
  TinyVocab vocab(w.words);
  w.vocab = vocab.words();
  w.ids = vocab.encode(w.words);
  const int64_t T = static_cast<int64_t>(w.words.size());
  Recorder r(w);

  // --- Embeddings: the book's table, or nn.Embedding rows for words the book does not have.
  r.section("Token embeddings (3-d), one row per word");
  Generator gen(0);  // notebook 003 starts with torch.manual_seed(0)
  Embedding emb(vocab.size(), 3, gen);
  for (const std::string& word : w.words) {
    auto it = book_embeddings().find(word);
    if (it == book_embeddings().end()) {
      w.book_embeddings = false;
      continue;
    }
    std::copy(it->second.begin(), it->second.end(), emb.weight.data() + vocab.id(word) * 3);
  }
  std::vector<int64_t> word_ids(w.ids.begin() + 1, w.ids.end() - 1);
  const Tensor inputs = r.add("inputs", "inputs = embedding of each word, (T, d_in=3)",
                              emb.forward(word_ids, {T}));

  // --- 3.3.1 Simplified self-attention for one query, then for all.
  r.section("3.3.1 A simple self-attention mechanism without trainable weights");
  const Tensor x2 = inputs.select(0, 1);
  const Tensor scores2 = r.add("simple.attn_scores_2", "attention scores of query x^(2): dot(x_i, x^(2))",
                               matmul(inputs, x2));
  r.add("simple.attn_weights_2_tmp", "normalised by their sum", normalize_sum(scores2, 0));
  r.add("simple.attn_weights_2_naive", "softmax_naive: exp(x) / exp(x).sum()", softmax_naive(scores2, 0));
  const Tensor w2 = r.add("simple.attn_weights_2", "torch.softmax(attn_scores_2, dim=0)", softmax(scores2, 0));
  r.add("simple.context_vec_2", "context vector z^(2) = sum_i attn_weights_2[i] * x_i", matmul(w2, inputs));

  r.section("3.3.2 Computing attention weights for all input tokens");
  const Tensor scores = r.add("simple.attn_scores", "attn_scores = inputs @ inputs.T", matmul(inputs, inputs.T()));
  const Tensor weights = r.add("simple.attn_weights", "softmax(attn_scores, dim=-1)", softmax(scores, -1));
  r.add("simple.all_context_vecs", "all_context_vecs = attn_weights @ inputs", matmul(weights, inputs));

  // --- 3.4.1 Trainable weights, one query at a time.
  r.section("3.4.1 Computing the attention weights step by step (torch.manual_seed(123))");
  gen.manual_seed(123);
  const Tensor Wq = r.add("trainable.W_query", "W_query = torch.rand(d_in=3, d_out=2)", rand({3, 2}, gen));
  const Tensor Wk = r.add("trainable.W_key", "W_key = torch.rand(3, 2)", rand({3, 2}, gen));
  const Tensor Wv = r.add("trainable.W_value", "W_value = torch.rand(3, 2)", rand({3, 2}, gen));
  const Tensor query2 = r.add("trainable.query_2", "query_2 = x_2 @ W_query", matmul(x2, Wq));
  r.add("trainable.key_2", "key_2 = x_2 @ W_key", matmul(x2, Wk));
  r.add("trainable.value_2", "value_2 = x_2 @ W_value", matmul(x2, Wv));
  const Tensor keys = r.add("trainable.keys", "keys = inputs @ W_key", matmul(inputs, Wk));
  const Tensor values = r.add("trainable.values", "values = inputs @ W_value", matmul(inputs, Wv));
  r.add("trainable.attn_score_22", "attn_score_22 = query_2 . keys[1]", matmul(query2, keys.select(0, 1)));
  const Tensor ts2 = r.add("trainable.attn_scores_2", "attn_scores_2 = query_2 @ keys.T", matmul(query2, keys.T()));
  const float dk = static_cast<float>(std::sqrt(static_cast<double>(keys.size(-1))));
  const Tensor tw2 = r.add("trainable.attn_weights_2", "softmax(attn_scores_2 / sqrt(d_k))",
                           softmax(div(ts2, dk), -1));
  r.add("trainable.context_vec_2", "context_vec_2 = attn_weights_2 @ values", matmul(tw2, values));

  // --- 3.4.2 The compact classes.
  r.section("3.4.2 A compact self-attention class");
  gen.manual_seed(123);
  SelfAttentionV1 sa_v1(3, 2, gen);
  r.add("sa_v1.seed123", "torch.manual_seed(123); SelfAttention_v1(3, 2)(inputs)", sa_v1.forward(inputs));
  gen.manual_seed(789);
  SelfAttentionV2 sa_v2(3, 2, false, gen);
  AttentionTrace v2;
  r.add("sa_v2.seed789", "torch.manual_seed(789); SelfAttention_v2(3, 2)(inputs)", sa_v2.forward(inputs, &v2));

  // --- 3.5 Causal attention, from SelfAttention_v2's queries and keys.
  r.section("3.5.1 Applying a causal attention mask");
  const Tensor unmasked = r.add("causal.attn_weights_unmasked", "softmax(queries @ keys.T / sqrt(d_k))", v2.weights);
  const Tensor simple_mask = r.add("causal.mask_simple", "mask_simple = torch.tril(torch.ones(T, T))",
                                   tril(Tensor::ones({T, T})));
  const Tensor masked_simple = r.add("causal.masked_simple", "attn_weights * mask_simple", mul(unmasked, simple_mask));
  r.add("causal.masked_simple_norm", "masked_simple / row sums", normalize_sum(masked_simple, -1));
  const Tensor masked = r.add("causal.masked_scores", "attn_scores.masked_fill(triu(ones, 1).bool(), -inf)",
                              masked_fill(v2.scores, causal_mask(T), -std::numeric_limits<float>::infinity()));
  const Tensor causal_w = r.add("causal.attn_weights", "softmax(masked / sqrt(d_k)): the same weights",
                                softmax(div(masked, dk), -1));

  r.section("3.5.2 Masking additional attention weights with dropout (p = 0.5, training mode)");
  Dropout dropout(0.5, gen);
  dropout.train();
  gen.manual_seed(123);
  r.add("dropout.ones_p05_seed123", "torch.manual_seed(123); nn.Dropout(0.5)(torch.ones(T, T))",
        dropout.forward(Tensor::ones({T, T})));
  gen.manual_seed(123);
  r.add("dropout.causal_weights_p05_seed123", "torch.manual_seed(123); dropout(attn_weights)",
        dropout.forward(causal_w));

  // --- 3.5.3 The CausalAttention class on a batch of two.
  r.section("3.5.3 Implementing a compact causal attention class (batch = stack(inputs, inputs))");
  const Tensor batch = stack({inputs, inputs}, 0);  // (2, T, 3)
  const AttentionTrace ca_trace = record_seeded<CausalAttention>(
      r, gen, attention_config("causal-attention", 3, 2, T, 0.0), batch, "causal_attention.seed123",
      "torch.manual_seed(123); CausalAttention(3, 2, T, 0.0)(batch)");
  w.pictures.push_back({"causal_attention.svg", "CausalAttention (seed 123): attention weights, batch item 0",
                        ca_trace.weights.select(0, 0)});

  r.section("3.6.1 Stacking multiple single-head attention layers");
  const AttentionTrace wr_trace = record_seeded<MultiHeadAttentionWrapper>(
      r, gen, attention_config("mha-wrapper", 3, 2, T, 0.0, 2), batch, "mha_wrapper.seed123",
      "torch.manual_seed(123); MultiHeadAttentionWrapper(3, 2, T, 0.0, num_heads=2)(batch)");
  add_head_pictures(w, "mha_wrapper", "MultiHeadAttentionWrapper", wr_trace.weights);

  r.section("3.6.2 Implementing multi-head attention with weight splits");
  const AttentionTrace mha_trace = record_seeded<MultiHeadAttention>(
      r, gen, attention_config("mha", 3, 2, T, 0.0, 2), batch, "mha.seed123",
      "torch.manual_seed(123); MultiHeadAttention(3, 2, T, 0.0, num_heads=2)(batch)");
  r.add("mha.attn_weights", "its attention weights per head, (B, H, T, T)", mha_trace.weights);
  add_head_pictures(w, "mha", "MultiHeadAttention", mha_trace.weights);
  return w;
}

}  // namespace qkv
