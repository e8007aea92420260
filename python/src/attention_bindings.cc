// python/src/attention_bindings.cc - the fused attention kernels (qkv/kernels/attention.h) on numpy arrays.
//
//   o = qkv.attention(q, k, v, causal=True)                  # q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv)
//   o, lse = qkv.attention(q, k, v, return_lse=True, dropout_p=0.1, seed=7)   # lse float64 (B, H, T)
//   dq, dk, dv = qkv.attention_backward(q, k, v, o, lse, do, dropout_p=0.1, seed=7)
//   w = qkv.attention_weights(q, k, lse, after_dropout=True, dropout_p=0.1, seed=7)   # (B, H, T, S)
//
// Arrays as arrays.h says: float32 views read in place, other floating types converted, any
// other dtype a TypeError; out= (and dq=, dk=, dv=) written in place.
// Masks: causal=True, or mask= a (T, S) array: boolean hides where True (the book's
// mask.bool() in masked_fill), floating-point is added to the scores (-inf hides). Today's
// variants: window=w (query i sees keys j > i - w), alibi=True (the paper's slopes) or H slopes,
// softcap=c (scores c tanh(s / c)), as arrays.h's add_variants says.
// The GIL is released while a kernel runs; a Ctrl-C meanwhile raises KeyboardInterrupt when it
// returns. Shapes that do not fit and arguments out of range raise ValueError (qkv.Error).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>  // std::optional (scale)

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "arrays.h"
#include "qkv/kernels/attention.h"

namespace qkv::python {
namespace {

using kernels::ConstHeads;
using kernels::MutableHeads;

// lse (B, H, T) as the kernels read it: float32, C-contiguous, and from a float64 lse (what
// qkv.attention returns) also the part a float drops (AttentionOptions::lse_low). Without it the
// weights the backward recomputes carry lse's float rounding, up to |lse| 2^-25 for a whole row:
// at scores in the hundreds, thousands of ulps on dv. A float32 lse is read as it is.
struct LseInput {
  py::array values;        // float32
  std::vector<float> low;  // empty for a float32 lse
};
LseInput lse_input(py::handle obj, const char* fn, const py::array& q) {
  LseInput in;
  const py::array a = py::array::ensure(obj);
  if (a && a.dtype().kind() == 'f' && a.dtype().itemsize() == 8 && a.ndim() == 3) {
    const auto exact = converted<py::array_t<double, py::array::c_style | py::array::forcecast>>(a);
    py::array_t<float> hi({exact.shape(0), exact.shape(1), exact.shape(2)});
    const auto n = static_cast<size_t>(exact.size());
    in.low.resize(n);
    const double* x = exact.data();
    float* h = hi.mutable_data();
    for (size_t i = 0; i < n; ++i) {
      h[i] = static_cast<float>(x[i]);
      in.low[i] = std::isfinite(h[i]) ? static_cast<float>(x[i] - static_cast<double>(h[i])) : 0.0f;
    }
    in.values = hi;
  } else {
    in.values = converted<Float32Array>(float32_input(obj, fn, "lse", 3, "(B, H, T)"));
  }
  const py::array& l = in.values;
  if (l.shape(0) != q.shape(0) || l.shape(1) != q.shape(1) || l.shape(2) != q.shape(2))
    throw py::value_error(std::string(fn) + ": lse has shape " + shape_of(l) + "; q " + shape_of(q) +
                          " needs (B, H, T)");
  return in;
}

py::object attention(py::handle q_, py::handle k_, py::handle v_, bool causal, py::handle mask, float dropout_p,
                     std::optional<double> scale, bool return_lse, py::handle seed, py::handle out, int64_t window,
                     py::handle alibi, double softcap) {
  const char* fn = "qkv.attention";
  const py::array q = float32_input(q_, fn, "q", 4, "(B, H, T, D)");
  const py::array k = float32_input(k_, fn, "k", 4, "(B, G, S, D)");
  const py::array v = float32_input(v_, fn, "v", 4, "(B, G, S, Dv)");
  Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, true);
  add_variants(opt, fn, q.shape(1), window, alibi, softcap);
  py::array o = float32_output(out, fn, "out", {q.shape(0), q.shape(1), q.shape(2), v.shape(3)});
  check_disjoint(fn, "out", o, {{"q", &q}, {"k", &k}, {"v", &v}});
  if (opt.mask) check_disjoint(fn, "out", o, {{"mask", &opt.mask}});  // read in place when it can be
  // lse in float64: the float the kernel writes plus the part it drops (AttentionOptions::lse_low)
  const auto rows = static_cast<size_t>(q.shape(0) * q.shape(1) * q.shape(2));
  std::vector<float> lse(rows), low(rows);
  opt.options.lse_low = low.data();
  const ConstHeads qh = const_heads(q), kh = const_heads(k), vh = const_heads(v);
  const MutableHeads oh = mutable_heads(o);
  run_kernel([&] { kernels::attention_forward(qh, kh, vh, oh, lse.data(), opt.options); });
  if (!return_lse) return o;
  py::array_t<double> exact({q.shape(0), q.shape(1), q.shape(2)});
  double* x = exact.mutable_data();
  for (size_t i = 0; i < rows; ++i) x[i] = static_cast<double>(lse[i]) + low[i];
  return py::make_tuple(o, exact);
}

py::tuple attention_backward(py::handle q_, py::handle k_, py::handle v_, py::handle o_, py::handle lse_,
                             py::handle do_, bool causal, py::handle mask, float dropout_p,
                             std::optional<double> scale, py::handle seed, py::handle dq_, py::handle dk_,
                             py::handle dv_, int64_t window, py::handle alibi, double softcap) {
  const char* fn = "qkv.attention_backward";
  const py::array q = float32_input(q_, fn, "q", 4, "(B, H, T, D)");
  const py::array k = float32_input(k_, fn, "k", 4, "(B, G, S, D)");
  const py::array v = float32_input(v_, fn, "v", 4, "(B, G, S, Dv)");
  const py::array o = float32_input(o_, fn, "o", 4, "(B, H, T, Dv)");
  const py::array d_o = float32_input(do_, fn, "grad_out", 4, "(B, H, T, Dv)");
  const LseInput lse_in = lse_input(lse_, fn, q);
  const py::array& lse = lse_in.values;
  Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, false);
  add_variants(opt, fn, q.shape(1), window, alibi, softcap);
  if (!lse_in.low.empty()) opt.options.lse_low = const_cast<float*>(lse_in.low.data());  // read only
  py::array dq = float32_output(dq_, fn, "dq", {q.shape(0), q.shape(1), q.shape(2), q.shape(3)});
  py::array dk = float32_output(dk_, fn, "dk", {k.shape(0), k.shape(1), k.shape(2), k.shape(3)});
  py::array dv = float32_output(dv_, fn, "dv", {v.shape(0), v.shape(1), v.shape(2), v.shape(3)});
  const std::initializer_list<std::pair<const char*, const py::array*>> read = {
      {"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}, {"grad_out", &d_o}, {"lse", &lse}};
  check_disjoint(fn, "dq", dq, read);
  check_disjoint(fn, "dk", dk, read);
  check_disjoint(fn, "dv", dv, read);
  check_disjoint(fn, "dq", dq, {{"dk", &dk}, {"dv", &dv}});
  check_disjoint(fn, "dk", dk, {{"dv", &dv}});
  if (opt.mask)
    for (const auto& [name, d] : {std::pair<const char*, const py::array*>{"dq", &dq}, {"dk", &dk}, {"dv", &dv}})
      check_disjoint(fn, name, *d, {{"mask", &opt.mask}});
  const ConstHeads qh = const_heads(q), kh = const_heads(k), vh = const_heads(v), oh = const_heads(o),
                   doh = const_heads(d_o);
  const MutableHeads dqh = mutable_heads(dq), dkh = mutable_heads(dk), dvh = mutable_heads(dv);
  const auto* l = static_cast<const float*>(lse.data());
  run_kernel([&] { kernels::attention_backward(qh, kh, vh, oh, doh, l, dqh, dkh, dvh, opt.options); });
  return py::make_tuple(dq, dk, dv);
}

py::array attention_weights(py::handle q_, py::handle k_, py::handle lse_, bool causal, py::handle mask,
                            float dropout_p, std::optional<double> scale, py::handle seed, bool after_dropout,
                            int64_t window, py::handle alibi, double softcap) {
  const char* fn = "qkv.attention_weights";
  const py::array q = float32_input(q_, fn, "q", 4, "(B, H, T, D)");
  const py::array k = float32_input(k_, fn, "k", 4, "(B, G, S, D)");
  const LseInput lse_in = lse_input(lse_, fn, q);
  const py::array& lse = lse_in.values;
  Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, false);
  add_variants(opt, fn, q.shape(1), window, alibi, softcap);
  if (!lse_in.low.empty()) opt.options.lse_low = const_cast<float*>(lse_in.low.data());  // read only
  const int64_t B = q.shape(0), H = q.shape(1), T = q.shape(2), S = k.shape(2);
  py::array_t<float> w({B, H, T, S});
  const ConstHeads qh = const_heads(q), kh = const_heads(k);
  const auto* l = static_cast<const float*>(lse.data());
  float* out = w.mutable_data();
  run_kernel([&] {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        kernels::attention_weights(qh, kh, l, opt.options, b, h, 0, T, after_dropout, out + (b * H + h) * T * S, S);
  });
  return w;
}

}  // namespace

void bind_attention(py::module_& m) {
  using py::arg;
  m.def("attention", &attention, arg("q"), arg("k"), arg("v"), py::kw_only(), arg("causal") = false,
        arg("mask") = py::none(), arg("dropout_p") = 0.0f, arg("scale") = py::none(), arg("return_lse") = false,
        arg("seed") = py::none(), arg("out") = py::none(), arg("window") = 0, arg("alibi") = false,
        arg("softcap") = 0.0,
        "Fused scaled dot-product attention: softmax(scale * q k^T (+ mask)) v, with dropout on the weights.\n"
        "q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv) float32 -> o (B, H, T, Dv) [, lse (B, H, T) float64:\n"
        "the log-sum-exp of each row's scaled scores, with the digits a float drops, which the backward needs\n"
        "at large scores; a float32 lse is accepted too].");
  m.def("attention_backward", &attention_backward, arg("q"), arg("k"), arg("v"), arg("o"), arg("lse"),
        arg("grad_out"), py::kw_only(), arg("causal") = false, arg("mask") = py::none(), arg("dropout_p") = 0.0f,
        arg("scale") = py::none(), arg("seed") = py::none(), arg("dq") = py::none(), arg("dk") = py::none(),
        arg("dv") = py::none(), arg("window") = 0, arg("alibi") = false, arg("softcap") = 0.0,
        "Gradients (dq, dk, dv) of attention given its inputs, o, lse and grad_out = dLoss/do; same keywords.");
  m.def("attention_weights", &attention_weights, arg("q"), arg("k"), arg("lse"), py::kw_only(),
        arg("causal") = false, arg("mask") = py::none(), arg("dropout_p") = 0.0f, arg("scale") = py::none(),
        arg("seed") = py::none(), arg("after_dropout") = false, arg("window") = 0, arg("alibi") = false,
        arg("softcap") = 0.0,
        "The softmax weights (B, H, T, S) the forward used, recomputed from q, k and its lse; with\n"
        "after_dropout, times the dropout mask / (1 - p).");
}

}  // namespace qkv::python
