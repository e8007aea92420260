// python/src/attention.cc - the fused attention kernels (qkv/kernels/attention.h) on numpy arrays.
//
//   o = qkv.attention(q, k, v, causal=True)                  # q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv)
//   o, lse = qkv.attention(q, k, v, return_lse=True, dropout_p=0.1, seed=7)
//   dq, dk, dv = qkv.attention_backward(q, k, v, o, lse, do, dropout_p=0.1, seed=7)
//   w = qkv.attention_weights(q, k, lse, after_dropout=True, dropout_p=0.1, seed=7)   # (B, H, T, S)
//
// Arrays: float32 arrays whose strides are non-negative multiples of 4 bytes (C-contiguous ones,
// and views such as x.transpose(0, 2, 1, 3)) are read in place; other floating-point arrays
// (float16, float64, negative strides, unaligned) are converted to a C-contiguous float32 copy;
// any other dtype is a TypeError naming it. out= (and dq=, dk=, dv=) are written in place and
// must be writable float32 arrays of the result's shape with such strides.
// Masks: causal=True, or mask= a (T, S) array: boolean hides where True (the book's
// mask.bool() in masked_fill), floating-point is added to the scores (-inf hides).
// The GIL is released while a kernel runs; a Ctrl-C meanwhile raises KeyboardInterrupt when it
// returns. Shapes that do not fit and arguments out of range raise ValueError (qkv.Error).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>  // std::optional (scale)

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "bindings.h"
#include "qkv/kernels/attention.h"

namespace qkv::python {
namespace {

using kernels::AttentionMask;
using kernels::AttentionOptions;
using kernels::ConstHeads;
using kernels::MutableHeads;
using Float32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::string shape_of(const py::array& a) { return py::str(a.attr("shape")); }
std::string dtype_of(const py::array& a) { return py::str(a.dtype()); }

// Whether the kernels can read a in place: float32, aligned, strides >= 0 and whole elements.
bool readable_in_place(const py::array& a) {
  if (!py::isinstance<py::array_t<float>>(a)) return false;
  if (reinterpret_cast<uintptr_t>(a.data()) % alignof(float) != 0) return false;
  for (py::ssize_t i = 0; i < a.ndim(); ++i)
    if (a.strides(i) < 0 || a.strides(i) % static_cast<py::ssize_t>(sizeof(float)) != 0) return false;
  return true;
}

// obj as a float32 array of the given rank: itself when it can be read in place, else a copy.
py::array float32_input(py::handle obj, const char* fn, const char* name, py::ssize_t rank, const char* dims) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error(std::string(fn) + ": " + name + " must be an array, not " +
                               std::string(py::str(py::type::of(obj).attr("__name__"))));
  if (a.dtype().kind() != 'f')
    throw py::type_error(std::string(fn) + ": " + name + " has dtype " + dtype_of(a) +
                         "; qkv computes in float32 and converts only floating-point arrays (float16, float32, float64)");
  if (a.ndim() != rank)
    throw py::value_error(std::string(fn) + ": " + name + " must be " + dims + ", got shape " + shape_of(a));
  if (!readable_in_place(a)) a = Float32Array::ensure(a);
  if (!a) throw py::error_already_set();
  return a;
}

template <typename F>
kernels::Heads<F> heads_of(const py::array& a, F* data) {
  const auto s = [&](py::ssize_t i) { return static_cast<int64_t>(a.strides(i)) / static_cast<int64_t>(sizeof(float)); };
  return {data, a.shape(0), a.shape(1), a.shape(2), a.shape(3), s(0), s(1), s(2), s(3)};
}
ConstHeads const_heads(const py::array& a) { return heads_of(a, static_cast<const float*>(a.data())); }

// A result: the caller's out= array (checked) or a new C-contiguous one.
py::array float32_output(py::handle out, const char* fn, const char* name, const std::vector<py::ssize_t>& shape) {
  if (out.is_none()) return py::array_t<float>(shape);
  if (!py::isinstance<py::array>(out) || !py::isinstance<py::array_t<float>>(out))
    throw py::type_error(std::string(fn) + ": " + name + " must be a float32 numpy array");
  py::array a = py::reinterpret_borrow<py::array>(out);
  if (std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()) != shape)
    throw py::value_error(std::string(fn) + ": " + name + " has shape " + shape_of(a) + ", the result's is " +
                          std::string(py::str(py::tuple(py::cast(shape)))));
  if (!a.writeable()) throw py::value_error(std::string(fn) + ": " + name + " is read-only");
  if (!readable_in_place(a))
    throw py::value_error(std::string(fn) + ": " + name + " must have non-negative strides of whole float32 elements");
  for (py::ssize_t i = 0; i < a.ndim(); ++i)
    if (a.strides(i) == 0 && a.shape(i) > 1)
      throw py::value_error(std::string(fn) + ": " + name + " has a zero stride (a broadcast view); give a real array");
  return a;
}
MutableHeads mutable_heads(py::array& a) { return heads_of(a, static_cast<float*>(a.mutable_data())); }

// The bytes [first, last) an array's elements lie in (first == last for an empty array).
std::pair<uintptr_t, uintptr_t> bytes_of(const py::array& a) {
  const auto first = reinterpret_cast<uintptr_t>(a.data());
  if (a.size() == 0) return {first, first};
  uintptr_t extent = static_cast<uintptr_t>(a.itemsize());
  for (py::ssize_t i = 0; i < a.ndim(); ++i)  // strides are >= 0 here (float32_output, readable_in_place)
    extent += static_cast<uintptr_t>(a.shape(i) - 1) * static_cast<uintptr_t>(a.strides(i));
  return {first, first + extent};
}

// An output the kernel writes while it reads the inputs must not overlap any of them in memory
// (out=q would change q under the kernel: wrong results, silently). Ranges are compared, as
// numpy's may_share_memory does: two interleaved views of one buffer count as overlapping.
void check_disjoint(const char* fn, const char* name, const py::array& out,
                    std::initializer_list<std::pair<const char*, const py::array*>> others) {
  const auto [a0, a1] = bytes_of(out);
  for (const auto& [other_name, other] : others) {
    const auto [b0, b1] = bytes_of(*other);
    if (a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1)
      throw py::value_error(std::string(fn) + ": " + name + " overlaps " + other_name + " in memory (their bytes' ranges " +
                            "intersect); the kernel writes " + name + " while it reads " + other_name +
                            ": give separate arrays");
  }
}

// What the Python keywords say, as AttentionOptions; keeps the mask's array alive.
struct Options {
  AttentionOptions options;
  py::array mask;
};

uint64_t seed_of(py::handle seed, float dropout_p, const char* fn, bool for_forward) {
  if (!seed.is_none()) {
    if (!PyLong_Check(seed.ptr())) throw py::type_error(std::string(fn) + ": seed must be an int");
    const unsigned long long s = PyLong_AsUnsignedLongLong(seed.ptr());  // OverflowError below 0 or from 2**64
    if (PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error(std::string(fn) + ": seed must be in [0, 2**64), got " + std::string(py::repr(seed)));
    }
    return s;
  }
  if (dropout_p == 0.0f) return 0;
  if (!for_forward)
    throw py::value_error(std::string(fn) + ": dropout_p > 0 needs the forward's seed (seed=...) to regenerate its mask");
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

Options options_of(const char* fn, int64_t T, int64_t S, int64_t D, bool causal, py::handle mask, float dropout_p,
                   std::optional<double> scale, py::handle seed, bool for_forward) {
  Options o;
  o.options.scale = scale ? static_cast<float>(*scale) : 1.0f / std::sqrt(static_cast<float>(D));
  o.options.dropout_p = dropout_p;
  o.options.dropout_seed = seed_of(seed, dropout_p, fn, for_forward);
  if (causal && !mask.is_none()) throw py::value_error(std::string(fn) + ": give causal=True or a mask, not both");
  if (causal) o.options.mask = AttentionMask::causal();
  if (!mask.is_none()) {
    py::array m = py::array::ensure(mask);
    if (!m) throw py::type_error(std::string(fn) + ": mask must be an array");
    const char kind = m.dtype().kind();
    if (kind != 'b' && kind != 'f')
      throw py::type_error(std::string(fn) + ": mask has dtype " + dtype_of(m) +
                           "; it must be boolean (True hides) or floating-point (added to the scores)");
    if (m.ndim() != 2 || m.shape(0) != T || m.shape(1) != S)
      throw py::value_error(std::string(fn) + ": mask must be (T, S) = (" + std::to_string(T) + ", " + std::to_string(S) +
                            "), got shape " + shape_of(m));
    if (kind == 'b' || !readable_in_place(m) || (S > 1 && m.strides(1) != sizeof(float))) m = Float32Array::ensure(m);
    if (!m) throw py::error_already_set();
    const auto* values = static_cast<const float*>(m.data());
    const int64_t row_stride = T > 1 ? static_cast<int64_t>(m.strides(0)) / 4 : S;
    o.options.mask = kind == 'b' ? AttentionMask::blocked(values, row_stride) : AttentionMask::additive(values, row_stride);
    o.mask = m;
  }
  return o;
}

// Runs fn with the GIL released and the default pool held; then honours a pending Ctrl-C.
template <typename Fn>
void run_kernel(Fn&& fn) {
  {
    py::gil_scoped_release release;
    std::shared_lock<std::shared_mutex> lock(pool_mutex());
    fn();
  }
  raise_pending_signals();
}

py::object attention(py::handle q_, py::handle k_, py::handle v_, bool causal, py::handle mask, float dropout_p,
                     std::optional<double> scale, bool return_lse, py::handle seed, py::handle out) {
  const char* fn = "qkv.attention";
  const py::array q = float32_input(q_, fn, "q", 4, "(B, H, T, D)");
  const py::array k = float32_input(k_, fn, "k", 4, "(B, G, S, D)");
  const py::array v = float32_input(v_, fn, "v", 4, "(B, G, S, Dv)");
  const Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, true);
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
                             py::handle dv_) {
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
  const Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, false);
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
                            float dropout_p, std::optional<double> scale, py::handle seed, bool after_dropout) {
  const char* fn = "qkv.attention_weights";
  const py::array q = float32_input(q_, fn, "q", 4, "(B, H, T, D)");
  const py::array k = float32_input(k_, fn, "k", 4, "(B, G, S, D)");
  py::array lse = float32_input(lse_, fn, "lse", 3, "(B, H, T)");
  if (lse.shape(0) != q.shape(0) || lse.shape(1) != q.shape(1) || lse.shape(2) != q.shape(2))
    throw py::value_error(std::string(fn) + ": lse has shape " + shape_of(lse) + "; q " + shape_of(q) +
                          " needs (B, H, T)");
  lse = Float32Array::ensure(lse);
  const Options opt = options_of(fn, q.shape(2), k.shape(2), q.shape(3), causal, mask, dropout_p, scale, seed, false);
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
        arg("seed") = py::none(), arg("out") = py::none(),
        "Fused scaled dot-product attention: softmax(scale * q k^T (+ mask)) v, with dropout on the weights.\n"
        "q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv) float32 -> o (B, H, T, Dv) [, lse (B, H, T)].");
  m.def("attention_backward", &attention_backward, arg("q"), arg("k"), arg("v"), arg("o"), arg("lse"),
        arg("grad_out"), py::kw_only(), arg("causal") = false, arg("mask") = py::none(), arg("dropout_p") = 0.0f,
        arg("scale") = py::none(), arg("seed") = py::none(), arg("dq") = py::none(), arg("dk") = py::none(),
        arg("dv") = py::none(),
        "Gradients (dq, dk, dv) of attention given its inputs, o, lse and grad_out = dLoss/do; same keywords.");
  m.def("attention_weights", &attention_weights, arg("q"), arg("k"), arg("lse"), py::kw_only(),
        arg("causal") = false, arg("mask") = py::none(), arg("dropout_p") = 0.0f, arg("scale") = py::none(),
        arg("seed") = py::none(), arg("after_dropout") = false,
        "The softmax weights (B, H, T, S) the forward used, recomputed from q, k and its lse; with\n"
        "after_dropout, times the dropout mask / (1 - p).");
}

}  // namespace qkv::python
