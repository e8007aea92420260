// A model from llama.cpp's GGUF file. See include/qkv/models/gguf_model.h.
#include "qkv/models/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "qkv/core/bf16.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/read_file.h"
#include "qkv/kernels/rope.h"
#include "qkv/models/decoder.h"

namespace qkv {

using json = nlohmann::json;

namespace {

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "\"" : ", \"") + n + "\"";
  return s;
}

// Where a family's state name sits in GGUF: the block prefix's tail, then one of these.
struct Part {
  std::string state, gguf;
};
std::vector<Part> block_parts(const StateNames& n, const std::string& arch) {
  if (arch == "qwen35" && !n.linear.empty()) {  // (the linear layers' parts first: their norm)
    const std::string& l = n.linear;
    std::vector<Part> parts = {{l + "in_proj_qkv.", "attn_qkv."}, {l + "in_proj_z.", "attn_gate."},
                               {l + "in_proj_b.", "ssm_beta."},   {l + "in_proj_a.", "ssm_alpha."},
                               {l + "conv1d.", "ssm_conv1d."},   {l + "norm.", "ssm_norm."},
                               {l + "out_proj.", "ssm_out."}};
    for (Part& p : block_parts(n, "")) parts.push_back(p.state == n.norm2 ? Part{n.norm2, "post_attention_norm."} : p);
    return parts;
  }
  return {{n.norm1, "attn_norm."},
          {n.attention + n.q, "attn_q."},
          {n.attention + n.k, "attn_k."},
          {n.attention + n.v, "attn_v."},
          {n.attention + n.o, "attn_output."},
          {n.attention + n.q_norm, "attn_q_norm."},
          {n.attention + n.k_norm, "attn_k_norm."},
          {n.norm2, "ffn_norm."},
          {n.ff + "gate_proj.", "ffn_gate."},
          {n.ff + "up_proj.", "ffn_up."},
          {n.ff + "down_proj.", "ffn_down."},
          {n.ff + "layers.0.", "ffn_up."},  // the book's FeedForward: Linear, GELU, Linear
          {n.ff + "layers.2.", "ffn_down."}};
}

// The tail after a part as GGUF names it: "weight" or "bias" (the book's LayerNorm: scale, shift).
std::string tail_of(const std::string& s, const std::string& prefix) {
  const std::string t = s.substr(prefix.size());
  return t == "weight" || t == "scale" ? "weight" : t == "bias" || t == "shift" ? "bias" : "";
}

// Architectures whose files hold Q, K and V as one tensor of their rows in turn.
bool fuses_qkv(const std::string& arch) { return arch == "gpt2"; }

// Llama 3's scaling from rope_freqs.weight: llama.cpp divides each frequency by the file's factor.
std::optional<kernels::RopeScaling> rope_scaling_of(const GgufFile& f, int64_t head_dim, double base) {
  const GgufTensor& t = f.tensor("rope_freqs.weight");
  const std::string where = excerpt(f.path()) + ": rope_freqs.weight";
  QKV_CHECK(t.shape == Shape({head_dim / 2}), where, " has shape ", shape_str(t.shape), "; expected (",
            head_dim / 2, ") for a head_dim of ", head_dim);
  std::vector<float> factors(static_cast<size_t>(head_dim / 2));
  f.read_floats("rope_freqs.weight", factors.data());
  kernels::RopeScaling s;
  s.factor = 0;
  for (float x : factors) {
    QKV_CHECK(std::isfinite(x) && x > 0, where, " holds ", x, "; expected positive factors");
    s.factor = std::max(s.factor, static_cast<double>(x));
  }
  if (s.factor == 1.0) return std::nullopt;  // every frequency as it is
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  // The original context L: from a factor between 1 and the largest (its wave within L/4..L:
  // 1/f = (1 - s)/factor + s, s = (L/w - 1)/3), else the only constraint is 4 w1 < L <= w2 (w1 the
  // longest wave left alone, w2 the shortest scaled): Llama 3's 8192 when it fits.
  auto wave = [&](int64_t i) { return 2.0 * M_PI / kernels::rope_frequency(i, head_dim, base); };
  double w1 = 0, w2 = INFINITY, L = 0;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double x = factors[i];
    if (std::fabs(x - 1.0) <= 1e-6) {
      w1 = std::max(w1, wave(i));
    } else if (std::fabs(x - s.factor) <= 1e-6 * s.factor) {
      w2 = std::min(w2, wave(i));
    } else if (L == 0) {
      L = std::round(wave(i) * (3.0 * (1.0 / x - 1.0 / s.factor) / (1.0 - 1.0 / s.factor) + 1.0));
    }
  }
  if (L == 0) L = 4 * w1 < 8192 && 8192 <= w2 ? 8192 : std::floor(4 * w1) + 1;
  s.original_max_positions = static_cast<int64_t>(std::min(L, 1e15));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double want = kernels::rope_frequency(i, head_dim, base) / kernels::rope_frequency(i, head_dim, base, s);
    QKV_CHECK(std::fabs(factors[i] - want) <= 1e-5 * want, where, "[", i, "] is ", factors[i], "; Llama 3's scaling ",
              "(factor ", s.factor, ", low_freq_factor 1, high_freq_factor 4, ", s.original_max_positions,
              " original positions) gives ", want,
              ": qkv reads Llama 3's scaling only");
  }
  return s;
}

// The file's parameters (the tied head's once), against the metadata's model before it is made.
void check_file_holds(const GgufFile& f, const DecoderSpec& spec, const ModelFamily& family) {
  int64_t held = 0;
  for (const GgufTensor& t : f.tensors())
    if (t.name != "rope_freqs.weight") held = checked_add(held, t.numel(), "the file's parameters");
  const int64_t wanted = decoder_parameters(spec, "the metadata's parameters");
  QKV_CHECK(wanted / 2 <= held, excerpt(f.path()), "'s metadata describes a ", family.name, " model of ", wanted,
            " parameters (", spec.layers, " layers, width ", spec.width, ", vocabulary ", spec.vocab_size,
            ") but its tensors hold only ", held, " (", f.tensors().size(), " tensors), not half of it");
}

// A tensor's rows [first, last) copied out of the mapped file a piece at a time: rows [r0, r1) of
// about kPieceBytes handed to `copy` (numbered from first), then their pages given back. The file's
// pages and their copy are in memory together for one piece, never for a whole tensor (Qwen3-0.6B's
// embedding is 311 MB in BF16).
constexpr int64_t kPieceBytes = int64_t{2} << 20;
template <typename Copy>
void copy_in_pieces(const GgufFile& f, const std::string& g, int64_t row_bytes, int64_t first, int64_t last,
                    Copy&& copy) {
  const int64_t step = std::max<int64_t>(1, kPieceBytes / row_bytes);
  for (int64_t r = first; r < last; r += step) {
    const int64_t end = std::min(last, r + step);
    copy(r - first, end - first, f.tensor(g).data + r * row_bytes);
    f.release(g, r * row_bytes, end * row_bytes);
  }
  f.release(g);  // the pages two pieces shared
}

// The most common type among the products' weights, for people ("Q8_0").
std::string weights_type(const GgufFile& f) {
  std::map<std::string, int64_t> count;
  for (const GgufTensor& t : f.tensors())
    if (t.shape.size() == 2) count[t.type->name] += t.numel();
  std::string best = "F32";
  int64_t most = -1;
  for (const auto& [name, n] : count)
    if (n > most) best = name, most = n;
  return best;
}

}  // namespace

bool is_gguf_file(const std::string& path) { return file_starts_with(path, "GGUF"); }

const ModelFamily& family_of_gguf(const GgufFile& file) {
  const std::string arch = file.string("general.architecture");
  std::vector<std::string> known;
  for (const ModelFamily* f : model_families())
    for (const std::string& a : f->gguf_architectures) {
      if (a == arch) return *f;
      known.push_back(a);
    }
  fail(excerpt(file.path()), ": general.architecture is ", excerpt(arch), "; qkv reads GGUF files of ", quoted_list(known));
}

namespace {

// gguf_config_json's reading of a file's metadata, keys after "{arch}.": counts checked to fit an
// int64, and the file's key each configuration key was read from (`sources`), so that the family's
// checks of the configuration name the file's own keys (read_gguf_config).
struct MetaReader {
  const GgufFile& f;
  std::string arch;  // "qwen3."
  std::vector<std::pair<std::string, std::string>> sources;  // (configuration key, the file's)

  explicit MetaReader(const GgufFile& file) : f(file), arch(file.string("general.architecture") + ".") {}
  bool has(const std::string& key) const { return f.has(arch + key); }
  int64_t integer(const std::string& key) const {  // a count past int64 is named, not clamped to 2^63 - 1
    const uint64_t v = f.unsigned_int(arch + key);
    QKV_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), excerpt(f.path()), ": metadata ",
              excerpt(arch + key), " is ", v, "; more than qkv reads (2^63 - 1)");
    return static_cast<int64_t>(v);
  }
  // The value of `key` as the configuration's `config`.
  int64_t integer(const std::string& key, const char* config) {
    sources.emplace_back(config, arch + key);
    return integer(key);
  }
  double number(const std::string& key, const char* config) {
    sources.emplace_back(config, arch + key);
    return f.number(arch + key);
  }
};

// The model's layers: {arch}.block_count less {arch}.nextn_predict_layers, the layers after them
// that predict further tokens (multi-token prediction: llama.cpp's converter keeps Qwen3.5's mtp.*
// there, blk.L.*); qkv predicts the next token only and leaves them unread.
int64_t model_layers(MetaReader& r, const char* config) {
  const int64_t blocks = r.integer("block_count", config);
  if (!r.has("nextn_predict_layers")) return blocks;
  const int64_t later = r.integer("nextn_predict_layers");
  QKV_CHECK(later < blocks, excerpt(r.f.path()), ": ", r.arch, "nextn_predict_layers (", later,
            ") is not fewer than block_count (", blocks, "); expected the model's layers before them");
  return blocks - later;
}

// {arch}.vocab_size, else token_embd's rows.
int64_t vocab_size(MetaReader& r) {
  if (r.has("vocab_size")) return r.integer("vocab_size", "vocab_size");
  r.sources.emplace_back("vocab_size", "token_embd.weight's rows");
  const GgufTensor& embed = r.f.tensor("token_embd.weight");
  QKV_CHECK(embed.shape.size() == 2, excerpt(r.f.path()), ": token_embd.weight has shape ", shape_str(embed.shape),
            "; expected (vocab, embedding_length)");
  return embed.shape[0];
}

// gpt2's metadata as the book's cfg dict (the GPT family's configuration); Q, K and V's bias when
// the file has one.
json gpt2_cfg(MetaReader& r) {
  const GgufFile& f = r.f;
  const std::string where = excerpt(f.path()) + ": gpt2.";
  json j = {{"emb_dim", r.integer("embedding_length", "emb_dim")},
            {"n_layers", model_layers(r, "n_layers")},
            {"n_heads", r.integer("attention.head_count", "n_heads")},
            {"context_length", r.integer("context_length", "context_length")},
            {"drop_rate", 0.0},
            {"qkv_bias", f.contains("blk.0.attn_qkv.bias")},
            {"tied_head", !f.contains("output.weight")}};
  const int64_t width = j["emb_dim"];
  QKV_CHECK(r.integer("feed_forward_length") == checked_mul(4, width, "4 x gpt2.embedding_length"), where,
            "feed_forward_length is ", r.integer("feed_forward_length"), "; the book's GPT has 4 x embedding_length (",
            4 * width, ")");
  if (f.has("gpt2.attention.head_count_kv"))
    QKV_CHECK(r.integer("attention.head_count_kv") == j["n_heads"].get<int64_t>(), where, "attention.head_count_kv is ",
              r.integer("attention.head_count_kv"), "; GPT-2's keys have as many heads as its queries (",
              j["n_heads"].get<int64_t>(), ")");
  const double eps = f.number("gpt2.attention.layer_norm_epsilon");
  QKV_CHECK(std::fabs(eps - 1e-5) <= 1e-9, where, "attention.layer_norm_epsilon is ", eps,
            "; the book's GPT normalises with 1e-5");
  j["vocab_size"] = vocab_size(r);
  return j;
}

// qwen35's metadata as Qwen3.5's config.json: the gated attention's sizes as the other families',
// rope.dimension_count the rotated dims of key_length (rope.dimension_sections: a text token's
// positions are one, plain RoPE whatever the sections), the linear layers' from ssm.* (group_count
// the key heads, time_step_rank the value heads, state_size the key width, inner_size the value
// heads' widths), layer_types from full_attention_interval (4 when absent, as llama.cpp reads it).
json qwen35_config(MetaReader& r) {
  const GgufFile& f = r.f;
  const std::string a = "qwen35.", where = excerpt(f.path()) + ": qwen35.";
  const int64_t layers = model_layers(r, "num_hidden_layers");
  const int64_t heads = r.integer("attention.head_count", "num_attention_heads");
  const int64_t head_dim = r.integer("attention.key_length", "head_dim");
  if (f.has(a + "attention.value_length"))
    QKV_CHECK(r.integer("attention.value_length") == head_dim, where, "attention.value_length (",
              r.integer("attention.value_length"), ") differs from attention.key_length (", head_dim,
              "); Qwen3.5's heads have one head_dim");
  const int64_t rotated = f.has(a + "rope.dimension_count") ? r.integer("rope.dimension_count") : head_dim;
  QKV_CHECK(rotated > 0 && rotated <= head_dim, where, "rope.dimension_count (", rotated,
            ") is not between 1 and attention.key_length (", head_dim, ")");
  const int64_t value_heads = r.integer("ssm.time_step_rank", "linear_num_value_heads");
  const int64_t inner = r.integer("ssm.inner_size");
  QKV_CHECK(value_heads > 0 && inner % value_heads == 0, where, "ssm.inner_size (", inner,
            ") is not a whole number of ssm.time_step_rank's (", value_heads, ") value heads");
  // (as config.json's factor: the rotated dims are floor(head_dim x factor))
  double factor = static_cast<double>(rotated) / static_cast<double>(head_dim);
  while (std::floor(static_cast<double>(head_dim) * factor) < static_cast<double>(rotated))
    factor = std::nextafter(factor, 2.0);
  const int64_t every = f.has(a + "full_attention_interval") ? r.integer("full_attention_interval") : 4;
  QKV_CHECK(every >= 1, where, "full_attention_interval is ", every, "; expected at least 1");
  json types = json::array();
  for (int64_t i = 0; i < layers && i < (int64_t{1} << 20); ++i)
    types.push_back((i + 1) % every != 0 ? "linear_attention" : "full_attention");
  const json text = {
      {"vocab_size", vocab_size(r)},
      {"hidden_size", r.integer("embedding_length", "hidden_size")},
      {"intermediate_size", r.integer("feed_forward_length", "intermediate_size")},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads",
       r.has("attention.head_count_kv") ? r.integer("attention.head_count_kv", "num_key_value_heads") : heads},
      {"head_dim", head_dim},
      {"rms_norm_eps", r.number("attention.layer_norm_rms_epsilon", "rms_norm_eps")},
      {"max_position_embeddings", r.integer("context_length", "max_position_embeddings")},
      {"rope_parameters",
       {{"rope_type", "default"},
        {"rope_theta", r.has("rope.freq_base") ? r.number("rope.freq_base", "rope_theta") : 10000.0},
        {"partial_rotary_factor", factor}}},
      {"layer_types", types},
      {"linear_num_value_heads", value_heads},
      {"linear_num_key_heads", r.integer("ssm.group_count", "linear_num_key_heads")},
      {"linear_key_head_dim", r.integer("ssm.state_size", "linear_key_head_dim")},
      {"linear_value_head_dim", inner / value_heads},
      {"linear_conv_kernel_dim", r.integer("ssm.conv_kernel", "linear_conv_kernel_dim")},
      {"tie_word_embeddings", !f.contains("output.weight")}};
  return {{"model_type", "qwen3_5"}, {"tie_word_embeddings", !f.contains("output.weight")}, {"text_config", text}};
}

json config_of(MetaReader& r) {
  const GgufFile& f = r.f;
  const ModelFamily& family = family_of_gguf(f);
  const std::string& a = r.arch;
  if (a == "gpt2.") return gpt2_cfg(r);
  if (a == "qwen35.") return qwen35_config(r);
  json j = {{"model_type", family.model_types.front()}};
  j["hidden_size"] = r.integer("embedding_length", "hidden_size");
  j["intermediate_size"] = r.integer("feed_forward_length", "intermediate_size");
  j["num_hidden_layers"] = model_layers(r, "num_hidden_layers");
  j["num_attention_heads"] = r.integer("attention.head_count", "num_attention_heads");
  j["num_key_value_heads"] = r.has("attention.head_count_kv")
                                 ? r.integer("attention.head_count_kv", "num_key_value_heads")
                                 : j["num_attention_heads"].get<int64_t>();
  j["max_position_embeddings"] = r.integer("context_length", "max_position_embeddings");
  j["rms_norm_eps"] = r.number("attention.layer_norm_rms_epsilon", "rms_norm_eps");
  j["rope_theta"] = r.has("rope.freq_base") ? r.number("rope.freq_base", "rope_theta") : 10000.0;
  j["vocab_size"] = vocab_size(r);
  const int64_t heads = j["num_attention_heads"];
  const int64_t width = j["hidden_size"];
  int64_t head_dim = heads > 0 && width % heads == 0 ? width / heads : 0;
  if (r.has("attention.key_length")) {
    head_dim = r.integer("attention.key_length", "head_dim");
    j["head_dim"] = head_dim;
    if (f.has(a + "attention.value_length"))
      QKV_CHECK(r.integer("attention.value_length") == head_dim, excerpt(f.path()), ": ", a, "attention.value_length (",
                r.integer("attention.value_length"), ") differs from ", a, "attention.key_length (", head_dim,
                "); qkv's heads have one head_dim");
  }
  if (f.has(a + "rope.dimension_count"))
    QKV_CHECK(r.integer("rope.dimension_count") == head_dim, excerpt(f.path()), ": ", a, "rope.dimension_count (",
              r.integer("rope.dimension_count"), ") is not the head's dimension (", head_dim,
              "); qkv rotates every dimension of a head");
  if (f.has(a + "rope.scaling.type")) {
    const std::string type = f.string(a + "rope.scaling.type");
    QKV_CHECK(type == "none", excerpt(f.path()), ": ", a, "rope.scaling.type is ", excerpt(type),
              "; qkv reads Llama 3's scaling (rope_freqs.weight) or none");
  }
  j["tie_word_embeddings"] = !f.contains("output.weight");
  if (f.contains("rope_freqs.weight") && head_dim > 0 && head_dim % 2 == 0) {
    if (const auto s = rope_scaling_of(f, head_dim, j["rope_theta"]))
      j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", s->factor}, {"low_freq_factor", s->low_freq_factor},
                           {"high_freq_factor", s->high_freq_factor},
                           {"original_max_position_embeddings", s->original_max_positions}};
  }
  return j;
}

}  // namespace

json gguf_config_json(const GgufFile& f) {
  MetaReader r(f);
  return config_of(r);
}

int64_t GgufOrder::state_index(int64_t i) const {
  if (kind == kSame || i < first || i >= first + heads * width) return i;
  const int64_t j = (i - first) / width, d = (i - first) % width;
  if (kind == kRopePairs) {  // the file's d = 2 i + s is the state's s D/2 + i
    return first + j * width + (d % 2) * (width / 2) + d / 2;
  }
  const int64_t r = heads / key_heads;  // kTiledValueHeads
  return first + ((j % key_heads) * r + j / key_heads) * width + d;
}

void gguf_reorder(const GgufOrder& o, void* data, int64_t rows, int64_t cols, int64_t elem_bytes, bool to_state) {
  if (o.same()) return;
  const int64_t n = o.columns ? cols : rows;  // what is reordered: columns within each row, or rows
  const int64_t unit = o.columns ? elem_bytes : cols * elem_bytes;
  QKV_CHECK(o.first + o.heads * o.width <= n && o.width > 0 && (o.kind != GgufOrder::kTiledValueHeads ||
                                                                  (o.key_heads > 0 && o.heads % o.key_heads == 0)),
            "a GGUF tensor's order of ", o.heads, " heads of ", o.width, " from ", o.first, " does not fit its ", n,
            o.columns ? " columns" : " rows");
  auto* bytes = static_cast<uint8_t*>(data);
  const int64_t span = o.heads * o.width;
  std::vector<uint8_t> copy(static_cast<size_t>(span * unit));
  for (int64_t row = 0; row < (o.columns ? rows : 1); ++row) {
    uint8_t* base = bytes + (o.columns ? row * cols * elem_bytes : 0);
    std::memcpy(copy.data(), base + o.first * unit, copy.size());
    for (int64_t i = o.first; i < o.first + span; ++i) {  // file index i, state index s
      const int64_t s = o.state_index(i);
      const int64_t to = to_state ? s : i, from = (to_state ? i : s) - o.first;
      std::memcpy(base + to * unit, copy.data() + from * unit, static_cast<size_t>(unit));
    }
  }
}

void gguf_map_values(GgufValues values, float* data, int64_t n, bool to_state, const std::string& where) {
  for (int64_t i = 0; i < n; ++i) {
    float& x = data[i];
    if (values == GgufValues::kOnePlus) {
      x = to_state ? x - 1.0f : 1.0f + x;
    } else if (values == GgufValues::kNegExp) {
      if (to_state) {
        QKV_CHECK(x < 0.0f && std::isfinite(x), where, "[", i, "] is ", x, "; expected negative values (-exp(A_log))");
        x = std::log(-x);
      } else {
        x = -std::exp(x);
      }
    }
  }
}

int64_t full_attention_interval(const DecoderSpec& s) {
  for (int64_t n = 1; n <= s.layers + 1; ++n) {
    bool fits = true;
    for (int64_t i = 0; i < s.layers && fits; ++i)
      fits = (s.kind(i) == LayerKind::kAttention) == ((i + 1) % n == 0);
    if (fits) return n;
  }
  std::string kinds;
  for (int64_t i = 0; i < s.layers && i < 64; ++i)
    kinds += std::string(i ? ", " : "") + (s.kind(i) == LayerKind::kLinear ? "linear" : "full");
  fail("the model's layers are ", kinds, s.layers > 64 ? ", ..." : "", "; llama.cpp's qwen35 has a full-attention ",
       "layer exactly at every full_attention_interval-th layer");
}

GgufPlace gguf_place(const ModelFamily& family, const std::string& arch, const DecoderSpec& spec,
                     const std::string& name) {
  const StateNames& n = family.names;
  const kernels::AttentionSpec& a = spec.attention;
  // a norm's values: the scale itself in llama.cpp's files
  const GgufValues norm = spec.norm_unit_offset ? GgufValues::kOnePlus : GgufValues::kSame;
  // the tensor `g` as a whole, its values and order
  auto at = [](std::string g, GgufValues values = GgufValues::kSame, GgufOrder order = {}, bool f32 = false) {
    GgufPlace p;
    p.name = std::move(g);
    p.values = values;
    p.order = order;
    p.f32 = f32;
    return p;
  };
  if (name == n.embed + "weight") return at("token_embd.weight");
  if (!n.positions.empty() && name == n.positions + "weight") return at("position_embd.weight");
  if (name.starts_with(n.final_norm))
    if (const std::string tail = tail_of(name, n.final_norm); !tail.empty())
      return at("output_norm." + tail, tail == "weight" ? norm : GgufValues::kSame);
  if (name == n.head + "weight") return at("output.weight");
  if (!name.starts_with(n.blocks)) return GgufPlace();
  const size_t dot = name.find('.', n.blocks.size());
  if (dot == std::string::npos) return GgufPlace();
  const std::string layer = name.substr(n.blocks.size(), dot - n.blocks.size());
  const std::string rest = name.substr(dot + 1);
  if (fuses_qkv(arch)) {  // Q's rows, then K's, then V's
    const int64_t q = a.heads * a.head_dim, kv = a.groups() * a.head_dim;
    const std::pair<const std::string*, int64_t> parts[] = {{&n.q, 0}, {&n.k, q}, {&n.v, q + kv}};
    for (const auto& [part, first] : parts)
      if (const std::string p = n.attention + *part; rest.starts_with(p))
        if (const std::string tail = tail_of(rest, p); !tail.empty())
        {
          GgufPlace place = at("blk." + layer + ".attn_qkv." + tail);
          place.first_row = first;
          place.rows = q + 2 * kv;
          return place;
        }
  }
  const std::string blk = "blk." + layer + ".";
  const LinearAttentionSizes& l = spec.linear;
  // qwen35's value heads, tiled where the key heads are fewer: rows (columns) of `width` from `first`
  auto tiled = [&](int64_t first, int64_t width, bool columns = false) {
    GgufOrder o;
    if (l.key_heads > 0 && l.value_heads != l.key_heads)
      o = {GgufOrder::kTiledValueHeads, l.value_heads, l.key_heads, first, width, columns};
    return o;
  };
  const int64_t qk_rows = 2 * l.key_heads * l.key_dim;
  if (arch == "qwen35" && !n.linear.empty() && rest.starts_with(n.linear)) {
    const std::string own = rest.substr(n.linear.size());
    if (own == "dt_bias") return at(blk + "ssm_dt.bias", GgufValues::kSame, tiled(0, 1), true);
    if (own == "A_log") return at(blk + "ssm_a", GgufValues::kNegExp, tiled(0, 1), true);
  }
  for (const Part& p : block_parts(n, arch))
    if (rest.starts_with(p.state))
      if (const std::string tail = tail_of(rest, p.state); !tail.empty()) {
        GgufPlace place = at(blk + p.gguf + tail);
        const std::string& g = p.gguf;
        if (g.ends_with("norm.") && g != "ssm_norm." && tail == "weight") place.values = norm;
        if (arch == "llama" && tail == "weight" && (g == "attn_q." || g == "attn_k."))
          place.order = {GgufOrder::kRopePairs, g == "attn_q." ? a.heads : a.groups(), 0, 0, a.head_dim};
        if (arch == "qwen35") {
          if (g == "attn_qkv.") place.order = tiled(qk_rows, l.value_dim);
          if (g == "attn_gate.") place.order = tiled(0, l.value_dim);
          if (g == "ssm_beta." || g == "ssm_alpha.") place.order = tiled(0, 1);
          if (g == "ssm_out.") place.order = tiled(0, l.value_dim, true);
          if (g == "ssm_conv1d.") {
            place.order = tiled(qk_rows, l.value_dim);
            place.shape = {qk_rows + l.value_heads * l.value_dim, l.conv_kernel};
            place.f32 = true;
          }
        }
        return place;
      }
  return GgufPlace();
}

namespace {

// The family's reading of gguf_config_json(file), its errors in the file's keys.
DecoderSpec read_gguf_config(const GgufFile& file, const ModelFamily& family, const std::string& where) {
  MetaReader r(file);
  const json config = config_of(r);
  try {
    return family.read_config(config, where);
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& [config_key, file_key] : r.sources) {
      const std::string key = str("\"", config_key, "\"");
      for (size_t at = m.find(key); at != std::string::npos; at = m.find(key, at + file_key.size()))
        m.replace(at, key.size(), file_key);
    }
    fail(m);
  }
}

}  // namespace

LoadedModel load_gguf(const std::string& path, const LoadOptions& options) {
  GgufFile file(path);
  const ModelFamily& family = family_of_gguf(file);
  const std::string where = excerpt(path) + "'s metadata";
  DecoderSpec spec = read_gguf_config(file, family, where);
  if (options.dropout) spec.attention.dropout = *options.dropout;
  check_file_holds(file, spec, family);
  const std::string type = weights_type(file);
  QKV_CHECK(options.quantize.empty() || (!options.float_weights && options.dtype.value_or(Dtype::kBF16) == Dtype::kBF16),
            "quantizing the weights (", options.quantize, ") is for generation: it does not go with f32 products or ",
            "the float weights");
  QKV_CHECK(options.quantize.empty() || type == "F32" || type == "F16" || type == "BF16", "quantizing the weights (",
            options.quantize, "): the weights of ", excerpt(path), " are ", type, " already; expected a file of float ",
            "weights (F32, F16, BF16) to quantize");
  const Dtype dtype = options.dtype.value_or(
      (type == "F32" && options.quantize.empty()) || options.float_weights ? Dtype::kF32 : Dtype::kBF16);
  const bool bf16_only = dtype == Dtype::kBF16 && !options.float_weights;
  spec.attention.dtype = dtype;
  spec.path = options.path.value_or(AttentionPath::kFused);

  LoadedModel m;
  m.generator = std::make_unique<Generator>(options.seed.value_or(Generator::kDefaultSeed));
  QKV_CHECK(!(options.draw && bf16_only), "weights in bf16 only are never drawn");
  std::unique_ptr<DecoderModel> model = options.draw ? std::make_unique<DecoderModel>(spec, *m.generator)
                                                     : build_model_to_load(spec, *m.generator);
  // Every tensor against the model first: names, shapes, types, nothing left over.
  const std::string arch = file.string("general.architecture");
  std::map<std::string, GgufPlace> place_of;  // state name -> where in the file
  std::map<std::string, int64_t> state_rows;  // state name -> its rows (a 1-D tensor's elements)
  std::set<std::string> wanted;
  for (const StateEntry& e : model->state_dict()) {
    if (e.tensor == nullptr) continue;  // the book's mask buffers: made, not read
    const GgufPlace place = gguf_place(family, arch, spec, e.name);
    const std::string& g = place.name;
    QKV_CHECK(!g.empty(), "qkv has no GGUF name for the ", family.name, " model's ", excerpt(e.name));
    QKV_CHECK(file.contains(g), excerpt(path), " has no tensor ", excerpt(g), " (", e.name, ", of shape ",
              shape_str(e.shape()), ", which its metadata's model needs)");
    const GgufTensor& t = file.tensor(g);
    Shape want = place.shape.empty() ? e.shape() : place.shape;
    if (place.part()) want[0] = place.rows;  // Q, K and V's rows together
    QKV_CHECK(t.shape == want, excerpt(path), ": tensor ", excerpt(g), " has shape ", shape_str(t.shape),
              "; the metadata's model has ", shape_str(want), " (", e.name, place.part() ? " and its neighbours" : "",
              ")");
    QKV_CHECK(t.type->readable, excerpt(path), ": tensor ", excerpt(g), " is ", t.type->name, "; qkv reads ",
              readable_quant_types());
    place_of[e.name] = place;
    state_rows[e.name] = e.shape()[0];
    wanted.insert(g);
  }
  // (the layers after the model's, block_count's last nextn_predict_layers, are not read)
  const uint64_t blocks = file.unsigned_int(arch + ".block_count");
  auto layer_of = [](const std::string& name) -> std::optional<uint64_t> {  // blk.L.*'s L
    if (!name.starts_with("blk.")) return std::nullopt;
    const size_t dot = name.find('.', 4);
    const std::string n = name.substr(4, dot == std::string::npos ? 0 : dot - 4);
    if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return std::stoull(n);
  };
  for (const GgufTensor& t : file.tensors()) {
    if (wanted.count(t.name) || t.name == "rope_freqs.weight") continue;
    const std::optional<uint64_t> layer = layer_of(t.name);
    if (layer && *layer >= static_cast<uint64_t>(spec.layers) && *layer < blocks) continue;
    QKV_CHECK(!layer || *layer < blocks, excerpt(path), ": tensor ", excerpt(t.name), " is of layer ", *layer,
              "; the metadata's ", arch, ".block_count is ", blocks);
    fail(excerpt(path), ": tensor ", excerpt(t.name), " is not of the metadata's ", family.name, " model");
  }

  // The tokenizer before the weights, and its metadata forgotten: building it takes a few tens of MB
  // for a while (151,936 tokens and 151,387 merges), which is then free again for the weights.
  std::optional<HfTokenizer> tokenizer;
  std::vector<int64_t> end_ids;
  if (options.tokenizer && file.has("tokenizer.ggml.model")) {
    tokenizer = HfTokenizer::build(gguf_tokenizer_parts(file), excerpt(path));
    end_ids = gguf_end_ids(file);
  }
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"})
    file.drop(key);
#if defined(__GLIBC__)
  malloc_trim(0);  // the freed strings' pages given back, not kept by the allocator through the load
#endif

  // llama.cpp's order of rows (columns), put back: "llama"'s Q and K, qwen35's value heads.
  // A state tensor's rows [first, last) of its GGUF tensor, and the bytes of one row (a 1-D
  // tensor's rows are its elements).
  struct Rows {
    const GgufTensor* t;
    int64_t first, last, cols, row_bytes;
  };
  auto rows_of = [&](const std::string& name) {
    const GgufPlace& p = place_of.at(name);
    const GgufTensor& t = file.tensor(p.name);
    const int64_t cols = t.shape.size() == 1 ? 1 : t.shape.back(), all = t.numel() / cols;
    const int64_t first = p.part() ? p.first_row : 0, last = p.part() ? first + state_rows.at(name) : all;
    return Rows{&t, first, last, cols, quant_bytes(*t.type, cols, p.name)};
  };
  auto read32 = [&](const std::string& name, float* out) {
    const GgufPlace& p = place_of.at(name);
    const GgufTensor& t = file.tensor(p.name);
    if (p.part()) {  // this part's rows only (rows are whole blocks; the type was checked readable above)
      const Rows r = rows_of(name);
      dequantize(*t.type, t.data + r.first * r.row_bytes, (r.last - r.first) * r.cols, out);
    } else {
      file.read_floats(p.name, out);
    }
    file.release(p.name);
    const Rows r = rows_of(name);
    gguf_map_values(p.values, out, (r.last - r.first) * r.cols, true, excerpt(path) + ": " + p.name);
    gguf_reorder(p.order, out, r.last - r.first, r.cols, sizeof(float), true);
  };

  // The products' weights in the types the integer products read, kept as their blocks (rows
  // reordered for Q and K as above); the other quantized types converted to the nearest of them.
  std::map<std::string, int64_t> converted;  // "Q5_K to Q6_K" -> tensors
  const QuantType* quantize_to = options.quantize.empty() ? nullptr : &product_quant_type(options.quantize);
  auto readq = [&](const std::string& name) -> std::optional<QuantMatrix> {
    const std::string& g = place_of.at(name).name;
    const Rows in = rows_of(name);
    const GgufTensor& t = *in.t;
    const std::string tt = t.type->name;
    const int64_t cols = in.cols, rows = in.last - in.first, in_row = in.row_bytes;
    const uint8_t* first = t.data + in.first * in_row;
    QuantMatrix q;
    if (tt == "Q8_0" || tt == "Q4_0" || tt == "Q4_K" || tt == "Q6_K") {
      q.type = t.type;
      q.blocks.reserve(static_cast<size_t>(rows * in_row));
      copy_in_pieces(file, g, in_row, in.first, in.last, [&](int64_t r0, int64_t r1, const uint8_t* from) {
        q.blocks.insert(q.blocks.end(), from, from + (r1 - r0) * in_row);
      });
    } else if (tt == "Q4_1" || tt == "Q5_0" || tt == "Q5_1" || tt == "Q5_K") {
      q.type = &quant_type_named(tt == "Q5_K" ? "Q6_K" : "Q8_0");
      const int64_t out_row = quant_bytes(*q.type, cols, g);
      q.blocks.resize(static_cast<size_t>(rows * out_row));
      std::vector<float> row(static_cast<size_t>(cols));
      copy_in_pieces(file, g, in_row, in.first, in.last, [&](int64_t r0, int64_t r1, const uint8_t* from) {
        for (int64_t r = r0; r < r1; ++r) {
          dequantize(*t.type, from + (r - r0) * in_row, cols, row.data());
          quantize(*q.type, row.data(), cols, q.blocks.data() + r * out_row,
                   str("tensor ", excerpt(g), " of ", excerpt(path), ", row ", r, ","));
        }
      });
      ++converted[tt + " to " + q.type->name];
    } else if (quantize_to != nullptr && std::string(fitting_quant_type(*quantize_to, cols).name) != "F16") {
      // F32, F16, BF16 asked to be quantized
      q = quantize_matrix(fitting_quant_type(*quantize_to, cols), rows, cols,
                          [&](int64_t r, float* out) { dequantize(*t.type, first + r * in_row, cols, out); },
                          str("tensor ", excerpt(g), " of ", excerpt(path)));
      ++converted[tt + " to " + q.type->name];
    } else {
      return std::nullopt;  // F32, F16, BF16: bf16 weights
    }
    const GgufPlace& place = place_of.at(name);
    QKV_CHECK(place.values == GgufValues::kSame, "qkv reads ", excerpt(g), " as floats only");
    if (!place.order.columns) {  // whole rows of blocks, reordered
      gguf_reorder(place.order, q.blocks.data(), rows, quant_bytes(*q.type, cols, g), 1, true);
    } else {  // heads of columns (qwen35's ssm_out): whole blocks where a head is, else decoded to bf16
      const int64_t block = q.type->block;
      GgufOrder o = place.order;
      if (o.width % block != 0 || o.first % block != 0) {
        file.release(g);
        return std::nullopt;
      }
      o.first /= block;
      o.width /= block;
      gguf_reorder(o, q.blocks.data(), rows, cols / block, quant_bytes(*q.type, block, g), true);
    }
    file.release(g);
    return q;
  };
  if (bf16_only) {
    std::vector<float> row;
    model->load_bf16_only(
        [&](const std::string& name, uint16_t* out) {
          const std::string& g = place_of.at(name).name;
          const Rows in = rows_of(name);
          const GgufTensor& t = *in.t;
          const int64_t cols = in.cols, row_bytes = in.row_bytes;
          if (std::string(t.type->name) == "BF16") {
            copy_in_pieces(file, g, row_bytes, in.first, in.last, [&](int64_t r0, int64_t r1, const uint8_t* from) {
              std::memcpy(out + r0 * cols, from, static_cast<size_t>((r1 - r0) * row_bytes));
            });
          } else {  // a block row at a time: never the whole tensor in floats
            row.resize(static_cast<size_t>(cols));
            copy_in_pieces(file, g, row_bytes, in.first, in.last, [&](int64_t r0, int64_t r1, const uint8_t* from) {
              for (int64_t r = r0; r < r1; ++r) {
                dequantize(*t.type, from + (r - r0) * row_bytes, cols, row.data());
                floats_to_bf16(row.data(), out + r * cols, static_cast<size_t>(cols));
              }
            });
          }
          const GgufPlace& place = place_of.at(name);
          QKV_CHECK(place.values == GgufValues::kSame, "qkv reads ", excerpt(g), " as floats only");
          gguf_reorder(place.order, out, in.last - in.first, cols, sizeof(uint16_t), true);
          file.release(g);
        },
        read32, options.dequantize ? nullptr : std::function<std::optional<QuantMatrix>(const std::string&)>(readq));
  } else {
    for (const StateEntry& e : model->state_dict())
      if (e.tensor != nullptr) read32(e.name, e.tensor->data());
  }
  model->eval();
  if (dtype == Dtype::kBF16 && !bf16_only) model->keep_bf16_weights();
  m.model = std::move(model);
  std::string how = str(dtype_name(dtype), " products");
  if (bf16_only && !options.dequantize && ((type != "F16" && type != "BF16") || quantize_to != nullptr)) {
    how = "integer products on its blocks";
    for (const auto& [what, n] : converted) how += str(", ", n, " tensors converted ", what);
  }
  m.description = str(m.model->describe(), " from ", excerpt(path), " (GGUF, ", type, " weights, ", how, ")");
  m.no_tokenizer = str(excerpt(path), " has no tokenizer (tokenizer.ggml.*)");
  if (tokenizer) {
    auto t = std::make_unique<HfTextTokenizer>(std::move(*tokenizer), excerpt(path) + "'s tokenizer.ggml");
    attach_tokenizer(m, std::move(t), excerpt(path) + "'s tokenizer", "");
    for (const int64_t id : end_ids)  // the file's own, after the family's (the first is eos_id)
      if (id < m.model->vocab_size() && std::find(m.end_ids.begin(), m.end_ids.end(), id) == m.end_ids.end())
        m.end_ids.push_back(id);
  }
  return m;
}

}  // namespace qkv
