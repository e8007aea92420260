// python/src/arrays.h - numpy arrays and keyword arguments as the library's views and options,
// shared by the bindings of the kernels (attention_bindings.cc) and of the MHA pipeline (mha_bindings.cc).
//
// Arrays: float32 arrays whose strides are non-negative multiples of 4 bytes (C-contiguous ones,
// and views such as x.transpose(0, 2, 1, 3)) are read in place; other floating-point arrays
// (float16, float64, negative strides, unaligned) are converted to a C-contiguous float32 copy;
// any other dtype is a TypeError naming it. Outputs (out=, dq=, ...) are written in place and
// must be writable float32 arrays of the result's shape with such strides.
#pragma once

#include <pybind11/numpy.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention.h"

namespace qkv::python {

using Float32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

// obj as T (a py::array_t with forcecast), as T::ensure makes it, except that a conversion that
// fails raises its own Python error (numpy's MemoryError for a copy that cannot be made): ensure
// clears that error, and an error_already_set thrown after it came out as pybind's "Internal error".
template <typename T>
T converted(py::handle obj) {
  return T(py::reinterpret_borrow<py::object>(obj));
}

std::string shape_of(const py::array& a);
std::string dtype_of(const py::array& a);

// Whether the kernels can read a in place: float32, aligned, strides >= 0 and whole elements.
bool readable_in_place(const py::array& a);
// obj as a float32 array of the given rank: itself when it can be read in place, else a copy.
// fn and name make the errors ("qkv.attention: q must be (B, H, T, D), got shape (2, 3)").
py::array float32_input(py::handle obj, const char* fn, const char* name, py::ssize_t rank, const char* dims);
// The same, C-contiguous (a copy when it is not): for the library's raw-pointer entry points.
py::array float32_contiguous(py::handle obj, const char* fn, const char* name, py::ssize_t rank, const char* dims);
// A result: the caller's out= array (checked) or a new C-contiguous one.
py::array float32_output(py::handle out, const char* fn, const char* name, const std::vector<py::ssize_t>& shape);
// An output the library writes while it reads the inputs must not overlap any of them in memory.
void check_disjoint(const char* fn, const char* name, const py::array& out,
                    std::initializer_list<std::pair<const char*, const py::array*>> others);

kernels::ConstHeads const_heads(const py::array& a);  // a (B, H, T, D) float32 array readable in place
kernels::MutableHeads mutable_heads(py::array& a);    // an output from float32_output

// What the Python keywords say, as AttentionOptions; keeps the mask's array alive.
struct Options {
  kernels::AttentionOptions options;
  py::array mask;
  std::vector<float> slopes;  // ALiBi's (options.alibi_slopes points here), or empty
};
// causal / mask (T, S) / dropout_p / scale (default 1/sqrt(D)) / seed (None: drawn when
// for_forward and dropout_p > 0; required otherwise).
Options options_of(const char* fn, int64_t T, int64_t S, int64_t D, bool causal, py::handle mask, float dropout_p,
                   std::optional<double> scale, py::handle seed, bool for_forward);

// Today's variants of the kernel call into o: window (> 0: key j hidden from query i when
// j <= i - window), alibi (False; True: the paper's slopes for H heads; or H slopes), softcap
// (> 0: scores capped as softcap * tanh(s / softcap)). Bad values: qkv.Error naming them.
void add_variants(Options& o, const char* fn, int64_t H, int64_t window, py::handle alibi, double softcap);

// Runs fn with the GIL released and the default pool pinned; then honours a pending Ctrl-C.
template <typename Fn>
void run_kernel(Fn&& fn) {
  {
    py::gil_scoped_release release;
    DefaultPoolPin pool_pin;
    fn();
  }
  raise_pending_signals();
}

}  // namespace qkv::python
