// Every backward pass checked against finite differences in double precision.
//
// For each module: random float inputs and parameters, a random upstream gradient g, and qkv's
// float backward. The reference is a separate re-implementation of the module's forward in
// double (written here from the book's formulas, sharing no code with qkv), of which the test takes
// central differences of L = sum(forward(...) * g) with respect to every element of the input
// and of every parameter. The double forward is first checked to reproduce qkv's float forward,
// so the differences are of the same function. Agreement is required within 1e-4 relative to the
// largest gradient of the tensor (float backward rounding is ~1e-6). Masks that hide every key of
// a row (notebook 004's tril bug) are included: qkv's zero weights there must come with zero
// gradients, which is what the finite differences of a constant row give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/feed_forward.h"
#include "qkv/modules/layer_norm.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/multi_head_attention.h"
#include "qkv/modules/sdpa.h"
#include "qkv/modules/self_attention.h"
#include "qkv/models/attention_lm.h"
#include "qkv/models/decoder.h"
#include "qkv/train/loss.h"

namespace qkv {
namespace {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Vec to_double(const Tensor& t) {
  Vec v;
  for (float x : t.to_vector()) v.push_back(x);
  return v;
}

Tensor random_tensor(const Shape& shape, Generator& gen, double scale = 1.0) {
  Tensor t = Tensor::empty(shape);
  gen.normal(t.data(), t.numel(), 0.0, scale);
  return t;
}

// --- the double-precision reference forwards ---------------------------------------------------

// y (N, out) = x (N, in) @ W^T (W (out, in)) + b
Vec ref_linear(const Vec& x, int64_t N, int64_t in, const Vec& W, int64_t out, const Vec* b) {
  Vec y(static_cast<size_t>(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? (*b)[static_cast<size_t>(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[static_cast<size_t>(n * in + i)] * W[static_cast<size_t>(o * in + i)];
      y[static_cast<size_t>(n * out + o)] = s;
    }
  return y;
}

// y (N, out) = x (N, in) @ W (in, out)
Vec ref_matmul(const Vec& x, int64_t N, int64_t in, const Vec& W, int64_t out) {
  Vec y(static_cast<size_t>(N * out), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o)
        y[static_cast<size_t>(n * out + o)] += x[static_cast<size_t>(n * in + i)] * W[static_cast<size_t>(i * out + o)];
  return y;
}

void ref_softmax_row(double* z, int64_t n) {
  double m = kNegInf;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, z[j]);
  if (m == kNegInf) {  // every entry masked: zero weights
    for (int64_t j = 0; j < n; ++j) z[j] = 0.0;
    return;
  }
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += (z[j] = std::exp(z[j] - m));
  for (int64_t j = 0; j < n; ++j) z[j] /= s;
}

// One (T, D) x (S, D) x (S, Dv) attention: softmax(q k^T / scale [masked]) [* noise] @ v.
// Element (t, d) of q is q[q0 + t * qs + d] (a row stride, so heads can be read in place).
struct Strided {
  const Vec* v;
  int64_t offset, row_stride;
  double at(int64_t r, int64_t c) const { return (*v)[static_cast<size_t>(offset + r * row_stride + c)]; }
};
void ref_attention(Strided q, Strided k, Strided v, int64_t T, int64_t S, int64_t D, int64_t Dv, double scale,
                   const std::function<bool(int64_t, int64_t)>& blocked, const std::function<double(int64_t, int64_t)>& additive,
                   const std::function<double(int64_t, int64_t)>& noise, Vec& out, int64_t out0, int64_t out_stride) {
  Vec z(static_cast<size_t>(S));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < S; ++s) {
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d) dot += q.at(t, d) * k.at(s, d);
      double zz = dot / scale;
      if (additive) zz += additive(t, s);
      if (blocked && blocked(t, s)) zz = kNegInf;
      z[static_cast<size_t>(s)] = zz;
    }
    ref_softmax_row(z.data(), S);
    for (int64_t dv = 0; dv < Dv; ++dv) {
      double acc = 0.0;
      for (int64_t s = 0; s < S; ++s) acc += z[static_cast<size_t>(s)] * (noise ? noise(t, s) : 1.0) * v.at(s, dv);
      out[static_cast<size_t>(out0 + t * out_stride + dv)] = acc;
    }
  }
}

// --- the check ---------------------------------------------------------------------------------

struct GradCase {
  std::string what;
  Params at;                                     // the point: every input and parameter, in double
  std::function<Vec(const Params&)> forward;     // the double reference forward
  Tensor qkv_output;                             // qkv's float forward at that point
  Tensor g;                                      // dL/doutput
  std::map<std::string, Tensor> qkv_grads;       // qkv's float gradients, by the names in `at`
};

void check(const GradCase& c, double tol = 1e-4) {
  SCOPED_TRACE(c.what);
  // 1. The reference computes the same function as qkv.
  Vec y = c.forward(c.at);
  Vec y_qkv = to_double(c.qkv_output);
  ASSERT_EQ(y.size(), y_qkv.size());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], y_qkv[i], 1e-5 * std::max(1.0, std::fabs(y[i]))) << "output " << i;
  Vec g = to_double(c.g);
  auto L = [&](const Params& p) {
    Vec out = c.forward(p);
    double s = 0.0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * g[i];
    return s;
  };
  // 2. Central differences of L against qkv's gradient, tensor by tensor.
  ASSERT_EQ(c.at.size(), c.qkv_grads.size()) << "every input and parameter needs a gradient";
  double worst_of_all = 0.0;
  for (const auto& [name, values] : c.at) {
    auto it = c.qkv_grads.find(name);
    ASSERT_NE(it, c.qkv_grads.end()) << name;
    Vec got = to_double(it->second);
    ASSERT_EQ(got.size(), values.size()) << name;
    Vec fd(values.size());
    double largest = 0.0;
    for (size_t i = 0; i < values.size(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::fabs(values[i]));
      Params plus = c.at, minus = c.at;
      plus[name][i] += h;
      minus[name][i] -= h;
      fd[i] = (L(plus) - L(minus)) / (2 * h);
      largest = std::max(largest, std::fabs(fd[i]));
    }
    double worst = 0.0;
    size_t worst_at = 0;
    for (size_t i = 0; i < fd.size(); ++i)
      if (std::fabs(got[i] - fd[i]) > worst) worst = std::fabs(got[i] - fd[i]), worst_at = i;
    const double rel = worst / std::max(1.0, largest);
    worst_of_all = std::max(worst_of_all, rel);
    EXPECT_LE(rel, tol) << "d" << name << ": worst element " << worst_at << ": qkv " << got[worst_at]
                        << ", finite differences " << fd[worst_at] << " (relative error " << rel << ")";
  }
  std::printf("  finite differences, %s: %zu tensors, worst relative error %.2g\n", c.what.c_str(), c.at.size(),
              worst_of_all);
}

std::map<std::string, Tensor> grads_of(Module& m) {
  std::map<std::string, Tensor> out;
  for (const StateEntry& e : m.state_dict())
    if (e.grad) out[e.name] = *e.grad;
  return out;
}

Params params_of(Module& m) {
  Params p;
  for (const StateEntry& e : m.state_dict())
    if (e.is_parameter) p[e.name] = to_double(*e.tensor);
  return p;
}

// --- layers -------------------------------------------------------------------------------------

TEST(BackwardFiniteDifferences, Linear) {
  for (bool bias : {false, true}) {
    Generator gen(11 + bias);
    Linear lin(5, 3, bias, gen);
    Tensor x = random_tensor({2, 4, 5}, gen);
    GradCase c{"Linear bias=" + std::to_string(bias), params_of(lin), nullptr, lin.forward(x), {}, {}};
    c.g = random_tensor(c.qkv_output.shape(), gen);
    c.at["input"] = to_double(x);
    c.forward = [bias](const Params& p) {
      return ref_linear(p.at("input"), 8, 5, p.at("weight"), 3, bias ? &p.at("bias") : nullptr);
    };
    Tensor dx = lin.backward(c.g);
    c.qkv_grads = grads_of(lin);
    c.qkv_grads["input"] = dx;
    check(c);
  }
}

// Llama's and Qwen3's RMSNorm: y = weight * x / sqrt(mean(x^2) + eps), per row.
TEST(BackwardFiniteDifferences, RMSNorm) {
  Generator gen(21);
  RMSNorm norm(6, 1e-5);
  gen.normal(norm.weight.data(), 6, 1.0, 0.5);  // not ones, so that dweight is not trivially dx
  Tensor x = random_tensor({2, 3, 6}, gen);
  GradCase c{"RMSNorm", params_of(norm), nullptr, norm.forward(x), {}, {}};
  c.g = random_tensor(c.qkv_output.shape(), gen);
  c.at["input"] = to_double(x);
  c.forward = [](const Params& p) {
    const Vec &in = p.at("input"), &w = p.at("weight");
    Vec y(in.size());
    for (size_t r = 0; r < in.size() / 6; ++r) {
      double ms = 0;
      for (size_t i = 0; i < 6; ++i) ms += in[r * 6 + i] * in[r * 6 + i] / 6.0;
      for (size_t i = 0; i < 6; ++i) y[r * 6 + i] = w[i] * in[r * 6 + i] / std::sqrt(ms + 1e-5);
    }
    return y;
  };
  Tensor dx = norm.backward(c.g);
  c.qkv_grads = grads_of(norm);
  c.qkv_grads["input"] = dx;
  check(c);
}

// The SwiGLU feed-forward: down(silu(gate(x)) * up(x)), no biases.
TEST(BackwardFiniteDifferences, SwiGLUFeedForward) {
  Generator gen(22);
  SwiGLUFeedForward ff(5, 7, gen);
  Tensor x = random_tensor({2, 3, 5}, gen, 2.0);  // wide enough that silu's curve matters
  GradCase c{"SwiGLUFeedForward", params_of(ff), nullptr, ff.forward(x), {}, {}};
  c.g = random_tensor(c.qkv_output.shape(), gen);
  c.at["input"] = to_double(x);
  c.forward = [](const Params& p) {
    const Vec g = ref_linear(p.at("input"), 6, 5, p.at("gate_proj.weight"), 7, nullptr);
    const Vec u = ref_linear(p.at("input"), 6, 5, p.at("up_proj.weight"), 7, nullptr);
    Vec h(g.size());
    for (size_t i = 0; i < g.size(); ++i) h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return ref_linear(h, 6, 7, p.at("down_proj.weight"), 5, nullptr);
  };
  Tensor dx = ff.backward(c.g);
  c.qkv_grads = grads_of(ff);
  c.qkv_grads["input"] = dx;
  check(c);
  // the draw order: gate, up, down, each as nn.Linear(bias=False) from the same generator
  Generator again(22);
  Linear gate(5, 7, false, again), up(5, 7, false, again), down(7, 5, false, again);
  EXPECT_EQ(ff.gate_proj.weight.to_vector(), gate.weight.to_vector());
  EXPECT_EQ(ff.up_proj.weight.to_vector(), up.weight.to_vector());
  EXPECT_EQ(ff.down_proj.weight.to_vector(), down.weight.to_vector());
}

TEST(BackwardFiniteDifferences, EmbeddingAccumulatesRepeatedRowsAndPositional) {
  Generator gen(3);
  Embedding emb(6, 4, gen);
  const std::vector<int64_t> ids = {1, 4, 1, 0, 5, 1};  // row 1 three times; rows 2, 3 unused
  GradCase c{"Embedding", params_of(emb), nullptr, emb.forward(ids, {2, 3}), {}, {}};
  c.g = random_tensor({2, 3, 4}, gen);
  emb.backward(c.g);
  c.qkv_grads["weight"] = emb.dweight;
  c.forward = [ids](const Params& p) {
    Vec y;
    for (int64_t id : ids)
      for (int64_t j = 0; j < 4; ++j) y.push_back(p.at("weight")[static_cast<size_t>(id * 4 + j)]);
    return y;
  };
  check(c);

  PositionalEmbedding pos(7, 3, gen);
  GradCase d{"PositionalEmbedding", params_of(pos), nullptr, pos.forward(5), {}, {}};
  d.g = random_tensor({5, 3}, gen);
  pos.backward(d.g);
  d.qkv_grads["weight"] = pos.table.dweight;
  d.forward = [](const Params& p) { return Vec(p.at("weight").begin(), p.at("weight").begin() + 15); };
  check(d);
}

TEST(BackwardFiniteDifferences, DropoutUsesTheForwardMask) {
  Generator gen(5);
  Dropout drop(0.4, gen);
  drop.train();
  Tensor x = random_tensor({3, 7}, gen);
  GradCase c{"Dropout", {{"input", to_double(x)}}, nullptr, drop.forward(x), {}, {}};
  Vec noise = to_double(drop.last_noise());
  ASSERT_EQ(noise.size(), 21u);
  c.g = random_tensor({3, 7}, gen);
  c.qkv_grads["input"] = drop.backward(c.g);
  c.forward = [noise](const Params& p) {
    Vec y = p.at("input");
    for (size_t i = 0; i < y.size(); ++i) y[i] *= noise[i];
    return y;
  };
  check(c);
  drop.eval();
  drop.forward(x);
  EXPECT_EQ(max_abs_diff(drop.backward(c.g), c.g), 0.0);
}

TEST(BackwardFiniteDifferences, SoftmaxIncludingFullyMaskedRows) {
  Generator gen(8);
  Tensor x = random_tensor({3, 5}, gen, 2.0);
  const float inf = std::numeric_limits<float>::infinity();
  for (int j = 0; j < 5; ++j) x.at({1, j}) = -inf;  // a fully masked row
  x.at({2, 0}) = -inf;                                // a partly masked one
  Tensor y = softmax(x, -1);
  Tensor g = random_tensor({3, 5}, gen);
  GradCase c{"softmax", {{"input", to_double(x)}}, nullptr, y, g, {{"input", softmax_backward(y, g, -1)}}};
  // -inf entries stay -inf under perturbation (x + h = -inf), so their gradient is 0 either way.
  c.forward = [](const Params& p) {
    Vec z = p.at("input");
    for (int r = 0; r < 3; ++r) ref_softmax_row(z.data() + r * 5, 5);
    return z;
  };
  check(c);
  for (int j = 0; j < 5; ++j) EXPECT_EQ(c.qkv_grads["input"].at({1, j}), 0.0f);
}

// --- attention modules ----------------------------------------------------------------------------

// The book's causal attention over (B, T, C) projections held in double: context (B, T, H * D).
// Head h of batch b reads columns [h D, (h+1) D) of q, k, v (B, T, H * D).
Vec ref_heads(const Vec& q, const Vec& k, const Vec& v, int64_t B, int64_t T, int64_t H, int64_t D,
              const std::function<bool(int64_t, int64_t)>& blocked, const std::vector<Vec>* noise) {
  Vec out(static_cast<size_t>(B * T * H * D));
  const int64_t row = H * D;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::function<double(int64_t, int64_t)> z;
      if (noise) {
        const Vec* n = &(*noise)[static_cast<size_t>(b * H + h)];
        z = [n, T](int64_t t, int64_t s) { return (*n)[static_cast<size_t>(t * T + s)]; };
      }
      const int64_t base = b * T * row + h * D;
      ref_attention({&q, base, row}, {&k, base, row}, {&v, base, row}, T, T, D, D, std::sqrt(static_cast<double>(D)),
                    blocked, nullptr, z, out, base, row);
    }
  return out;
}

// Dropout noise of a (B, H, T, T) or (B, T, T) tensor, split per (b, h) matrix.
std::vector<Vec> split_noise(const Tensor& noise, int64_t mats, int64_t T) {
  std::vector<Vec> out;
  if (!noise.defined()) return out;
  Vec all = to_double(noise);
  for (int64_t m = 0; m < mats; ++m)
    out.emplace_back(all.begin() + m * T * T, all.begin() + (m + 1) * T * T);
  return out;
}

TEST(BackwardFiniteDifferences, SelfAttentionV1AndV2) {
  Generator gen(21);
  SelfAttentionV1 v1(3, 4, gen, MatrixInit::kRandn);
  Tensor x = random_tensor({5, 3}, gen);
  GradCase c{"SelfAttentionV1", params_of(v1), nullptr, v1.forward(x), {}, {}};
  c.at["input"] = to_double(x);
  c.g = random_tensor({5, 4}, gen);
  Tensor dx1 = v1.backward(c.g);
  c.qkv_grads = grads_of(v1);  // views of dW_query, dW_key, dW_value
  c.qkv_grads["input"] = dx1;
  c.forward = [](const Params& p) {
    const Vec& in = p.at("input");
    Vec q = ref_matmul(in, 5, 3, p.at("W_query"), 4), k = ref_matmul(in, 5, 3, p.at("W_key"), 4),
        v = ref_matmul(in, 5, 3, p.at("W_value"), 4);
    return ref_heads(q, k, v, 1, 5, 1, 4, nullptr, nullptr);
  };
  check(c);

  SelfAttentionV2 v2(3, 4, /*qkv_bias=*/true, gen);
  GradCase d{"SelfAttentionV2", params_of(v2), nullptr, v2.forward(x), {}, {}};
  d.at["input"] = to_double(x);
  d.g = random_tensor({5, 4}, gen);
  Tensor dx = v2.backward(d.g);
  d.qkv_grads = grads_of(v2);
  d.qkv_grads["input"] = dx;
  d.forward = [](const Params& p) {
    const Vec& in = p.at("input");
    Vec q = ref_linear(in, 5, 3, p.at("W_query.weight"), 4, &p.at("W_query.bias"));
    Vec k = ref_linear(in, 5, 3, p.at("W_key.weight"), 4, &p.at("W_key.bias"));
    Vec v = ref_linear(in, 5, 3, p.at("W_value.weight"), 4, &p.at("W_value.bias"));
    return ref_heads(q, k, v, 1, 5, 1, 4, nullptr, nullptr);
  };
  check(d);
}

std::function<bool(int64_t, int64_t)> mask_of(const Tensor& mask) {
  Vec m = to_double(mask);
  const int64_t n = mask.size(1);
  return [m, n](int64_t t, int64_t s) { return m[static_cast<size_t>(t * n + s)] != 0.0; };
}

TEST(BackwardFiniteDifferences, CausalAttentionWithDropoutAndFullyMaskedRows) {
  for (bool tril_bug : {false, true}) {
    Generator gen(31 + tril_bug);
    const AttentionConfig cfg = attention_config("causal-attention", 3, 4, 6, 0.3, 1, true);
    CausalAttention ca(cfg, gen);
    // Notebook 004's bug: a tril mask hides every key of the last row.
    if (tril_bug) ca.mask.load(tril(Tensor::ones({6, 6})));
    ca.train();
    Tensor x = random_tensor({2, 5, 3}, gen);
    GradCase c{str("CausalAttention tril_bug=", tril_bug), params_of(ca), nullptr, ca.forward(x), {}, {}};
    c.at["input"] = to_double(x);
    c.g = random_tensor({2, 5, 4}, gen);
    Tensor dx = ca.backward(c.g);
    c.qkv_grads = grads_of(ca);
    c.qkv_grads["input"] = dx;
    std::vector<Vec> noise = split_noise(ca.dropout.last_noise(), 2, 5);
    ASSERT_EQ(noise.size(), 2u);
    auto blocked = mask_of(ca.mask.to_tensor());
    c.forward = [noise, blocked](const Params& p) {
      const Vec& in = p.at("input");
      Vec q = ref_linear(in, 10, 3, p.at("W_query.weight"), 4, &p.at("W_query.bias"));
      Vec k = ref_linear(in, 10, 3, p.at("W_key.weight"), 4, &p.at("W_key.bias"));
      Vec v = ref_linear(in, 10, 3, p.at("W_value.weight"), 4, &p.at("W_value.bias"));
      return ref_heads(q, k, v, 2, 5, 1, 4, blocked, &noise);
    };
    check(c);
  }
}

TEST(BackwardFiniteDifferences, MultiHeadAttentionWrapper) {
  Generator gen(41);
  const AttentionConfig cfg = attention_config("mha-wrapper", 3, 2, 4, 0.25, 3, false);
  MultiHeadAttentionWrapper w(cfg, gen);
  w.train();
  Tensor x = random_tensor({2, 4, 3}, gen);
  GradCase c{"MultiHeadAttentionWrapper", params_of(w), nullptr, w.forward(x), {}, {}};
  c.at["input"] = to_double(x);
  c.g = random_tensor({2, 4, 6}, gen);
  Tensor dx = w.backward(c.g);
  c.qkv_grads = grads_of(w);
  c.qkv_grads["input"] = dx;
  std::vector<std::vector<Vec>> noise;
  for (CausalAttention& h : w.heads) noise.push_back(split_noise(h.dropout.last_noise(), 2, 4));
  c.forward = [noise](const Params& p) {
    const Vec& in = p.at("input");
    Vec out(2 * 4 * 6);
    for (int h = 0; h < 3; ++h) {
      const std::string n = "heads." + std::to_string(h) + ".";
      Vec q = ref_linear(in, 8, 3, p.at(n + "W_query.weight"), 2, nullptr);
      Vec k = ref_linear(in, 8, 3, p.at(n + "W_key.weight"), 2, nullptr);
      Vec v = ref_linear(in, 8, 3, p.at(n + "W_value.weight"), 2, nullptr);
      Vec y = ref_heads(q, k, v, 2, 4, 1, 2, [](int64_t t, int64_t s) { return s > t; }, &noise[static_cast<size_t>(h)]);
      for (int r = 0; r < 8; ++r)
        for (int j = 0; j < 2; ++j) out[static_cast<size_t>(r * 6 + h * 2 + j)] = y[static_cast<size_t>(r * 2 + j)];
    }
    return out;
  };
  check(c);
}

Vec ref_mha(const Params& p, const std::string& prefix, const Vec& x, int64_t B, int64_t T, int64_t C, int64_t d_out,
            int64_t H, bool bias, const std::function<bool(int64_t, int64_t)>& blocked, const std::vector<Vec>* noise) {
  auto b = [&](const char* w) { return bias ? &p.at(prefix + w + ".bias") : nullptr; };
  Vec q = ref_linear(x, B * T, C, p.at(prefix + "W_query.weight"), d_out, b("W_query"));
  Vec k = ref_linear(x, B * T, C, p.at(prefix + "W_key.weight"), d_out, b("W_key"));
  Vec v = ref_linear(x, B * T, C, p.at(prefix + "W_value.weight"), d_out, b("W_value"));
  Vec ctx = ref_heads(q, k, v, B, T, H, d_out / H, blocked, noise);
  return ref_linear(ctx, B * T, d_out, p.at(prefix + "out_proj.weight"), d_out, &p.at(prefix + "out_proj.bias"));
}

TEST(BackwardFiniteDifferences, MultiHeadAttention) {
  for (double p_drop : {0.0, 0.3}) {
    Generator gen(51);
    const AttentionConfig cfg = attention_config("mha", 3, 6, 5, p_drop, 3, true);
    MultiHeadAttention mha(cfg, gen);
    mha.train();
    Tensor x = random_tensor({2, 5, 3}, gen);
    GradCase c{str("MultiHeadAttention dropout=", p_drop), params_of(mha), nullptr, mha.forward(x), {}, {}};
    c.at["input"] = to_double(x);
    c.g = random_tensor({2, 5, 6}, gen);
    Tensor dx = mha.backward(c.g);
    c.qkv_grads = grads_of(mha);
    c.qkv_grads["input"] = dx;
    std::vector<Vec> noise = split_noise(mha.dropout.last_noise(), 2 * 3, 5);
    const std::vector<Vec>* n = noise.empty() ? nullptr : &noise;
    auto blocked = mask_of(mha.mask.to_tensor());
    c.forward = [noise, n, blocked](const Params& p) {
      return ref_mha(p, "", p.at("input"), 2, 5, 3, 6, 3, true, blocked, n ? &noise : nullptr);
    };
    check(c);
  }
}

TEST(BackwardFiniteDifferences, ScaledDotProductAttentionMasksAndBroadcasting) {
  const float inf = std::numeric_limits<float>::infinity();
  for (MaskKind kind : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kAdditive, MaskKind::kBlocked}) {
    Generator gen(61);
    // q (2, 4, 3), k (1, 5, 3) and v (5, 2) broadcast against q's leading dim.
    Tensor q = random_tensor({2, 4, 3}, gen), k = random_tensor({1, 5, 3}, gen), v = random_tensor({5, 2}, gen);
    Tensor mask = kind == MaskKind::kAdditive ? random_tensor({4, 5}, gen) : Tensor::zeros({4, 5});
    for (int s = 0; s < 5; ++s) mask.at({2, s}) = kind == MaskKind::kAdditive ? -inf : 1.0f;  // row 2: all hidden
    if (kind == MaskKind::kBlocked) mask.at({0, 3}) = 1.0f;
    if (kind == MaskKind::kAdditive) mask.at({1, 1}) = -inf;
    const Tensor* m = kind == MaskKind::kNone || kind == MaskKind::kCausal ? nullptr : &mask;
    SdpaResult r = scaled_dot_product_attention(q, k, v, m, kind);
    Tensor g = random_tensor(r.output.shape(), gen);
    SdpaGrads grads = scaled_dot_product_attention_backward(g, q, k, v, r, m, kind);
    GradCase c{str("sdpa kind=", static_cast<int>(kind)), {{"q", to_double(q)}, {"k", to_double(k)}, {"v", to_double(v)}},
           nullptr, r.output, g, {{"q", grads.dq}, {"k", grads.dk}, {"v", grads.dv}}};
    Vec mv = to_double(mask);
    c.forward = [mv, kind](const Params& p) {
      Vec out(2 * 4 * 2);
      std::function<bool(int64_t, int64_t)> blocked;
      std::function<double(int64_t, int64_t)> additive;
      if (kind == MaskKind::kBlocked) blocked = [mv](int64_t t, int64_t s) { return mv[static_cast<size_t>(t * 5 + s)] != 0.0; };
      if (kind == MaskKind::kAdditive) additive = [mv](int64_t t, int64_t s) { return mv[static_cast<size_t>(t * 5 + s)]; };
      if (kind == MaskKind::kCausal) blocked = [](int64_t t, int64_t s) { return s > t; };  // top-left aligned
      for (int64_t b = 0; b < 2; ++b)
        ref_attention({&p.at("q"), b * 12, 3}, {&p.at("k"), 0, 3}, {&p.at("v"), 0, 2}, 4, 5, 3, 2, std::sqrt(3.0), blocked,
                      additive, nullptr, out, b * 8, 2);
      return out;
    };
    check(c);
  }
}

TEST(ScaledDotProductAttention, AMaskIsGivenExactlyWhenItsKindTakesOne) {
  Generator gen(62);
  const Tensor q = random_tensor({3, 2}, gen), mask = Tensor::zeros({3, 3});
  for (MaskKind kind : {MaskKind::kAdditive, MaskKind::kBlocked})
    EXPECT_THROW(scaled_dot_product_attention(q, q, q, nullptr, kind), Error) << static_cast<int>(kind);
  for (MaskKind kind : {MaskKind::kNone, MaskKind::kCausal})
    EXPECT_THROW(scaled_dot_product_attention(q, q, q, &mask, kind), Error) << static_cast<int>(kind);
  // The causal kind is the book's triu(ones(T, S), 1) buffer as a boolean mask.
  const Tensor causal = triu(Tensor::ones({3, 3}), 1);
  EXPECT_EQ(max_abs_diff(scaled_dot_product_attention(q, q, q, nullptr, MaskKind::kCausal).weights,
                         scaled_dot_product_attention(q, q, q, &causal, MaskKind::kBlocked).weights),
            0.0);
}

// --- loss and the whole model -----------------------------------------------------------------------

double ref_cross_entropy(const Vec& logits, const std::vector<int64_t>& targets, int64_t V) {
  double total = 0.0;
  int count = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] == -100) continue;
    const double* row = logits.data() + i * static_cast<size_t>(V);
    double m = kNegInf, s = 0.0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, row[j]);
    for (int64_t j = 0; j < V; ++j) s += std::exp(row[j] - m);
    total += -(row[targets[i]] - m - std::log(s));
    ++count;
  }
  return total / count;
}

TEST(BackwardFiniteDifferences, CrossEntropyWithIgnoredTargets) {
  Generator gen(71);
  Tensor logits = random_tensor({2, 3, 5}, gen, 2.0);
  const std::vector<int64_t> targets = {4, -100, 0, 2, 2, -100};
  CrossEntropyLoss ce;
  const float loss = ce.forward(logits, targets);
  EXPECT_EQ(ce.count(), 4);
  GradCase c{"cross_entropy", {{"logits", to_double(logits)}}, nullptr, Tensor::scalar(loss), Tensor::scalar(1.0f),
         {{"logits", ce.backward()}}};
  c.forward = [targets](const Params& p) { return Vec{ref_cross_entropy(p.at("logits"), targets, 5)}; };
  check(c);
  for (int j = 0; j < 5; ++j) EXPECT_EQ(c.qkv_grads["logits"].at({0, 1, j}), 0.0f) << "ignored rows get no gradient";
}

TEST(BackwardFiniteDifferences, AttentionLanguageModelEndToEnd) {
  Generator gen(81);
  LMConfig cfg;
  cfg.vocab_size = 7;
  cfg.context_length = 5;
  cfg.d_model = 4;
  cfg.attention.heads = 2;
  cfg.num_layers = 2;
  cfg.attention.dropout = 0.2;
  set_head_dim(cfg);
  cfg.qkv_bias = true;
  DecoderModel lm(lm_spec(cfg), gen);
  lm.train();
  const std::vector<int64_t> ids = {1, 3, 3, 6, 0, 2, 5, 5};  // (2, 4)
  const std::vector<int64_t> targets = {3, 3, 6, -100, 2, 5, 5, 1};
  Tensor logits = lm.forward(ids, 2, 4);
  CrossEntropyLoss ce;
  const float loss = ce.forward(logits, targets);
  lm.backward(ce.backward());
  std::vector<std::vector<Vec>> noise;
  for (DecoderBlock& b : lm.blocks) noise.push_back(split_noise(b.att->dropout.last_noise(), 4, 4));
  GradCase c{"AttentionLM", params_of(lm), nullptr, Tensor::scalar(loss), Tensor::scalar(1.0f), grads_of(lm)};
  c.forward = [ids, targets, noise](const Params& p) {
    Vec x(2 * 4 * 4);
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 4; ++j)
        x[static_cast<size_t>(i * 4 + j)] =
            p.at("tok_emb.weight")[static_cast<size_t>(ids[static_cast<size_t>(i)] * 4 + j)] +
            p.at("pos_emb.weight")[static_cast<size_t>((i % 4) * 4 + j)];
    for (int b = 0; b < 2; ++b) {
      Vec y = ref_mha(p, "blocks." + std::to_string(b) + ".", x, 2, 4, 4, 4, 2, true,
                      [](int64_t t, int64_t s) { return s > t; }, &noise[static_cast<size_t>(b)]);
      for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    }
    Vec ref_logits = ref_linear(x, 8, 4, p.at("out_head.weight"), 7, &p.at("out_head.bias"));
    return Vec{ref_cross_entropy(ref_logits, targets, 7)};
  };
  check(c);
}

// --- gradients accumulate like PyTorch's .grad ------------------------------------------------------

TEST(Gradients, AccumulateAcrossCallsUntilZeroGrad) {
  Generator gen(91);
  const AttentionConfig cfg = attention_config("mha", 3, 4, 6, 0.0, 2, true);
  MultiHeadAttention mha(cfg, gen);
  Tensor x = random_tensor({2, 6, 3}, gen), g = random_tensor({2, 6, 4}, gen);
  mha.forward(x);
  mha.backward(g);
  std::map<std::string, Tensor> once;
  for (const auto& [name, t] : grads_of(mha)) once[name] = t.clone();
  mha.forward(x);
  mha.backward(g);
  for (const auto& [name, t] : grads_of(mha)) {
    EXPECT_GT(max_abs_diff(once[name], Tensor::zeros(t.shape())), 0.0) << name;
    EXPECT_LE(max_abs_diff(t, mul(once[name], 2.0f)), 1e-6 * (1 + max_abs_diff(once[name], Tensor::zeros(t.shape()))))
        << name;
  }
  mha.zero_grad();
  for (const auto& [name, t] : grads_of(mha)) EXPECT_EQ(max_abs_diff(t, Tensor::zeros(t.shape())), 0.0) << name;
  for (const StateEntry& e : mha.state_dict()) EXPECT_EQ(e.grad == nullptr, !e.is_parameter) << e.name;
}

TEST(Gradients, BackwardWithAMismatchedShapeSaysSo) {
  Generator gen(1);
  Linear lin(3, 2, true, gen);
  lin.forward(Tensor::zeros({4, 3}));
  try {
    lin.backward(Tensor::zeros({4, 3}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(4, 2)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
