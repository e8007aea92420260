// The KV cache's step rules and storage, and decode_attention against the naive reference
// (kernels::attention_forward_reference fed fp32 copies of the cache's keys and values; for a
// bf16 cache, of its bf16-rounded values). "Close" is the fused kernels' tolerance
// (tests/kernels/attention_test.cc): |got - want| <= 1e-5 * (1 + |want|) element by element.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/kernels/simd.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {

using testing_support::error_of;

std::vector<float> normal_vector(int64_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> x(static_cast<size_t>(std::max<int64_t>(n, 1)));
  for (float& v : x) v = normal(rng);
  return x;
}

testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                               const char* what) {
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::isfinite(g) && std::fabs(g - w) <= tol * (1.0 + std::fabs(w));
    if (!ok && bad++ == 0) first = str(what, "[", i, "] got ", g, " want ", w);
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << bad << " of " << want.size() << " differ, first " << first;
}

// --- KvCache ---------------------------------------------------------------------------------------

TEST(KvCacheBf16, RoundsToNearestEvenAndWidensExactly) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // halfway, even below
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // halfway, even above
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);  // above half
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_float(0x3f81), 1.0f + std::ldexp(1.0f, -7));
}

// (B, G, n, dim) contiguous rows whose values say where they came from.
std::vector<float> labelled(int64_t B, int64_t G, int64_t n, int64_t dim, float base) {
  std::vector<float> x(static_cast<size_t>(B * G * n * dim));
  for (size_t i = 0; i < x.size(); ++i) x[i] = base + static_cast<float>(i);
  return x;
}

TEST(KvCache, StepsAppendEveryLayerThenCommit) {
  KvCache cache(2, 1, 2, 8, 3, 2, CacheDtype::kF32);
  EXPECT_EQ(cache.bytes(), 2 * 1 * 2 * 8 * (3 + 2) * 4);
  EXPECT_EQ(cache.length(), 0);
  std::vector<float> k0 = labelled(1, 2, 3, 3, 0), v0 = labelled(1, 2, 3, 2, 100);
  cache.append(0, ConstHeads::contiguous(k0.data(), 1, 2, 3, 3), ConstHeads::contiguous(v0.data(), 1, 2, 3, 2));
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.pending(), 3);
  EXPECT_EQ(cache.length(0), 3);  // layer 0 sees its new positions before the commit
  EXPECT_EQ(cache.length(1), 0);
  EXPECT_TRUE(cache.appended(0));
  EXPECT_FALSE(cache.appended(1));
  cache.append(1, ConstHeads::contiguous(k0.data(), 1, 2, 3, 3), ConstHeads::contiguous(v0.data(), 1, 2, 3, 2));
  cache.commit();
  EXPECT_EQ(cache.length(), 3);
  EXPECT_EQ(cache.length(1), 3);
  EXPECT_EQ(cache.pending(), 0);
  // A second step of one position lands at position 3.
  std::vector<float> k1 = labelled(1, 2, 1, 3, 1000), v1 = labelled(1, 2, 1, 2, 2000);
  for (int64_t l = 0; l < 2; ++l)
    cache.append(l, ConstHeads::contiguous(k1.data(), 1, 2, 1, 3), ConstHeads::contiguous(v1.data(), 1, 2, 1, 2));
  cache.commit();
  ASSERT_EQ(cache.length(), 4);
  const ConstHeads keys = cache.keys(1), values = cache.values(1);
  EXPECT_EQ(keys.tokens, 4);
  EXPECT_EQ(keys.stride_h, 8 * 3);  // rows of the capacity
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t n = 0; n < 3; ++n) EXPECT_EQ(keys.row(0, g, n)[c], k0[static_cast<size_t>((g * 3 + n) * 3 + c)]);
      EXPECT_EQ(keys.row(0, g, 3)[c], k1[static_cast<size_t>(g * 3 + c)]);
    }
  EXPECT_EQ(values.row(0, 1, 3)[1], v1[3]);
  // Truncate rolls back; the next append overwrites from there.
  cache.truncate(2);
  EXPECT_EQ(cache.length(), 2);
  for (int64_t l = 0; l < 2; ++l)
    cache.append(l, ConstHeads::contiguous(k1.data(), 1, 2, 1, 3), ConstHeads::contiguous(v1.data(), 1, 2, 1, 2));
  cache.commit();
  EXPECT_EQ(cache.length(), 3);
  EXPECT_EQ(cache.keys(0).row(0, 1, 2)[2], k1[5]);
  // A zero-position step is allowed; reset empties, even in the middle of a step.
  cache.append(0, ConstHeads::contiguous(k1.data(), 1, 2, 0, 3), ConstHeads::contiguous(v1.data(), 1, 2, 0, 2));
  cache.reset();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_FALSE(cache.appended(0));
  EXPECT_EQ(cache.keys(0).tokens, 0);
}

TEST(KvCache, Bf16StoresRoundedValuesAndCopiesThemOutAsFloat) {
  KvCache cache(1, 2, 1, 4, 5, 3, CacheDtype::kBF16);
  EXPECT_EQ(cache.bytes(), 2 * 4 * (5 + 3) * 2);
  std::mt19937 rng(7);
  std::vector<float> k = normal_vector(2 * 4 * 5, rng), v = normal_vector(2 * 4 * 3, rng);
  cache.append(0, ConstHeads::contiguous(k.data(), 2, 1, 4, 5), ConstHeads::contiguous(v.data(), 2, 1, 4, 3));
  cache.commit();
  std::vector<float> kc(k.size()), vc(v.size());
  cache.copy_keys(0, MutableHeads::contiguous(kc.data(), 2, 1, 4, 5));
  cache.copy_values(0, MutableHeads::contiguous(vc.data(), 2, 1, 4, 3));
  for (size_t i = 0; i < k.size(); ++i) {
    EXPECT_EQ(kc[i], bf16_to_float(float_to_bf16(k[i])));
    EXPECT_NE(kc[i], k[i]) << "random normals are not all bf16 values";  // the rounding happened
  }
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(vc[i], bf16_to_float(float_to_bf16(v[i])));
  EXPECT_NE(error_of([&] { (void)cache.keys(0); }).find("holds bf16, not f32 (use copy_keys)"), std::string::npos);
}

TEST(KvCache, CopiesOneHeadOfEverySequenceInEitherDtype) {
  // 2 sequences, 3 key/value heads, 5 of 6 positions: head g's copy is the full copy's head g, in
  // a contiguous (B, 1, N, D) buffer and in one with a column stride.
  std::mt19937 rng(11);
  std::vector<float> k = normal_vector(2 * 3 * 5 * 4, rng), v = normal_vector(2 * 3 * 5 * 2, rng);
  for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16}) {
    KvCache cache(1, 2, 3, 6, 4, 2, dtype);
    cache.append(0, ConstHeads::contiguous(k.data(), 2, 3, 5, 4), ConstHeads::contiguous(v.data(), 2, 3, 5, 2));
    cache.commit();
    std::vector<float> all_k(k.size()), all_v(v.size());
    cache.copy_keys(0, MutableHeads::contiguous(all_k.data(), 2, 3, 5, 4));
    cache.copy_values(0, MutableHeads::contiguous(all_v.data(), 2, 3, 5, 2));
    for (int64_t g = 0; g < 3; ++g) {
      std::vector<float> hk(2 * 5 * 4, -1.0f), hv(2 * 5 * 2, -1.0f), strided(2 * 5 * 4 * 2, -1.0f);
      cache.copy_keys(0, MutableHeads::contiguous(hk.data(), 2, 1, 5, 4), g);
      cache.copy_values(0, MutableHeads::contiguous(hv.data(), 2, 1, 5, 2), g);
      MutableHeads sk = MutableHeads::contiguous(strided.data(), 2, 1, 5, 4);
      sk.stride_d = 2, sk.stride_n *= 2, sk.stride_h *= 2, sk.stride_b *= 2;
      cache.copy_keys(0, sk, g);
      std::vector<float> pad(2 * 5 * 3, -1.0f);
      MutableHeads padded = MutableHeads::contiguous(pad.data(), 2, 1, 5, 3);
      padded.dim = 2;
      cache.copy_values(0, padded, g);  // (2, 1, 5, 2) in rows 3 floats apart: one copy per row
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < 5; ++t) {
          for (int64_t c = 0; c < 4; ++c) {
            const float want = all_k[static_cast<size_t>(((b * 3 + g) * 5 + t) * 4 + c)];
            EXPECT_EQ(hk[static_cast<size_t>((b * 5 + t) * 4 + c)], want) << "b " << b << " g " << g << " t " << t;
            EXPECT_EQ(sk.row(b, 0, t)[2 * c], want);
          }
          for (int64_t c = 0; c < 2; ++c) {
            const float want = all_v[static_cast<size_t>(((b * 3 + g) * 5 + t) * 2 + c)];
            EXPECT_EQ(hv[static_cast<size_t>((b * 5 + t) * 2 + c)], want);
            EXPECT_EQ(padded.row(b, 0, t)[c], want) << "b " << b << " g " << g << " t " << t;
          }
        }
    }
    EXPECT_NE(error_of([&] { cache.copy_keys(0, MutableHeads::contiguous(all_k.data(), 2, 1, 5, 4), 3); })
                  .find("first_head 3 is outside the cache's 3 key/value heads"),
              std::string::npos);
    EXPECT_NE(error_of([&] { cache.copy_keys(0, MutableHeads::contiguous(all_k.data(), 2, 2, 5, 4), 2); })
                  .find("should be (2, 1 .. 1 heads from head 2"),
              std::string::npos);
  }
}

TEST(KvCache, MixUpsAreErrorsNamingTheValues) {
  KvCache cache(2, 1, 1, 4, 2, 2, CacheDtype::kF32);
  std::vector<float> x(16, 1.0f);
  auto step = [&](int64_t n) { return ConstHeads::contiguous(x.data(), 1, 1, n, 2); };
  EXPECT_EQ(error_of([&] { cache.append(0, step(5), step(5)); }),
            "KvCache::append: appending 5 positions to the 0 held would exceed the capacity of 4 positions");
  cache.append(0, step(3), step(3));
  EXPECT_EQ(error_of([&] { cache.append(0, step(3), step(3)); }),
            "KvCache::append: layer 0 already appended 3 positions in this step (commit() before appending to it again)");
  EXPECT_EQ(error_of([&] { cache.append(1, step(2), step(2)); }),
            "KvCache::append: layer 1 appends 2 positions but this step's layers appended 3 (every layer appends the "
            "same positions)");
  EXPECT_EQ(error_of([&] { cache.commit(); }),
            "KvCache::commit: layer 1 of 2 has not appended this step's 3 positions (1 of 2 layers did)");
  EXPECT_EQ(error_of([&] { cache.truncate(0); }),
            "KvCache::truncate: a step is in progress (1 of 2 layers appended); commit() first");
  cache.append(1, step(3), step(3));
  cache.commit();
  EXPECT_EQ(error_of([&] { cache.commit(); }),
            "KvCache::commit: no layer appended since the last commit (nothing to commit)");
  EXPECT_EQ(error_of([&] { cache.append(0, step(2), step(2)); }),
            "KvCache::append: appending 2 positions to the 3 held would exceed the capacity of 4 positions");
  EXPECT_EQ(error_of([&] { cache.truncate(5); }), "KvCache::truncate: 5 positions is not in [0, length 3]");
  EXPECT_EQ(error_of([&] { cache.truncate(-1); }), "KvCache::truncate: -1 positions is not in [0, length 3]");
  EXPECT_EQ(error_of([&] { cache.append(2, step(1), step(1)); }), "KvCache::append: layer 2 is not in [0, 2)");
  EXPECT_EQ(error_of([&] { cache.append(0, ConstHeads::contiguous(x.data(), 1, 1, 1, 3), step(1)); }),
            "KvCache::append: k_new (1, 1, 1, 3) should be (1, 1, n, 2)");
  EXPECT_EQ(error_of([&] { cache.append(0, step(1), step(2)); }),
            "KvCache::append: v_new (1, 1, 2, 2) should be (1, 1, 1, 2) to match k_new");
  EXPECT_EQ(cache.length(), 3) << "a refused append changes nothing";
  EXPECT_FALSE(cache.appended(0));
}

TEST(KvCache, BadSizesAreRefused) {
  EXPECT_EQ(error_of([] { KvCache(0, 1, 1, 4, 2, 2, CacheDtype::kF32); }),
            "KvCache: sizes must be at least 1 (capacity at least 0), got layers 0, batch 1, kv_heads 1, capacity 4, "
            "head_dim 2, value_dim 2");
  EXPECT_NE(error_of([] { KvCache(1, 1, 1, -1, 2, 2, CacheDtype::kF32); }).find("capacity -1"), std::string::npos);
  EXPECT_EQ(error_of([] { KvCache(1, 1, 1, 4, 2, 2, static_cast<CacheDtype>(7)); }),
            "KvCache: unknown dtype 7 (expected f32 or bf16)");
  const std::string overflow = error_of([] { KvCache(1, int64_t{1} << 40, 1 << 20, 1 << 30, 64, 64, CacheDtype::kF32); });
  EXPECT_NE(overflow.find("KvCache (layers x batch x kv_heads x capacity x (head_dim + value_dim))"), std::string::npos)
      << overflow;
  Limits small = limits();
  small.max_memory_bytes = 1000;
  testing_support::ScopedLimits scoped(small);
  const std::string memory = error_of([] { KvCache(1, 1, 1, 100, 2, 2, CacheDtype::kF32); });
  EXPECT_NE(memory.find("KvCache needs 1600 bytes"), std::string::npos) << memory;
  EXPECT_NE(memory.find("max_memory_bytes"), std::string::npos) << memory;
}

// --- decode_attention against the reference --------------------------------------------------------

struct DecodeCase {
  int64_t B = 1, H = 1, G = 1, Tq = 1, S = 1, D = 64, Dv = 64;
  CacheDtype dtype = CacheDtype::kF32;
  bool causal = true;
  int64_t query_offset = -1;  // -1: S - Tq (clamped at 0)
  int64_t window = 0;
  bool alibi = false;
  float softcap = 0.0f;
  float dropout = 0.0f;
  AttentionMask::Kind mask = AttentionMask::Kind::kNone;  // additive / blocked instead of causal
  int64_t prefill = -1;  // positions in the first step (-1: all but the last Tq); the rest one per step
  float scale = 0.0f;    // 0: 1 / sqrt(D)
  bool nan_query = false;  // the first query row (b 0, head 0, position 0) starts with a NaN
  std::string name() const {
    return str("B=", B, " H=", H, " G=", G, " Tq=", Tq, " S=", S, " D=", D, " Dv=", Dv, " ",
               cache_dtype_name(dtype), causal ? " causal" : "", " offset=", query_offset, " window=", window,
               alibi ? " alibi" : "", " softcap=", softcap, " p=", dropout, " mask=", static_cast<int>(mask),
               " scale=", scale);
  }
};

struct DecodeRun {
  std::vector<float> o, lse;
};

// Fills a cache of S positions (a prefill step, then steps of one position), decodes Tq queries
// on `pool`, and (with want) runs the reference on the cache's fp32 copies.
DecodeRun run_case(const DecodeCase& c, ThreadPool* pool, DecodeRun* want, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t layers = 2, layer = 1;
  KvCache cache(layers, c.B, c.G, c.S + 3, c.D, c.Dv, c.dtype);
  const std::vector<float> k = normal_vector(c.B * c.G * c.S * c.D, rng), v = normal_vector(c.B * c.G * c.S * c.Dv, rng);
  const ConstHeads kall = ConstHeads::contiguous(k.data(), c.B, c.G, c.S, c.D);
  const ConstHeads vall = ConstHeads::contiguous(v.data(), c.B, c.G, c.S, c.Dv);
  auto rows = [](ConstHeads x, int64_t from, int64_t n) {
    x.data += from * x.stride_n;
    x.tokens = n;
    return x;
  };
  int64_t at = 0;
  const int64_t first = c.prefill >= 0 ? c.prefill : std::max<int64_t>(0, c.S - 3);
  while (at < c.S) {
    const int64_t n = at == 0 ? std::max<int64_t>(first, 1) : 1;
    for (int64_t l = 0; l < layers; ++l) cache.append(l, rows(kall, at, n), rows(vall, at, n));
    cache.commit();
    at += n;
  }
  std::vector<float> q = normal_vector(c.B * c.H * c.Tq * c.D, rng), slopes(static_cast<size_t>(c.H));
  if (c.nan_query) q[0] = std::nanf("");
  alibi_default_slopes(c.H, slopes.data());
  std::vector<float> mask(static_cast<size_t>(c.Tq * (c.S + 2)));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& m : mask)
    m = c.mask == AttentionMask::Kind::kBlocked ? (u(rng) < 0.3f ? 1.0f : 0.0f)
                                                : (u(rng) < 0.1f ? -kInf : 4.0f * u(rng) - 2.0f);
  AttentionOptions opt;
  opt.scale = c.scale > 0.0f ? c.scale : 1.0f / std::sqrt(static_cast<float>(c.D));
  if (c.causal) opt.mask = AttentionMask::causal();
  if (c.mask == AttentionMask::Kind::kAdditive) opt.mask = AttentionMask::additive(mask.data(), c.S + 2);
  if (c.mask == AttentionMask::Kind::kBlocked) opt.mask = AttentionMask::blocked(mask.data(), c.S + 2);
  opt.query_offset = c.query_offset >= 0 ? c.query_offset : std::max<int64_t>(0, c.S - c.Tq);
  opt.window = c.window;
  opt.alibi_slopes = c.alibi ? slopes.data() : nullptr;
  opt.softcap = c.softcap;
  opt.dropout_p = c.dropout;
  opt.dropout_seed = 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(seed);
  opt.pool = pool;
  const ConstHeads qh = ConstHeads::contiguous(q.data(), c.B, c.H, c.Tq, c.D);
  DecodeRun got;
  got.o.assign(static_cast<size_t>(c.B * c.H * c.Tq * c.Dv), kInf);
  got.lse.assign(static_cast<size_t>(c.B * c.H * c.Tq), kInf);
  decode_attention(qh, cache, layer, MutableHeads::contiguous(got.o.data(), c.B, c.H, c.Tq, c.Dv), got.lse.data(), opt);
  if (want) {
    std::vector<float> kc(static_cast<size_t>(c.B * c.G * c.S * c.D) + 1), vc(static_cast<size_t>(c.B * c.G * c.S * c.Dv) + 1);
    const MutableHeads kh = MutableHeads::contiguous(kc.data(), c.B, c.G, c.S, c.D);
    const MutableHeads vh = MutableHeads::contiguous(vc.data(), c.B, c.G, c.S, c.Dv);
    cache.copy_keys(layer, kh);
    cache.copy_values(layer, vh);
    want->o.assign(got.o.size(), 0.0f);
    want->lse.assign(got.lse.size(), 0.0f);
    attention_forward_reference(qh, kh, vh, MutableHeads::contiguous(want->o.data(), c.B, c.H, c.Tq, c.Dv),
                                want->lse.data(), opt);
  }
  return got;
}

void check_case(const DecodeCase& c, uint32_t seed, ThreadPool& one, ThreadPool& two) {
  SCOPED_TRACE(c.name());
  DecodeRun want;
  const DecodeRun got1 = run_case(c, &one, &want, seed);
  EXPECT_TRUE(close(got1.o, want.o, 1e-5, "o"));
  EXPECT_TRUE(close(got1.lse, want.lse, 1e-5, "lse"));
  const DecodeRun got2 = run_case(c, &two, nullptr, seed);
  EXPECT_EQ(std::memcmp(got1.o.data(), got2.o.data(), got1.o.size() * sizeof(float)), 0) << "o: 1 vs 2 threads";
  EXPECT_EQ(std::memcmp(got1.lse.data(), got2.lse.data(), got1.lse.size() * sizeof(float)), 0) << "lse: 1 vs 2 threads";
}

class DecodeAttention : public testing::Test {
 protected:
  ThreadPool one{1}, two{2};
};

TEST_F(DecodeAttention, EachVariantAloneMatchesTheReference) {
  const int64_t chunked = 3 * decode_chunk_keys(1) + 37;  // several chunks
  ASSERT_GT(chunked, decode_chunk_keys(chunked)) << "the cache spans more than one chunk";
  for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16})
    for (int64_t S : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}, chunked}) {
      DecodeCase base;
      base.H = 4;
      base.G = 2;
      base.S = S;
      base.dtype = dtype;
      std::vector<DecodeCase> cases;
      cases.push_back(base);                                          // causal decode of one token
      { DecodeCase c = base; c.causal = false; cases.push_back(c); }  // no mask
      { DecodeCase c = base; c.Tq = 5; cases.push_back(c); }          // a draft of 5
      { DecodeCase c = base; c.window = 50; cases.push_back(c); }
      { DecodeCase c = base; c.alibi = true; cases.push_back(c); }
      { DecodeCase c = base; c.softcap = 2.0f; cases.push_back(c); }
      { DecodeCase c = base; c.dropout = 0.3f; cases.push_back(c); }
      { DecodeCase c = base; c.G = 4; cases.push_back(c); }           // multi-head
      { DecodeCase c = base; c.G = 1; cases.push_back(c); }           // multi-query
      { DecodeCase c = base; c.causal = false; c.mask = AttentionMask::Kind::kAdditive; c.Tq = 2; cases.push_back(c); }
      { DecodeCase c = base; c.causal = false; c.mask = AttentionMask::Kind::kBlocked; c.Tq = 2; cases.push_back(c); }
      { DecodeCase c = base; c.D = 33; c.Dv = 17; cases.push_back(c); }  // odd dims
      uint32_t seed = 1;
      for (const DecodeCase& c : cases) check_case(c, seed++, one, two);
    }
}

TEST_F(DecodeAttention, RandomCombinationsMatchTheReference) {
  std::mt19937 rng(20240611);
  const int64_t chunked = 2 * decode_chunk_keys(1) + 11;
  const int64_t Ss[] = {1, 7, 64, 1000, chunked};
  const int64_t Hs[] = {1, 2, 3, 4, 6, 12};
  const std::pair<int64_t, int64_t> dims[] = {{64, 64}, {64, 64}, {33, 33}, {5, 9}, {16, 16}, {32, 32}, {128, 128}};
  for (int n = 0; n < 60; ++n) {
    DecodeCase c;
    auto pick = [&](int count) { return static_cast<int>(rng() % static_cast<uint32_t>(count)); };
    c.B = 1 + pick(2);
    c.H = Hs[pick(6)];
    std::vector<int64_t> divisors;
    for (int64_t g = 1; g <= c.H; ++g)
      if (c.H % g == 0) divisors.push_back(g);
    const int choice = pick(3);
    c.G = choice == 0 ? c.H : choice == 1 ? 1 : divisors[static_cast<size_t>(pick(static_cast<int>(divisors.size())))];
    c.Tq = std::array<int64_t, 3>{1, 2, 5}[static_cast<size_t>(pick(3))];
    c.S = Ss[pick(5)];
    std::tie(c.D, c.Dv) = dims[pick(7)];
    c.dtype = pick(2) ? CacheDtype::kBF16 : CacheDtype::kF32;
    c.causal = pick(4) != 0;
    if (pick(4) == 0) c.query_offset = pick(static_cast<int>(c.S) + 3);  // anywhere, even past the end
    if (pick(3) == 0) c.window = 1 + pick(100);
    c.alibi = pick(3) == 0;
    if (pick(3) == 0) c.softcap = 0.5f + 3.0f * static_cast<float>(pick(10)) / 10.0f;
    if (pick(4) == 0) c.dropout = 0.2f;
    if (!c.causal && pick(3) == 0) c.mask = pick(2) ? AttentionMask::Kind::kAdditive : AttentionMask::Kind::kBlocked;
    if (pick(3) == 0) c.prefill = 0;  // one position per step all the way
    check_case(c, static_cast<uint32_t>(100 + n), one, two);
  }
}

TEST_F(DecodeAttention, EveryVariantTogether) {
  DecodeCase c;
  c.B = 2;
  c.H = 6;
  c.G = 2;
  c.Tq = 5;
  c.S = 2 * decode_chunk_keys(1) + 300;
  c.window = 700;  // the chunks start at the window's first key, past the first chunk
  c.alibi = true;
  c.softcap = 1.5f;
  c.dropout = 0.1f;
  for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16}) {
    c.dtype = dtype;
    check_case(c, 77, one, two);
  }
}

// Scores of tens (scale 2 instead of 1/8): the running max jumps often and most weights underflow,
// in the fused per-row pass over full blocks (grouped heads, D = 64) and in the general one (the
// causal tail of a draft of 3), over several chunks.
TEST_F(DecodeAttention, SharpSoftmaxOverGroupedHeadsMatchesTheReference) {
  DecodeCase c;
  c.H = 12;
  c.G = 4;
  c.S = 3 * decode_chunk_keys(1) + 37;
  c.scale = 2.0f;
  for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16})
    for (int64_t Tq : {int64_t{1}, int64_t{3}}) {
      c.dtype = dtype;
      c.Tq = Tq;
      check_case(c, 91, one, two);
    }
}

// Twelve or more rows per key on float keys of widths that are not 1, 2, 4 or 8 vectors (latent
// attention's heads over one latent, a large group): each block of 64 keys is two small products,
// the variants applied to its scores by blocks of 16; every variant, a draft's causal tail, caches
// that end inside a block and span several chunks; on every SIMD target.
TEST_F(DecodeAttention, ManyRowsPerKeyAsProductsMatchTheReference) {
  const int64_t chunked = 2 * decode_chunk_keys(1) + 77;
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    uint32_t seed = 300;
    for (int64_t S : {int64_t{5}, int64_t{64}, int64_t{130}, chunked}) {
      DecodeCase base;
      base.H = 12;
      base.G = 1;
      base.S = S;
      base.D = base.Dv = 48;
      std::vector<DecodeCase> cases;
      cases.push_back(base);
      { DecodeCase c = base; c.H = 16; c.D = 33; c.Dv = 17; cases.push_back(c); }
      { DecodeCase c = base; c.H = 6; c.Tq = 3; c.window = 40; cases.push_back(c); }  // 18 rows, a draft's tail
      { DecodeCase c = base; c.alibi = true; c.softcap = 2.0f; cases.push_back(c); }
      { DecodeCase c = base; c.dropout = 0.25f; cases.push_back(c); }
      { DecodeCase c = base; c.causal = false; c.mask = AttentionMask::Kind::kAdditive; cases.push_back(c); }
      { DecodeCase c = base; c.causal = false; c.mask = AttentionMask::Kind::kBlocked; cases.push_back(c); }
      { DecodeCase c = base; c.scale = 2.0f; cases.push_back(c); }  // a sharp softmax: the max jumps
      for (const DecodeCase& c : cases) check_case(c, seed++, one, two);
    }
  }
  force_simd_target(0);
}

TEST_F(DecodeAttention, ARowThatSeesNoKeyIsZeroWithMinusInfinityLse) {
  DecodeCase c;
  c.S = 10;
  c.Tq = 2;
  c.window = 3;
  c.query_offset = 20;  // the window [18, 20] is past the cache's 10 keys
  DecodeRun want;
  const DecodeRun got = run_case(c, &one, &want, 5);
  for (float x : got.o) EXPECT_EQ(x, 0.0f);
  for (float x : got.lse) EXPECT_EQ(x, -kInf);
  EXPECT_TRUE(close(got.o, want.o, 1e-5, "o"));
}

// A NaN in a query makes its row's scores NaN, and PyTorch's softmax then gives NaN weights and a
// NaN output; the kernel's running max passes over NaN, and a row whose max came out -inf took no
// weight: an output of zeros, so a model with a NaN weight decoded finite garbage. Now the row is
// NaN (its lse too) on every path - one block or many, one chunk or several, a group's rows
// together - and on every SIMD target; the other rows keep their values.
TEST_F(DecodeAttention, ANaNQueryGivesANaNRowAsPyTorch) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16})
      for (int64_t S : {int64_t{7}, int64_t{64}, decode_chunk_keys(1) + 100})
        for (int64_t G : {int64_t{1}, int64_t{2}}) {
          DecodeCase c;
          c.dtype = dtype;
          c.S = S;
          c.G = G;
          c.H = 4;
          c.nan_query = true;
          SCOPED_TRACE(c.name());
          DecodeRun want;
          const DecodeRun got = run_case(c, &one, &want, 3);
          const size_t row = static_cast<size_t>(c.Dv);
          for (size_t i = 0; i < row; ++i) ASSERT_TRUE(std::isnan(got.o[i])) << "o[" << i << "] of the NaN row";
          EXPECT_TRUE(std::isnan(got.lse[0]));
          const std::vector<float> rest(got.o.begin() + static_cast<std::ptrdiff_t>(row), got.o.end()),
              want_rest(want.o.begin() + static_cast<std::ptrdiff_t>(row), want.o.end());
          EXPECT_TRUE(close(rest, want_rest, 1e-5, "o of the other rows"));
        }
  }
  force_simd_target(0);
}

TEST_F(DecodeAttention, EverySimdTargetMatchesTheReference) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    DecodeCase c;
    c.H = 6;
    c.G = 2;
    c.Tq = 2;
    c.S = decode_chunk_keys(1) + 100;
    c.alibi = true;
    c.softcap = 3.0f;
    c.window = 400;
    for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16})
      for (int64_t D : {int64_t{64}, int64_t{33}, int64_t{32}, int64_t{128}}) {
        c.dtype = dtype;
        c.D = c.Dv = D;
        check_case(c, 11, one, two);
      }
  }
  force_simd_target(0);
}

// A group's query heads over full blocks take the rows in fours (AVX-512), pairs or alone, each key
// and value widened once for the rows together; a row's arithmetic is the same whichever: every
// head of a group of 1 to 5 (and a draft of 2 queries) gives the bits it gives decoded alone over
// its key/value head, on every SIMD target, for head sizes of 1 to 16 vectors; and matches the
// reference. The cache spans two chunks of whole blocks (with a draft of 2, the last block takes the
// general path, row by row). A cache that ends inside a block is not in this claim: on the
// register-blocked path (heads past 16 vectors) the tail's sums group the rows, and differ.
TEST_F(DecodeAttention, GroupedRowsGiveEachRowItsBitsAloneOnEverySimdTarget) {
  const int64_t S = decode_chunk_keys(1) + 48, G = 2;  // whole blocks of 16
  std::mt19937 rng(77);
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16})
      for (int64_t D : {int64_t{16}, int64_t{64}, int64_t{128}, int64_t{256}})
        for (int64_t group : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}})
          for (int64_t Tq : {int64_t{1}, int64_t{2}}) {
            SCOPED_TRACE(str(cache_dtype_name(dtype), " D=", D, " group=", group, " Tq=", Tq));
            const int64_t H = G * group;
            const std::vector<float> k = normal_vector(G * S * D, rng), v = normal_vector(G * S * D, rng);
            const std::vector<float> q = normal_vector(H * Tq * D, rng);
            AttentionOptions opt;
            opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
            opt.mask = AttentionMask::causal();
            opt.query_offset = S - Tq;
            opt.pool = &two;
            // o (1, heads, Tq, D) of `heads` query heads at q over `kv_heads` key/value heads at k, v.
            auto decode = [&](const float* qp, int64_t heads, const float* kp, const float* vp, int64_t kv_heads,
                              std::vector<float>& o, std::vector<float>& lse) {
              KvCache cache(1, 1, kv_heads, S, D, D, dtype);
              cache.append(0, ConstHeads::contiguous(kp, 1, kv_heads, S, D), ConstHeads::contiguous(vp, 1, kv_heads, S, D));
              cache.commit();
              o.assign(static_cast<size_t>(heads * Tq * D), kInf);
              lse.assign(static_cast<size_t>(heads * Tq), kInf);
              decode_attention(ConstHeads::contiguous(qp, 1, heads, Tq, D), cache, 0,
                               MutableHeads::contiguous(o.data(), 1, heads, Tq, D), lse.data(), opt);
              return cache;
            };
            std::vector<float> o, lse, o1, lse1;
            const KvCache cache = decode(q.data(), H, k.data(), v.data(), G, o, lse);
            for (int64_t h = 0; h < H; ++h) {
              const int64_t g = h / group;
              decode(&q[h * Tq * D], 1, &k[g * S * D], &v[g * S * D], 1, o1, lse1);
              ASSERT_EQ(std::memcmp(o1.data(), &o[h * Tq * D], o1.size() * sizeof(float)), 0) << "o of head " << h;
              ASSERT_EQ(std::memcmp(lse1.data(), &lse[h * Tq], lse1.size() * sizeof(float)), 0) << "lse of head " << h;
            }
            std::vector<float> kc(static_cast<size_t>(G * S * D)), vc(kc.size()), want(o.size()), want_lse(lse.size());
            cache.copy_keys(0, MutableHeads::contiguous(kc.data(), 1, G, S, D));
            cache.copy_values(0, MutableHeads::contiguous(vc.data(), 1, G, S, D));
            attention_forward_reference(ConstHeads::contiguous(q.data(), 1, H, Tq, D),
                                        ConstHeads::contiguous(kc.data(), 1, G, S, D),
                                        ConstHeads::contiguous(vc.data(), 1, G, S, D),
                                        MutableHeads::contiguous(want.data(), 1, H, Tq, D), want_lse.data(), opt);
            ASSERT_TRUE(close(o, want, 1e-5, "o"));
            ASSERT_TRUE(close(lse, want_lse, 1e-5, "lse"));
          }
  }
  force_simd_target(0);
}

TEST_F(DecodeAttention, SeesTheStepInProgressOfItsLayer) {
  // After layer 0 appends the new position (before commit), decoding layer 0 attends to it;
  // layer 1, not yet appended, sees the committed positions only.
  KvCache cache(2, 1, 1, 8, 4, 4, CacheDtype::kF32);
  std::vector<float> k(16, 0.0f), v(16, 0.0f), q(4, 1.0f), o(4), lse(1);
  for (int n = 0; n < 4; ++n) v[static_cast<size_t>(n * 4)] = static_cast<float>(n + 1);
  auto heads = [](std::vector<float>& x, int64_t from, int64_t n) {
    return ConstHeads::contiguous(x.data() + from * 4, 1, 1, n, 4);
  };
  for (int64_t l = 0; l < 2; ++l) cache.append(l, heads(k, 0, 3), heads(v, 0, 3));
  cache.commit();
  cache.append(0, heads(k, 3, 1), heads(v, 3, 1));
  AttentionOptions opt;
  opt.pool = &one;
  decode_attention(ConstHeads::contiguous(q.data(), 1, 1, 1, 4), cache, 0, MutableHeads::contiguous(o.data(), 1, 1, 1, 4),
                   lse.data(), opt);
  EXPECT_FLOAT_EQ(o[0], 2.5f) << "equal weights over values 1, 2, 3, 4";
  EXPECT_FLOAT_EQ(lse[0], std::log(4.0f));
  decode_attention(ConstHeads::contiguous(q.data(), 1, 1, 1, 4), cache, 1, MutableHeads::contiguous(o.data(), 1, 1, 1, 4),
                   lse.data(), opt);
  EXPECT_FLOAT_EQ(o[0], 2.0f) << "equal weights over values 1, 2, 3";
}

TEST_F(DecodeAttention, BadArgumentsAreErrorsNamingThem) {
  KvCache cache(1, 1, 4, 8, 8, 8, CacheDtype::kF32);
  std::vector<float> q(6 * 8), o(6 * 8), lse(6);
  AttentionOptions opt;
  auto call = [&](int64_t H, int64_t D, int64_t Dv, int64_t layer) {
    return error_of([&] {
      decode_attention(ConstHeads::contiguous(q.data(), 1, H, 1, D), cache, layer,
                       MutableHeads::contiguous(o.data(), 1, H, 1, Dv), lse.data(), opt);
    });
  };
  EXPECT_EQ(call(6, 8, 8, 0),
            "decode_attention: the cache's 4 key/value heads must divide q's 6 query heads (grouped-query attention)");
  EXPECT_EQ(call(4, 7, 8, 0), "decode_attention: q (1, 4, 1, 7) should be (1, H, Tq, 8) for the cache's batch and head_dim");
  EXPECT_EQ(call(4, 8, 6, 0), "decode_attention: o (1, 4, 1, 6) should be (1, 4, 1, 8)");
  EXPECT_EQ(call(4, 8, 8, 1), "decode_attention: layer 1 is not in [0, 1)");
  opt.dropout_p = 1.0f;
  EXPECT_EQ(call(4, 8, 8, 0), "decode_attention: dropout p must be in [0, 1), got 1");
}

// decode_attention_rows on the caller's rows gives decode_attention's bits on a cache holding the
// same keys and values (rows past the length hold NaN: never read), keys and values as one array
// (latent attention's absorbed decoding) included; bad rows are errors naming the sizes.
TEST(DecodeAttentionRows, TheCallersRowsGiveTheCachesBits) {
  std::mt19937 rng(31);
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "keys and values one array" : "keys and values apart");
    const int64_t B = 2, H = 6, G = shared ? 1 : 2, Tq = 2, S = decode_chunk_keys(1) + 37, C = S + 5, D = 24;
    const int64_t Dv = shared ? D : 16;
    const std::vector<float> k = normal_vector(B * G * S * D, rng);
    const std::vector<float> v = shared ? k : normal_vector(B * G * S * Dv, rng);
    KvCache cache(1, B, G, C, D, Dv, CacheDtype::kF32);
    cache.append(0, ConstHeads::contiguous(k.data(), B, G, S, D), ConstHeads::contiguous(v.data(), B, G, S, Dv));
    cache.commit();
    std::vector<float> keys(static_cast<size_t>(B * G * C * D), std::nanf("")), values(B * G * C * Dv, std::nanf(""));
    for (int64_t bg = 0; bg < B * G; ++bg) {
      std::copy_n(&k[bg * S * D], S * D, &keys[bg * C * D]);
      std::copy_n(&v[bg * S * Dv], S * Dv, &values[bg * C * Dv]);
    }
    const std::vector<float> q = normal_vector(B * H * Tq * D, rng);
    AttentionOptions opt;
    opt.scale = 0.3f;
    opt.mask = AttentionMask::causal();
    opt.query_offset = S - Tq;
    std::vector<float> o1(static_cast<size_t>(B * H * Tq * Dv)), o2(o1.size()), l1(B * H * Tq), l2(l1.size());
    const ConstHeads qh = ConstHeads::contiguous(q.data(), B, H, Tq, D);
    decode_attention(qh, cache, 0, MutableHeads::contiguous(o1.data(), B, H, Tq, Dv), l1.data(), opt);
    decode_attention_rows(qh, keys.data(), shared ? keys.data() : values.data(), G, C, S, Dv,
                          MutableHeads::contiguous(o2.data(), B, H, Tq, Dv), l2.data(), opt);
    for (size_t i = 0; i < o1.size(); ++i) ASSERT_EQ(o1[i], o2[i]) << i;
    for (size_t i = 0; i < l1.size(); ++i) ASSERT_EQ(l1[i], l2[i]) << i;
  }
  const std::vector<float> q(8, 1.0f), rows(64, 1.0f);
  std::vector<float> o(8), l(2);
  const ConstHeads qh = ConstHeads::contiguous(q.data(), 1, 2, 1, 4);
  const MutableHeads oh = MutableHeads::contiguous(o.data(), 1, 2, 1, 4);
  EXPECT_NE(error_of([&] { decode_attention_rows(qh, rows.data(), rows.data(), 1, 4, 5, 4, oh, l.data(), {}); })
                .find("decode_attention_rows: 5 keys in rows of capacity 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode_attention_rows(qh, nullptr, rows.data(), 1, 4, 3, 4, oh, l.data(), {}); })
                .find("decode_attention_rows: no keys or values"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode_attention_rows(qh, rows.data(), rows.data(), 0, 4, 3, 4, oh, l.data(), {}); })
                .find("key/value heads (0)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode_attention_rows(qh, rows.data(), rows.data(), 1, 16, 3, 5, oh, l.data(), {}); })
                .find("o (1, 2, 1, 4) should be (1, 2, 1, 5)"),
            std::string::npos);
}

// Latent attention's absorbed step: 12 and more heads over one array of latents as keys and values,
// of every width (those the per-row loops unroll included: there only one array makes the step a
// block's products), against the reference reading the same array twice; on every SIMD target.
TEST(DecodeAttentionRows, LatentsAsKeysAndValuesMatchTheReference) {
  ThreadPool two(2);
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    std::mt19937 rng(41);
    for (const int64_t D : {int64_t{16}, int64_t{24}, int64_t{64}, int64_t{96}, int64_t{128}})
      for (const int64_t H : {int64_t{12}, int64_t{16}})
        for (const int64_t window : {int64_t{0}, int64_t{100}}) {
          SCOPED_TRACE("D=" + std::to_string(D) + " H=" + std::to_string(H) + " window=" + std::to_string(window));
          const int64_t B = 2, Tq = 1, S = 2 * decode_chunk_keys(1) + 45, C = S + 3;
          std::vector<float> latents = normal_vector(B * C * D, rng);
          const std::vector<float> q = normal_vector(B * H * Tq * D, rng);
          AttentionOptions opt;
          opt.scale = 0.25f;
          opt.mask = AttentionMask::causal();
          opt.query_offset = S - Tq;
          opt.window = window;
          opt.pool = &two;
          std::vector<float> o(static_cast<size_t>(B * H * Tq * D)), l(static_cast<size_t>(B * H * Tq));
          std::vector<float> want_o(o.size()), want_l(l.size());
          const ConstHeads qh = ConstHeads::contiguous(q.data(), B, H, Tq, D);
          decode_attention_rows(qh, latents.data(), latents.data(), 1, C, S, D,
                                MutableHeads::contiguous(o.data(), B, H, Tq, D), l.data(), opt);
          ConstHeads kh = ConstHeads::contiguous(latents.data(), B, 1, C, D);
          kh.tokens = S;
          attention_forward_reference(qh, kh, kh, MutableHeads::contiguous(want_o.data(), B, H, Tq, D), want_l.data(),
                                      opt);
          EXPECT_TRUE(close(o, want_o, 1e-5, "o"));
          EXPECT_TRUE(close(l, want_l, 1e-5, "lse"));
        }
  }
  force_simd_target(0);
}

}  // namespace
}  // namespace qkv::kernels
