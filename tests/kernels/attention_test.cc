// The fused attention kernels against their naive references (and qkv's textbook `attend`):
// forward, backward and weights on demand, over sizes from 0 upward, odd and misaligned, causal
// and not, masked and not, with and without dropout, T != S. "Close" means
// |fused - reference| <= 1e-5 * (1 + |reference|) element by element (rtol = atol = 1e-5).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/philox.h"
#include "qkv/kernels/simd.h"
#include "qkv/modules/attention_core.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {


enum class ArrayLayout { kContiguous, kInterleaved, kMisaligned, kStridedDim };
const char* layout_name(ArrayLayout l) {
  switch (l) {
    case ArrayLayout::kContiguous: return "contiguous";
    case ArrayLayout::kInterleaved: return "interleaved";
    case ArrayLayout::kMisaligned: return "misaligned";
    case ArrayLayout::kStridedDim: return "strided-dim";
  }
  return "?";
}

// Owns a (B, H, N, D) array laid out as asked.
struct Array {
  std::vector<float> storage;
  MutableHeads view;
  ConstHeads in() const {
    return {view.data, view.batch, view.heads, view.tokens, view.dim,
            view.stride_b, view.stride_h, view.stride_n, view.stride_d};
  }
  float& at(int64_t b, int64_t h, int64_t n, int64_t d) { return view.row(b, h, n)[d * view.stride_d]; }
};

Array make_array(int64_t B, int64_t H, int64_t N, int64_t D, ArrayLayout layout, std::mt19937& rng, float fill_nan = 0) {
  Array a;
  int64_t size = 0, offset = 0;
  switch (layout) {
    case ArrayLayout::kContiguous:
      size = B * H * N * D;
      a.storage.assign(static_cast<size_t>(size), 0.0f);
      a.view = MutableHeads::contiguous(nullptr, B, H, N, D);
      break;
    case ArrayLayout::kInterleaved:  // (B, N, H * D + 5): heads side by side in padded rows
      size = B * N * (H * D + 5);
      a.storage.assign(static_cast<size_t>(size), 0.0f);
      a.view = MutableHeads::interleaved(nullptr, B, H, N, D, H * D + 5);
      break;
    case ArrayLayout::kMisaligned:  // one float off any alignment, rows of D + 3
      offset = 1;
      size = offset + B * H * N * (D + 3);
      a.storage.assign(static_cast<size_t>(size), 0.0f);
      a.view = {nullptr, B, H, N, D, H * N * (D + 3), N * (D + 3), D + 3, 1};
      break;
    case ArrayLayout::kStridedDim:  // (B, H, D, N) storage: the head dim is the strided one
      size = B * H * N * D;
      a.storage.assign(static_cast<size_t>(size), 0.0f);
      a.view = {nullptr, B, H, N, D, H * N * D, N * D, 1, N};
      break;
  }
  a.storage.resize(static_cast<size_t>(std::max<int64_t>(size, 1)));
  a.view.data = a.storage.data() + offset;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) a.at(b, h, n, d) = fill_nan != 0 ? fill_nan : normal(rng);
  return a;
}

// Compares two (B, H, N, D) arrays: NaN where the reference has NaN, equal infinities, and
// |got - want| <= tol * (1 + |want|) elsewhere.
testing::AssertionResult close(ConstHeads got, ConstHeads want, double tol) {
  int bad = 0;
  double worst = 0;
  std::string first;
  for (int64_t b = 0; b < want.batch; ++b)
    for (int64_t h = 0; h < want.heads; ++h)
      for (int64_t n = 0; n < want.tokens; ++n)
        for (int64_t d = 0; d < want.dim; ++d) {
          const double g = got.row(b, h, n)[d * got.stride_d], w = want.row(b, h, n)[d * want.stride_d];
          bool ok;
          if (std::isnan(w)) {
            ok = std::isnan(g);
          } else if (std::isinf(w)) {
            ok = g == w;
          } else {
            ok = std::isfinite(g) && std::fabs(g - w) <= tol * (1.0 + std::fabs(w));
          }
          if (std::isfinite(g) && std::isfinite(w)) worst = std::max(worst, std::fabs(g - w) / (1.0 + std::fabs(w)));
          if (!ok && bad++ == 0)
            first = str("[", b, ", ", h, ", ", n, ", ", d, "] got ", g, " want ", w);
        }
  if (bad == 0) return testing::AssertionSuccess() << "worst " << worst;
  return testing::AssertionFailure() << bad << " elements differ, first " << first << "; worst finite "
                                     << worst;
}

testing::AssertionResult close_lse(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = std::isinf(want[i]) ? got[i] == want[i]
                    : std::isnan(want[i]) ? std::isnan(got[i])
                                          : std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i]));
    if (!ok) return testing::AssertionFailure() << "lse[" << i << "] got " << got[i] << " want " << want[i];
  }
  return testing::AssertionSuccess();
}

struct Case {
  int64_t B, H, T, S, D, Dv;
  AttentionMask::Kind mask;
  float dropout;
  ArrayLayout layout;
  std::optional<float> scale = {};  // default 1 / sqrt(D)
  std::string name() const {
    const char* m[] = {"none", "causal", "additive", "blocked"};
    return str("B=", B, " H=", H, " T=", T, " S=", S, " D=", D, " Dv=", Dv, " mask=", m[static_cast<int>(mask)],
               " p=", dropout, " ", layout_name(layout), scale ? str(" scale=", *scale) : std::string());
  }
};

// A (T, S) mask: additive values in [-2, 2] with some -inf, or 0/1 with about 30% blocked; row
// T / 2 entirely blocked (when T > 1) to exercise a row with no visible key.
std::vector<float> make_mask(const Case& c, std::mt19937& rng, int64_t row_stride) {
  std::vector<float> m(static_cast<size_t>(std::max<int64_t>(c.T * row_stride, 1)), 0.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t i = 0; i < c.T; ++i)
    for (int64_t j = 0; j < c.S; ++j) {
      float& x = m[static_cast<size_t>(i * row_stride + j)];
      const bool blocked = u(rng) < 0.3f || (c.T > 1 && i == c.T / 2);
      if (c.mask == AttentionMask::Kind::kAdditive) x = blocked && u(rng) < 0.5f ? -kInf : 4.0f * u(rng) - 2.0f;
      if (c.mask == AttentionMask::Kind::kAdditive && c.T > 1 && i == c.T / 2) x = -kInf;
      if (c.mask == AttentionMask::Kind::kBlocked) x = blocked ? 1.0f : 0.0f;
    }
  return m;
}

AttentionOptions options_for(const Case& c, const std::vector<float>& mask, int64_t row_stride, ThreadPool* pool) {
  AttentionOptions o;
  o.scale = c.scale ? *c.scale : 1.0f / std::sqrt(static_cast<float>(c.D));
  switch (c.mask) {
    case AttentionMask::Kind::kNone: break;
    case AttentionMask::Kind::kCausal: o.mask = AttentionMask::causal(); break;
    case AttentionMask::Kind::kAdditive: o.mask = AttentionMask::additive(mask.data(), row_stride); break;
    case AttentionMask::Kind::kBlocked: o.mask = AttentionMask::blocked(mask.data(), row_stride); break;
  }
  o.dropout_p = c.dropout;
  o.dropout_seed = 0x1234567890abcdefULL + static_cast<uint64_t>(c.T);
  o.pool = pool;
  return o;
}

std::vector<Case> forward_cases() {
  std::vector<Case> cases;
  const int64_t Ts[] = {1, 2, 3, 17, 63, 65, 130};
  const std::pair<int64_t, int64_t> dims[] = {{1, 1}, {3, 3}, {3, 5}, {32, 32}, {64, 64}, {64, 16}, {80, 80}, {128, 128}};
  const ArrayLayout layouts[] = {ArrayLayout::kContiguous, ArrayLayout::kInterleaved, ArrayLayout::kMisaligned, ArrayLayout::kStridedDim};
  int n = 0;
  for (int64_t T : Ts)
    for (auto [D, Dv] : dims)
      for (int m = 0; m < 4; ++m, ++n) {
        const auto kind = static_cast<AttentionMask::Kind>(m);
        // T != S for every kind every third case (causal included: top-left aligned).
        const int64_t S = n % 3 == 0 ? (T > 5 ? T - 5 : T + 4) : T;
        const int64_t BH = T * S * D > 200000 ? 1 : 2;
        cases.push_back({BH, 3 - BH + 1, T, S, D, Dv, kind, n % 2 ? 0.25f : 0.0f, layouts[(n / 2) % 4]});
      }
  return cases;
}

// The fused forward against the reference on one case.
void check_forward(const Case& c, std::mt19937& rng, ThreadPool* pool) {
  SCOPED_TRACE(c.name());
  Array q = make_array(c.B, c.H, c.T, c.D, c.layout, rng), k = make_array(c.B, c.H, c.S, c.D, c.layout, rng),
        v = make_array(c.B, c.H, c.S, c.Dv, c.layout, rng);
  Array o = make_array(c.B, c.H, c.T, c.Dv, c.layout, rng, kInf);  // fused: starts as garbage
  Array ref = make_array(c.B, c.H, c.T, c.Dv, ArrayLayout::kContiguous, rng);
  const int64_t row_stride = c.S + 3;
  const std::vector<float> mask = make_mask(c, rng, row_stride);
  const AttentionOptions opt = options_for(c, mask, row_stride, pool);
  std::vector<float> lse(static_cast<size_t>(c.B * c.H * c.T), kInf), lse_ref(lse.size());
  attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
  attention_forward_reference(q.in(), k.in(), v.in(), ref.view, lse_ref.data(), opt);
  EXPECT_TRUE(close(o.in(), ref.in(), 1e-5));
  EXPECT_TRUE(close_lse(lse, lse_ref, 1e-5));
}

// The fused backward (after the fused forward) against the reference backward on one case.
void check_backward(const Case& c, std::mt19937& rng, ThreadPool* pool) {
  SCOPED_TRACE(c.name());
  Array q = make_array(c.B, c.H, c.T, c.D, c.layout, rng), k = make_array(c.B, c.H, c.S, c.D, c.layout, rng),
        v = make_array(c.B, c.H, c.S, c.Dv, c.layout, rng), d_o = make_array(c.B, c.H, c.T, c.Dv, c.layout, rng);
  Array o = make_array(c.B, c.H, c.T, c.Dv, c.layout, rng);
  Array dq = make_array(c.B, c.H, c.T, c.D, c.layout, rng, kInf), dk = make_array(c.B, c.H, c.S, c.D, c.layout, rng, kInf),
        dv = make_array(c.B, c.H, c.S, c.Dv, c.layout, rng, kInf);
  Array rq = make_array(c.B, c.H, c.T, c.D, ArrayLayout::kContiguous, rng),
        rk = make_array(c.B, c.H, c.S, c.D, ArrayLayout::kContiguous, rng),
        rv = make_array(c.B, c.H, c.S, c.Dv, ArrayLayout::kContiguous, rng);
  const int64_t row_stride = c.S;
  const std::vector<float> mask = make_mask(c, rng, row_stride);
  const AttentionOptions opt = options_for(c, mask, row_stride, pool);
  std::vector<float> lse(static_cast<size_t>(c.B * c.H * c.T));
  attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
  attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.data(), dq.view, dk.view, dv.view, opt);
  attention_backward_reference(q.in(), k.in(), v.in(), d_o.in(), rq.view, rk.view, rv.view, opt);
  EXPECT_TRUE(close(dq.in(), rq.in(), 1e-5)) << "dq";
  EXPECT_TRUE(close(dk.in(), rk.in(), 1e-5)) << "dk";
  EXPECT_TRUE(close(dv.in(), rv.in(), 1e-5)) << "dv";
}

TEST(FusedAttention, ForwardMatchesTheReference) {
  std::mt19937 rng(1);
  ThreadPool pool(2);
  int checked = 0;
  for (const Case& c : forward_cases()) {
    check_forward(c, rng, &pool);
    ++checked;
  }
  EXPECT_EQ(checked, 7 * 8 * 4);
}

TEST(FusedAttention, BackwardMatchesTheReference) {
  std::mt19937 rng(2);
  ThreadPool pool(2);
  int checked = 0, n = 0;
  const int64_t Ts[] = {1, 2, 3, 17, 63, 65, 130};
  const std::pair<int64_t, int64_t> dims[] = {{1, 1}, {3, 5}, {32, 32}, {64, 64}, {80, 80}, {128, 128}};
  for (int64_t T : Ts)
    for (auto [D, Dv] : dims)
      for (int m = 0; m < 4; ++m, ++n) {
        const int64_t S = n % 3 == 0 ? (T > 5 ? T - 5 : T + 4) : T;
        check_backward({1, 2, T, S, D, Dv, static_cast<AttentionMask::Kind>(m), n % 2 ? 0.25f : 0.0f,
                        static_cast<ArrayLayout>((n / 2) % 4)},
                       rng, &pool);
        ++checked;
      }
  EXPECT_EQ(checked, 7 * 6 * 4);
}

// Heads whose keys and values outgrow L2 (S (D + Dv) floats > 512 KB) are run with several query
// blocks per task sharing each key block, and in the backward several key blocks share each pass
// over the query blocks (T (3 D + 2 Dv) floats > 512 KB): the same results, every mask, dropout,
// T != S.
TEST(FusedAttention, LongSequencesMatchTheReference) {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  const Case cases[] = {
      {1, 1, 1100, 1100, 64, 64, AttentionMask::Kind::kCausal, 0.0f, ArrayLayout::kContiguous},
      {1, 1, 1100, 1100, 64, 64, AttentionMask::Kind::kCausal, 0.2f, ArrayLayout::kInterleaved},
      {1, 1, 1037, 1100, 64, 64, AttentionMask::Kind::kNone, 0.0f, ArrayLayout::kMisaligned},
      {1, 1, 700, 1100, 64, 64, AttentionMask::Kind::kAdditive, 0.1f, ArrayLayout::kContiguous},
      {1, 1, 1100, 1090, 64, 64, AttentionMask::Kind::kBlocked, 0.0f, ArrayLayout::kStridedDim},
      {1, 2, 531, 531, 200, 136, AttentionMask::Kind::kCausal, 0.0f, ArrayLayout::kContiguous},
  };
  for (const Case& c : cases) {
    ASSERT_GT(c.S * (c.D + c.Dv) * 4, 512 * 1024) << c.name();
    check_forward(c, rng, &pool);
  }
  for (const Case& c : {cases[1], cases[3], cases[4], cases[5]}) {
    ASSERT_GT(c.T * (3 * c.D + 2 * c.Dv) * 4, 512 * 1024) << c.name();
    check_backward(c, rng, &pool);
  }
}

// The same checks on every SIMD target compiled in that this CPU runs (AVX-512, AVX2, the
// portable fallback), forcing the dispatch to each in turn.
TEST(FusedAttention, EverySimdTargetMatchesTheReference) {
  const std::vector<int64_t> targets = available_simd_targets();
  ASSERT_FALSE(targets.empty());
  std::mt19937 rng(11);
  ThreadPool pool(2);
  int n = 0;
  for (int64_t target : targets) {
    force_simd_target(target);
    SCOPED_TRACE(simd_target_name(target));
    for (int64_t T : {1, 17, 65, 130})
      for (auto [D, Dv] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {64, 64}, {80, 80}})
        for (int m = 0; m < 4; ++m, ++n) {
          const Case c{1, 2, T, n % 3 == 0 ? T + 4 : T, D, Dv, static_cast<AttentionMask::Kind>(m),
                       n % 2 ? 0.25f : 0.0f, static_cast<ArrayLayout>(n % 4)};
          check_forward(c, rng, &pool);
          check_backward(c, rng, &pool);
        }
    EXPECT_EQ(simd_target(), simd_target_name(target));
  }
  force_simd_target(0);
  EXPECT_GE(targets.size(), 2u) << "expected at least the best target and the portable fallback";
}

// Scales the book's path does not use: the kernels then scale q before the product (ScoreUnits in
// attention_blocks-inl.h) - negative (the largest raw product is not the largest score), zero,
// small enough that raw products could overflow where scaled ones do not - and the edges of the
// raw-product path (2^-8, and 0.5: scores 4 times the usual at D = 64, as large as the reference's
// 1e-5 allows). Forward and backward, every mask, every SIMD target.
TEST(FusedAttention, EveryScaleMatchesTheReference) {
  std::mt19937 rng(17);
  ThreadPool pool(2);
  int n = 0;
  for (int64_t target : available_simd_targets()) {
    force_simd_target(target);
    SCOPED_TRACE(simd_target_name(target));
    for (float scale : {-0.3f, 0.0f, 1e-3f, 0x1p-8f, 0.5f})
      for (int m = 0; m < 4; ++m, ++n) {
        const Case c{1, 2, n % 2 ? 17 : 65, 65, n % 3 ? 64 : 3, 5, static_cast<AttentionMask::Kind>(m), 0.0f,
                     ArrayLayout::kContiguous, scale};
        check_forward(c, rng, &pool);
        check_backward(c, rng, &pool);
      }
  }
  force_simd_target(0);
}

// The reference backward against central finite differences of the reference forward, so the
// fused backward is tied to the forward's math and not only to a second implementation of it.
TEST(FusedAttention, ReferenceBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(3);
  for (int m = 0; m < 4; ++m) {
    const Case c{1, 1, 5, 6, 3, 2, static_cast<AttentionMask::Kind>(m), m == 1 ? 0.3f : 0.0f, ArrayLayout::kContiguous};
    SCOPED_TRACE(c.name());
    Array q = make_array(1, 1, c.T, c.D, c.layout, rng), k = make_array(1, 1, c.S, c.D, c.layout, rng),
          v = make_array(1, 1, c.S, c.Dv, c.layout, rng), g = make_array(1, 1, c.T, c.Dv, c.layout, rng);
    Array o = make_array(1, 1, c.T, c.Dv, c.layout, rng);
    Array dq = make_array(1, 1, c.T, c.D, c.layout, rng), dk = make_array(1, 1, c.S, c.D, c.layout, rng),
          dv = make_array(1, 1, c.S, c.Dv, c.layout, rng);
    std::vector<float> mask = make_mask(c, rng, c.S);
    if (c.mask == AttentionMask::Kind::kAdditive)
      for (float& x : mask) x = std::isinf(x) ? -kInf : x;
    const AttentionOptions opt = options_for(c, mask, c.S, nullptr);
    std::vector<float> lse(static_cast<size_t>(c.T));
    auto loss = [&]() {  // sum(o * g)
      attention_forward_reference(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
      double s = 0;
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t d = 0; d < c.Dv; ++d) s += static_cast<double>(o.at(0, 0, i, d)) * g.at(0, 0, i, d);
      return s;
    };
    attention_backward_reference(q.in(), k.in(), v.in(), g.in(), dq.view, dk.view, dv.view, opt);
    auto check = [&](Array& x, Array& dx, const char* name) {
      for (int64_t n = 0; n < x.view.tokens; ++n)
        for (int64_t d = 0; d < x.view.dim; ++d) {
          float& xv = x.at(0, 0, n, d);
          const float saved = xv, eps = 1e-2f;
          xv = saved + eps;
          const double up = loss();
          xv = saved - eps;
          const double down = loss();
          xv = saved;
          const double fd = (up - down) / (2.0 * eps);
          EXPECT_NEAR(dx.at(0, 0, n, d), fd, 2e-3 * (1.0 + std::fabs(fd))) << name << "[" << n << ", " << d << "]";
        }
    };
    check(q, dq, "dq");
    check(k, dk, "dk");
    check(v, dv, "dv");
  }
}

// At scores in the tens a float lse is off by up to |lse| 2^-25, and every weight the backward
// recomputes from it, exp(s - lse), carries that error for the whole row. The part a float drops
// (AttentionOptions::lse_low), which the forward writes and the backward reads, removes it.
TEST(FusedAttention, TheLowPartOfLseKeepsTheBackwardExactAtLargeScores) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  const int64_t B = 1, H = 2, T = 96, D = 32;
  Array q = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), k = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
        v = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), d_o = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
  for (float& x : q.storage) x *= 12.0f;  // scores of tens
  Array o = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = AttentionMask::causal();
  opt.pool = &pool;
  std::vector<float> lse(static_cast<size_t>(B * H * T)), low(lse.size(), kInf);
  opt.lse_low = low.data();
  attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
  float largest = 0.0f;
  for (size_t i = 0; i < lse.size(); ++i) {
    largest = std::max(largest, std::abs(lse[i]));
    // the low part is what rounding lse to float dropped: at most half an ulp of it
    ASSERT_LE(std::abs(low[i]), std::abs(std::nextafter(lse[i], kInf) - lse[i]) / 2) << i;
  }
  ASSERT_GT(largest, 40.0f) << "the case must have large scores";
  Array rq = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), rk = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
        rv = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
  attention_backward_reference(q.in(), k.in(), v.in(), d_o.in(), rq.view, rk.view, rv.view, opt);
  // What a value bias's gradient sums: dv over the keys, sum_j dv_j = sum_i d_o_i sum_j w_ij, in
  // which a row-wide error of the weights adds up instead of averaging out. Distance from the
  // reference's sums, relative to max(1, their largest).
  const auto distance = [&](const AttentionOptions& o_opt) {
    Array dq = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), dk = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
          dv = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
    attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.data(), dq.view, dk.view, dv.view, o_opt);
    double diff = 0.0, size = 1.0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        double got = 0.0, want = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          got += dv.at(0, h, j, d);
          want += rv.at(0, h, j, d);
        }
        diff = std::max(diff, std::abs(got - want));
        size = std::max(size, std::abs(want));
      }
    return diff / size;
  };
  AttentionOptions without = opt;
  without.lse_low = nullptr;
  const double exact = distance(opt), rounded = distance(without);
  EXPECT_LT(exact, 5e-7) << "with the low part";
  EXPECT_GT(rounded, 3 * exact) << "without it: " << rounded << ", with it: " << exact;
  std::printf("value sums' distance from the reference: %.3g with lse's low part, %.3g without\n", exact, rounded);
}

// dS_ij = P_ij (dP_ij - D_i): with D_i = d_o . o, dP's rounding does not cancel against D's, and
// where the weights sit on one key dS is that rounding times P instead of about P (1 - P) times it
// (PyTorch's softmax backward sums D from its own dP). Rows that see at most 64 keys sum D_i from
// their own weights and dP: a causal sequence's first query, whose one weight is 1, gets dq = 0
// as in exact arithmetic, and the rows of a peaked softmax land near the float64 reference; rows
// past 64 keys keep d_o . o. On every SIMD target (the rows do not depend on its block sizes).
TEST(FusedAttention, ShortRowsSumDFromTheirOwnWeights) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  const int64_t B = 1, H = 3, T = 80, D = 24;
  Array q = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), k = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
        v = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), d_o = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
  for (float& x : q.storage) x *= 6.0f;   // peaked weights
  for (float& x : v.storage) x *= 10.0f;  // dP of tens: its rounding is what dS must not keep
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = AttentionMask::causal();
  opt.pool = &pool;
  std::vector<float> lse(static_cast<size_t>(B * H * T)), low(lse.size());
  opt.lse_low = low.data();
  Array rq = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), rk = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
        rv = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
  attention_backward_reference(q.in(), k.in(), v.in(), d_o.in(), rq.view, rk.view, rv.view, opt);
  double scale = 1.0;  // the reference dq's largest
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t d = 0; d < D; ++d) scale = std::max(scale, std::abs(static_cast<double>(rq.at(0, h, i, d))));
  for (int64_t target : available_simd_targets()) {
    force_simd_target(target);
    SCOPED_TRACE(simd_target_name(target));
    Array o = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
    attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
    Array dq = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), dk = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
          dv = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
    attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.data(), dq.view, dk.view, dv.view, opt);
    double first = 0.0, short_rows = 0.0;  // |dq| of row 0; distance from the reference over rows 1..63
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        first = std::max(first, std::abs(static_cast<double>(dq.at(0, h, 0, d))));
        for (int64_t i = 1; i < 64; ++i)
          short_rows = std::max(short_rows, std::abs(static_cast<double>(dq.at(0, h, i, d)) - rq.at(0, h, i, d)));
      }
    EXPECT_LE(first, 1e-9 * scale) << "the first query's dq, zero in exact arithmetic";
    EXPECT_LE(short_rows / scale, 1.5e-6) << "rows 1..63's dq from the float64 reference";
    std::printf("%s: first row's |dq| %.3g, short rows' dq distance %.3g (scale %.3g)\n",
                simd_target_name(target).c_str(), first, short_rows / scale, scale);
  }
  force_simd_target(0);
}

// On the book's path the kernels keep the raw products q . k as scores and take a weight as
// 2^((s - m) f) in the forward and 2^(s f - lse) in the backward (s f inside one FMA), f =
// scale log2(e): the only rounding before the exponent is the product's. With small-integer q and k the products are exact, so the forward's o and the
// backward's gradients land within float rounding of the float64 reference; scaling q by
// scale log2(e) first (as the kernels did) rounds every element of q, and at scores of hundreds
// that put o 35 times further from the reference (3.8e-6 against 1.1e-7). On every SIMD target.
TEST(FusedAttention, ExactProductsGiveWeightsWithinFloatRounding) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-12, 12);
  const int64_t B = 1, H = 2, T = 70, D = 64;
  Array q = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), k = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
        v = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), d_o = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
  for (float& x : q.storage) x = static_cast<float>(small(rng));
  for (float& x : k.storage) x = static_cast<float>(small(rng));
  AttentionOptions opt;
  opt.scale = 1.0f / 8.0f;  // 1 / sqrt(D), exact
  opt.mask = AttentionMask::causal();
  opt.pool = &pool;
  std::vector<float> lse(static_cast<size_t>(B * H * T)), low(lse.size());
  opt.lse_low = low.data();
  Array ro = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), rq = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
        rk = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), rv = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
  std::vector<float> rlse(lse.size());
  attention_forward_reference(q.in(), k.in(), v.in(), ro.view, rlse.data(), opt);
  attention_backward_reference(q.in(), k.in(), v.in(), d_o.in(), rq.view, rk.view, rv.view, opt);
  // the largest |distance| / max(1, largest |reference|) of each tensor
  const auto distance = [&](Array& got, Array& want) {
    double diff = 0.0, size = 1.0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          diff = std::max(diff, std::abs(static_cast<double>(got.at(0, h, i, d)) - want.at(0, h, i, d)));
          size = std::max(size, std::abs(static_cast<double>(want.at(0, h, i, d))));
        }
    return diff / size;
  };
  float largest = 0.0f;
  for (float l : rlse) largest = std::max(largest, std::abs(l));
  ASSERT_GT(largest, 100.0f) << "the case must have scores in the hundreds";
  for (int64_t target : available_simd_targets()) {
    force_simd_target(target);
    SCOPED_TRACE(simd_target_name(target));
    Array o = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), dq = make_array(B, H, T, D, ArrayLayout::kContiguous, rng),
          dk = make_array(B, H, T, D, ArrayLayout::kContiguous, rng), dv = make_array(B, H, T, D, ArrayLayout::kContiguous, rng);
    attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
    attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.data(), dq.view, dk.view, dv.view, opt);
    const double eo = distance(o, ro), eq = distance(dq, rq), ek = distance(dk, rk), ev = distance(dv, rv);
    EXPECT_LE(eo, 1e-6) << "o";
    EXPECT_LE(eq, 1e-6) << "dq";
    EXPECT_LE(ek, 1e-6) << "dk";
    EXPECT_LE(ev, 1e-6) << "dv";
    std::printf("%s: distance from float64: o %.3g, dq %.3g, dk %.3g, dv %.3g\n", simd_target_name(target).c_str(), eo, eq,
                ek, ev);
  }
  force_simd_target(0);
}

TEST(FusedAttention, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937 rng(4);
  // Six heads: one backward task per head. One head: its keys split into runs (fewer heads than
  // the split threshold), the dq shares summed afterwards.
  for (const Case& c : {Case{2, 3, 131, 131, 64, 64, AttentionMask::Kind::kCausal, 0.2f, ArrayLayout::kContiguous},
                        Case{1, 1, 300, 300, 64, 64, AttentionMask::Kind::kCausal, 0.2f, ArrayLayout::kInterleaved}}) {
    SCOPED_TRACE(str("B=", c.B, " H=", c.H, " T=", c.T));
    Array q = make_array(c.B, c.H, c.T, c.D, c.layout, rng), k = make_array(c.B, c.H, c.S, c.D, c.layout, rng),
          v = make_array(c.B, c.H, c.S, c.Dv, c.layout, rng), d_o = make_array(c.B, c.H, c.T, c.Dv, c.layout, rng);
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      const AttentionOptions opt = options_for(c, {}, 0, &pool);
      Array o = make_array(c.B, c.H, c.T, c.Dv, c.layout, rng), dq = make_array(c.B, c.H, c.T, c.D, c.layout, rng),
            dk = make_array(c.B, c.H, c.S, c.D, c.layout, rng), dv = make_array(c.B, c.H, c.S, c.Dv, c.layout, rng);
      std::vector<float> lse(static_cast<size_t>(c.B * c.H * c.T));
      attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
      attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.data(), dq.view, dk.view, dv.view, opt);
      std::vector<float> all = o.storage;
      for (const Array* a : {&dq, &dk, &dv}) all.insert(all.end(), a->storage.begin(), a->storage.end());
      all.insert(all.end(), lse.begin(), lse.end());
      outs.push_back(all);
    }
    EXPECT_EQ(outs[0], outs[1]) << "1 vs 2 threads, bit for bit";
    EXPECT_EQ(outs[0], outs[2]) << "1 vs 3 threads, bit for bit";
  }
}

TEST(FusedAttention, MatchesTheTextbookAttend) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (auto [B, H, T, D] : std::vector<std::array<int64_t, 4>>{{1, 1, 6, 2}, {2, 3, 17, 8}, {2, 2, 70, 64}, {1, 2, 33, 80}}) {
    SCOPED_TRACE(str("B=", B, " H=", H, " T=", T, " D=", D));
    auto random = [&](const Shape& shape) {
      std::vector<float> x(static_cast<size_t>(numel_of(shape)));
      for (float& e : x) e = normal(rng);
      return Tensor::from(shape, x);
    };
    Tensor q = random({B, H, T, D}), k = random({B, H, T, D}), v = random({B, H, T, D});
    Tensor mask = causal_mask(T);
    AttentionTrace trace;
    Tensor want = attend(q, k, v, &mask, nullptr, &trace);  // (B, H, T, D)
    Tensor got = Tensor::zeros({B, H, T, D});
    std::vector<float> lse(static_cast<size_t>(B * H * T));
    AttentionOptions opt;
    opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
    opt.mask = AttentionMask::causal();
    auto heads = [&](const Tensor& t) { return ConstHeads::contiguous(t.data(), B, H, T, D); };
    attention_forward(heads(q), heads(k), heads(v), MutableHeads::contiguous(got.data(), B, H, T, D), lse.data(), opt);
    EXPECT_TRUE(close(heads(got), heads(want), 1e-5));
    // Weights on demand, every head and row, against the textbook's softmax weights.
    Tensor w = Tensor::zeros({B, H, T, T});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        attention_weights(heads(q), heads(k), lse.data(), opt, b, h, 0, T, false,
                          w.data() + (b * H + h) * T * T, T);
    EXPECT_TRUE(close(ConstHeads::contiguous(w.data(), B, H, T, T),
                      ConstHeads::contiguous(trace.weights.contiguous().data(), B, H, T, T), 1e-5));
  }
}

// Weights after dropout, recomputed on demand for some rows, times v give the fused output.
TEST(FusedAttention, WeightsOnDemandReproduceTheOutput) {
  std::mt19937 rng(6);
  const Case c{2, 2, 77, 77, 16, 16, AttentionMask::Kind::kCausal, 0.4f, ArrayLayout::kContiguous};
  Array q = make_array(c.B, c.H, c.T, c.D, c.layout, rng), k = make_array(c.B, c.H, c.S, c.D, c.layout, rng),
        v = make_array(c.B, c.H, c.S, c.Dv, c.layout, rng), o = make_array(c.B, c.H, c.T, c.Dv, c.layout, rng);
  const AttentionOptions opt = options_for(c, {}, 0, nullptr);
  std::vector<float> lse(static_cast<size_t>(c.B * c.H * c.T));
  attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
  const int64_t b = 1, h = 0, r0 = 30, r1 = 50;
  std::vector<float> w(static_cast<size_t>((r1 - r0) * c.S)), wd(w.size());
  attention_weights(q.in(), k.in(), lse.data(), opt, b, h, r0, r1, false, w.data(), c.S);
  attention_weights(q.in(), k.in(), lse.data(), opt, b, h, r0, r1, true, wd.data(), c.S);
  for (int64_t i = r0; i < r1; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < c.S; ++j) {
      const float x = w[static_cast<size_t>((i - r0) * c.S + j)], xd = wd[static_cast<size_t>((i - r0) * c.S + j)];
      sum += x;
      if (j > i) {
        EXPECT_EQ(x, 0.0f) << "causal";
      }
      const bool kept = dropout_kept(opt.dropout_seed, dropout_threshold(opt.dropout_p), b, h, i, j);
      EXPECT_FLOAT_EQ(xd, kept ? x / (1.0f - opt.dropout_p) : 0.0f);
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << i;
    for (int64_t d = 0; d < c.Dv; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < c.S; ++j) acc += static_cast<double>(wd[static_cast<size_t>((i - r0) * c.S + j)]) * v.at(b, h, j, d);
      EXPECT_NEAR(o.at(b, h, i, d), acc, 1e-5 * (1 + std::fabs(acc)));
    }
  }
}

// attention_weights against the reference's weights, for every mask kind (additive included)
// and T != S: with v the (S, S) identity, the reference's output row i is its weight row i.
TEST(FusedAttention, WeightsOnDemandMatchTheReferenceWeightsForEveryMask) {
  std::mt19937 rng(11);
  for (int m = 0; m < 4; ++m) {
    const Case c{2, 2, 13, 21, 8, 21, static_cast<AttentionMask::Kind>(m), 0.0f, ArrayLayout::kInterleaved};
    SCOPED_TRACE(c.name());
    Array q = make_array(c.B, c.H, c.T, c.D, c.layout, rng), k = make_array(c.B, c.H, c.S, c.D, c.layout, rng);
    Array eye = make_array(c.B, c.H, c.S, c.S, ArrayLayout::kContiguous, rng);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t j = 0; j < c.S; ++j)
          for (int64_t d = 0; d < c.S; ++d) eye.at(b, h, j, d) = j == d ? 1.0f : 0.0f;
    Array ref = make_array(c.B, c.H, c.T, c.S, ArrayLayout::kContiguous, rng);  // (B, H, T, S) weights
    Array o = make_array(c.B, c.H, c.T, c.S, ArrayLayout::kContiguous, rng);
    const int64_t row_stride = c.S + 2;
    const std::vector<float> mask = make_mask(c, rng, row_stride);
    const AttentionOptions opt = options_for(c, mask, row_stride, nullptr);
    std::vector<float> lse(static_cast<size_t>(c.B * c.H * c.T)), lse_ref(lse.size());
    attention_forward_reference(q.in(), k.in(), eye.in(), ref.view, lse_ref.data(), opt);
    attention_forward(q.in(), k.in(), eye.in(), o.view, lse.data(), opt);  // the lse a module keeps
    Array w = make_array(c.B, c.H, c.T, c.S, ArrayLayout::kContiguous, rng, kInf);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        attention_weights(q.in(), k.in(), lse.data(), opt, b, h, 0, c.T, false, w.view.row(b, h, 0), c.S);
    EXPECT_TRUE(close(w.in(), ref.in(), 1e-5));
  }
}

TEST(FusedAttention, DropoutDropsAboutPAndIsPhilox) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  for (double p : {0.1, 0.5, 0.9}) {
    const uint32_t thr = dropout_threshold(p);
    int64_t dropped = 0, n = 0;
    for (int64_t i = 0; i < 200; ++i)
      for (int64_t j = 0; j < 500; ++j, ++n) dropped += dropout_kept(42, thr, 1, 2, i, j) ? 0 : 1;
    EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(n), p, 0.01) << "p = " << p;
  }
  EXPECT_EQ(dropout_threshold(0.0), 0u) << "p = 0 keeps everything";
}

TEST(FusedAttention, FullyMaskedRowsGiveZeroAndMinusInfinity) {
  std::mt19937 rng(7);
  for (int64_t T : {1, 5, 70}) {
    const Case c{1, 2, T, T, 64, 64, AttentionMask::Kind::kBlocked, 0.0f, ArrayLayout::kContiguous};
    Array q = make_array(1, 2, T, 64, c.layout, rng), k = make_array(1, 2, T, 64, c.layout, rng),
          v = make_array(1, 2, T, 64, c.layout, rng), o = make_array(1, 2, T, 64, c.layout, rng),
          d_o = make_array(1, 2, T, 64, c.layout, rng);
    std::vector<float> mask(static_cast<size_t>(T * T), 0.0f);
    for (int64_t j = 0; j < T; ++j) mask[static_cast<size_t>((T - 1) * T + j)] = 1.0f;  // the last row sees nothing
    AttentionOptions opt = options_for(c, mask, T, nullptr);
    std::vector<float> lse(static_cast<size_t>(2 * T));
    attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(lse[static_cast<size_t>(h * T + T - 1)], -kInf);
      for (int64_t d = 0; d < 64; ++d) EXPECT_EQ(o.at(0, h, T - 1, d), 0.0f);
    }
    Array dq = make_array(1, 2, T, 64, c.layout, rng), dk = make_array(1, 2, T, 64, c.layout, rng),
          dv = make_array(1, 2, T, 64, c.layout, rng);
    attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.data(), dq.view, dk.view, dv.view, opt);
    for (float x : dq.storage) ASSERT_FALSE(std::isnan(x));
    for (float x : dk.storage) ASSERT_FALSE(std::isnan(x));
    for (float x : dv.storage) ASSERT_FALSE(std::isnan(x));
    for (int64_t d = 0; d < 64; ++d) EXPECT_EQ(dq.at(0, 1, T - 1, d), 0.0f);
  }
}

TEST(FusedAttention, EmptySequencesWork) {
  std::mt19937 rng(8);
  // T = 0: nothing to do. S = 0: every query sees nothing: o = 0, lse = -inf, dq = 0.
  Array q0 = make_array(1, 2, 0, 8, ArrayLayout::kContiguous, rng), k = make_array(1, 2, 4, 8, ArrayLayout::kContiguous, rng);
  Array o0 = make_array(1, 2, 0, 8, ArrayLayout::kContiguous, rng);
  attention_forward(q0.in(), k.in(), k.in(), o0.view, nullptr, {});
  Array q = make_array(1, 2, 3, 8, ArrayLayout::kContiguous, rng), k0 = make_array(1, 2, 0, 8, ArrayLayout::kContiguous, rng);
  Array o = make_array(1, 2, 3, 8, ArrayLayout::kContiguous, rng), d_o = make_array(1, 2, 3, 8, ArrayLayout::kContiguous, rng),
        dq = make_array(1, 2, 3, 8, ArrayLayout::kContiguous, rng);
  std::vector<float> lse(6, 0.0f);
  for (auto mask : {AttentionMask::none(), AttentionMask::causal()}) {
    AttentionOptions opt;
    opt.mask = mask;
    attention_forward(q.in(), k0.in(), k0.in(), o.view, lse.data(), opt);
    for (float x : o.storage) EXPECT_EQ(x, 0.0f);
    for (float x : lse) EXPECT_EQ(x, -kInf);
    attention_backward(q.in(), k0.in(), k0.in(), o.in(), d_o.in(), lse.data(), dq.view, k0.view, k0.view, opt);
    for (float x : dq.storage) EXPECT_EQ(x, 0.0f);
  }
}

TEST(FusedAttention, NonFiniteInputsPropagateLikeTheReference) {
  std::mt19937 rng(9);
  const Case c{1, 1, 100, 100, 64, 64, AttentionMask::Kind::kCausal, 0.0f, ArrayLayout::kContiguous};
  Array q = make_array(1, 1, 100, 64, c.layout, rng), k = make_array(1, 1, 100, 64, c.layout, rng),
        v = make_array(1, 1, 100, 64, c.layout, rng), o = make_array(1, 1, 100, 64, c.layout, rng),
        ref = make_array(1, 1, 100, 64, c.layout, rng);
  q.at(0, 0, 10, 3) = std::nanf("");   // query 10's scores are all NaN
  k.at(0, 0, 60, 0) = kInf;            // key 60 gives +-inf or NaN scores to the queries that see it
  const AttentionOptions opt = options_for(c, {}, 0, nullptr);
  std::vector<float> lse(100), lse_ref(100);
  attention_forward(q.in(), k.in(), v.in(), o.view, lse.data(), opt);
  attention_forward_reference(q.in(), k.in(), v.in(), ref.view, lse_ref.data(), opt);
  EXPECT_TRUE(std::isnan(o.at(0, 0, 10, 0)));
  EXPECT_TRUE(std::isfinite(o.at(0, 0, 59, 0))) << "queries before key 60 do not see it";
  for (int64_t i = 0; i < 100; ++i)
    for (int64_t d = 0; d < 64; ++d)
      EXPECT_EQ(std::isnan(o.at(0, 0, i, d)), std::isnan(ref.at(0, 0, i, d))) << i << ", " << d;
}

TEST(FusedAttention, BadArgumentsSayWhatIsWrong) {
  std::mt19937 rng(10);
  Array q = make_array(1, 2, 4, 8, ArrayLayout::kContiguous, rng), k = make_array(1, 2, 5, 8, ArrayLayout::kContiguous, rng),
        v = make_array(1, 2, 4, 8, ArrayLayout::kContiguous, rng), o = make_array(1, 2, 4, 8, ArrayLayout::kContiguous, rng);
  std::vector<float> lse(8);
  auto message = [&](const AttentionOptions& opt, ConstHeads vv) {
    try {
      attention_forward(q.in(), k.in(), vv, o.view, lse.data(), opt);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message({}, v.in()), "attention_forward: v (1, 2, 4, 8) should be (1, 2, 5, 8)");
  AttentionOptions bad;
  bad.dropout_p = 1.0f;
  Array v5 = make_array(1, 2, 5, 8, ArrayLayout::kContiguous, rng);
  EXPECT_EQ(message(bad, v5.in()), "attention_forward: dropout p must be in [0, 1), got 1");
  AttentionOptions small_mask;
  std::vector<float> m(20);
  small_mask.mask = AttentionMask::additive(m.data(), 4);
  EXPECT_EQ(message(small_mask, v5.in()),
            "attention_forward: the mask's row stride (4) is smaller than the number of keys (5)");
}

}  // namespace
}  // namespace qkv::kernels
