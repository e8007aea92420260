// The explore page as one HTML file: the data as JSON (tensors in base 85) inside the template.
// See include/qkv/explore/explore.h.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/explore/explore.h"
#include "qkv/explore/page_encoding.h"

namespace qkv {
namespace {

constexpr const char* kDataMarker = "__QKV_DATA__";

// A tensor whose last two dims are square and zero above the diagonal is stored as its lower
// triangles (i (i + 1) / 2 + j), halving causal weights.
bool lower_triangular(const Tensor& t) {
  if (t.dim() < 2 || t.size(-1) != t.size(-2) || t.size(-1) < 2) return false;
  const int64_t n = t.size(-1), mats = t.numel() / (n * n);
  const float* d = t.data();
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j)
        if (d[(m * n + i) * n + j] != 0.0f) return false;
  return true;
}

int64_t stored_elements(const Tensor& t, bool tri) {
  if (!tri) return t.numel();
  const int64_t n = t.size(-1);
  return t.numel() / (n * n) * (n * (n + 1) / 2);
}

int bytes_per(ExplorePrecision p) { return p == ExplorePrecision::kF32 ? 4 : p == ExplorePrecision::kF16 ? 2 : 1; }

// may_tri: a tensor the page reads as dense rows (a computed layer's queries and keys) is never a triangle.
nlohmann::json encode_tensor(const Tensor& src, ExplorePrecision p, bool may_tri = true) {
  const Tensor t = src.contiguous();
  const bool tri = may_tri && lower_triangular(t);
  std::vector<float> v;
  v.reserve(static_cast<size_t>(stored_elements(t, tri)));
  const float* d = t.data();
  if (tri) {
    const int64_t n = t.size(-1), mats = t.numel() / (n * n);
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j <= i; ++j) v.push_back(d[(m * n + i) * n + j]);
  } else {
    v.assign(d, d + t.numel());
  }
  bool integral = true;
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (float x : v) {
    if (std::isfinite(x)) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      if (x != std::nearbyint(x)) integral = false;
    }
  }
  if (!(lo <= hi)) lo = hi = 0;
  // float16 cannot hold a finite value beyond 65504: such a tensor is stored as float32, so that a
  // number never reads as infinity (nor a large negative score as a masked one).
  if (p == ExplorePrecision::kF16 && !fits_half(v.data(), v.size())) p = ExplorePrecision::kF32;
  std::string bytes;
  switch (p) {
    case ExplorePrecision::kF32:
      bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      break;
    case ExplorePrecision::kF16:
      bytes.resize(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = float_to_half(v[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
      break;
    default:  // 8 bits (page_encoding.h): lo .. hi as 0 .. 252; NaN, inf and -inf as codes of their own
      bytes.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) bytes[i] = static_cast<char>(quantise_u8(v[i], lo, hi));
  }
  nlohmann::json shape = nlohmann::json::array();
  for (int k = 0; k < t.dim(); ++k) shape.push_back(t.size(k));
  return {{"shape", shape}, {"dtype", explore_precision_name(p)}, {"tri", tri}, {"lo", lo}, {"hi", hi},
          {"integral", integral}, {"bytes", bytes.size()}, {"b85", base85_encode(bytes)}};
}

using TensorKey = std::pair<const float*, int64_t>;
TensorKey key_of(const Tensor& t) { return {t.data(), t.numel()}; }

// Tensors are stored once each, by their data (a layer's weights are also a pipeline step).
class TensorTable {
 public:
  explicit TensorTable(ExplorePrecision p) : p_(p) {}
  // p: this tensor's precision (kAuto: the page's); a tensor given one is read as dense rows.
  std::string add(const std::string& name, const Tensor& t, ExplorePrecision p = ExplorePrecision::kAuto) {
    if (auto it = seen_.find(key_of(t)); it != seen_.end()) return it->second;
    json_[name] = encode_tensor(t, p == ExplorePrecision::kAuto ? p_ : p, p == ExplorePrecision::kAuto);
    seen_[key_of(t)] = name;
    return name;
  }
  // An entry made by the caller (a computed layer's weights) that stands for t.
  void put(const std::string& name, const Tensor& t, nlohmann::json entry) {
    json_[name] = std::move(entry);
    seen_[key_of(t)] = name;
  }
  nlohmann::json& json() { return json_; }

 private:
  ExplorePrecision p_;
  nlohmann::json json_ = nlohmann::json::object();
  std::map<TensorKey, std::string> seen_;
};

std::string base85_of(const void* data, size_t bytes) {
  return base85_encode(std::string(static_cast<const char*>(data), bytes));
}

// A computed layer's weights (ExploreWeights::kComputed): what the page needs to compute them.
nlohmann::json computed_entry(const ExploreLayer& L, bool causal, const std::string& queries, const std::string& keys) {
  const Tensor w = L.weights.contiguous();
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int64_t n = 0; n < w.numel(); ++n) {
    lo = std::min(lo, w.data()[n]);
    hi = std::max(hi, w.data()[n]);
  }
  const ExploreCorrections& c = explore_layer_corrections(L, causal);
  return {{"computed", true},
          {"shape", {w.size(0), w.size(1), w.size(2)}},
          {"dtype", "computed"},
          {"tri", causal},
          {"lo", lo},
          {"hi", hi},
          {"integral", false},
          {"queries", queries},
          {"keys", keys},
          {"tolerance", kExploreComputedTolerance},
          {"largestUncorrected", c.largest_uncorrected},
          {"fixStart", c.head_start},
          {"fixIndex", base85_of(c.index.data(), c.index.size() * 4)},
          {"fixValue", base85_of(c.value.data(), c.value.size() * 4)}};
}

// Every tensor the page stores, once each, with its precision (kAuto: none, a computed layer's weights).
template <typename F>
void for_each_tensor(const ExplorePage& page, ExploreStorage st, F&& f) {
  std::map<TensorKey, ExplorePrecision> how;
  for (const ExploreLayer& l : page.layers) {
    const bool computed = st.computed && !l.linear;
    how.emplace(key_of(l.weights), computed ? ExplorePrecision::kAuto : st.values);
    how.emplace(key_of(l.queries), computed ? ExplorePrecision::kF16 : st.values);
    how.emplace(key_of(l.keys), computed ? ExplorePrecision::kF16 : st.values);
  }
  std::set<TensorKey> done;
  auto visit = [&](const Tensor& t) {
    if (!t.defined() || !done.insert(key_of(t)).second) return;
    const auto it = how.find(key_of(t));
    const ExplorePrecision p = it == how.end() ? st.values : it->second;
    if (p != ExplorePrecision::kAuto) f(t, p);
  };
  for (const ExploreLayer& l : page.layers) {
    visit(l.weights);
    visit(l.queries);
    visit(l.keys);
    visit(l.thumbnails);
  }
  for (const ExploreStep& s : page.pipeline) visit(s.value);
  visit(page.rollout);
  visit(page.rollout_thumbnail);
}

}  // namespace

ExplorePrecision parse_explore_precision(const std::string& name) {
  if (name == "auto") return ExplorePrecision::kAuto;
  if (name == "f32") return ExplorePrecision::kF32;
  if (name == "f16") return ExplorePrecision::kF16;
  if (name == "u8") return ExplorePrecision::kU8;
  fail("explore: unknown precision '", name, "'; expected auto, f32, f16 or u8");
}

const char* explore_precision_name(ExplorePrecision p) {
  switch (p) {
    case ExplorePrecision::kF32: return "f32";
    case ExplorePrecision::kF16: return "f16";
    case ExplorePrecision::kU8: return "u8";
    default: return "auto";
  }
}

ExploreWeights parse_explore_weights(const std::string& name) {
  if (name == "auto") return ExploreWeights::kAuto;
  if (name == "stored") return ExploreWeights::kStored;
  if (name == "computed") return ExploreWeights::kComputed;
  fail("explore: unknown attention weights '", name, "'; expected auto, stored or computed");
}

int64_t estimate_page_bytes(const ExplorePage& page, ExploreStorage st) {
  QKV_CHECK(st.values != ExplorePrecision::kAuto, "estimate_page_bytes: resolve the precision first");
  int64_t bytes = static_cast<int64_t>(explore_template().size()) + 4096;
  for_each_tensor(page, st, [&](const Tensor& t, ExplorePrecision p) {
    const bool tri = t.dim() >= 2 && t.size(-1) == t.size(-2) && page.causal;  // an estimate: no scan
    bytes += (stored_elements(t, tri) * bytes_per(p) + 3) / 4 * 5 + 256;
  });
  for (const std::string& s : page.tokens) bytes += static_cast<int64_t>(s.size()) * 6 + 4;
  for (const ExploreLayer& l : page.layers) bytes += static_cast<int64_t>(l.stats.size()) * 160;
  bytes += static_cast<int64_t>(page.lens.ids.size()) * 24;  // an id and a probability as JSON numbers
  for (const auto& [id, text] : page.lens.words) bytes += static_cast<int64_t>(text.size()) * 6 + 12;
  for (const ExploreStep& s : page.pipeline) bytes += static_cast<int64_t>(s.caption.size()) + 256;
  if (st.computed)  // each correction an index and a value, 4 bytes each
    for (const ExploreLayer& l : page.layers)
      if (!l.linear)
        bytes += static_cast<int64_t>(explore_layer_corrections(l, page.causal).index.size()) * 8 * 5 / 4 + 512;
  return bytes;
}

int64_t minimum_page_bytes(int64_t layers, int64_t heads, int64_t head_dim, int64_t tokens, bool causal,
                           ExplorePrecision p, ExploreWeights w, int64_t square_steps) {
  const double T = static_cast<double>(tokens), per_head = static_cast<double>(layers) * static_cast<double>(heads);
  const double cells = causal ? T * (T + 1) / 2 : T * T;
  const double stored = per_head * cells * bytes_per(p == ExplorePrecision::kAuto ? ExplorePrecision::kU8 : p) * 5.0 / 4.0;
  const double computed = per_head * 2.0 * T * static_cast<double>(head_dim) * 2.0 * 5.0 / 4.0;
  const double least = w == ExploreWeights::kStored ? stored : w == ExploreWeights::kComputed ? computed
                                                                                                : std::min(stored, computed);
  const double steps = static_cast<double>(square_steps) * static_cast<double>(heads) * cells *
                       bytes_per(p == ExplorePrecision::kAuto ? ExplorePrecision::kU8 : p) * 5.0 / 4.0;
  const double bytes = least + steps + static_cast<double>(explore_template().size());
  return bytes >= 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes);
}

ExploreStorage resolve_storage(const ExplorePage& page, ExplorePrecision p, ExploreWeights w, int64_t max_bytes) {
  std::vector<ExploreStorage> order;
  const std::vector<ExplorePrecision> values =
      p != ExplorePrecision::kAuto ? std::vector<ExplorePrecision>{p}
                                   : std::vector<ExplorePrecision>{ExplorePrecision::kF32, ExplorePrecision::kF16};
  if (w != ExploreWeights::kComputed)
    for (ExplorePrecision v : values) order.push_back({v, false});
  if (w != ExploreWeights::kStored)
    for (ExplorePrecision v : p != ExplorePrecision::kAuto ? values
                                                          : std::vector<ExplorePrecision>{ExplorePrecision::kF16,
                                                                                          ExplorePrecision::kU8})
      order.push_back({v, true});
  if (w != ExploreWeights::kComputed && p == ExplorePrecision::kAuto) order.push_back({ExplorePrecision::kU8, false});
  for (const ExploreStorage& st : order) {
    // float32 only while the page is small (exactness costs size a browser feels)
    const int64_t limit = st.values == ExplorePrecision::kF32 && p == ExplorePrecision::kAuto
                              ? std::min(max_bytes, kExploreExactBytes) : max_bytes;
    if (estimate_page_bytes(page, st) <= limit) return st;
  }
  return order.back();  // too large: the caller says so with this estimate
}

void keep_pipeline_layer(ExplorePage& page, int64_t layer) {
  QKV_CHECK(layer >= 0 && layer < static_cast<int64_t>(page.layers.size()), "explore: pipeline layer ", layer,
            " is not one of the page's ", page.layers.size(), " layer(s)");
  std::vector<ExploreStep> kept;
  for (ExploreStep& s : page.pipeline)
    if (s.layer < 0 || s.layer == layer) kept.push_back(std::move(s));
  page.pipeline = std::move(kept);
  page.pipeline_layer = layer;
}

std::string explore_html(const ExplorePage& page, ExploreStorage st) {
  const ExplorePrecision p = st.values;
  QKV_CHECK(p != ExplorePrecision::kAuto, "explore_html: resolve the precision first");
  QKV_CHECK(!page.layers.empty() && !page.tokens.empty(), "explore_html: a page needs tokens and a layer");
  TensorTable tensors(p);
  if (st.computed)  // first, so that the pipeline's steps holding them name these entries
    for (size_t l = 0; l < page.layers.size(); ++l) {
      const ExploreLayer& L = page.layers[l];
      if (L.linear) continue;  // A is no softmax of the queries and keys: stored
      const std::string n = "layer" + std::to_string(l) + ".";
      const std::string q = tensors.add(n + "queries", L.queries, ExplorePrecision::kF16);
      const std::string k = tensors.add(n + "keys", L.keys, ExplorePrecision::kF16);
      tensors.put(n + "weights", L.weights, computed_entry(L, page.causal, q, k));
    }
  nlohmann::json steps = nlohmann::json::array();
  for (const ExploreStep& s : page.pipeline) {
    nlohmann::json links = nlohmann::json::array();
    for (const ExploreLink& l : s.links) links.push_back({{"from", l.from}, {"row", l.row}, {"col", l.col}});
    steps.push_back({{"name", s.name}, {"caption", s.caption}, {"tensor", tensors.add(s.name, s.value)},
                     {"perHead", s.per_head}, {"layer", s.layer}, {"links", links}, {"prefix", s.index_prefix},
                     {"parameter", s.parameter}});
  }
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < page.layers.size(); ++l) {
    const ExploreLayer& L = page.layers[l];
    const std::string n = "layer" + std::to_string(l) + ".";
    nlohmann::json stats = nlohmann::json::array();
    auto value = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };  // null: not measured
    for (const ExploreHeadStats& h : L.stats)
      stats.push_back({{"entropy", value(h.entropy)}, {"distance", value(h.distance)}, {"first", value(h.first)},
                       {"previous", value(h.previous)}, {"induction", value(h.induction)}});
    layers.push_back({{"weights", tensors.add(n + "weights", L.weights)},
                      {"stats", stats},
                      {"queries", tensors.add(n + "queries", L.queries)},
                      {"keys", tensors.add(n + "keys", L.keys)},
                      {"thumbnails", tensors.add(n + "thumbnails", L.thumbnails)},
                      {"scale", L.scale},
                      {"softcap", L.softcap},
                      {"alibi", L.alibi},
                      {"window", L.window},
                      {"linear", L.linear},
                      {"heads", L.weights.size(0)}});  // this layer's: layers may differ (Qwen3.5's)
    if (!L.head_names.empty()) layers.back()["headNames"] = L.head_names;
  }
  nlohmann::json j = {{"title", page.title},
                      {"source", page.source},
                      {"tokens", page.tokens},
                      {"causal", page.causal},
                      {"dropout", page.dropout},
                      {"precision", explore_precision_name(p)},
                      {"computedWeights", st.computed},
                      {"pipelineLayer", page.pipeline_layer},
                      {"layers", layers},
                      {"rollout", tensors.add("rollout", page.rollout)},
                      {"rolloutThumbnail", tensors.add("rollout_thumbnail", page.rollout_thumbnail)},
                      {"pipeline", steps},
                      {"generatedFrom", page.generated_from}};
  if (!page.ids.empty()) j["ids"] = page.ids;
  if (!page.lens.rows.empty()) {
    nlohmann::json words = nlohmann::json::object();
    for (const auto& [id, text] : page.lens.words) words[std::to_string(id)] = text;
    nlohmann::json probs = nlohmann::json::array();  // to 6 significant digits: a third of the digits
    for (float prob : page.lens.probs) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", static_cast<double>(prob));
      probs.push_back(std::strtod(buf, nullptr));
    }
    j["lens"] = {{"rows", page.lens.rows}, {"top", page.lens.top}, {"ids", page.lens.ids},
                 {"probs", probs}, {"words", words}};
  }
  j["tensors"] = std::move(tensors.json());
  // Labels may be any bytes (a GPT-2 token can be half a character): invalid UTF-8 becomes U+FFFD.
  std::string data = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Inside <script type="application/json">: no '<' may appear, so "</script>" in a label cannot
  // end the element. JSON allows \u003c anywhere '<' can be (only inside strings).
  std::string safe;
  safe.reserve(data.size() + 64);
  for (char c : data) {
    if (c == '<') safe += "\\u003c";
    else if (c == '>') safe += "\\u003e";
    else if (c == '&') safe += "\\u0026";
    else safe += c;
  }
  const std::string& tpl = explore_template();
  const size_t at = tpl.find(kDataMarker);
  QKV_CHECK(at != std::string::npos, "explore: the page template has no data marker");
  return tpl.substr(0, at) + safe + tpl.substr(at + std::strlen(kDataMarker));
}

const std::string& explore_template() {
  static const std::string page =
#include "explore_page_html.inc"
      ;
  return page;
}

}  // namespace qkv
