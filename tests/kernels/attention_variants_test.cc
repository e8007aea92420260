// The fused attention kernels on today's attention variants - grouped-query heads (G < H), a query
// offset, a sliding window, ALiBi and softcapping - against the naive references, forward and
// backward, alone and combined with the causal, additive and boolean masks and dropout; results
// bit for bit the same on 1 and 2 threads. "Close" is the kernel tests' (tests/kernels/attention_test.cc):
// |fused - reference| <= 1e-5 * (1 + |reference|) element by element, lse included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/philox.h"
#include "qkv/kernels/simd.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {

using testing_support::error_of;

constexpr double kTol = 1e-5;

// Owns a (B, H, N, D) array, contiguous or with its heads interleaved in padded rows (the layout of
// a projection output).
struct VariantArray {
  std::vector<float> storage;
  MutableHeads view;
  ConstHeads in() const { return view; }
  float& at(int64_t b, int64_t h, int64_t n, int64_t d) { return view.row(b, h, n)[d * view.stride_d]; }
};

VariantArray make_array(int64_t B, int64_t H, int64_t N, int64_t D, bool interleaved, std::mt19937& rng, float fill = 0) {
  VariantArray a;
  const int64_t width = H * D + 3;
  a.storage.assign(static_cast<size_t>(std::max<int64_t>(interleaved ? B * N * width : B * H * N * D, 1)), 0.0f);
  a.view = interleaved ? MutableHeads::interleaved(a.storage.data(), B, H, N, D, width)
                       : MutableHeads::contiguous(a.storage.data(), B, H, N, D);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) a.at(b, h, n, d) = fill != 0 ? fill : normal(rng);
  return a;
}

// NaN where the reference has NaN, equal infinities, |got - want| <= tol (1 + |want|) elsewhere.
testing::AssertionResult close(ConstHeads got, ConstHeads want) {
  int bad = 0;
  std::string first;
  for (int64_t b = 0; b < want.batch; ++b)
    for (int64_t h = 0; h < want.heads; ++h)
      for (int64_t n = 0; n < want.tokens; ++n)
        for (int64_t d = 0; d < want.dim; ++d) {
          const double g = got.row(b, h, n)[d * got.stride_d], w = want.row(b, h, n)[d * want.stride_d];
          const bool ok = std::isnan(w)   ? std::isnan(g)
                          : std::isinf(w) ? g == w
                                          : std::isfinite(g) && std::fabs(g - w) <= kTol * (1.0 + std::fabs(w));
          if (!ok && bad++ == 0) first = str("[", b, ", ", h, ", ", n, ", ", d, "] got ", g, " want ", w);
        }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << bad << " elements differ, first " << first;
}

testing::AssertionResult close_lse(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = std::isinf(want[i])   ? got[i] == want[i]
                    : std::isnan(want[i]) ? std::isnan(got[i])
                                          : std::fabs(got[i] - want[i]) <= kTol * (1.0 + std::fabs(want[i]));
    if (!ok) return testing::AssertionFailure() << "lse[" << i << "] got " << got[i] << " want " << want[i];
  }
  return testing::AssertionSuccess();
}

enum class Slopes { kNone, kDefault, kArbitrary };

struct VariantCase {
  int64_t B = 1, H = 1, G = 1, T = 1, S = 1, D = 64, Dv = 64;
  MaskKind mask = MaskKind::kNone;
  int64_t offset = 0, window = 0, key_offset = 0;
  Slopes alibi = Slopes::kNone;
  float softcap = 0.0f, dropout = 0.0f;
  bool interleaved = false;
  std::string name() const {
    const char* m[] = {"none", "causal", "additive", "blocked"};
    const char* a[] = {"none", "default", "arbitrary"};
    return str("B=", B, " H=", H, " G=", G, " T=", T, " S=", S, " D=", D, " Dv=", Dv,
               " mask=", m[static_cast<int>(mask)], " offset=", offset, " key_offset=", key_offset, " window=", window,
               " alibi=", a[static_cast<int>(alibi)], " softcap=", softcap, " p=", dropout,
               interleaved ? " interleaved" : " contiguous");
  }
};

// Everything one case reads: inputs, mask values, slopes.
struct Inputs {
  VariantArray q, k, v, d_o;
  std::vector<float> mask, slopes;
  AttentionOptions options(const VariantCase& c, ThreadPool* pool) const {
    AttentionOptions o = testing_support::case_attention_options(c.T, c.D, c.mask, mask.data(), c.S + 2, c.dropout, pool);
    o.query_offset = c.offset;
    o.key_offset = c.key_offset;
    o.window = c.window;
    o.alibi_slopes = c.alibi == Slopes::kNone ? nullptr : slopes.data();
    o.softcap = c.softcap;
    return o;
  }
};

Inputs make_inputs(const VariantCase& c, std::mt19937& rng) {
  Inputs in{make_array(c.B, c.H, c.T, c.D, c.interleaved, rng), make_array(c.B, c.G, c.S, c.D, c.interleaved, rng),
            make_array(c.B, c.G, c.S, c.Dv, c.interleaved, rng), make_array(c.B, c.H, c.T, c.Dv, c.interleaved, rng),
            {}, {}};
  // (T, S) with row stride S + 2: additive values in [-2, 2] with some -inf, or about 30% blocked.
  const int64_t stride = c.S + 2;
  in.mask.assign(static_cast<size_t>(std::max<int64_t>(c.T * stride, 1)), 0.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t i = 0; i < c.T; ++i)
    for (int64_t j = 0; j < c.S; ++j) {
      float& x = in.mask[static_cast<size_t>(i * stride + j)];
      if (c.mask == MaskKind::kAdditive) x = u(rng) < 0.1f ? -kInf : 4.0f * u(rng) - 2.0f;
      if (c.mask == MaskKind::kBlocked) x = u(rng) < 0.3f ? 1.0f : 0.0f;
    }
  in.slopes.resize(static_cast<size_t>(c.H));
  if (c.alibi == Slopes::kDefault) alibi_default_slopes(c.H, in.slopes.data());
  // Arbitrary slopes, negative ones included, scaled so that no bias exceeds about 8 in size: lse
  // is float32, and a row whose lse is ~100 (a bias of 100, which the kernels cannot shift away
  // when the true lse is that large) has its weights recomputed from it with a relative error of
  // ~1e-5 (half an ulp of 100), in any float32 kernel - beyond the tolerance.
  const float reach = static_cast<float>(std::max<int64_t>(1, c.offset + c.T + c.S));
  if (c.alibi == Slopes::kArbitrary)
    for (float& s : in.slopes) s = (2.0f * u(rng) - 0.5f) * 5.0f / reach;
  return in;
}

// One run of the fused forward and backward: every output in one vector (for bitwise comparison)
// and the arrays to compare with the references.
struct Fused {
  VariantArray o, dq, dk, dv;
  std::vector<float> lse;
  std::vector<float> all() const {
    std::vector<float> a = o.storage;
    for (const VariantArray* x : {&dq, &dk, &dv}) a.insert(a.end(), x->storage.begin(), x->storage.end());
    a.insert(a.end(), lse.begin(), lse.end());
    return a;
  }
};

Fused run_fused(const VariantCase& c, const Inputs& in, ThreadPool* pool, std::mt19937& rng) {
  Fused f{make_array(c.B, c.H, c.T, c.Dv, c.interleaved, rng, kInf), make_array(c.B, c.H, c.T, c.D, c.interleaved, rng, kInf),
          make_array(c.B, c.G, c.S, c.D, c.interleaved, rng, kInf), make_array(c.B, c.G, c.S, c.Dv, c.interleaved, rng, kInf),
          std::vector<float>(static_cast<size_t>(c.B * c.H * c.T), kInf)};
  const AttentionOptions opt = in.options(c, pool);
  attention_forward(in.q.in(), in.k.in(), in.v.in(), f.o.view, f.lse.data(), opt);
  attention_backward(in.q.in(), in.k.in(), in.v.in(), f.o.in(), in.d_o.in(), f.lse.data(), f.dq.view, f.dk.view,
                     f.dv.view, opt);
  return f;
}

// The fused forward and backward against the references, on 1 and 2 threads (bit for bit equal).
void check_case(const VariantCase& c, std::mt19937& rng) {
  SCOPED_TRACE(c.name());
  const Inputs in = make_inputs(c, rng);
  ThreadPool one(1), two(2);
  const Fused f1 = run_fused(c, in, &one, rng), f2 = run_fused(c, in, &two, rng);
  EXPECT_TRUE(f1.all() == f2.all()) << "1 and 2 threads differ";

  const AttentionOptions opt = in.options(c, nullptr);
  VariantArray o = make_array(c.B, c.H, c.T, c.Dv, false, rng), dq = make_array(c.B, c.H, c.T, c.D, false, rng),
        dk = make_array(c.B, c.G, c.S, c.D, false, rng), dv = make_array(c.B, c.G, c.S, c.Dv, false, rng);
  std::vector<float> lse(f2.lse.size());
  attention_forward_reference(in.q.in(), in.k.in(), in.v.in(), o.view, lse.data(), opt);
  attention_backward_reference(in.q.in(), in.k.in(), in.v.in(), in.d_o.in(), dq.view, dk.view, dv.view, opt);
  EXPECT_TRUE(close(f2.o.in(), o.in())) << "o";
  EXPECT_TRUE(close_lse(f2.lse, lse)) << "lse";
  EXPECT_TRUE(close(f2.dq.in(), dq.in())) << "dq";
  EXPECT_TRUE(close(f2.dk.in(), dk.in())) << "dk";
  EXPECT_TRUE(close(f2.dv.in(), dv.in())) << "dv";
}

// Random configurations over every variant and its combinations (seeded).
std::vector<VariantCase> random_cases(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](auto... xs) {
    const std::vector<std::common_type_t<decltype(xs)...>> v{xs...};
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  std::vector<VariantCase> cases;
  for (int i = 0; i < n; ++i) {
    VariantCase c;
    c.B = pick(1, 1, 2);
    c.H = pick(1, 2, 4, 6);
    c.G = pick(c.H, c.H % 2 == 0 ? c.H / 2 : c.H, int64_t{1});
    c.T = pick(1, 2, 17, 50, 97, 130);
    c.S = pick(c.T, c.T, c.T + 13, std::max<int64_t>(1, c.T - 9), int64_t{70});
    c.D = pick(64, 64, 7, 33);
    c.Dv = c.D == 64 ? 64 : pick(c.D, int64_t{5});
    c.mask = static_cast<MaskKind>(pick(0, 1, 1, 2, 3));
    c.offset = pick(int64_t{0}, int64_t{0}, int64_t{5}, std::max<int64_t>(0, c.S - c.T), int64_t{200});
    c.window = pick(0, 0, 1, 9, 40, 1000);
    c.key_offset = pick(int64_t{0}, int64_t{0}, int64_t{3}, c.offset + 1, std::max<int64_t>(0, c.offset - 6));
    c.alibi = static_cast<Slopes>(pick(0, 1, 2));
    c.softcap = pick(0.0f, 0.0f, 5.0f, 0.7f, 50.0f);
    c.dropout = pick(0.0f, 0.0f, 0.2f);
    c.interleaved = pick(0, 1) != 0;
    cases.push_back(c);
  }
  return cases;
}

TEST(AttentionVariants, RandomConfigurationsMatchTheReferences) {
  std::mt19937 rng(21);
  int checked = 0;
  for (const VariantCase& c : random_cases(60, 7)) {
    check_case(c, rng);
    ++checked;
  }
  EXPECT_EQ(checked, 60);
}

// Each variant alone, then all of them at once, on the D = 64 (unrolled) path and an odd D.
TEST(AttentionVariants, EachVariantAloneAndAllTogether) {
  std::mt19937 rng(22);
  for (int64_t D : {64, 9}) {
    VariantCase base;
    base.B = 2;
    base.H = 4;
    base.G = 4;
    base.T = 77;
    base.S = 77;
    base.D = D;
    base.Dv = D;
    std::vector<VariantCase> cases;
    for (MaskKind m : {MaskKind::kNone, MaskKind::kCausal}) {
      VariantCase c = base;
      c.mask = m;
      for (int64_t G : {int64_t{2}, int64_t{1}}) {  // grouped-query, multi-query
        VariantCase x = c;
        x.G = G;
        cases.push_back(x);
      }
      for (int64_t offset : {3, 100}) {
        VariantCase x = c;
        x.offset = offset;
        x.S = base.T + offset;  // a KV cache of S keys decoding T queries
        cases.push_back(x);
      }
      for (int64_t key_offset : {1, 6, 40, 90}) {  // a block of keys of a longer sequence (ring attention)
        VariantCase x = c;
        x.key_offset = key_offset;
        x.offset = 50;
        x.dropout = key_offset == 6 ? 0.25f : 0.0f;
        cases.push_back(x);
      }
      for (int64_t w : {1, 8, 64, 500}) {
        VariantCase x = c;
        x.window = w;
        cases.push_back(x);
      }
      for (Slopes a : {Slopes::kDefault, Slopes::kArbitrary}) {
        VariantCase x = c;
        x.alibi = a;
        cases.push_back(x);
      }
      for (float cap : {5.0f, 1000.0f}) {
        VariantCase x = c;
        x.softcap = cap;
        cases.push_back(x);
      }
      VariantCase all = c;
      all.G = 2;
      all.offset = 11;
      all.S = base.T + 11;
      all.window = 20;
      all.alibi = Slopes::kDefault;
      all.softcap = 5.0f;
      all.dropout = 0.3f;
      all.interleaved = true;
      cases.push_back(all);
    }
    for (const VariantCase& c : cases) check_case(c, rng);
  }
}

// The edges: no queries, no keys, one of each; windows and offsets that leave rows with no key at
// all (o = 0, lse = -inf, dq = 0); T != S both ways.
TEST(AttentionVariants, EdgeSizesMatchTheReferences) {
  std::mt19937 rng(23);
  std::vector<VariantCase> cases;
  for (int64_t T : {0, 1})
    for (int64_t S : {0, 1, 5}) {
      VariantCase c;
      c.H = 2;
      c.G = 1;
      c.T = T;
      c.S = S;
      c.D = 3;
      c.Dv = 3;
      c.mask = MaskKind::kCausal;
      c.offset = 2;
      c.window = 2;
      c.alibi = Slopes::kDefault;
      c.softcap = 5.0f;
      cases.push_back(c);
    }
  {
    VariantCase c;  // non-causal window with a large offset: queries past S + window - 1 see no key
    c.H = 3;
    c.G = 1;
    c.T = 60;
    c.S = 30;
    c.offset = 20;
    c.window = 15;
    c.dropout = 0.2f;
    cases.push_back(c);
  }
  {
    VariantCase c;  // causal with T > S: every key visible to the last rows, the window slides past
    c.H = 4;
    c.G = 2;
    c.T = 130;
    c.S = 40;
    c.mask = MaskKind::kCausal;
    c.window = 25;
    c.interleaved = true;
    cases.push_back(c);
  }
  {
    VariantCase c;  // boolean mask under a window: rows with every visible key blocked
    c.B = 2;
    c.H = 2;
    c.G = 2;
    c.T = 50;
    c.S = 50;
    c.mask = MaskKind::kBlocked;
    c.window = 2;
    c.softcap = 3.0f;
    cases.push_back(c);
  }
  for (const VariantCase& c : cases) check_case(c, rng);
}

// Heads whose keys and values outgrow L2 take the kernels' grouped paths (several query blocks per
// key block in the forward, several key blocks per pass in the backward): the variants there too.
TEST(AttentionVariants, LongSequencesMatchTheReferences) {
  std::mt19937 rng(24);
  VariantCase c;
  c.H = 2;
  c.G = 1;
  c.T = 1100;
  c.S = 1100;
  c.mask = MaskKind::kCausal;
  c.window = 300;
  c.alibi = Slopes::kDefault;
  c.softcap = 5.0f;
  c.interleaved = true;
  ASSERT_GT(c.S * (c.D + c.Dv) * 4, 512 * 1024);
  check_case(c, rng);
}

// Every SIMD target compiled in that this CPU runs (AVX-512, AVX2, the portable fallback), forcing
// the dispatch to each in turn: a few random configurations and all the variants at once.
TEST(AttentionVariants, EverySimdTargetMatchesTheReferences) {
  const std::vector<int64_t> targets = available_simd_targets();
  ASSERT_FALSE(targets.empty());
  std::mt19937 rng(28);
  std::vector<VariantCase> cases = random_cases(6, 8);
  VariantCase all;
  all.B = 2;
  all.H = 4;
  all.G = 2;
  all.T = 70;
  all.S = 81;
  all.mask = MaskKind::kCausal;
  all.offset = 11;
  all.window = 20;
  all.alibi = Slopes::kDefault;
  all.softcap = 5.0f;
  all.dropout = 0.3f;
  cases.push_back(all);
  for (int64_t target : targets) {
    force_simd_target(target);
    SCOPED_TRACE(simd_target_name(target));
    for (const VariantCase& c : cases) check_case(c, rng);
    EXPECT_EQ(simd_target(), simd_target_name(target));
  }
  force_simd_target(0);
}

// Weights on demand use the same scores: with the fused forward's lse they sum to 1 on every row
// that sees a key, and with dropout they reproduce the fused output.
TEST(AttentionVariants, WeightsOnDemandReproduceTheFusedOutput) {
  std::mt19937 rng(25);
  VariantCase c;
  c.B = 1;
  c.H = 4;
  c.G = 2;
  c.T = 40;
  c.S = 52;
  c.D = 64;
  c.Dv = 64;
  c.mask = MaskKind::kCausal;
  c.offset = 12;
  c.window = 10;
  c.alibi = Slopes::kArbitrary;
  c.softcap = 4.0f;
  c.dropout = 0.25f;
  const Inputs in = make_inputs(c, rng);
  ThreadPool pool(2);
  const AttentionOptions opt = in.options(c, &pool);
  VariantArray o = make_array(c.B, c.H, c.T, c.Dv, false, rng);
  std::vector<float> lse(static_cast<size_t>(c.H * c.T));
  attention_forward(in.q.in(), in.k.in(), in.v.in(), o.view, lse.data(), opt);
  std::vector<float> w(static_cast<size_t>(c.T * c.S)), wz(w.size());
  VariantArray v = in.v;
  for (int64_t h = 0; h < c.H; ++h) {
    attention_weights(in.q.in(), in.k.in(), lse.data(), opt, 0, h, 0, c.T, false, w.data(), c.S);
    attention_weights(in.q.in(), in.k.in(), lse.data(), opt, 0, h, 0, c.T, true, wz.data(), c.S);
    for (int64_t i = 0; i < c.T; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < c.S; ++j) sum += w[static_cast<size_t>(i * c.S + j)];
      EXPECT_NEAR(sum, 1.0, 1e-5) << "head " << h << " row " << i;
      for (int64_t d = 0; d < c.Dv; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < c.S; ++j) acc += wz[static_cast<size_t>(i * c.S + j)] * v.at(0, h / 2, j, d);
        EXPECT_NEAR(o.at(0, h, i, d), acc, kTol * (1 + std::fabs(acc))) << "head " << h << " row " << i;
      }
    }
  }
}

TEST(AttentionVariants, BadOptionsSayWhatIsWrong) {
  std::mt19937 rng(26);
  VariantArray q = make_array(1, 4, 4, 8, false, rng), k = make_array(1, 2, 5, 8, false, rng),
        v = make_array(1, 2, 5, 8, false, rng), o = make_array(1, 4, 4, 8, false, rng);
  VariantArray k3 = make_array(1, 3, 5, 8, false, rng), v3 = make_array(1, 3, 5, 8, false, rng);
  std::vector<float> lse(16);
  auto forward = [&](const AttentionOptions& opt, const VariantArray& kk, const VariantArray& vv) {
    return error_of([&] { attention_forward(q.in(), kk.in(), vv.in(), o.view, lse.data(), opt); });
  };
  EXPECT_EQ(forward({}, k, v), "(no error)");
  EXPECT_EQ(forward({}, k3, v3),
            "attention_forward: the key/value heads of k (1, 3, 5, 8) must divide the query heads of q (1, 4, 4, 8) "
            "(grouped-query attention)");
  AttentionOptions bad;
  bad.window = -1;
  EXPECT_EQ(forward(bad, k, v), "attention_forward: the window must be positive (or 0 for none), got -1");
  bad = {};
  bad.softcap = -2.0f;
  EXPECT_EQ(forward(bad, k, v), "attention_forward: softcap must be positive (or 0 for none), got -2");
  bad.softcap = std::nanf("");
  EXPECT_EQ(forward(bad, k, v), "attention_forward: softcap must be positive (or 0 for none), got nan");
  bad = {};
  bad.query_offset = -1;
  EXPECT_EQ(forward(bad, k, v), "attention_forward: query_offset must be in [0, 2^31), got -1");
  bad = {};
  bad.key_offset = int64_t{1} << 31;
  EXPECT_EQ(forward(bad, k, v), "attention_forward: key_offset must be in [0, 2^31), got 2147483648");
  bad = {};
  const float slopes[] = {0.5f, kInf, 0.125f, 0.0625f};
  bad.alibi_slopes = slopes;
  EXPECT_EQ(forward(bad, k, v), "attention_forward: ALiBi slope 1 must be finite, got inf");
  // dk and dv have the kv heads' shape.
  VariantArray dq = make_array(1, 4, 4, 8, false, rng), dk4 = make_array(1, 4, 5, 8, false, rng),
        dv = make_array(1, 2, 5, 8, false, rng);
  EXPECT_EQ(error_of([&] {
              attention_backward(q.in(), k.in(), v.in(), o.in(), o.in(), lse.data(), dq.view, dk4.view, dv.view, {});
            }),
            "attention_backward: dk (1, 4, 5, 8) should be (1, 2, 5, 8)");
}

TEST(AttentionVariants, AlibiDefaultSlopes) {
  std::vector<float> s(12);
  alibi_default_slopes(8, s.data());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s[static_cast<size_t>(i)], std::exp2f(-static_cast<float>(i + 1))) << i;
  alibi_default_slopes(12, s.data());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s[static_cast<size_t>(i)], std::exp2f(-static_cast<float>(i + 1))) << i;
  const double extra[] = {-0.5, -1.5, -2.5, -3.5};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(s[static_cast<size_t>(8 + i)], static_cast<float>(std::exp2(extra[i]))) << i;
  alibi_default_slopes(1, s.data());
  EXPECT_EQ(s[0], 1.0f / 256.0f);  // n = 1: 2^-8
  EXPECT_EQ(error_of([&] { alibi_default_slopes(-1, s.data()); }),
            "alibi_default_slopes: the number of heads must not be negative, got -1");
}

TEST(AttentionVariants, VisiblePairsCountTheWindow) {
  EXPECT_EQ(attention_visible_pairs(10, 10, true, 0, 3), 1 + 2 + 3 * 8);
  EXPECT_EQ(attention_visible_pairs(10, 10, false, 0, 3), 10 + 10 + 10 + 9 + 8 + 7 + 6 + 5 + 4 + 3);
  EXPECT_EQ(attention_visible_pairs(4, 10, true, 6, 3), 12);  // the last 4 of 10 positions, 3 keys each
  EXPECT_EQ(attention_visible_pairs(4, 10, true, 6, 0), 7 + 8 + 9 + 10);
  EXPECT_EQ(attention_visible_pairs(5, 3, false, 10, 4), 0);  // past the window of every key
  // Against a count pair by pair.
  std::mt19937 rng(27);
  for (int n = 0; n < 50; ++n) {
    const int64_t T = rng() % 40, S = rng() % 40, off = rng() % 30, w = rng() % 3 == 0 ? 0 : 1 + rng() % 20;
    const bool causal = rng() % 2;
    double pairs = 0;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j) pairs += (!causal || j <= off + i) && (w == 0 || j > off + i - w);
    EXPECT_EQ(attention_visible_pairs(T, S, causal, off, w), pairs) << T << " " << S << " " << off << " " << w;
    EXPECT_EQ(attention_forward_flops(2, 3, T, S, 8, 4, causal, off, w), 2.0 * 6 * pairs * 12);
  }
}

}  // namespace
}  // namespace qkv::kernels
