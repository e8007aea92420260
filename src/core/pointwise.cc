// GELU and AdamW's update, element by element. See include/qkv/core/pointwise.h. Compiled once per
// SIMD target by Highway and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/pointwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "qkv/core/error.h"
#include "qkv/core/pointwise.h"

#ifndef QKV_CORE_POINTWISE_ONCE_
#define QKV_CORE_POINTWISE_ONCE_
namespace qkv::pointwise_detail {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;
// Elements per task: large enough that a task outweighs its hand-out, small enough that two
// threads share a (512 x 3072) activation evenly. Fixed, so results never depend on the threads.
constexpr int64_t kChunk = 16384;
}  // namespace qkv::pointwise_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace qkv::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// GELU through the logistic function, which needs no cancellation: with z = 2u,
//   0.5 (1 + tanh(u)) = s = 1 / (1 + e^-z),   0.5 (1 - tanh(u)) = 1 - s = e^-z s,
// so gelu(x) = x s and gelu'(x) = s + 2 x s (1 - s) k (1 + 3 c x^2), each to a few ulps of its own
// size for every x (1 + tanh(u) computed as such loses all its digits for x below about -4).
// p = 1 / (1 + e^-|z|) and q = 1 - p = e^-|z| p are exact to a few ulps; s and 1 - s are p and q
// or q and p by the sign of z.
struct Logistic {
  VF s, one_minus_s;
};
HWY_INLINE Logistic GeluLogistic(DF d, VF x) {
  const VF two_k = hn::Set(d, static_cast<float>(2.0 * pointwise_detail::kSqrt2OverPi));
  const VF c = hn::Set(d, static_cast<float>(pointwise_detail::kCubic));
  const VF one = hn::Set(d, 1.0f);
  const VF z = hn::Mul(two_k, hn::MulAdd(c, hn::Mul(hn::Mul(x, x), x), x));
  const VF e = hn::Exp(d, hn::Neg(hn::Abs(z)));
  const VF p = hn::Div(one, hn::Add(one, e)), q = hn::Mul(e, p);
  const auto negative = hn::Lt(z, hn::Zero(d));
  return {hn::IfThenElse(negative, q, p), hn::IfThenElse(negative, p, q)};
}

// y = x s; the tail (n not a multiple of the lanes) through a padded vector.
void GeluSpan(const float* x, float* y, size_t n) {
  const DF d;
  const size_t L = hn::Lanes(d);
  auto one_vector = [&](VF v) { return hn::Mul(v, GeluLogistic(d, v).s); };
  size_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(one_vector(hn::LoadU(d, x + i)), d, y + i);
  if (i < n) {
    HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
    std::copy(x + i, x + n, buf);
    hn::Store(one_vector(hn::Load(d, buf)), d, buf);
    std::copy(buf, buf + (n - i), y + i);
  }
}

// dx = dy (s + 2 x s (1 - s) k (1 + 3 c x^2)).
void GeluBackwardSpan(const float* x, const float* dy, float* dx, size_t n) {
  const DF d;
  const size_t L = hn::Lanes(d);
  const VF two_k = hn::Set(d, static_cast<float>(2.0 * pointwise_detail::kSqrt2OverPi));
  const VF c3 = hn::Set(d, static_cast<float>(3.0 * pointwise_detail::kCubic));
  const VF one = hn::Set(d, 1.0f);
  const VF big = hn::Set(d, 1e15f);  // past it s (1 - s) is 0; dz/dx stays finite there
  auto one_vector = [&](VF v, VF g) {
    const Logistic l = GeluLogistic(d, v);
    const VF vc = hn::Min(hn::Abs(v), big);
    const VF dz = hn::Mul(two_k, hn::MulAdd(c3, hn::Mul(vc, vc), one));  // dz/dx
    const VF slope = hn::MulAdd(hn::Mul(hn::Mul(v, l.s), l.one_minus_s), dz, l.s);
    return hn::Mul(g, slope);
  };
  size_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(one_vector(hn::LoadU(d, x + i), hn::LoadU(d, dy + i)), d, dx + i);
  if (i < n) {
    HWY_ALIGN float bx[hn::MaxLanes(d)] = {};
    HWY_ALIGN float bg[hn::MaxLanes(d)] = {};
    std::copy(x + i, x + n, bx);
    std::copy(dy + i, dy + n, bg);
    hn::Store(one_vector(hn::Load(d, bx), hn::Load(d, bg)), d, bx);
    std::copy(bx, bx + (n - i), dx + i);
  }
}

// SwiGLU's gate: s = sigmoid(g) = 1 / (1 + e^-g), as p = 1 / (1 + e^-|g|) and e^-|g| p by g's sign
// (no overflow for any g).
HWY_INLINE VF Sigmoid(DF d, VF g) {
  const VF one = hn::Set(d, 1.0f);
  const VF e = hn::Exp(d, hn::Neg(hn::Abs(g)));
  const VF p = hn::Div(one, hn::Add(one, e));
  return hn::IfThenElse(hn::Lt(g, hn::Zero(d)), hn::Mul(e, p), p);
}

// h = g s u.
void SwigluSpan(const float* g, const float* u, float* h, size_t n) {
  const DF d;
  const size_t L = hn::Lanes(d);
  size_t i = 0;
  for (; i + L <= n; i += L) {
    const VF gv = hn::LoadU(d, g + i);
    hn::StoreU(hn::Mul(hn::Mul(gv, Sigmoid(d, gv)), hn::LoadU(d, u + i)), d, h + i);
  }
  if (i < n) swiglu_reference(g + i, u + i, h + i, static_cast<int64_t>(n - i));
}

// y = x s.
void SiluSpan(const float* x, float* y, size_t n) {
  const DF d;
  const size_t L = hn::Lanes(d);
  size_t i = 0;
  for (; i + L <= n; i += L) {
    const VF xv = hn::LoadU(d, x + i);
    hn::StoreU(hn::Mul(xv, Sigmoid(d, xv)), d, y + i);
  }
  if (i < n) silu_reference(x + i, y + i, static_cast<int64_t>(n - i));
}

// dg = dh u s (1 + g (1 - s)), du = dh g s.
void SwigluBackwardSpan(const float* g, const float* u, const float* dh, float* dg, float* du, size_t n) {
  const DF d;
  const size_t L = hn::Lanes(d);
  const VF one = hn::Set(d, 1.0f);
  size_t i = 0;
  for (; i + L <= n; i += L) {
    const VF gv = hn::LoadU(d, g + i), uv = hn::LoadU(d, u + i), dv = hn::LoadU(d, dh + i);
    const VF sv = Sigmoid(d, gv);
    const VF slope = hn::MulAdd(gv, hn::Sub(one, sv), one);
    hn::StoreU(hn::Mul(hn::Mul(hn::Mul(dv, uv), sv), slope), d, dg + i);
    hn::StoreU(hn::Mul(hn::Mul(dv, gv), sv), d, du + i);
  }
  if (i < n) swiglu_backward_reference(g + i, u + i, dh + i, dg + i, du + i, static_cast<int64_t>(n - i));
}

// AdamW, lane by lane, the reference's operations in its order (Mul and Add, never MulAdd).
void AdamWSpan(float* HWY_RESTRICT w, const float* HWY_RESTRICT g, float* HWY_RESTRICT m, float* HWY_RESTRICT v,
               size_t n, const AdamWScalars& s) {
  const DF d;
  const size_t L = hn::Lanes(d);
  const VF decay = hn::Set(d, s.decay), b1 = hn::Set(d, s.b1), a1 = hn::Set(d, s.a1), b2 = hn::Set(d, s.b2),
           a2 = hn::Set(d, s.a2), bc2 = hn::Set(d, s.bc2_sqrt), eps = hn::Set(d, s.eps),
           step = hn::Set(d, s.neg_step_size);
  size_t i = 0;
  for (; i + L <= n; i += L) {
    const VF gi = hn::LoadU(d, g + i);
    const VF wi = hn::Mul(hn::LoadU(d, w + i), decay);
    const VF mi = hn::Add(hn::Mul(hn::LoadU(d, m + i), b1), hn::Mul(a1, gi));
    const VF vi = hn::Add(hn::Mul(hn::LoadU(d, v + i), b2), hn::Mul(hn::Mul(a2, gi), gi));
    const VF denom = hn::Add(hn::Div(hn::Sqrt(vi), bc2), eps);
    hn::StoreU(mi, d, m + i);
    hn::StoreU(vi, d, v + i);
    hn::StoreU(hn::Add(wi, hn::Mul(step, hn::Div(mi, denom))), d, w + i);
  }
  if (i < n) adamw_update_reference(w + i, g + i, m + i, v + i, static_cast<int64_t>(n - i), s);
}

// scan_logits' lanes: each keeps its largest (strict >, so its first) and that entry's index, and
// ORs its NaN / +inf and above -inf tests; the lanes are then combined (the largest value, at the
// smallest index among equals), and the tail past the last whole vector taken one by one after
// them (its indices are the largest). 32-bit indices: the caller checks n < 2^31.
LogitsScan ScanLogitsSpan(const float* v, size_t n) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  using VI = hn::Vec<decltype(di)>;
  const size_t L = hn::Lanes(d);
  const VF inf = hn::Set(d, HUGE_VALF), minus_inf = hn::Set(d, -HUGE_VALF);
  VF top = minus_inf, bad = hn::Zero(d), finite = hn::Zero(d);
  VI at = hn::Set(di, -1), index = hn::Iota(di, 0);
  const VI step = hn::Set(di, static_cast<int32_t>(L));
  size_t i = 0;
  for (; i + L <= n; i += L) {
    const VF x = hn::LoadU(d, v + i);
    const auto above = hn::Gt(x, top);
    top = hn::IfThenElse(above, x, top);
    at = hn::IfThenElse(hn::RebindMask(di, above), index, at);
    bad = hn::Or(bad, hn::VecFromMask(d, hn::Or(hn::IsNaN(x), hn::Eq(x, inf))));
    finite = hn::Or(finite, hn::VecFromMask(d, hn::Ne(x, minus_inf)));
    index = hn::Add(index, step);
  }
  HWY_ALIGN float tops[hn::MaxLanes(d)];
  HWY_ALIGN int32_t ats[hn::MaxLanes(di)];
  hn::Store(top, d, tops);
  hn::Store(at, di, ats);
  LogitsScan out;
  out.bad = !hn::AllFalse(d, hn::MaskFromVec(bad));
  out.any_finite = !hn::AllFalse(d, hn::MaskFromVec(finite));
  float best_value = -HUGE_VALF;
  int64_t best = -1;
  for (size_t l = 0; l < L; ++l) {
    if (ats[l] < 0) continue;  // the lane saw nothing above -inf
    if (tops[l] > best_value || (tops[l] == best_value && ats[l] < best)) best_value = tops[l], best = ats[l];
  }
  for (; i < n; ++i) {
    const float x = v[i];
    if (x > best_value) best_value = x, best = static_cast<int64_t>(i);
    out.bad |= std::isnan(x) || x == HUGE_VALF;
    out.any_finite |= x != -HUGE_VALF;
  }
  out.argmax = best < 0 ? 0 : best;
  return out;
}

}  // namespace qkv::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv {
HWY_EXPORT(GeluSpan);
HWY_EXPORT(GeluBackwardSpan);
HWY_EXPORT(AdamWSpan);
HWY_EXPORT(SwigluSpan);
HWY_EXPORT(SiluSpan);
HWY_EXPORT(SwigluBackwardSpan);
HWY_EXPORT(ScanLogitsSpan);

namespace {
using pointwise_detail::kChunk;
// fn(begin, count) over [0, n) in chunks of kChunk, on the pool (null: the default pool).
template <typename Fn>
void for_chunks(int64_t n, ThreadPool* pool_arg, Fn&& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  auto one = [&](int64_t c) {
    const int64_t b = c * kChunk;
    fn(b, std::min(kChunk, n - b));
  };
  ThreadPool& pool = pool_arg ? *pool_arg : default_pool();
  if (pool.num_threads() == 1 || chunks <= 1) {
    for (int64_t c = 0; c < chunks; ++c) one(c);
  } else {
    pool.parallel_for(chunks, [&](int64_t c, int) { one(c); });
  }
}
}  // namespace

void gelu_tanh(const float* x, float* y, int64_t n, ThreadPool* pool) {
  for_chunks(n, pool, [&](int64_t b, int64_t k) { HWY_DYNAMIC_DISPATCH(GeluSpan)(x + b, y + b, static_cast<size_t>(k)); });
}

void gelu_tanh_backward(const float* x, const float* dy, float* dx, int64_t n, ThreadPool* pool) {
  for_chunks(n, pool, [&](int64_t b, int64_t k) {
    HWY_DYNAMIC_DISPATCH(GeluBackwardSpan)(x + b, dy + b, dx + b, static_cast<size_t>(k));
  });
}

void swiglu(const float* g, const float* u, float* h, int64_t n, ThreadPool* pool) {
  for_chunks(n, pool, [&](int64_t b, int64_t k) {
    HWY_DYNAMIC_DISPATCH(SwigluSpan)(g + b, u + b, h + b, static_cast<size_t>(k));
  });
}

void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                     ThreadPool* pool) {
  for_chunks(n, pool, [&](int64_t b, int64_t k) {
    HWY_DYNAMIC_DISPATCH(SwigluBackwardSpan)(g + b, u + b, dh + b, dg + b, du + b, static_cast<size_t>(k));
  });
}

void silu(const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(SiluSpan)(x, y, static_cast<size_t>(n)); }

void silu_reference(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
  }
}

void swiglu_reference(const float* g, const float* u, float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = g[i];
    h[i] = static_cast<float>(v / (1.0 + std::exp(-v)) * u[i]);
  }
}

void swiglu_backward_reference(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = g[i], s = 1.0 / (1.0 + std::exp(-v)), d = dh[i];
    dg[i] = static_cast<float>(d * u[i] * s * (1.0 + v * (1.0 - s)));
    du[i] = static_cast<float>(d * v * s);
  }
}

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s, ThreadPool* pool) {
  for_chunks(n, pool, [&](int64_t b, int64_t k) {
    HWY_DYNAMIC_DISPATCH(AdamWSpan)(w + b, g + b, m + b, v + b, static_cast<size_t>(k), s);
  });
}

void gelu_tanh_reference(const float* x, float* y, int64_t n) {
  using namespace pointwise_detail;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v))));
  }
}

void gelu_tanh_backward_reference(const float* x, const float* dy, float* dx, int64_t n) {
  using namespace pointwise_detail;
  for (int64_t i = 0; i < n; ++i) {
    // y = 0.5 v (1 + t), t = tanh(u), u = k (v + c v^3):  dy/dv = 0.5 (1 + t) + 0.5 v (1 - t^2) k (1 + 3 c v^2)
    const double v = x[i];
    const double t = std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    const double slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kCubic * v * v);
    dx[i] = static_cast<float>(dy[i] * slope);
  }
}

void adamw_update_reference(float* w, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    w[i] = w[i] * s.decay;                              // param.mul_(1 - lr * weight_decay)
    m[i] = m[i] * s.b1 + s.a1 * g[i];                   // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    v[i] = v[i] * s.b2 + s.a2 * g[i] * g[i];            // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    const float denom = std::sqrt(v[i]) / s.bc2_sqrt + s.eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    w[i] = w[i] + s.neg_step_size * (m[i] / denom);     // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

LogitsScan scan_logits(const float* v, int64_t n) {
  QKV_CHECK(n >= 1 && n <= std::numeric_limits<int32_t>::max(), "scan_logits: n (", n, ") must be in [1, 2^31 - 1]");
  return HWY_DYNAMIC_DISPATCH(ScanLogitsSpan)(v, static_cast<size_t>(n));
}

LogitsScan scan_logits_reference(const float* v, int64_t n) {
  LogitsScan out;
  int64_t best = -1;
  for (int64_t j = 0; j < n; ++j) {
    out.bad |= std::isnan(v[j]) || v[j] == HUGE_VALF;
    out.any_finite |= v[j] != -HUGE_VALF;
    if (v[j] != -HUGE_VALF && !std::isnan(v[j]) && (best < 0 || v[j] > v[best])) best = j;
  }
  out.argmax = best < 0 ? 0 : best;
  return out;
}

}  // namespace qkv
#endif  // HWY_ONCE
