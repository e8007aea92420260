// A model from llama.cpp's GGUF file. See include/qkv/models/gguf_model.h.
#include "qkv/models/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "qkv/core/bf16.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
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
std::vector<Part> block_parts(const StateNames& n) {
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

// llama.cpp's "llama" Q and K: within each head of D rows, GGUF row 2 i + s holds Hugging Face's
// row s D/2 + i. `heads` heads of `rows_per_head` rows of `cols` values, in place.
template <typename T>
void unpermute_rows(T* w, int64_t heads, int64_t rows_per_head, int64_t cols) {
  const int64_t half = rows_per_head / 2;
  std::vector<T> head(static_cast<size_t>(rows_per_head * cols));
  for (int64_t h = 0; h < heads; ++h) {
    T* base = w + h * rows_per_head * cols;
    std::memcpy(head.data(), base, head.size() * sizeof(T));
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(base + (s * half + i) * cols, head.data() + (2 * i + s) * cols, static_cast<size_t>(cols) * sizeof(T));
  }
}

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

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

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

// {arch}.vocab_size, else token_embd's rows.
int64_t vocab_size(const GgufFile& f, const std::function<int64_t(const std::string&)>& integer) {
  if (f.has(f.string("general.architecture") + ".vocab_size")) return integer("vocab_size");
  const GgufTensor& embed = f.tensor("token_embd.weight");
  QKV_CHECK(embed.shape.size() == 2, excerpt(f.path()), ": token_embd.weight has shape ", shape_str(embed.shape),
            "; expected (vocab, embedding_length)");
  return embed.shape[0];
}

// gpt2's metadata as the book's cfg dict (the GPT family's configuration); Q, K and V's bias when
// the file has one.
json gpt2_cfg(const GgufFile& f, const std::function<int64_t(const std::string&)>& integer) {
  const std::string where = excerpt(f.path()) + ": gpt2.";
  json j = {{"emb_dim", integer("embedding_length")},
            {"n_layers", integer("block_count")},
            {"n_heads", integer("attention.head_count")},
            {"context_length", integer("context_length")},
            {"drop_rate", 0.0},
            {"qkv_bias", f.contains("blk.0.attn_qkv.bias")},
            {"tied_head", !f.contains("output.weight")}};
  const int64_t width = j["emb_dim"];
  QKV_CHECK(integer("feed_forward_length") == checked_mul(4, width, "4 x gpt2.embedding_length"), where,
            "feed_forward_length is ", integer("feed_forward_length"), "; the book's GPT has 4 x embedding_length (",
            4 * width, ")");
  if (f.has("gpt2.attention.head_count_kv"))
    QKV_CHECK(integer("attention.head_count_kv") == j["n_heads"].get<int64_t>(), where, "attention.head_count_kv is ",
              integer("attention.head_count_kv"), "; GPT-2's keys have as many heads as its queries (",
              j["n_heads"].get<int64_t>(), ")");
  const double eps = f.number("gpt2.attention.layer_norm_epsilon");
  QKV_CHECK(std::fabs(eps - 1e-5) <= 1e-9, where, "attention.layer_norm_epsilon is ", eps,
            "; the book's GPT normalises with 1e-5");
  j["vocab_size"] = vocab_size(f, integer);
  return j;
}

}  // namespace

json gguf_config_json(const GgufFile& f) {
  const ModelFamily& family = family_of_gguf(f);
  const std::string a = f.string("general.architecture") + ".";
  auto integer = [&](const std::string& key) { return static_cast<int64_t>(std::min<uint64_t>(f.unsigned_int(a + key), INT64_MAX)); };
  if (a == "gpt2.") return gpt2_cfg(f, integer);
  json j = {{"model_type", family.model_types.front()}};
  j["hidden_size"] = integer("embedding_length");
  j["intermediate_size"] = integer("feed_forward_length");
  j["num_hidden_layers"] = integer("block_count");
  j["num_attention_heads"] = integer("attention.head_count");
  j["num_key_value_heads"] = f.has(a + "attention.head_count_kv") ? integer("attention.head_count_kv")
                                                                   : j["num_attention_heads"].get<int64_t>();
  j["max_position_embeddings"] = integer("context_length");
  j["rms_norm_eps"] = f.number(a + "attention.layer_norm_rms_epsilon");
  j["rope_theta"] = f.has(a + "rope.freq_base") ? f.number(a + "rope.freq_base") : 10000.0;
  j["vocab_size"] = vocab_size(f, integer);
  const int64_t heads = j["num_attention_heads"];
  const int64_t width = j["hidden_size"];
  int64_t head_dim = heads > 0 && width % heads == 0 ? width / heads : 0;
  if (f.has(a + "attention.key_length")) {
    head_dim = integer("attention.key_length");
    j["head_dim"] = head_dim;
    if (f.has(a + "attention.value_length"))
      QKV_CHECK(integer("attention.value_length") == head_dim, excerpt(f.path()), ": ", a, "attention.value_length (",
                integer("attention.value_length"), ") differs from ", a, "attention.key_length (", head_dim,
                "); qkv's heads have one head_dim");
  }
  if (f.has(a + "rope.dimension_count"))
    QKV_CHECK(integer("rope.dimension_count") == head_dim, excerpt(f.path()), ": ", a, "rope.dimension_count (",
              integer("rope.dimension_count"), ") is not the head's dimension (", head_dim,
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

GgufPlace gguf_place(const ModelFamily& family, const std::string& arch, const DecoderSpec& spec,
                     const std::string& name) {
  const StateNames& n = family.names;
  if (name == n.embed + "weight") return {"token_embd.weight"};
  if (!n.positions.empty() && name == n.positions + "weight") return {"position_embd.weight"};
  if (name.starts_with(n.final_norm))
    if (const std::string tail = tail_of(name, n.final_norm); !tail.empty()) return {"output_norm." + tail};
  if (name == n.head + "weight") return {"output.weight"};
  if (!name.starts_with(n.blocks)) return {};
  const size_t dot = name.find('.', n.blocks.size());
  if (dot == std::string::npos) return {};
  const std::string layer = name.substr(n.blocks.size(), dot - n.blocks.size());
  const std::string rest = name.substr(dot + 1);
  if (fuses_qkv(arch)) {  // Q's rows, then K's, then V's
    const kernels::AttentionSpec& a = spec.attention;
    const int64_t q = a.heads * a.head_dim, kv = a.groups() * a.head_dim;
    const std::pair<const std::string*, int64_t> parts[] = {{&n.q, 0}, {&n.k, q}, {&n.v, q + kv}};
    for (const auto& [part, first] : parts)
      if (const std::string p = n.attention + *part; rest.starts_with(p))
        if (const std::string tail = tail_of(rest, p); !tail.empty())
          return {"blk." + layer + ".attn_qkv." + tail, first, q + 2 * kv};
  }
  for (const Part& p : block_parts(n))
    if (rest.starts_with(p.state))
      if (const std::string tail = tail_of(rest, p.state); !tail.empty()) return {"blk." + layer + "." + p.gguf + tail};
  return {};
}

int64_t gguf_reordered_heads(const std::string& arch, const std::string& name, const kernels::AttentionSpec& a) {
  if (arch != "llama") return 0;
  return name.ends_with(".attn_q.weight") ? a.heads : name.ends_with(".attn_k.weight") ? a.groups() : 0;
}

LoadedModel load_gguf(const std::string& path, const LoadOptions& options) {
  GgufFile file(path);
  const ModelFamily& family = family_of_gguf(file);
  const std::string where = excerpt(path) + "'s metadata";
  DecoderSpec spec = family.read_config(gguf_config_json(file), where);
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
    Shape want = e.shape();
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
  for (const GgufTensor& t : file.tensors())
    QKV_CHECK(wanted.count(t.name) || t.name == "rope_freqs.weight", excerpt(path), ": tensor ", excerpt(t.name),
              " is not of the metadata's ", family.name, " model");

  // The tokenizer before the weights, and its metadata forgotten: building it takes a few tens of MB
  // for a while (151,936 tokens and 151,387 merges), which is then free again for the weights.
  std::optional<HfTokenizer> tokenizer;
  if (options.tokenizer && file.has("tokenizer.ggml.model"))
    tokenizer = HfTokenizer::build(gguf_tokenizer_parts(file), excerpt(path));
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"})
    file.drop(key);
#if defined(__GLIBC__)
  malloc_trim(0);  // the freed strings' pages given back, not kept by the allocator through the load
#endif

  // llama.cpp's order of Q's and K's rows, put back (the "llama" architecture's only).
  auto heads_of = [&](const std::string& g) { return gguf_reordered_heads(arch, g, spec.attention); };
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
    if (const int64_t h = heads_of(p.name)) unpermute_rows(out, h, t.shape[0] / h, t.shape[1]);
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
          quantize(*q.type, row.data(), cols, q.blocks.data() + r * out_row);
        }
      });
      ++converted[tt + " to " + q.type->name];
    } else if (quantize_to != nullptr && std::string(fitting_quant_type(*quantize_to, cols).name) != "F16") {
      // F32, F16, BF16 asked to be quantized
      q = quantize_matrix(fitting_quant_type(*quantize_to, cols), rows, cols,
                          [&](int64_t r, float* out) { dequantize(*t.type, first + r * in_row, cols, out); });
      ++converted[tt + " to " + q.type->name];
    } else {
      return std::nullopt;  // F32, F16, BF16: bf16 weights
    }
    if (const int64_t h = heads_of(g)) {  // whole rows of blocks, reordered
      const int64_t row = quant_bytes(*q.type, cols, g);
      unpermute_rows(q.blocks.data(), h, rows / h, row);
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
          if (const int64_t h = heads_of(g)) unpermute_rows(out, h, t.shape[0] / h, t.shape[1]);
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
  }
  return m;
}

}  // namespace qkv
