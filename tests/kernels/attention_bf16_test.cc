// The bf16 fused attention (qkv/kernels/attention_bf16.h) against the naive fp32 references run on
// the bf16 inputs widened to float32, forward (o, lse) and backward (dq, dk, dv), over sizes from
// 0 upward, odd T, S, D, D = 64, causal and not, G < H, offsets, window, ALiBi, softcap, additive
// and boolean masks, dropout; each with the bf16 dot product allowed and forced off, on every
// SIMD target this CPU runs.
//
// Tolerances, from where the kernel rounds (attention_bf16.h):
//   o:    the probabilities P are rounded to bf16 (relative error <= 2^-8, half of bf16's 2^-7
//         ulp) before P v, while the normaliser l sums them unrounded, so
//         |o_i - ref_i| <= 2^-8 sum_j w_ij z |v_j| <= 2^-8 z max |v|  (z = 1 / (1 - p) under
//         dropout), plus float32 rounding of the scores and sums (rtol 1e-5). The check is
//         |o - ref| <= 2^-8 z max|v| + 1e-5 (1 + |ref|). Measured (printed by the test, the same on
//         every target, vdpbf16ps or widened): worst 0.18 of the bound, mean 0.015 - the rounding
//         errors of a row's weights do not all have one sign, and |v_j| is rarely max|v|. The test
//         also asserts the worst is above 1/16 of the bound, so P's rounding is really there.
//   lse:  no bf16 rounding reaches it (products of bf16 values are exact in float32): rtol 2e-5.
//   grads: the backward rounds d_o, P z and dS * scale to bf16 before its products (q, k, v are
//         bf16 already), so two checks:
//         - given the reference's o and lse, against attention_backward_reference with the same
//           rounding points (Dtype::kBF16, in double): only float32 arithmetic differs, and where
//           a float32 P z or dS lands on the other side of a bf16 rounding boundary than the
//           double one, one term of a sum moves by a bf16 ulp (2^-8 of the term). The check is
//           max |got - ref| <= 2^-8 max |ref| per tensor (kFlipBound), + 1e-5 (1 + |ref|). Measured
//           (printed): worst 0.08 of it. The same run also measures how far the rounding takes the
//           gradients from the unrounded fp32 reference (4.5e-3 of max |grad|, asserted above half
//           the tight bound): the rounding is really there.
//         - from the bf16 forward's o and lse, against the unrounded fp32 reference: o's error
//           enters D_i = d_o_i . o_i and so dS = P (dP - D_i), on top of the roundings above.
//           Norm-wise: max |got - ref| <= 2^-5 max |ref| per tensor (kGradNormBound), which a
//           wrong pairing or a skipped product would break by orders of magnitude. Measured: worst
//           0.21 of it (6.7e-3 of max |grad|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/attention_bf16.h"
#include "qkv/kernels/simd.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {

// The backward's bounds, as fractions of the largest element of the gradient (file header).
const double kGradNormBound = std::ldexp(1.0, -5);
const double kFlipBound = std::ldexp(1.0, -8);

enum class Layout { kContiguous, kInterleaved, kStridedDim };

// A (B, H, N, D) bf16 array in the asked layout, and its values widened to a contiguous float32 one.
struct BF16Array {
  std::vector<uint16_t> storage;
  std::vector<float> wide;
  ConstHeadsBF16 view;
  ConstHeads widened() const { return ConstHeads::contiguous(wide.data(), view.batch, view.heads, view.tokens, view.dim); }
  float max_abs() const {
    float m = 0;
    for (float x : wide) m = std::max(m, std::fabs(x));
    return m;
  }
};

BF16Array make_bf16(int64_t B, int64_t H, int64_t N, int64_t D, Layout layout, std::mt19937& rng) {
  BF16Array a;
  const int64_t n = B * H * N * D;
  switch (layout) {
    case Layout::kContiguous:
      a.storage.assign(static_cast<size_t>(std::max<int64_t>(n, 1)), 0);
      a.view = ConstHeadsBF16::contiguous(nullptr, B, H, N, D);
      break;
    case Layout::kInterleaved:  // (B, N, H * D + 3)
      a.storage.assign(static_cast<size_t>(std::max<int64_t>(B * N * (H * D + 3), 1)), 0);
      a.view = ConstHeadsBF16::interleaved(nullptr, B, H, N, D, H * D + 3);
      break;
    case Layout::kStridedDim:  // (B, H, D, N) storage
      a.storage.assign(static_cast<size_t>(std::max<int64_t>(n, 1)), 0);
      a.view = {nullptr, B, H, N, D, H * N * D, N * D, 1, N};
      break;
  }
  a.view.data = a.storage.data();
  a.wide.assign(static_cast<size_t>(std::max<int64_t>(n, 1)), 0.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < N; ++t)
        for (int64_t d = 0; d < D; ++d) {
          const uint16_t x = float_to_bf16(normal(rng));
          const_cast<uint16_t*>(a.view.row(b, h, t))[d * a.view.stride_d] = x;
          a.wide[static_cast<size_t>(((b * H + h) * N + t) * D + d)] = bf16_to_float(x);
        }
  return a;
}

struct Bf16Case {
  int64_t B = 1, H = 1, G = 1, T = 1, S = 1, D = 1, Dv = 1;
  MaskKind mask = MaskKind::kNone;
  float dropout = 0.0f;
  Layout layout = Layout::kContiguous;
  int64_t query_offset = 0, key_offset = 0, head_offset = 0, window = 0;
  bool alibi = false;
  float softcap = 0.0f;
  std::string name() const {
    return str("B", B, " H", H, " G", G, " T", T, " S", S, " D", D, " Dv", Dv, " mask", static_cast<int>(mask), " p",
               dropout, " layout", static_cast<int>(layout), " offsets ", query_offset, "/", key_offset, "/",
               head_offset, " window", window, alibi ? " alibi" : "", softcap > 0 ? " softcap" : "");
  }
};

// Max |got - want| over a tensor against `bound` + 1e-5 (1 + |want|) element by element; NaN and
// infinities must match. Returns the worst |got - want| / bound seen (for the printed figures);
// with `typical`, adds the sum of |got - want| / bound and the count of finite elements to it.
double check_close(const char* what, const float* got, const float* want, size_t n, double bound, int* failures,
                   double typical[2] = nullptr) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isinf(w)) {
      if (!(std::isnan(w) ? std::isnan(g) : g == w)) {
        if ((*failures)++ == 0) ADD_FAILURE() << what << "[" << i << "] got " << g << " want " << w;
      }
      continue;
    }
    const double err = std::fabs(g - w);
    if (!(err <= bound + 1e-5 * (1.0 + std::fabs(w)))) {
      if ((*failures)++ == 0) ADD_FAILURE() << what << "[" << i << "] got " << g << " want " << w << " bound " << bound;
    }
    if (bound > 0) worst = std::max(worst, err / bound);
    if (bound > 0 && typical) typical[0] += err / bound, typical[1] += 1;
  }
  return worst;
}

struct Figures {  // the worst error seen, as a fraction of its bound; o's mean (sum, count)
  double o = 0, grads = 0, flips = 0;
  double rounding = 0;  // the worst |grad - unrounded fp32 reference's| / max |grad|
  double o_typical[2] = {0, 0};
};

void check_case(const Bf16Case& c, std::mt19937& rng, ThreadPool* pool, Figures* fig) {
  SCOPED_TRACE(c.name());
  BF16Array q = make_bf16(c.B, c.H, c.T, c.D, c.layout, rng), k = make_bf16(c.B, c.G, c.S, c.D, c.layout, rng),
            v = make_bf16(c.B, c.G, c.S, c.Dv, c.layout, rng);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> mask(static_cast<size_t>(std::max<int64_t>(c.T * (c.S + 2), 1)), 0.0f);
  for (int64_t i = 0; i < c.T; ++i)
    for (int64_t j = 0; j < c.S; ++j) {
      float& x = mask[static_cast<size_t>(i * (c.S + 2) + j)];
      const bool blocked = u(rng) < 0.3f || (c.T > 1 && i == c.T / 2);
      if (c.mask == MaskKind::kAdditive) x = blocked && u(rng) < 0.5f ? -kInf : 4.0f * u(rng) - 2.0f;
      if (c.mask == MaskKind::kBlocked) x = blocked ? 1.0f : 0.0f;
    }
  std::vector<float> slopes(static_cast<size_t>(std::max<int64_t>(c.H, 1)));
  alibi_default_slopes(c.H, slopes.data());
  if (c.H > 1) slopes[1] = -slopes[1];  // a negative slope too
  AttentionOptions opt = testing_support::case_attention_options(c.T, c.D, c.mask, mask.data(), c.S + 2, c.dropout, pool);
  opt.query_offset = c.query_offset;
  opt.key_offset = c.key_offset;
  opt.head_offset = c.head_offset;
  opt.window = c.window;
  opt.alibi_slopes = c.alibi ? slopes.data() : nullptr;
  opt.softcap = c.softcap;

  const size_t no = static_cast<size_t>(std::max<int64_t>(c.B * c.H * c.T * c.Dv, 1));
  const size_t nl = static_cast<size_t>(std::max<int64_t>(c.B * c.H * c.T, 1));
  std::vector<float> o(no, 7.0f), lse(nl, 7.0f), o_ref(no), lse_ref(nl);
  const MutableHeads ov = MutableHeads::contiguous(o.data(), c.B, c.H, c.T, c.Dv);
  attention_forward_bf16(q.view, k.view, v.view, ov, lse.data(), opt);
  attention_forward_reference(q.widened(), k.widened(), v.widened(),
                              MutableHeads::contiguous(o_ref.data(), c.B, c.H, c.T, c.Dv), lse_ref.data(), opt);
  const double z = 1.0 / (1.0 - c.dropout);
  const double o_bound = std::ldexp(1.0, -8) * z * v.max_abs();
  int failures = 0;
  const size_t n_o = static_cast<size_t>(c.B * c.H * c.T * c.Dv), n_l = static_cast<size_t>(c.B * c.H * c.T);
  fig->o = std::max(fig->o, check_close("o", o.data(), o_ref.data(), n_o, o_bound, &failures, fig->o_typical));
  for (size_t i = 0; i < n_l; ++i) {
    const bool ok = std::isinf(lse_ref[i]) ? lse[i] == lse_ref[i]
                                           : std::fabs(lse[i] - lse_ref[i]) <= 2e-5 * (1.0 + std::fabs(lse_ref[i]));
    if (!ok && failures++ == 0) ADD_FAILURE() << "lse[" << i << "] got " << lse[i] << " want " << lse_ref[i];
  }

  // Backward, from the bf16 forward's o and lse.
  std::vector<float> d_o(no);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : d_o) x = normal(rng);
  const ConstHeads dov = ConstHeads::contiguous(d_o.data(), c.B, c.H, c.T, c.Dv);
  const size_t nq = static_cast<size_t>(std::max<int64_t>(c.B * c.H * c.T * c.D, 1));
  const size_t nk = static_cast<size_t>(std::max<int64_t>(c.B * c.G * c.S * c.D, 1));
  const size_t nv = static_cast<size_t>(std::max<int64_t>(c.B * c.G * c.S * c.Dv, 1));
  std::vector<float> dq(nq, 7.0f), dk(nk, 7.0f), dv(nv, 7.0f), dq_ref(nq), dk_ref(nk), dv_ref(nv);
  attention_backward_bf16(q.view, k.view, v.view, ov, dov, lse.data(),
                          MutableHeads::contiguous(dq.data(), c.B, c.H, c.T, c.D),
                          MutableHeads::contiguous(dk.data(), c.B, c.G, c.S, c.D),
                          MutableHeads::contiguous(dv.data(), c.B, c.G, c.S, c.Dv), opt);
  attention_backward_reference(q.widened(), k.widened(), v.widened(), dov,
                               MutableHeads::contiguous(dq_ref.data(), c.B, c.H, c.T, c.D),
                               MutableHeads::contiguous(dk_ref.data(), c.B, c.G, c.S, c.D),
                               MutableHeads::contiguous(dv_ref.data(), c.B, c.G, c.S, c.Dv), opt);
  const size_t n_q = static_cast<size_t>(c.B * c.H * c.T * c.D), n_k = static_cast<size_t>(c.B * c.G * c.S * c.D),
               n_v = static_cast<size_t>(c.B * c.G * c.S * c.Dv);
  const auto max_abs = [](const std::vector<float>& x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(x[i])));
    return m;
  };
  // Each gradient: the kernel's, the fp32 reference's, the reference's with bf16 rounding points.
  struct Grad {
    const char* name;
    const std::vector<float>&got, &ref, &ref16;
    size_t n;
  };
  std::vector<float> dq16(nq), dk16(nk), dv16(nv);
  const Grad grads[] = {{"dq", dq, dq_ref, dq16, n_q}, {"dk", dk, dk_ref, dk16, n_k}, {"dv", dv, dv_ref, dv16, n_v}};
  // From the bf16 forward's o: against the fp32 reference, norm-wise (see the file's header).
  for (const Grad& g : grads) {
    const double bound = kGradNormBound * max_abs(g.ref, g.n);
    fig->grads = std::max(fig->grads, check_close(g.name, g.got.data(), g.ref.data(), g.n, bound, &failures));
  }
  // Given the reference's o and lse: against the reference with the kernel's bf16 rounding points
  // (attention_backward_reference with Dtype::kBF16), so only float32 arithmetic differs - and
  // where a float32 P z or dS lands on the other side of a bf16 rounding boundary than the double
  // one, one term of a sum moves by a bf16 ulp (see the file's header): kFlipBound of the largest
  // gradient.
  const ConstHeads o_given = ConstHeads::contiguous(o_ref.data(), c.B, c.H, c.T, c.Dv);
  attention_backward_bf16(q.view, k.view, v.view, o_given, dov, lse_ref.data(),
                          MutableHeads::contiguous(dq.data(), c.B, c.H, c.T, c.D),
                          MutableHeads::contiguous(dk.data(), c.B, c.G, c.S, c.D),
                          MutableHeads::contiguous(dv.data(), c.B, c.G, c.S, c.Dv), opt);
  attention_backward_reference(q.widened(), k.widened(), v.widened(), dov,
                               MutableHeads::contiguous(dq16.data(), c.B, c.H, c.T, c.D),
                               MutableHeads::contiguous(dk16.data(), c.B, c.G, c.S, c.D),
                               MutableHeads::contiguous(dv16.data(), c.B, c.G, c.S, c.Dv), opt, Dtype::kBF16);
  for (const Grad& g : grads) {
    const double scale = max_abs(g.ref16, g.n);
    fig->flips = std::max(fig->flips, check_close(str(g.name, " given the reference's o").c_str(), g.got.data(),
                                                  g.ref16.data(), g.n, kFlipBound * scale, &failures));
    // How far the rounding takes the gradients from the unrounded ones (the rounding is there).
    for (size_t i = 0; i < g.n; ++i)
      if (scale > 0 && std::isfinite(g.ref[i]))
        fig->rounding = std::max(fig->rounding, std::fabs(g.got[i] - g.ref[i]) / scale);
  }
}

std::vector<Bf16Case> all_cases() {
  std::vector<Bf16Case> cases;
  auto add = [&](Bf16Case c) { cases.push_back(c); };
  // sizes from 0 and 1 up, odd ones
  add({1, 1, 1, 0, 3, 4, 4});
  add({1, 1, 1, 3, 0, 4, 4});
  add({0, 1, 1, 3, 3, 4, 4});
  add({1, 1, 1, 1, 1, 1, 1});
  add({1, 2, 2, 17, 23, 3, 5, MaskKind::kNone, 0.0f, Layout::kStridedDim});
  add({1, 2, 2, 17, 23, 3, 5, MaskKind::kCausal, 0.0f, Layout::kInterleaved});
  add({2, 3, 3, 65, 65, 64, 64, MaskKind::kCausal});
  add({1, 2, 2, 65, 65, 64, 64, MaskKind::kNone, 0.0f, Layout::kInterleaved});
  add({1, 2, 2, 130, 131, 80, 80, MaskKind::kCausal});
  add({1, 1, 1, 49, 97, 33, 7, MaskKind::kNone});
  add({1, 2, 2, 70, 70, 64, 64, MaskKind::kAdditive});
  add({1, 2, 2, 70, 75, 9, 9, MaskKind::kBlocked, 0.0f, Layout::kStridedDim});
  // dropout (the fp32 kernel's mask: the reference draws the same)
  add({1, 2, 2, 100, 100, 64, 64, MaskKind::kCausal, 0.2f});
  add({1, 2, 2, 33, 40, 5, 6, MaskKind::kNone, 0.5f, Layout::kInterleaved});
  // grouped-query heads, offsets, window, ALiBi, softcap
  add({1, 4, 2, 90, 90, 64, 64, MaskKind::kCausal});
  add({2, 6, 1, 40, 41, 16, 16, MaskKind::kNone, 0.1f});
  Bf16Case c{1, 2, 2, 50, 120, 64, 64, MaskKind::kCausal};
  c.query_offset = 70;
  c.head_offset = 3;
  c.dropout = 0.25f;
  add(c);
  c = {1, 2, 2, 60, 60, 32, 32, MaskKind::kCausal};
  c.key_offset = 20;
  add(c);
  c = {1, 2, 2, 150, 150, 64, 64, MaskKind::kCausal};
  c.window = 37;
  add(c);
  c = {1, 4, 2, 80, 80, 64, 64, MaskKind::kCausal};
  c.alibi = true;
  add(c);
  c = {1, 2, 2, 80, 85, 24, 24, MaskKind::kNone};
  c.alibi = true;
  c.softcap = 5.0f;
  add(c);
  c = {1, 2, 1, 64, 64, 64, 64, MaskKind::kCausal};
  c.softcap = 2.0f;
  c.window = 20;
  c.dropout = 0.3f;
  add(c);
  return cases;
}

// Forces the bf16 dot product off or back on for a scope.
class Bf16Dot {
 public:
  explicit Bf16Dot(bool allowed) : before_(set_bf16_dot_allowed(allowed)) {}
  ~Bf16Dot() { set_bf16_dot_allowed(before_); }
  Bf16Dot(const Bf16Dot&) = delete;
  Bf16Dot& operator=(const Bf16Dot&) = delete;

 private:
  bool before_;
};

TEST(FusedAttentionBF16, MatchesTheReferenceOnEveryTargetWithAndWithoutTheDotProduct) {
  const std::vector<int64_t> targets = available_simd_targets();
  ASSERT_FALSE(targets.empty());
  ThreadPool pool(2);
  for (int64_t target : targets) {
    force_simd_target(target);
    for (bool dot : {true, false}) {
      SCOPED_TRACE(str(simd_target_name(target), dot ? " bf16 dot allowed" : " bf16 dot off"));
      const Bf16Dot scope(dot);
      std::mt19937 rng(5);
      Figures fig;
      for (const Bf16Case& c : all_cases()) check_case(c, rng, &pool, &fig);
      // The measured worst errors as fractions of their bounds (see the file's header).
      std::printf("  %s, bf16 dot %s (%s): |o - ref| worst %.3f, mean %.4f of 2^-8 z max|v|; grads: worst %.4f of "
                  "their bound, given the reference's o %.4f of theirs against the rounded reference and %.2e of "
                  "max|grad| from the unrounded one\n",
                  simd_target_name(target).c_str(), dot ? "allowed" : "off",
                  dot && cpu_has_bf16_dot() && simd_target_name(target) == "AVX3" ? "vdpbf16ps" : "widened",
                  fig.o, fig.o_typical[0] / std::max(fig.o_typical[1], 1.0), fig.grads, fig.flips, fig.rounding);
      // The bound is not vacuous: P's rounding shows (a bound 16 times tighter would fail).
      EXPECT_GT(fig.o, 1.0 / 16);
      // And the backward's: it moves the gradients from the unrounded ones by far more than the
      // rounded reference's float32 differences (measured 4.5e-3 against 3e-4 of max |grad|).
      EXPECT_GT(fig.rounding, kFlipBound / 2);
    }
  }
  force_simd_target(0);
}

// Exact figures where P's rounding decides the result: q = 1, k = (0, 1), scale = ln(x) with
// x = 0.75 + 2^-10 gives the weights P = (1, x) before normalisation. bf16 holds 0.75 but not x,
// so o = (P_0 v_0 + bf16(P_1) v_1) / (P_0 + P_1) = 0.75 / (1.75 + 2^-10) with v = (0, 1): the
// product uses the rounded P, the normaliser the float32 one. (Unrounded it would be x / (1 + x).)
TEST(FusedAttentionBF16, RoundsTheProbabilitiesToBf16BeforeTheProductOnly) {
  const uint16_t q[1] = {float_to_bf16(1.0f)}, k[2] = {float_to_bf16(0.0f), float_to_bf16(1.0f)},
                 v[2] = {float_to_bf16(0.0f), float_to_bf16(1.0f)};
  const double x = 0.75 + std::ldexp(1.0, -10);
  AttentionOptions opt;
  opt.scale = static_cast<float>(std::log(x));
  ThreadPool pool(1);
  opt.pool = &pool;
  for (int64_t target : available_simd_targets()) {
    force_simd_target(target);
    for (bool dot : {true, false}) {
      SCOPED_TRACE(str(simd_target_name(target), dot ? " bf16 dot allowed" : " bf16 dot off"));
      const Bf16Dot scope(dot);
      float o = 0, lse = 0;
      attention_forward_bf16(ConstHeadsBF16::contiguous(q, 1, 1, 1, 1), ConstHeadsBF16::contiguous(k, 1, 1, 2, 1),
                             ConstHeadsBF16::contiguous(v, 1, 1, 2, 1), MutableHeads::contiguous(&o, 1, 1, 1, 1), &lse,
                             opt);
      EXPECT_NEAR(o, 0.75 / (1.75 + std::ldexp(1.0, -10)), 2e-7);
      EXPECT_NEAR(lse, std::log(1.0 + x), 2e-7);
    }
  }
  force_simd_target(0);
}

TEST(FusedAttentionBF16, BadShapesGiveTheFp32KernelsMessages) {
  std::vector<uint16_t> a(64, 0);
  std::vector<float> out(64), lse(8);
  const ConstHeadsBF16 q = ConstHeadsBF16::contiguous(a.data(), 1, 2, 4, 4);
  const ConstHeadsBF16 k = ConstHeadsBF16::contiguous(a.data(), 1, 2, 4, 4);
  const ConstHeadsBF16 k_bad_dim = ConstHeadsBF16::contiguous(a.data(), 1, 2, 4, 3);
  const ConstHeadsBF16 k_three = ConstHeadsBF16::contiguous(a.data(), 1, 3, 4, 4);
  const MutableHeads o = MutableHeads::contiguous(out.data(), 1, 2, 4, 4);
  const MutableHeads o_bad = MutableHeads::contiguous(out.data(), 1, 2, 5, 4);
  const auto message = [](const std::function<void()>& f) { return testing_support::error_of(f); };
  EXPECT_EQ(message([&] { attention_forward_bf16(q, k_bad_dim, k, o, lse.data(), {}); }),
            "attention_forward_bf16: k (1, 2, 4, 3) should be (1, 2, 4, 4)");
  EXPECT_EQ(message([&] { attention_forward_bf16(q, k_three, k_three, o, lse.data(), {}); }),
            "attention_forward_bf16: the key/value heads of k (1, 3, 4, 4) must divide the query heads of q (1, 2, 4, 4) "
            "(grouped-query attention)");
  EXPECT_EQ(message([&] { attention_forward_bf16(q, k, k, o_bad, lse.data(), {}); }),
            "attention_forward_bf16: o (1, 2, 5, 4) should be (1, 2, 4, 4)");
  EXPECT_EQ(message([&] { attention_forward_bf16(q, k, k, o, nullptr, {}); }),
            "attention_forward_bf16: lse (1, 2, 4) is null");
  AttentionOptions bad_p;
  bad_p.dropout_p = 1.0f;
  EXPECT_EQ(message([&] { attention_forward_bf16(q, k, k, o, lse.data(), bad_p); }),
            "attention_forward_bf16: dropout p must be in [0, 1), got 1");
  EXPECT_EQ(message([&] { attention_backward_bf16(q, k, k, o, o, lse.data(), o, o_bad, o, {}); }),
            "attention_backward_bf16: dk (1, 2, 5, 4) should be (1, 2, 4, 4)");
  // The fp32 kernel says the same with its own name.
  std::vector<float> af(64, 0.0f);
  const ConstHeads kf_bad = ConstHeads::contiguous(af.data(), 1, 2, 4, 3), qf = ConstHeads::contiguous(af.data(), 1, 2, 4, 4);
  EXPECT_EQ(message([&] { attention_forward(qf, kf_bad, qf, o, lse.data(), {}); }),
            "attention_forward: k (1, 2, 4, 3) should be (1, 2, 4, 4)");
}

}  // namespace
}  // namespace qkv::kernels
