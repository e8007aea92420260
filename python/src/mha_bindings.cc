// python/src/mha_bindings.cc - the fast multi-head attention pipeline (qkv/kernels/mha.h) on numpy arrays:
// what qkv.torch's MultiHeadAttention and CausalAttention run forward and backward.
//
//   ws = _qkv.MhaWorkspace()
//   y = _qkv.mha_forward(x, w_qkv, b_qkv, w_out, b_out, heads=H, causal=True, workspace=ws)
//   dx, dw_qkv, db_qkv, dw_out, db_out = _qkv.mha_backward(x, dy, w_qkv, b_qkv, w_out, b_out,
//                                                          heads=H, causal=True, workspace=ws)
//
// Legend: B batch, T tokens, C_in = d_in, C = d_out, H heads, G key/value heads, D = C / H.
//   x (B, T, C_in), w_qkv ((H + 2G) D, C_in) = [W_query; W_key; W_value], b_qkv ((H + 2G) D) or None,
//   w_out (C, C) and b_out (C), or None for no output projection (CausalAttention), y (B, T, C).
// The workspace keeps what the forward leaves for the backward (the heads, the context, the
// log-sum-exp) with the forward's id (workspace.forward_id), so the backward takes the workspace of
// the forward whose gradients it computes and, given forward_id=, refuses one a later forward
// overwrote. Arrays are copied to C-contiguous float32 when they are not already; the GIL is
// released while the pipeline runs. Today's variants are keywords, the fields of qkv's
// AttentionSpec (validated once, by validate_attention_spec; the keywords are its fields' names): kv_heads (G),
// rope ("half" | "interleaved"), rope_base, window, alibi (the paper's slopes), softcap, dtype
// ("f32" | "bf16": bf16 mode).
#include <pybind11/stl.h>  // std::optional

#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/kernels/mha.h"

namespace qkv::python {
namespace {

// What a forward leaves for its backward (kernels::MhaSaved, with its id and shape), the scratch
// both use, and whether that forward had an output projection.
struct Workspace {
  kernels::MhaSaved saved;
  kernels::MhaWorkspace ws;
  bool has_out = false;
};

// The weights as C-contiguous float32 arrays; nullopt where the caller gave None.
struct Weights {
  py::array w_qkv;
  std::optional<py::array> b_qkv, w_out, b_out;
  kernels::MhaWeights view() const {
    auto data = [](const std::optional<py::array>& a) { return a ? static_cast<const float*>(a->data()) : nullptr; };
    kernels::MhaWeights w;
    w.w_qkv = static_cast<const float*>(w_qkv.data());
    w.b_qkv = data(b_qkv);
    w.w_out = data(w_out);
    w.b_out = data(b_out);
    return w;
  }
};

// The variants' keywords.
struct Variants {
  std::optional<int64_t> kv_heads;
  py::handle rope;  // None, "half" or "interleaved"
  double rope_base = 10000.0;
  int64_t window = 0;
  bool alibi = false;
  double softcap = 0.0;
  std::string dtype = "f32";
};

// The attention spec of H heads of head_dim D with the variants, validated (qkv's one validation:
// validate_attention_spec; a broken rule is a ValueError naming the keyword, as `namer` calls it:
// the spec's own field names are _qkv.mha_forward's keywords).
kernels::AttentionSpec spec_of(const char* fn, int64_t heads, int64_t head_dim, const Variants& v,
                               kernels::SpecNamer namer = kernels::spec_field_name) {
  kernels::AttentionSpec a;
  a.heads = heads;
  a.kv_heads = v.kv_heads.value_or(0) == heads ? 0 : v.kv_heads.value_or(0);  // 0: as many as the heads
  a.head_dim = head_dim;
  if (!v.rope.is_none()) {
    const std::string r = py::str(v.rope);
    if (r != "half" && r != "interleaved")
      throw py::value_error(std::string(fn) + ": rope is '" + r + "'; expected None, 'half' or 'interleaved'");
    a.rope = r == "half" ? kernels::RopeLayout::kHalf : kernels::RopeLayout::kInterleaved;
  }
  a.rope_base = v.rope_base;
  a.window = v.window;
  a.alibi = v.alibi;
  a.softcap = v.softcap;
  if (v.dtype != "f32" && v.dtype != "bf16")
    throw py::value_error(std::string(fn) + ": dtype is '" + v.dtype + "'; expected 'f32' or 'bf16'");
  a.dtype = v.dtype == "bf16" ? Dtype::kBF16 : Dtype::kF32;
  try {
    kernels::validate_attention_spec(a, fn, namer);
  } catch (const kernels::AttentionSpecError& e) {
    throw py::value_error(e.what());
  }
  return a;
}

// qkv.torch.MultiHeadAttention's names of the fields (the book's num_heads, and num_kv_heads).
std::string module_keyword(kernels::SpecField f) {
  if (f == kernels::SpecField::kHeads) return "num_heads";
  if (f == kernels::SpecField::kKvHeads) return "num_kv_heads";
  return kernels::spec_field_name(f);
}

// The shape from x (B, T, C_in), w_qkv ((H + 2G) D, C_in) and the variants, the weights checked
// against it and the spec validated.
kernels::MhaShape shape_of_call(const char* fn, const py::array& x, py::handle w_qkv_, py::handle b_qkv_,
                                py::handle w_out_, py::handle b_out_, int64_t heads, const Variants& v, Weights& w) {
  w.w_qkv = float32_contiguous(w_qkv_, fn, "w_qkv", 2, "((heads + 2 kv_heads) head_dim, d_in)");
  kernels::MhaShape s;
  s.batch = x.shape(0);
  s.tokens = x.shape(1);
  s.d_in = x.shape(2);
  const int64_t rows = w.w_qkv.shape(0);
  // The heads and their groups as the spec has them (0: as many as the heads); when they break its
  // rules, its validation says so (head_dim does not matter to those rules).
  const int64_t G = v.kv_heads.value_or(0) > 0 ? *v.kv_heads : heads;
  if (heads < 1 || G > heads || heads % G != 0) spec_of(fn, heads, 2, v);
  if (w.w_qkv.shape(1) != s.d_in || rows % (heads + 2 * G) != 0)
    throw py::value_error(std::string(fn) + ": w_qkv has shape " + shape_of(w.w_qkv) + "; x " + shape_of(x) + " with " +
                          std::to_string(heads) + " heads and " + std::to_string(G) +
                          " kv_heads needs ((heads + 2 kv_heads) head_dim, " + std::to_string(s.d_in) + ")");
  const int64_t d_out = rows / (heads + 2 * G) * heads;
  s.attention = spec_of(fn, heads, d_out / heads, v);
  auto vector = [&](py::handle obj, const char* name, int64_t n) -> std::optional<py::array> {
    if (obj.is_none()) return std::nullopt;
    py::array a = float32_contiguous(obj, fn, name, 1, "a vector");
    if (a.shape(0) != n)
      throw py::value_error(std::string(fn) + ": " + name + " has shape " + shape_of(a) + ", expected (" +
                            std::to_string(n) + ",)");
    return a;
  };
  w.b_qkv = vector(b_qkv_, "b_qkv", rows);
  if (!w_out_.is_none()) {
    w.w_out = float32_contiguous(w_out_, fn, "w_out", 2, "(d_out, d_out)");
    if (w.w_out->shape(0) != d_out || w.w_out->shape(1) != d_out)
      throw py::value_error(std::string(fn) + ": w_out has shape " + shape_of(*w.w_out) + ", expected (" +
                            std::to_string(d_out) + ", " + std::to_string(d_out) + ")");
    w.b_out = vector(b_out_, "b_out", d_out);
  } else if (!b_out_.is_none()) {
    throw py::value_error(std::string(fn) + ": b_out without w_out");
  }
  return s;
}

// The call's spec and per-call arguments from the Python keywords (options_of's checks): the shape
// with its causality and dropout, and the kernel's mask, seed and dropout flag.
struct Call {
  kernels::MhaShape shape;
  kernels::MhaCall call;
  Options options;  // keeps the mask's array alive; call.mask points at its AttentionMask (not copyable)
  std::vector<float> slopes;  // ALiBi's, when the spec asks (call.alibi_slopes points here)
  Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
};
void fill_call(Call& c, const char* fn, const kernels::MhaShape& s, bool causal, py::handle mask, float dropout_p,
               py::handle seed, bool for_forward) {
  c.shape = s;
  c.options = options_of(fn, s.tokens, s.tokens, s.head_dim(), causal, mask, dropout_p, std::nullopt, seed, for_forward);
  c.shape.attention.causal = causal;
  c.shape.attention.dropout = dropout_p;
  c.call.dropout = dropout_p > 0.0f;
  c.call.dropout_seed = c.options.options.dropout_seed;
  c.slopes = kernels::spec_alibi_slopes(c.shape.attention);
  c.call.alibi_slopes = c.slopes.empty() ? nullptr : c.slopes.data();
  const kernels::MaskKind kind = c.options.options.mask.kind;
  if (kind == kernels::MaskKind::kAdditive || kind == kernels::MaskKind::kBlocked) c.call.mask = &c.options.options.mask;
}

py::array mha_forward(py::handle x_, py::handle w_qkv, py::handle b_qkv, py::handle w_out, py::handle b_out,
                      int64_t heads, bool causal, py::handle mask, float dropout_p, py::handle seed,
                      Workspace& workspace, std::optional<int64_t> kv_heads, py::handle rope, double rope_base,
                      int64_t window, bool alibi, double softcap, const std::string& dtype) {
  const char* fn = "qkv.mha_forward";
  const py::array x = float32_contiguous(x_, fn, "x", 3, "(B, T, d_in)");
  Weights w;
  kernels::MhaShape s =
      shape_of_call(fn, x, w_qkv, b_qkv, w_out, b_out, heads, {kv_heads, rope, rope_base, window, alibi, softcap, dtype}, w);
  Call call;
  fill_call(call, fn, s, causal, mask, dropout_p, seed, true);
  py::array_t<float> y({s.batch, s.tokens, s.d_out()});
  const kernels::MhaWeights wv = w.view();
  const auto* xp = static_cast<const float*>(x.data());
  float* yp = y.mutable_data();
  run_kernel([&] { kernels::mha_forward(call.shape, wv, xp, yp, workspace.saved, workspace.ws, call.call); });
  workspace.has_out = wv.w_out != nullptr;
  return y;
}

py::tuple mha_backward(py::handle x_, py::handle dy_, py::handle w_qkv, py::handle b_qkv, py::handle w_out,
                       py::handle b_out, int64_t heads, bool causal, py::handle mask, float dropout_p, py::handle seed,
                       Workspace& workspace, bool need_dx, py::handle forward_id, std::optional<int64_t> kv_heads,
                       py::handle rope, double rope_base, int64_t window, bool alibi, double softcap,
                       const std::string& dtype) {
  const char* fn = "qkv.mha_backward";
  const py::array x = float32_contiguous(x_, fn, "x", 3, "(B, T, d_in)");
  Weights w;
  kernels::MhaShape s =
      shape_of_call(fn, x, w_qkv, b_qkv, w_out, b_out, heads, {kv_heads, rope, rope_base, window, alibi, softcap, dtype}, w);
  Call call;
  fill_call(call, fn, s, causal, mask, dropout_p, seed, false);
  const kernels::MhaShape& f = workspace.saved.shape();
  if (workspace.saved.id() == 0 || f.batch != s.batch || f.tokens != s.tokens || f.d_in != s.d_in ||
      f.d_out() != s.d_out() || f.heads() != s.heads() || f.groups() != s.groups() ||
      workspace.has_out != !w_out.is_none())
    throw py::value_error(std::string(fn) + ": the workspace does not hold a forward of these shapes (x " + shape_of(x) +
                          "); run mha_forward with it first");
  const uint64_t id = forward_id.is_none() ? workspace.saved.id() : forward_id.cast<uint64_t>();
  if (id != workspace.saved.id())
    throw py::value_error(std::string(fn) + ": the workspace holds forward " + std::to_string(workspace.saved.id()) +
                          ", not forward " + std::to_string(id) + " (a later forward overwrote what this backward needs)");
  const py::array dy = float32_contiguous(dy_, fn, "grad_y", 3, "(B, T, d_out)");
  if (dy.shape(0) != s.batch || dy.shape(1) != s.tokens || dy.shape(2) != s.d_out())
    throw py::value_error(std::string(fn) + ": grad_y has shape " + shape_of(dy) + ", y's is (" +
                          std::to_string(s.batch) + ", " + std::to_string(s.tokens) + ", " + std::to_string(s.d_out()) + ")");
  const int64_t Q = s.qkv_width();
  // A gradient array where the forward had the weight (and dx where asked for); None elsewhere.
  auto gradient = [](bool wanted, std::vector<py::ssize_t> shape) -> std::optional<py::array_t<float>> {
    if (!wanted) return std::nullopt;
    return py::array_t<float>(shape);
  };
  std::optional<py::array_t<float>> dx = gradient(need_dx, {s.batch, s.tokens, s.d_in}),
                                          dw_qkv = gradient(true, {Q, s.d_in}),
                                          db_qkv = gradient(w.b_qkv.has_value(), {Q}),
                                          dw_out = gradient(w.w_out.has_value(), {s.d_out(), s.d_out()}),
                                          db_out = gradient(w.b_out.has_value(), {s.d_out()});
  auto data = [](std::optional<py::array_t<float>>& a) { return a ? a->mutable_data() : nullptr; };
  kernels::MhaGradients g;
  g.dw_qkv = data(dw_qkv);
  g.db_qkv = data(db_qkv);
  g.dw_out = data(dw_out);
  g.db_out = data(db_out);
  float* dxp = data(dx);
  const kernels::MhaWeights wv = w.view();
  const auto* xp = static_cast<const float*>(x.data());
  const auto* dyp = static_cast<const float*>(dy.data());
  run_kernel([&] {
    kernels::mha_backward(call.shape, wv, xp, dyp, dxp, g, workspace.saved, id, workspace.ws, call.call);
  });
  auto or_none = [](const std::optional<py::array_t<float>>& a) { return a ? py::object(*a) : py::object(py::none()); };
  return py::make_tuple(or_none(dx), or_none(dw_qkv), or_none(db_qkv), or_none(dw_out), or_none(db_out));
}

// One step of decoding through the pipeline with a KV cache (kernels::mha_forward_cached): x's
// tokens at the cache's next positions, their keys and values appended to `layer`, attention over
// every cached position. Inference: no dropout, no mask but the causal one, nothing for a backward.
py::array mha_forward_cached(py::handle x_, py::handle w_qkv, py::handle b_qkv, py::handle w_out, py::handle b_out,
                             int64_t heads, kernels::KvCache& cache, int64_t layer, Workspace& workspace,
                             std::optional<int64_t> kv_heads, py::handle rope, double rope_base, int64_t window,
                             bool alibi, double softcap, const std::string& dtype) {
  const char* fn = "qkv.mha_forward_cached";
  const py::array x = float32_contiguous(x_, fn, "x", 3, "(B, T, d_in)");
  Weights w;
  kernels::MhaShape s =
      shape_of_call(fn, x, w_qkv, b_qkv, w_out, b_out, heads, {kv_heads, rope, rope_base, window, alibi, softcap, dtype}, w);
  if (cache.batch() != s.batch || cache.kv_heads() != s.groups() || cache.head_dim() != s.head_dim() ||
      cache.value_dim() != s.head_dim())
    throw py::value_error(std::string(fn) + ": the cache holds (batch " + std::to_string(cache.batch()) + ", kv_heads " +
                          std::to_string(cache.kv_heads()) + ", head_dim " + std::to_string(cache.head_dim()) +
                          ") but this call has (batch " + std::to_string(s.batch) + ", kv_heads " +
                          std::to_string(s.groups()) + ", head_dim " + std::to_string(s.head_dim()) + ")");
  Call call;
  fill_call(call, fn, s, true, py::none(), 0.0f, py::none(), true);
  py::array_t<float> y({s.batch, s.tokens, s.d_out()});
  const kernels::MhaWeights wv = w.view();
  const auto* xp = static_cast<const float*>(x.data());
  float* yp = y.mutable_data();
  run_kernel([&] { kernels::mha_forward_cached(call.shape, wv, xp, yp, cache, layer, workspace.saved, workspace.ws, call.call); });
  workspace.has_out = false;  // the workspace holds a decoding step's scratch, not a forward for a backward
  return y;
}

kernels::CacheDtype cache_dtype_of(const std::string& name) {
  if (name == "f32") return kernels::CacheDtype::kF32;
  if (name == "bf16") return kernels::CacheDtype::kBF16;
  throw py::value_error("qkv.KvCache: dtype is '" + name + "'; expected 'f32' or 'bf16'");
}

}  // namespace

void bind_mha(py::module_& m) {
  using py::arg;
  py::class_<Workspace>(m, "MhaWorkspace",
                        "What mha_forward leaves for mha_backward (heads, context, log-sum-exp); reused across calls.")
      .def(py::init<>())
      .def_property_readonly("bytes", [](const Workspace& w) { return w.saved.bytes() + w.ws.bytes(); })
      .def_property_readonly("forward_id", [](const Workspace& w) { return w.saved.id(); },
                             "The id of the forward whose state it holds (0: none yet)");
  m.def(
      "check_attention_spec",
      [](int64_t heads, int64_t head_dim, std::optional<int64_t> kv_heads, py::handle rope, double rope_base,
         int64_t window, bool alibi, double softcap, const std::string& dtype) {
        spec_of("qkv.torch.MultiHeadAttention", heads, head_dim,
                {kv_heads, rope, rope_base, window, alibi, softcap, dtype}, module_keyword);
      },
      arg("heads"), arg("head_dim"), py::kw_only(), arg("kv_heads") = py::none(), arg("rope") = py::none(),
      arg("rope_base") = 10000.0, arg("window") = 0, arg("alibi") = false, arg("softcap") = 0.0, arg("dtype") = "f32",
      "Raises ValueError naming the keyword (qkv.torch.MultiHeadAttention's) when the variants break a rule of\n"
      "qkv's attention spec.");
  py::class_<kernels::KvCache>(m, "KvCache",
                                "The keys and values of past positions, per layer (qkv/kernels/kv_cache.h): every layer "
                                "appends a step's positions, then commit() ends the step.")
      .def(py::init([](int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                       const std::string& dtype) {
             return kernels::KvCache(layers, batch, kv_heads, capacity, head_dim, head_dim, cache_dtype_of(dtype));
           }),
           arg("layers"), arg("batch"), arg("kv_heads"), arg("capacity"), arg("head_dim"), arg("dtype") = "f32")
      .def_property_readonly("layers", &kernels::KvCache::layers)
      .def_property_readonly("batch", &kernels::KvCache::batch)
      .def_property_readonly("kv_heads", &kernels::KvCache::kv_heads)
      .def_property_readonly("capacity", &kernels::KvCache::capacity)
      .def_property_readonly("head_dim", &kernels::KvCache::head_dim)
      .def_property_readonly("dtype", [](const kernels::KvCache& c) { return kernels::cache_dtype_name(c.dtype()); })
      .def_property_readonly("bytes", &kernels::KvCache::bytes)
      .def_property_readonly("length", [](const kernels::KvCache& c) { return c.length(); },
                             "Committed positions")
      .def_property_readonly("pending", &kernels::KvCache::pending, "Positions of the step in progress (0: none)")
      .def("appended", &kernels::KvCache::appended, arg("layer"))
      .def("commit", &kernels::KvCache::commit)
      .def("truncate", &kernels::KvCache::truncate, arg("n"))
      .def("reset", &kernels::KvCache::reset)
      .def("keys", [](const kernels::KvCache& c, int64_t layer) {
             py::array_t<float> out({c.batch(), c.kv_heads(), c.length(layer), c.head_dim()});
             c.copy_keys(layer, mutable_heads(out));
             return out;
           }, arg("layer"), "The positions layer `layer` sees, as float32 (B, G, length, D)")
      .def("values", [](const kernels::KvCache& c, int64_t layer) {
             py::array_t<float> out({c.batch(), c.kv_heads(), c.length(layer), c.value_dim()});
             c.copy_values(layer, mutable_heads(out));
             return out;
           }, arg("layer"));
  m.def("mha_forward_cached", &mha_forward_cached, arg("x"), arg("w_qkv"), arg("b_qkv"), arg("w_out"), arg("b_out"),
        py::kw_only(), arg("heads"), arg("cache"), arg("layer") = 0, arg("workspace"), arg("kv_heads") = py::none(),
        arg("rope") = py::none(), arg("rope_base") = 10000.0, arg("window") = 0, arg("alibi") = false,
        arg("softcap") = 0.0, arg("dtype") = "f32",
        "A decoding step of the pipeline: x (B, T, d_in) at the cache's next positions; their keys and values\n"
        "appended to the cache's `layer`; attention over every cached position -> y (B, T, d_out).");
  m.def("mha_forward", &mha_forward, arg("x"), arg("w_qkv"), arg("b_qkv"), arg("w_out"), arg("b_out"), py::kw_only(),
        arg("heads"), arg("causal") = true, arg("mask") = py::none(), arg("dropout_p") = 0.0f, arg("seed") = py::none(),
        arg("workspace"), arg("kv_heads") = py::none(), arg("rope") = py::none(), arg("rope_base") = 10000.0,
        arg("window") = 0, arg("alibi") = false, arg("softcap") = 0.0, arg("dtype") = "f32",
        "The book's MultiHeadAttention forward in qkv's pipeline: x (B, T, d_in), w_qkv ((heads + 2 kv_heads) head_dim,\n"
        "d_in) = [W_query; W_key; W_value], b_qkv or None, w_out (d_out, d_out) and b_out, or None (no out_proj)\n"
        "-> y (B, T, d_out); today's variants as keywords.");
  m.def("mha_backward", &mha_backward, arg("x"), arg("grad_y"), arg("w_qkv"), arg("b_qkv"), arg("w_out"), arg("b_out"),
        py::kw_only(), arg("heads"), arg("causal") = true, arg("mask") = py::none(), arg("dropout_p") = 0.0f,
        arg("seed") = py::none(), arg("workspace"), arg("need_dx") = true, arg("forward_id") = py::none(),
        arg("kv_heads") = py::none(), arg("rope") = py::none(), arg("rope_base") = 10000.0, arg("window") = 0,
        arg("alibi") = false, arg("softcap") = 0.0, arg("dtype") = "f32",
        "Gradients (dx or None, dw_qkv, db_qkv, dw_out, db_out; None where the forward had no such weight) after\n"
        "mha_forward with the same arguments and workspace; forward_id (the workspace's forward_id right after that\n"
        "forward) makes a workspace another forward has overwritten an error instead of other gradients.");
}

}  // namespace qkv::python
