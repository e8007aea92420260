// python/src/attention_bindings.cc - the fused attention kernels (qkv/kernels/attention.h) on numpy arrays.
//
//   o = qkv.attention(q, k, v, causal=True)                  # q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv)
//   o, lse = qkv.attention(q, k, v, return_lse=True, dropout_p=0.1, seed=7)
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

#include "arrays.h"
#include "qkv/kernels/attention.h"

namespace qkv::python {
namespace {

using kernels::ConstHeads;
using kernels::MutableHeads;

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
  py::array_t<float> lse({q.shape(0), q.shape(1), q.shape(2)});
  const ConstHeads qh = const_heads(q), kh = const_heads(k), vh = const_heads(v);
  const MutableHeads oh = mutable_heads(o);
  float* l = lse.mutable_data();
  run_kernel([&] { kernels::attention_forward(qh, kh, vh, oh, l, opt.options); });
  if (return_lse) return py::make_tuple(o, lse);
  return o;
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
  py::array lse = float32_input(lse_, fn, "lse", 3, "(B, H, T)");
  if (lse.shape(0) != q.shape(0) || lse.shape(1) != q.shape(1) || lse.shape(2) != q.shape(2))
    throw py::value_error(std::string(fn) + ": lse has shape " + shape_of(lse) + "; q " + shape_of(q) +
                          " needs (B, H, T)");
  lse = Float32Array::ensure(lse);  // the kernel reads lse as a contiguous (B, H, T) array
  Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, false);
  add_variants(opt, fn, q.shape(1), window, alibi, softcap);
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
  py::array lse = float32_input(lse_, fn, "lse", 3, "(B, H, T)");
  if (lse.shape(0) != q.shape(0) || lse.shape(1) != q.shape(1) || lse.shape(2) != q.shape(2))
    throw py::value_error(std::string(fn) + ": lse has shape " + shape_of(lse) + "; q " + shape_of(q) +
                          " needs (B, H, T)");
  lse = Float32Array::ensure(lse);
  Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, false);
  add_variants(opt, fn, q.shape(1), window, alibi, softcap);
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
        "q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv) float32 -> o (B, H, T, Dv) [, lse (B, H, T)].");
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
