// GPT-2's weights in Hugging Face's layout and the book's. See include/qkv/models/gpt_weights.h.
#include "qkv/models/gpt_weights.h"

#include <sys/stat.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/ops.h"
#include "qkv/core/prefault.h"
#include "qkv/io/atomic_file.h"
#include "qkv/core/json_read.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"

namespace qkv {
namespace {

bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data(), y.data(), static_cast<size_t>(x.numel()) * sizeof(float)) == 0;
}

int64_t default_heads(int64_t E) {
  switch (E) {
    case 768: return 12;
    case 1024: return 16;
    case 1280: return 20;
    case 1600: return 25;
    default: return 0;
  }
}

// The number of blocks: 1 + the largest N of names "<prefix>N.<...>".
int64_t count_blocks(const MappedSafetensors& f, const std::string& prefix) {
  int64_t n = 0;
  for (const std::string& name : f.names()) {
    if (!name.starts_with(prefix)) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos) continue;
    int64_t i = 0;
    bool digits = true;
    for (size_t k = 0; k < dot; ++k) {
      if (rest[k] < '0' || rest[k] > '9' || i > (int64_t{1} << 40)) digits = false;
      else i = i * 10 + (rest[k] - '0');
    }
    if (digits) n = std::max(n, i + 1);
  }
  return n;
}

// The file's tensors as the model's: each name checked (present, of the model's shape) when the
// weights are read, each tensor made (decoded, sliced, transposed) only when the model loads it.
struct Source {
  std::shared_ptr<const MappedSafetensors> f;
  std::string prefix;  // "transformer." or ""
  std::set<std::string> used;

  // The file's tensor `name` (after the prefix), checked to have `shape`.
  std::string check(const std::string& name, const Shape& shape) {
    const std::string full = prefix + name;
    QKV_CHECK(f->contains(full), excerpt(f->path()), " has no tensor ", excerpt(full), " of shape ", shape_str(shape),
              ", which a GPT-2 model of its sizes has");
    QKV_CHECK(f->shape(full) == shape, excerpt(f->path()), ": tensor ", excerpt(full), " has shape ",
              shape_str(f->shape(full)), "; the model's sizes make it ", shape_str(shape));
    used.insert(full);
    return full;
  }
  GptTensor as_is(const std::string& name, const Shape& shape) {
    return {shape, [f = f, full = check(name, shape)](float* out) { f->read_into(full, out); }};
  }
  // Columns [begin, end) of a Conv1D weight (in, out), as nn.Linear's (out, in).
  GptTensor transposed(const std::string& name, const Shape& shape, int64_t begin, int64_t end) {
    return {{end - begin, shape[0]}, [f = f, full = check(name, shape), begin, end](float* out) {
              const Tensor w = f->read(full);  // (in, out)
              const int64_t in = w.size(0), cols = w.size(1), rows = end - begin;
              prefault_pages(out, static_cast<size_t>(rows * in) * sizeof(float));  // written whole: mapped in one call
              constexpr int64_t kTile = 32;    // out[j][i] = w[i][begin + j], tile by tile (cache-friendly)
              for (int64_t j0 = 0; j0 < rows; j0 += kTile)
                for (int64_t i0 = 0; i0 < in; i0 += kTile)
                  for (int64_t j = j0; j < std::min(j0 + kTile, rows); ++j)
                    for (int64_t i = i0; i < std::min(i0 + kTile, in); ++i)
                      out[j * in + i] = w.data()[i * cols + begin + j];
            }};
  }
  GptTensor slice(const std::string& name, const Shape& shape, int64_t begin, int64_t end) {
    return {{end - begin}, [f = f, full = check(name, shape), begin, end](float* out) {
              const Tensor v = f->read(full);
              std::copy(v.data() + begin, v.data() + end, out);
            }};
  }
  // Every tensor of the file was used, or is a buffer the layout carries.
  void check_all_used(const std::function<bool(const std::string&)>& ignorable) const {
    for (const std::string& name : f->names())
      QKV_CHECK(used.count(name) > 0 || ignorable(name), excerpt(f->path()), " has a tensor ", excerpt(name),
                " that is not part of the GPT model its other tensors describe");
  }
};

// The sizes a file's names and shapes give, before the head count is known.
struct FileSizes {
  int64_t vocab_size = 0, context_length = 0, emb_dim = 0, n_layers = 0;
  bool qkv_bias = false, tied_head = false;
};

// The file's spec: its sizes and a head count (given, or GPT-2's for its width) that divides the width.
DecoderSpec spec_of(const FileSizes& c, std::optional<int64_t> heads, const std::string& file) {
  const int64_t H = heads ? *heads : default_heads(c.emb_dim);
  QKV_CHECK(H > 0, excerpt(file), ": the head count of a model of width ", c.emb_dim,
            " is not known (GPT-2's widths are 768, 1024, 1280 and 1600): give it (--num-heads H)");
  QKV_CHECK(c.emb_dim % H == 0, excerpt(file), ": the head count ", H, " does not divide the width ", c.emb_dim);
  return gpt_spec(c.vocab_size, c.context_length, c.emb_dim, H, c.n_layers, 0.0, c.qkv_bias, c.tied_head);
}

GptWeights from_hugging_face(const std::shared_ptr<const MappedSafetensors>& file, std::optional<int64_t> heads,
                             const std::string& config_json) {
  const MappedSafetensors& f = *file;
  GptWeights w;
  w.layout = GptLayout::kHuggingFace;
  Source src{file, f.contains("transformer.wte.weight") ? "transformer." : "", {}};
  const Shape& wte = f.shape(src.prefix + "wte.weight");
  QKV_CHECK(wte.size() == 2, excerpt(f.path()), ": wte.weight has shape ", shape_str(wte), "; expected (V, E)");
  FileSizes c;
  c.vocab_size = wte[0];
  c.emb_dim = wte[1];
  QKV_CHECK(f.contains(src.prefix + "wpe.weight"), excerpt(f.path()), " has no tensor ",
            excerpt(src.prefix + "wpe.weight"), " (the position embedding)");
  const Shape& wpe = f.shape(src.prefix + "wpe.weight");
  QKV_CHECK(!wpe.empty(), excerpt(f.path()), ": wpe.weight has shape ", shape_str(wpe), "; expected (context, E)");
  c.context_length = wpe[0];
  c.n_layers = count_blocks(f, src.prefix + "h.");
  c.qkv_bias = true;  // GPT-2's c_attn has a bias
  c.tied_head = !f.contains("lm_head.weight");
  std::optional<int64_t> config_heads;
  if (!config_json.empty()) {
    const nlohmann::json j = parse_json(config_json, "config.json");
    QKV_CHECK(j.is_object(), "config.json must be a JSON object, not ", json_excerpt(j));
    auto expect = [&](const char* key, int64_t have) {
      if (!j.contains(key)) return;
      QKV_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() == have, "config.json's ", key, " (",
                json_excerpt(j[key]), ") disagrees with the tensors, which make it ", have);
    };
    expect("n_embd", c.emb_dim);
    expect("n_layer", c.n_layers);
    expect("n_positions", c.context_length);
    expect("vocab_size", c.vocab_size);
    if (j.contains("n_head")) {
      QKV_CHECK(j["n_head"].is_number_integer() && j["n_head"].get<int64_t>() > 0,
                "config.json's n_head must be a positive integer, not ", json_excerpt(j["n_head"]));
      config_heads = j["n_head"].get<int64_t>();
      QKV_CHECK(!heads || *heads == *config_heads, "--num-heads ", heads.value_or(0), " disagrees with config.json's n_head ",
                *config_heads);
    }
    if (j.contains("layer_norm_epsilon"))
      QKV_CHECK(j["layer_norm_epsilon"].is_number() && j["layer_norm_epsilon"].get<double>() == 1e-5,
                "config.json's layer_norm_epsilon (", json_excerpt(j["layer_norm_epsilon"]),
                ") is not GPT-2's 1e-5, the only one qkv's GPT model has");
  }
  w.spec = spec_of(c, config_heads ? config_heads : heads, f.path());
  const int64_t E = c.emb_dim, V = c.vocab_size, F = 4 * E;
  auto& s = w.tensors;
  s["tok_emb.weight"] = src.as_is("wte.weight", {V, E});
  s["pos_emb.weight"] = src.as_is("wpe.weight", {c.context_length, E});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".", b = "trf_blocks." + std::to_string(i) + ".";
    s[b + "norm1.scale"] = src.as_is(h + "ln_1.weight", {E});
    s[b + "norm1.shift"] = src.as_is(h + "ln_1.bias", {E});
    // c_attn: x @ W + b with W (E, 3E) = [W_query^T | W_key^T | W_value^T]
    const char* parts[] = {"W_query", "W_key", "W_value"};
    for (int64_t p = 0; p < 3; ++p) {
      s[b + "att." + parts[p] + ".weight"] = src.transposed(h + "attn.c_attn.weight", {E, 3 * E}, p * E, (p + 1) * E);
      s[b + "att." + parts[p] + ".bias"] = src.slice(h + "attn.c_attn.bias", {3 * E}, p * E, (p + 1) * E);
    }
    s[b + "att.out_proj.weight"] = src.transposed(h + "attn.c_proj.weight", {E, E}, 0, E);
    s[b + "att.out_proj.bias"] = src.as_is(h + "attn.c_proj.bias", {E});
    s[b + "norm2.scale"] = src.as_is(h + "ln_2.weight", {E});
    s[b + "norm2.shift"] = src.as_is(h + "ln_2.bias", {E});
    s[b + "ff.layers.0.weight"] = src.transposed(h + "mlp.c_fc.weight", {E, F}, 0, F);
    s[b + "ff.layers.0.bias"] = src.as_is(h + "mlp.c_fc.bias", {F});
    s[b + "ff.layers.2.weight"] = src.transposed(h + "mlp.c_proj.weight", {F, E}, 0, E);
    s[b + "ff.layers.2.bias"] = src.as_is(h + "mlp.c_proj.bias", {E});
  }
  s["final_norm.scale"] = src.as_is("ln_f.weight", {E});
  s["final_norm.shift"] = src.as_is("ln_f.bias", {E});
  if (!c.tied_head) {
    const Shape& head = f.shape("lm_head.weight");
    QKV_CHECK(head == Shape({V, E}), excerpt(f.path()), ": tensor 'lm_head.weight' has shape ", shape_str(head),
              "; the model's sizes make it ", shape_str(Shape({V, E})));
    src.prefix.clear();  // lm_head sits beside "transformer.", not under it
    s["out_head.weight"] = src.as_is("lm_head.weight", {V, E});
  }
  src.check_all_used([](const std::string& n) { return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias"); });
  w.file = file;
  return w;
}

GptWeights from_book(const std::shared_ptr<const MappedSafetensors>& file, std::optional<int64_t> heads) {
  const MappedSafetensors& f = *file;
  GptWeights w;
  w.layout = GptLayout::kBook;
  Source src{file, "", {}};
  const Shape& tok = f.shape("tok_emb.weight");
  QKV_CHECK(tok.size() == 2, excerpt(f.path()), ": tok_emb.weight has shape ", shape_str(tok), "; expected (V, E)");
  FileSizes c;
  c.vocab_size = tok[0];
  c.emb_dim = tok[1];
  QKV_CHECK(f.contains("pos_emb.weight"), excerpt(f.path()), " has no tensor 'pos_emb.weight' (the position embedding)");
  const Shape& pos = f.shape("pos_emb.weight");
  QKV_CHECK(!pos.empty(), excerpt(f.path()), ": pos_emb.weight has shape ", shape_str(pos), "; expected (context, E)");
  c.context_length = pos[0];
  c.n_layers = count_blocks(f, "trf_blocks.");
  c.qkv_bias = f.contains("trf_blocks.0.att.W_query.bias");
  // Tied when the head is absent, or holds the token embedding's very values (as the book's
  // loader of GPT-2's weights makes it: out_head.weight = wte): written back to Hugging Face's
  // layout, such a model stays tied.
  c.tied_head = !f.contains("out_head.weight") ||
                (f.shape("out_head.weight") == tok && same_bits(f.read("out_head.weight"), f.read("tok_emb.weight")));
  w.spec = spec_of(c, heads, f.path());
  // Every tensor of a model of these sizes, by name and shape.
  Generator skip(0);
  const std::unique_ptr<LanguageModel> shapes = build_model_to_load(w.spec, skip);
  for (const StateEntry& e : shapes->state_dict()) {
    if (ends_with(e.name, ".mask")) continue;
    w.tensors[e.name] = src.as_is(e.name, e.shape());
  }
  if (c.tied_head && f.contains("out_head.weight")) src.used.insert("out_head.weight");
  src.check_all_used([](const std::string& n) { return ends_with(n, ".att.mask"); });
  w.file = file;
  return w;
}

bool holds_gpt(const MappedSafetensors& f) {
  return f.contains("wte.weight") || f.contains("transformer.wte.weight") || f.contains("tok_emb.weight");
}

}  // namespace

const char* gpt_layout_name(GptLayout layout) { return layout == GptLayout::kHuggingFace ? "huggingface" : "book"; }

GptLayout parse_gpt_layout(const std::string& name) {
  if (name == "huggingface" || name == "hf") return GptLayout::kHuggingFace;
  if (name == "book") return GptLayout::kBook;
  fail("unknown GPT layout ", excerpt(name), "; expected huggingface or book");
}

bool is_gpt_weights(const MappedSafetensors& f) { return holds_gpt(f); }

Tensor GptWeights::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  QKV_CHECK(it != tensors.end(), "the GPT weights have no tensor ", excerpt(name));
  Tensor t = Tensor::empty(it->second.shape);
  it->second.fill(t.data());
  return t;
}

GptWeights gpt_weights_from(const std::shared_ptr<const MappedSafetensors>& file, std::optional<int64_t> heads,
                            const std::string& config_json) {
  const MappedSafetensors& f = *file;
  QKV_CHECK(holds_gpt(f), excerpt(f.path()), " holds no GPT model: it has neither Hugging Face's 'wte.weight' ",
            "nor the book's 'tok_emb.weight'");
  // qkv's own files (qkv train --model gpt, qkv convert) carry their configuration: its head count.
  if (!heads && f.metadata().count("config")) {
    const DecoderSpec saved = gpt_spec_from_cfg(parse_json(f.metadata().at("config"), excerpt(f.path()) + "'s config"),
                                                excerpt(f.path()) + "'s config");
    heads = saved.attention.heads;
  }
  return f.contains("tok_emb.weight") ? from_book(file, heads) : from_hugging_face(file, heads, config_json);
}

GptWeights read_gpt_weights(const std::string& path, std::optional<int64_t> heads) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    const std::string dir = path.back() == '/' ? path : path + "/";
    std::string config;
    QKV_CHECK(::stat((dir + "model.safetensors").c_str(), &st) == 0, "cannot read ", excerpt(path),
              ": it is a directory without model.safetensors (a Hugging Face model's directory holds "
              "model.safetensors and config.json)");
    if (::stat((dir + "config.json").c_str(), &st) == 0) config = read_file(dir + "config.json");
    return gpt_weights_from(std::make_shared<const MappedSafetensors>(dir + "model.safetensors"), heads, config);
  }
  return gpt_weights_from(std::make_shared<const MappedSafetensors>(path), heads);
}

void load_gpt_weights(LanguageModel& model, const GptWeights& w) {
  QKV_CHECK(model.spec().family == "gpt", "GPT-2's weights load into a GPT model, not a ", model.family().title, " one");
  const std::vector<StateEntry> entries = model.state_dict();
  for (const StateEntry& e : entries) {  // every tensor first: nothing is loaded into a model it does not fit
    if (e.mask) continue;
    const auto it = w.tensors.find(e.name);
    QKV_CHECK(it != w.tensors.end(), "the GPT weights have no tensor ", excerpt(e.name), " of shape ",
              shape_str(e.shape()), " (the model's configuration differs from the file's)");
    QKV_CHECK(it->second.shape == e.shape(), "the GPT weights' tensor ", excerpt(e.name), " has shape ",
              shape_str(it->second.shape), "; the model has ", shape_str(e.shape()));
  }
  // Straight into the model's own tensors, one at a time: no second copy of the model.
  for (const StateEntry& e : entries)
    if (!e.mask) w.tensors.at(e.name).fill(e.tensor->data());
}

NamedTensors gpt_state_in_layout(LanguageModel& m, GptLayout layout) {
  const DecoderSpec& c = m.spec();
  QKV_CHECK(c.family == "gpt", "GPT-2's layouts hold GPT models, not a ", m.family().title, " one");
  std::map<std::string, Tensor> state;  // the book's names
  NamedTensors out;
  for (const StateEntry& e : m.state_dict()) {
    if (layout == GptLayout::kBook) out.push_back({e.name, e.value()});
    if (e.tensor) state[e.name] = *e.tensor;
  }
  if (layout == GptLayout::kBook) {
    if (c.tied_head) out.push_back({"out_head.weight", state.at("tok_emb.weight")});
    return out;
  }
  QKV_CHECK(c.qkv_bias, "Hugging Face's GPT-2 layout has biases on q, k and v; this model has none (qkv_bias false)");
  auto t = [&](const std::string& name) { return state.at(name); };
  auto conv1d = [](const Tensor& w) { return w.transpose(0, 1).contiguous(); };  // nn.Linear's (out, in) -> (in, out)
  out.push_back({"wte.weight", t("tok_emb.weight")});
  out.push_back({"wpe.weight", t("pos_emb.weight")});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".", b = "trf_blocks." + std::to_string(i) + ".";
    out.push_back({h + "ln_1.weight", t(b + "norm1.scale")});
    out.push_back({h + "ln_1.bias", t(b + "norm1.shift")});
    out.push_back({h + "attn.c_attn.weight",
                   conv1d(cat({t(b + "att.W_query.weight"), t(b + "att.W_key.weight"), t(b + "att.W_value.weight")}, 0))});
    out.push_back({h + "attn.c_attn.bias",
                   cat({t(b + "att.W_query.bias"), t(b + "att.W_key.bias"), t(b + "att.W_value.bias")}, 0)});
    out.push_back({h + "attn.c_proj.weight", conv1d(t(b + "att.out_proj.weight"))});
    out.push_back({h + "attn.c_proj.bias", t(b + "att.out_proj.bias")});
    out.push_back({h + "ln_2.weight", t(b + "norm2.scale")});
    out.push_back({h + "ln_2.bias", t(b + "norm2.shift")});
    out.push_back({h + "mlp.c_fc.weight", conv1d(t(b + "ff.layers.0.weight"))});
    out.push_back({h + "mlp.c_fc.bias", t(b + "ff.layers.0.bias")});
    out.push_back({h + "mlp.c_proj.weight", conv1d(t(b + "ff.layers.2.weight"))});
    out.push_back({h + "mlp.c_proj.bias", t(b + "ff.layers.2.bias")});
  }
  out.push_back({"ln_f.weight", t("final_norm.scale")});
  out.push_back({"ln_f.bias", t("final_norm.shift")});
  if (!c.tied_head) out.push_back({"lm_head.weight", t("out_head.weight")});
  return out;
}

std::string hugging_face_config_json(const DecoderSpec& c) {
  return nlohmann::json({{"model_type", "gpt2"},
                         {"architectures", {"GPT2LMHeadModel"}},
                         {"n_embd", c.width},
                         {"n_head", c.attention.heads},
                         {"n_layer", c.layers},
                         {"n_positions", c.context_length},
                         {"n_ctx", c.context_length},
                         {"vocab_size", c.vocab_size},
                         {"layer_norm_epsilon", 1e-5},
                         {"activation_function", "gelu_new"},
                         {"tie_word_embeddings", c.tied_head}})
      .dump(2);
}

std::unique_ptr<LanguageModel> gpt_model_from(const GptWeights& w, Generator& gen, bool draw) {
  std::unique_ptr<LanguageModel> model = draw ? build_model(w.spec, gen) : build_model_to_load(w.spec, gen);
  load_gpt_weights(*model, w);  // the causal masks are the model's own (the files' are ignored)
  model->eval();
  return model;
}

std::vector<OutputFile> gpt_layout_files(LanguageModel& model, const std::string& to, const std::string& out,
                                         const std::string& config) {
  QKV_CHECK(config.empty() || to == "huggingface", "Hugging Face's config.json goes with the huggingface layout");
  if (to == "qkv") {  // the family's own checkpoint
    std::vector<OutputFile> files = model.family().checkpoint(model, out, "");
    files.front().what = "--out";
    return files;
  }
  const GptLayout layout = parse_gpt_layout(to);
  std::vector<OutputFile> files = {
      {out,
       serialize_safetensors(gpt_state_in_layout(model, layout), {{"format", "pt"}}),
       "--out"}};
  if (!config.empty()) files.push_back({config, hugging_face_config_json(model.spec()) + "\n", "--config"});
  return files;
}

}  // namespace qkv
