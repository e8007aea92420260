// python/src/delta_rule_bindings.cc - the gated delta rule (qkv/modules/delta_rule.h) on numpy arrays,
// for qkv.torch's Gated DeltaNet modules.
//
//   y, states = qkv.delta_rule(q, k, v, beta, alpha)
//       q, k (B, T, H, Dk); v (B, T, H, Dv); beta (B, T, H) per head or (B, T, H, Dv) per channel;
//       alpha (B, T, H) -> y (B, T, H, Dv) float32, states (B, H, T, Dk, Dv) float64 (every token's)
//   dq, dk, dv, dbeta, dalpha = qkv.delta_rule_backward(q, k, v, beta, alpha, states, dy)
//
// Arrays as arrays.h says (float32, converted when they are not). Shapes that do not agree raise
// ValueError naming the array and both shapes.
#include <pybind11/numpy.h>

#include <cstdint>
#include <string>
#include <vector>

#include "arrays.h"
#include "qkv/modules/delta_rule.h"

namespace qkv::python {
namespace {

struct Arrays {
  py::array q, k, v, beta, alpha;
  DeltaRuleShape shape;
  DeltaRuleInputs inputs() const {
    return {static_cast<const float*>(q.data()), static_cast<const float*>(k.data()), static_cast<const float*>(v.data()),
            static_cast<const float*>(beta.data()), static_cast<const float*>(alpha.data())};
  }
};

void expect_shape(const char* fn, const char* name, const py::array& a, const std::vector<py::ssize_t>& want,
                  const char* dims) {
  bool same = a.ndim() == static_cast<py::ssize_t>(want.size());
  for (size_t i = 0; same && i < want.size(); ++i) same = a.shape(static_cast<py::ssize_t>(i)) == want[i];
  if (same) return;
  std::string w = "(";
  for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
  throw py::value_error(std::string(fn) + ": " + name + " has shape " + shape_of(a) + "; expected " + dims + " = " +
                        w + ")");
}

Arrays arrays_of(const char* fn, py::handle q, py::handle k, py::handle v, py::handle beta, py::handle alpha) {
  Arrays a;
  a.q = float32_contiguous(q, fn, "q", 4, "(B, T, H, Dk)");
  const py::ssize_t B = a.q.shape(0), T = a.q.shape(1), H = a.q.shape(2), Dk = a.q.shape(3);
  a.k = float32_contiguous(k, fn, "k", 4, "(B, T, H, Dk)");
  expect_shape(fn, "k", a.k, {B, T, H, Dk}, "(B, T, H, Dk)");
  a.v = float32_contiguous(v, fn, "v", 4, "(B, T, H, Dv)");
  const py::ssize_t Dv = a.v.shape(3);
  expect_shape(fn, "v", a.v, {B, T, H, Dv}, "(B, T, H, Dv)");
  const py::array as_array = py::array::ensure(beta);  // null when beta is no array: float32_contiguous says so
  const py::ssize_t beta_rank = as_array && as_array.ndim() == 4 ? 4 : 3;
  a.beta = float32_contiguous(beta, fn, "beta", beta_rank, "(B, T, H) or (B, T, H, Dv)");
  const bool per_channel = a.beta.ndim() == 4;
  if (per_channel)
    expect_shape(fn, "beta", a.beta, {B, T, H, Dv}, "(B, T, H, Dv)");
  else
    expect_shape(fn, "beta", a.beta, {B, T, H}, "(B, T, H)");
  a.alpha = float32_contiguous(alpha, fn, "alpha", 3, "(B, T, H)");
  expect_shape(fn, "alpha", a.alpha, {B, T, H}, "(B, T, H)");
  a.shape = {B, T, H, Dk, Dv, per_channel};
  return a;
}

py::tuple delta_rule(py::handle q, py::handle k, py::handle v, py::handle beta, py::handle alpha) {
  const Arrays a = arrays_of("qkv.delta_rule", q, k, v, beta, alpha);
  const DeltaRuleShape& s = a.shape;
  py::array_t<float> y({s.batch, s.tokens, s.heads, s.value_dim});
  py::array_t<double> states({s.batch, s.heads, s.tokens, s.key_dim, s.value_dim});
  float* out = y.mutable_data();
  double* kept = states.mutable_data();
  run_kernel([&] {
    std::vector<double> all;
    delta_rule_forward(s, a.inputs(), all, out);
    std::copy(all.begin(), all.end(), kept);
  });
  return py::make_tuple(y, states);
}

py::tuple delta_rule_backward(py::handle q, py::handle k, py::handle v, py::handle beta, py::handle alpha,
                              py::handle states_, py::handle dy_) {
  const char* fn = "qkv.delta_rule_backward";
  const Arrays a = arrays_of(fn, q, k, v, beta, alpha);
  const DeltaRuleShape& s = a.shape;
  const auto states = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(states_);
  if (!states) throw py::type_error(std::string(fn) + ": states must be the float64 array qkv.delta_rule returned");
  expect_shape(fn, "states", states, {s.batch, s.heads, s.tokens, s.key_dim, s.value_dim}, "(B, H, T, Dk, Dv)");
  const py::array dy = float32_contiguous(dy_, fn, "dy", 4, "(B, T, H, Dv)");
  expect_shape(fn, "dy", dy, {s.batch, s.tokens, s.heads, s.value_dim}, "(B, T, H, Dv)");
  py::array_t<float> dq({s.batch, s.tokens, s.heads, s.key_dim}), dk({s.batch, s.tokens, s.heads, s.key_dim}),
      dv({s.batch, s.tokens, s.heads, s.value_dim}), dalpha({s.batch, s.tokens, s.heads});
  py::array_t<float> dbeta = s.beta_per_channel ? py::array_t<float>({s.batch, s.tokens, s.heads, s.value_dim})
                                                : py::array_t<float>({s.batch, s.tokens, s.heads});
  const DeltaRuleGrads g{dq.mutable_data(), dk.mutable_data(), dv.mutable_data(), dbeta.mutable_data(),
                         dalpha.mutable_data()};
  const double* kept = states.data();
  const auto* d = static_cast<const float*>(dy.data());
  run_kernel([&] {
    const std::vector<double> all(kept, kept + states.size());
    delta_rule_backward(s, a.inputs(), all, d, g);
  });
  return py::make_tuple(dq, dk, dv, dbeta, dalpha);
}

}  // namespace

void bind_delta_rule(py::module_& m) {
  using py::arg;
  m.def("delta_rule", &delta_rule, arg("q"), arg("k"), arg("v"), arg("beta"), arg("alpha"),
        "The gated delta rule token by token: y (B, T, H, Dv) and every token's state (B, H, T, Dk, Dv, float64).");
  m.def("delta_rule_backward", &delta_rule_backward, arg("q"), arg("k"), arg("v"), arg("beta"), arg("alpha"),
        arg("states"), arg("dy"), "The gradients of q, k, v, beta, alpha given dy, from delta_rule's states.");
}

}  // namespace qkv::python
