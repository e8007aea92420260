// python/src/arrays.cc - numpy arrays and keywords as the library's views and options. See arrays.h.
#include "arrays.h"

#include <pybind11/stl.h>  // py::cast of a shape (std::vector)

#include <cmath>
#include <random>

#include "qkv/kernels/attention_spec.h"

namespace qkv::python {

using kernels::AttentionMask;
using kernels::ConstHeads;
using kernels::MutableHeads;

namespace {
template <typename F>
kernels::Heads<F> heads_of(const py::array& a, F* data) {
  const auto s = [&](py::ssize_t i) { return static_cast<int64_t>(a.strides(i)) / static_cast<int64_t>(sizeof(float)); };
  return {data, a.shape(0), a.shape(1), a.shape(2), a.shape(3), s(0), s(1), s(2), s(3)};
}

// The bytes [first, last) an array's elements lie in (first == last for an empty array).
std::pair<uintptr_t, uintptr_t> bytes_of(const py::array& a) {
  const auto first = reinterpret_cast<uintptr_t>(a.data());
  if (a.size() == 0) return {first, first};
  uintptr_t extent = static_cast<uintptr_t>(a.itemsize());
  for (py::ssize_t i = 0; i < a.ndim(); ++i)  // strides are >= 0 here (float32_output, readable_in_place)
    extent += static_cast<uintptr_t>(a.shape(i) - 1) * static_cast<uintptr_t>(a.strides(i));
  return {first, first + extent};
}

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
}  // namespace

std::string shape_of(const py::array& a) { return py::str(a.attr("shape")); }
std::string dtype_of(const py::array& a) { return py::str(a.dtype()); }

bool readable_in_place(const py::array& a) {
  if (!py::isinstance<py::array_t<float>>(a)) return false;
  if (reinterpret_cast<uintptr_t>(a.data()) % alignof(float) != 0) return false;
  for (py::ssize_t i = 0; i < a.ndim(); ++i)
    if (a.strides(i) < 0 || a.strides(i) % static_cast<py::ssize_t>(sizeof(float)) != 0) return false;
  return true;
}

py::array float32_input(py::handle obj, const char* fn, const char* name, py::ssize_t rank, const char* dims) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error(std::string(fn) + ": " + name + " must be an array, not " +
                               std::string(py::str(py::type::of(obj).attr("__name__"))));
  if (a.dtype().kind() != 'f')
    throw py::type_error(std::string(fn) + ": " + name + " has dtype " + dtype_of(a) +
                         "; qkv computes in float32 and converts only floating-point arrays (float16, float32, float64)");
  if (a.ndim() != rank)
    throw py::value_error(std::string(fn) + ": " + name + " must be " + dims + ", got shape " + shape_of(a));
  if (!readable_in_place(a)) a = converted<Float32Array>(a);
  return a;
}

ConstHeads const_heads(const py::array& a) { return heads_of(a, static_cast<const float*>(a.data())); }

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
  for (py::ssize_t i = 0; i < a.ndim() && a.size() > 0; ++i)  // an empty array has no elements to share
    if (a.strides(i) == 0 && a.shape(i) > 1)
      throw py::value_error(std::string(fn) + ": " + name + " has a zero stride (a broadcast view); give a real array");
  return a;
}
MutableHeads mutable_heads(py::array& a) { return heads_of(a, static_cast<float*>(a.mutable_data())); }


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


Options options_of(const char* fn, int64_t T, int64_t S, int64_t D, bool causal, py::handle mask, float dropout_p,
                   std::optional<double> scale, py::handle seed, bool for_forward) {
  Options o;
  // a float32 scale: a double beyond float's range (1e300) was reported as "inf"
  if (scale && std::isfinite(*scale) && !std::isfinite(static_cast<float>(*scale)))
    throw py::value_error(std::string(fn) + ": scale is " + py::repr(py::float_(*scale)).cast<std::string>() +
                          ", beyond float32's range (the kernels compute in float32)");
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
    if (kind == 'b' || !readable_in_place(m) || (S > 1 && m.strides(1) != sizeof(float))) m = converted<Float32Array>(m);
    const auto* values = static_cast<const float*>(m.data());
    const int64_t row_stride = T > 1 ? static_cast<int64_t>(m.strides(0)) / 4 : S;
    o.options.mask = kind == 'b' ? AttentionMask::blocked(values, row_stride) : AttentionMask::additive(values, row_stride);
    o.mask = m;
  }
  return o;
}

void add_variants(Options& o, const char* fn, int64_t H, int64_t window, py::handle alibi, double softcap) {
  kernels::check_window(window, fn);
  kernels::check_softcap(softcap, fn);
  o.options.window = window;
  o.options.softcap = static_cast<float>(softcap);
  if (alibi.is_none() || (py::isinstance<py::bool_>(alibi) && !alibi.cast<bool>())) return;
  if (py::isinstance<py::bool_>(alibi)) {
    o.slopes.resize(static_cast<size_t>(H));
    kernels::alibi_default_slopes(H, o.slopes.data());
  } else {
    const py::array a = float32_contiguous(alibi, fn, "alibi", 1, "(H) slopes");
    if (a.shape(0) != H)
      throw py::value_error(std::string(fn) + ": alibi has " + std::to_string(a.shape(0)) + " slopes; q has " +
                            std::to_string(H) + " heads");
    const auto* p = static_cast<const float*>(a.data());
    o.slopes.assign(p, p + H);
  }
  kernels::check_alibi_slopes(o.slopes.data(), H, fn, [](kernels::SpecField f) {
    return f == kernels::SpecField::kAlibiSlopes ? std::string("alibi") : kernels::spec_field_name(f);
  });
  o.options.alibi_slopes = o.slopes.data();
}

py::array float32_contiguous(py::handle obj, const char* fn, const char* name, py::ssize_t rank, const char* dims) {
  py::array a = float32_input(obj, fn, name, rank, dims);
  if (!(a.flags() & py::array::c_style)) a = converted<Float32Array>(a);
  return a;
}

}  // namespace qkv::python
