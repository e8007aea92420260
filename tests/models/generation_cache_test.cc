// Generation with a KV cache (MultiHeadAttention::forward_cached, DecoderModel::forward_cached,
// generate's kv_cache): the cached loop gives the tokens of the uncached one, and each step's
// last-position logits within 1e-5 relative (to the largest logit of the row), for every
// attention variant, prompts shorter than, equal to and longer than the context, generation past
// the context (the window slides) and sampling at temperature 0 and above; a bf16 cache within a
// bf16 tolerance; every misuse a clear error.
// Both loops run the fused kernels (the uncached one the flash kernel, the cached one the decode
// kernel, or the flash kernel over the cache for a prefill of 64 or more positions).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/kernels/mha.h"
#include "qkv/models/attention_lm.h"
#include "qkv/models/decoder.h"
#include "qkv/models/generation.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;
using kernels::CacheDtype;
using kernels::KvCache;
using kernels::RopeLayout;

struct CacheVariant {
  std::string name;
  int64_t kv_heads = 0;
  RopeLayout rope = RopeLayout::kNone;
  int64_t window = 0;
  bool alibi = false;
  float softcap = 0.0f;
  bool any() const { return kv_heads != 0 || rope != RopeLayout::kNone || window > 0 || alibi || softcap > 0; }
};

// An attention LM (the attention-lm family's DecoderModel) whose blocks carry the variant.
DecoderModel make_lm(const CacheVariant& v, int64_t context, uint64_t seed = 7, int64_t vocab = 23, int64_t layers = 2,
                     Dtype dtype = Dtype::kF32) {
  LMConfig c;
  c.vocab_size = vocab;
  c.context_length = context;
  c.d_model = 16;
  c.attention.heads = 4;
  c.num_layers = layers;
  c.attention.kv_heads = v.kv_heads;
  c.attention.rope = v.rope;
  c.attention.window = v.window;
  c.attention.alibi = v.alibi;
  c.attention.softcap = v.softcap;
  set_head_dim(c);
  DecoderSpec spec = lm_spec(c);
  spec.attention.dtype = dtype;  // kBF16: bf16 mode
  Generator gen(seed);  // (no dropout: nothing draws from it after the weights)
  return DecoderModel(spec, gen);
}

struct Generated {
  std::vector<int64_t> tokens;
  std::vector<std::vector<float>> logits;  // per step (V)
};

Generated run(LanguageModel& lm, const std::vector<int64_t>& prompt, SamplingOptions o) {
  Generated r;
  o.on_logits = [&](const float* l, int64_t V) { r.logits.emplace_back(l, l + V); };
  r.tokens = generate(lm, prompt, o);
  return r;
}

std::vector<int64_t> prompt_of(int64_t n, int64_t vocab) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 7 + 3) % vocab);
  return p;
}

// max over steps and positions of |a - b| / max_j |b_j| (the row's largest logit)
double max_relative_diff(const Generated& a, const Generated& b) {
  double worst = 0;
  for (size_t s = 0; s < std::min(a.logits.size(), b.logits.size()); ++s) {
    double scale = 0, diff = 0;
    for (size_t j = 0; j < b.logits[s].size(); ++j) {
      scale = std::max(scale, std::abs(static_cast<double>(b.logits[s][j])));
      diff = std::max(diff, std::abs(static_cast<double>(a.logits[s][j]) - b.logits[s][j]));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-30));
  }
  return worst;
}

const std::vector<CacheVariant>& variants() {
  static const std::vector<CacheVariant> v = {
      {"plain"},
      {"gqa", 2},
      {"mqa", 1},
      {"rope_half", 0, RopeLayout::kHalf},
      {"rope_interleaved", 0, RopeLayout::kInterleaved},
      {"window", 0, RopeLayout::kNone, 5},
      {"alibi", 0, RopeLayout::kNone, 0, true},
      {"softcap", 0, RopeLayout::kNone, 0, false, 0.5f},
      {"gqa_rope_window", 2, RopeLayout::kHalf, 4},
      {"mqa_interleaved_alibi_softcap", 1, RopeLayout::kInterleaved, 0, true, 0.7f},
      {"all", 2, RopeLayout::kHalf, 6, true, 0.6f},
  };
  return v;
}

TEST(GenerationCache, CachedAndUncachedGiveTheSameTokensAndLogitsForEveryVariant) {
  const int64_t context = 12, vocab = 23;
  for (const CacheVariant& v : variants()) {
    for (int64_t prompt_len : {5, 12, 17}) {  // shorter than, equal to, longer than the context
      for (double temperature : {0.0, 0.8}) {
        DecoderModel lm = make_lm(v, context);
        SamplingOptions o;
        o.max_new_tokens = 15;  // 5 + 15 > 12: the window slides
        o.temperature = temperature;
        o.top_k = temperature > 0 ? 6 : 0;
        o.seed = 99;
        o.kv_cache = false;
        const Generated plain = run(lm, prompt_of(prompt_len, vocab), o);
        o.kv_cache = true;
        const Generated cached = run(lm, prompt_of(prompt_len, vocab), o);
        const std::string what =
            v.name + ", prompt " + std::to_string(prompt_len) + ", temperature " + std::to_string(temperature);
        ASSERT_EQ(cached.logits.size(), 15u) << what;
        EXPECT_EQ(cached.tokens, plain.tokens) << what;
        EXPECT_LE(max_relative_diff(cached, plain), 1e-5) << what;
        // the same seed gives the same tokens again
        EXPECT_EQ(run(lm, prompt_of(prompt_len, vocab), o).tokens, cached.tokens) << what;
      }
    }
  }
}

TEST(GenerationCache, AFusedPrefillOfALongPromptMatchesTheUncachedRun) {
  // 70 prompt tokens on an empty fp32 cache: the prefill runs the flash kernel over the cache.
  DecoderModel lm = make_lm({"plain"}, 80, 3, 31);
  SamplingOptions o;
  o.max_new_tokens = 20;  // 70 + 20 > 80: slides, re-running fused prefills of the whole window
  o.temperature = 0;
  o.kv_cache = false;
  const Generated plain = run(lm, prompt_of(70, 31), o);
  o.kv_cache = true;
  const Generated cached = run(lm, prompt_of(70, 31), o);
  EXPECT_EQ(cached.tokens, plain.tokens);
  EXPECT_LE(max_relative_diff(cached, plain), 1e-5);
}

TEST(GenerationCache, ABf16CachesFirstPrefillAttendsToTheKeysAndValuesAsTheCacheHoldsThem) {
  // 70 prompt tokens on an empty bf16 cache: the flash kernel over the step's own keys and values,
  // rounded to bf16 as the cache keeps them. The same prompt as two prefills of 35 (below 64: the
  // decoding kernel, over the cache's bf16 values widened) gives the same last logits up to the
  // order of fp32 sums; unrounded keys and values would be off by bf16's rounding (~2^-9).
  for (const CacheVariant& v : {CacheVariant{"plain"}, CacheVariant{"gqa_rope", 2, RopeLayout::kHalf}}) {
    DecoderModel lm = make_lm(v, 80, 3, 31);
    lm.eval();
    const std::vector<int64_t> ids = prompt_of(70, 31);
    KvCache whole = lm.make_cache(1, CacheDtype::kBF16), halves = lm.make_cache(1, CacheDtype::kBF16);
    const Tensor a = lm.forward_cached(ids, 1, 70, whole);
    lm.forward_cached(std::vector<int64_t>(ids.begin(), ids.begin() + 35), 1, 35, halves);
    const Tensor b = lm.forward_cached(std::vector<int64_t>(ids.begin() + 35, ids.end()), 1, 35, halves);
    double scale = 0, diff = 0;
    for (int64_t j = 0; j < 31; ++j) {
      scale = std::max(scale, std::abs(static_cast<double>(b.data()[j])));
      diff = std::max(diff, std::abs(static_cast<double>(a.data()[j]) - b.data()[j]));
    }
    EXPECT_LE(diff / scale, 1e-5) << v.name;
  }
}

TEST(GenerationCache, ALaterLongPrefillOnABf16CacheAttendsToTheCachedKeysAndValues) {
  // A chat's next turn: 70 tokens after 40 already cached in bf16. It runs the flash kernel one
  // key/value head at a time over that head's 110 cached positions widened to fp32; the same 70 as
  // two steps of 35 (the decoding kernel) give the same last logits up to the order of fp32 sums.
  // Batch 2 (rows of their own per sequence) and grouped heads with RoPE.
  for (const CacheVariant& v : {CacheVariant{"plain"}, CacheVariant{"gqa_rope", 2, RopeLayout::kHalf}}) {
    DecoderModel lm = make_lm(v, 120, 3, 31);
    lm.eval();
    const std::vector<int64_t> a = prompt_of(110, 31), c = prompt_of(110, 29);  // two different sequences
    auto rows = [&](int64_t t0, int64_t n) {  // tokens [t0, t0 + n) of both sequences, (2, n)
      std::vector<int64_t> ids;
      for (const auto* seq : {&a, &c}) ids.insert(ids.end(), seq->begin() + t0, seq->begin() + t0 + n);
      return ids;
    };
    KvCache whole = lm.make_cache(2, CacheDtype::kBF16), halves = lm.make_cache(2, CacheDtype::kBF16);
    lm.forward_cached(rows(0, 40), 2, 40, whole);
    lm.forward_cached(rows(0, 40), 2, 40, halves);
    const Tensor x = lm.forward_cached(rows(40, 70), 2, 70, whole);
    lm.forward_cached(rows(40, 35), 2, 35, halves);
    const Tensor y = lm.forward_cached(rows(75, 35), 2, 35, halves);
    for (int64_t b = 0; b < 2; ++b) {
      const float* xr = x.data() + b * 31;  // (B, V): the last position's logits
      const float* yr = y.data() + b * 31;
      double scale = 0, diff = 0;
      for (int64_t j = 0; j < 31; ++j) {
        scale = std::max(scale, std::abs(static_cast<double>(yr[j])));
        diff = std::max(diff, std::abs(static_cast<double>(xr[j]) - yr[j]));
      }
      EXPECT_LE(diff / scale, 1e-5) << v.name << ", sequence " << b;
    }
  }
}

TEST(GenerationCache, ALongPromptsAttentionRowsAreHeldOnceForTheWholeModelNotOncePerLayer) {
  // A 70-token prefill grows the attention's working rows (the heads, the context, the QKV
  // product's staging) to 70 rows; the blocks run one after another, so one set serves them all:
  // the model's scratch is the same with 1 layer and with 4, and no block keeps a set of its own.
  std::vector<size_t> scratch;
  for (int64_t layers : {1, 4}) {
    DecoderModel lm = make_lm({"plain"}, 80, 3, 31, layers);
    lm.eval();
    KvCache cache = lm.make_cache(1);
    const std::vector<int64_t> ids = prompt_of(70, 31);
    lm.forward_cached(ids, 1, static_cast<int64_t>(ids.size()), cache);
    for (const DecoderBlock& b : lm.blocks) EXPECT_EQ(b.att->own_cached_bytes(), 0u) << layers << " layers";
    scratch.push_back(lm.step_scratch_bytes());
  }
  EXPECT_GT(scratch[0], size_t{70 * 16 * 3 * sizeof(float)});  // at least the QKV rows of 70 tokens
  EXPECT_EQ(scratch[1], scratch[0]);
}

TEST(GenerationCache, Bf16CacheIsWithinBf16ToleranceAndNotFp32) {
  // bf16 keeps 8 significant bits: each cached key and value is off by at most 2^-9 relative.
  // A value error moves an attention output (a convex combination of values) by at most 2^-9 of
  // the largest value, a key error each score by 2^-9 |q . k|; through two residual blocks and
  // the output head (weights of norm about 1 at this size) the logits move by a few times 2^-9
  // of their scale: 2e-2 of the row's largest logit (about 10 x 2^-9) bounds it with room.
  for (const CacheVariant& v : {CacheVariant{"plain"}, CacheVariant{"gqa_rope", 2, RopeLayout::kHalf}}) {
    DecoderModel lm = make_lm(v, 12);
    SamplingOptions o;
    o.max_new_tokens = 6;  // no slide: every step decodes against the bf16 cache
    o.temperature = 0;
    const Generated f32 = run(lm, prompt_of(5, 23), o);
    o.cache_dtype = CacheDtype::kBF16;
    const Generated bf16 = run(lm, prompt_of(5, 23), o);
    const double diff = max_relative_diff(bf16, f32);
    EXPECT_LE(diff, 2e-2) << v.name;
    EXPECT_GT(diff, 0.0) << v.name << ": the bf16 cache must round the keys and values";
  }
}

TEST(GenerationCache, TheDefaultCacheIsInTheProductsPrecision) {
  // Unless told, generate keeps the cache as the products compute: f32 for an f32 model, bf16 for a
  // model in bf16 mode (a bf16 checkpoint, a GGUF file). Each default run gives the explicit run's
  // logits bit for bit, and not the other type's.
  for (const Dtype dtype : {Dtype::kF32, Dtype::kBF16}) {
    DecoderModel lm = make_lm({"plain"}, 12, 7, 23, 2, dtype);
    const bool bf16 = dtype == Dtype::kBF16;
    EXPECT_EQ(lm.default_cache_dtype(), bf16 ? CacheDtype::kBF16 : CacheDtype::kF32);
    SamplingOptions o;
    o.max_new_tokens = 6;
    o.temperature = 0;
    const Generated by_default = run(lm, prompt_of(5, 23), o);
    o.cache_dtype = CacheDtype::kF32;
    const Generated f32 = run(lm, prompt_of(5, 23), o);
    o.cache_dtype = CacheDtype::kBF16;
    const Generated b16 = run(lm, prompt_of(5, 23), o);
    ASSERT_EQ(by_default.logits.size(), 6u);
    EXPECT_EQ(by_default.logits, bf16 ? b16.logits : f32.logits) << dtype_name(dtype);
    EXPECT_GT(max_relative_diff(by_default, bf16 ? f32 : b16), 0.0) << dtype_name(dtype);
  }
}

TEST(GenerationCache, LmForwardCachedMatchesTheFullForwardAtEveryStepAndKeepsBackwardState) {
  DecoderModel lm = make_lm({"plain"}, 12);
  lm.eval();
  const std::vector<int64_t> ids = prompt_of(9, 23);
  const Tensor full = lm.forward(ids, 1, 9);  // (1, 9, V)
  KvCache cache = lm.make_cache(1);
  EXPECT_EQ(cache.layers(), 2);
  EXPECT_EQ(cache.capacity(), 12);
  // a prefill of 4, then 2, then one at a time
  int64_t at = 0;
  for (int64_t n : {4, 2, 1, 1, 1}) {
    const Tensor logits = lm.forward_cached(std::vector<int64_t>(ids.begin() + at, ids.begin() + at + n), 1, n, cache);
    at += n;
    ASSERT_EQ(logits.shape(), Shape({1, 23}));
    EXPECT_EQ(cache.length(), at);
    for (int64_t j = 0; j < 23; ++j)
      EXPECT_NEAR(logits.data()[j], full.data()[(at - 1) * 23 + j], 1e-5) << "position " << at - 1 << ", logit " << j;
  }
  // the full forward's state is intact: backward still runs on (1, 9, V)
  EXPECT_NO_THROW(lm.backward(Tensor::zeros({1, 9, 23})));
}

TEST(GenerationCache, ModuleErrorsNameTheMismatch) {
  AttentionConfig a = attention_config("mha", 16, 16, 8, 0.0, 4);
  a.attention.kv_heads = 2;
  Generator gen(1);
  MultiHeadAttention mha(a, gen);
  mha.eval();
  const Tensor x = Tensor::zeros({1, 3, 16});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {  // kv heads: the module has 2, the cache 4
    KvCache cache(1, 1, 4, 8, 4, 4, CacheDtype::kF32);
    EXPECT_THAT(message([&] { mha.forward_cached(x, cache, 0); }),
                HasSubstr("the cache holds (batch 1, kv_heads 4, head_dim 4, value_dim 4) but the attention needs "
                          "(batch 1, kv_heads 2"));
  }
  {  // batch
    KvCache cache(1, 2, 2, 8, 4, 4, CacheDtype::kF32);
    EXPECT_THAT(message([&] { mha.forward_cached(x, cache, 0); }), HasSubstr("(batch 2, kv_heads 2"));
  }
  {  // layer out of range
    KvCache cache(1, 1, 2, 8, 4, 4, CacheDtype::kF32);
    EXPECT_THAT(message([&] { mha.forward_cached(x, cache, 1); }), HasSubstr("layer 1 is outside the cache's 1 layers"));
  }
  {  // overflow: 3 + 3 positions in a cache of 5
    KvCache cache(1, 1, 2, 5, 4, 4, CacheDtype::kF32);
    mha.forward_cached(x, cache, 0);
    cache.commit();
    EXPECT_THAT(message([&] { mha.forward_cached(x, cache, 0); }),
                HasSubstr("3 new positions after 3 overflow the cache's capacity of 5"));
  }
  {  // past the module's context length (8) with a larger cache
    KvCache cache(1, 1, 2, 20, 4, 4, CacheDtype::kF32);
    for (int i = 0; i < 2; ++i) {
      mha.forward_cached(x, cache, 0);
      cache.commit();
    }
    EXPECT_THAT(message([&] { mha.forward_cached(x, cache, 0); }),
                HasSubstr("3 new tokens after the cache's 6 positions exceed the context length of 8"));
  }
  {  // mixing: the same layer twice in one step
    KvCache cache(2, 1, 2, 8, 4, 4, CacheDtype::kF32);
    mha.forward_cached(x, cache, 0);
    EXPECT_THAT(message([&] { mha.forward_cached(x, cache, 0); }),
                HasSubstr("layer 0 already appended in the cache's step in progress (3 positions"));
  }
  {  // wrong input width
    KvCache cache(1, 1, 2, 8, 4, 4, CacheDtype::kF32);
    EXPECT_THAT(message([&] { mha.forward_cached(Tensor::zeros({1, 3, 5}), cache, 0); }),
                HasSubstr("forward_cached expects (batch, new_tokens, d_in = 16)"));
  }
  {  // a loaded mask that is not causal
    MultiHeadAttention other(a, gen);
    other.eval();
    other.mask.load(Tensor::zeros({8, 8}));
    KvCache cache(1, 1, 2, 8, 4, 4, CacheDtype::kF32);
    EXPECT_THAT(message([&] { other.forward_cached(x, cache, 0); }),
                HasSubstr("a cached forward needs the causal mask"));
  }
  {  // dropout in training mode
    AttentionConfig d = a;
    d.attention.dropout = 0.1;
    MultiHeadAttention dropped(d, gen);
    dropped.train();
    KvCache cache(1, 1, 2, 8, 4, 4, CacheDtype::kF32);
    EXPECT_THAT(message([&] { dropped.forward_cached(x, cache, 0); }), HasSubstr("call eval() first"));
    dropped.eval();
    EXPECT_NO_THROW(dropped.forward_cached(x, cache, 0));
  }
}

TEST(GenerationCache, LmErrorsNameTheMismatch) {
  DecoderModel lm = make_lm({"plain"}, 6);
  lm.eval();
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    KvCache cache(3, 1, 4, 6, 4, 4, CacheDtype::kF32);
    EXPECT_THAT(message([&] { lm.forward_cached({1}, 1, 1, cache); }),
                HasSubstr("the cache has 3 layers but the model has 2 blocks"));
  }
  {
    KvCache cache = lm.make_cache(1);
    lm.forward_cached({1, 2, 3, 4}, 1, 4, cache);
    EXPECT_THAT(message([&] { lm.forward_cached({1, 2, 3}, 1, 3, cache); }),
                HasSubstr("3 new tokens after the cache's 4 positions exceed context_length 6"));
    lm.blocks[0].att->forward_cached(Tensor::zeros({1, 1, 16}), cache, 0);  // a step left in progress
    EXPECT_THAT(message([&] { lm.forward_cached({1}, 1, 1, cache); }),
                HasSubstr("the cache has a step of 1 positions in progress"));
    cache.reset();
    EXPECT_NO_THROW(lm.forward_cached({1}, 1, 1, cache));
    EXPECT_THAT(message([&] { lm.forward_cached({1, 99}, 1, 2, cache); }),
                HasSubstr("id 99 at position 1 is outside the vocabulary of 23"));
  }
  EXPECT_THAT(message([&] { make_lm({"plain"}, 6, 1, 23, 0).make_cache(1); }),
              HasSubstr("no keys or values to cache"));
}

TEST(GenerationCache, GenerateRefusesAHugeMaxNewTokensUpFront) {
  DecoderModel lm = make_lm({"plain"}, 6);
  SamplingOptions o;
  o.max_new_tokens = int64_t{1} << 60;
  try {
    generate(lm, {1, 2}, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("generate: the ids of the prompt and max_new_tokens"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("memory limit"));
  }
  // a model without blocks still generates (nothing to cache)
  DecoderModel empty = make_lm({"plain"}, 6, 1, 23, 0);
  o.max_new_tokens = 8;
  o.temperature = 0;
  const std::vector<int64_t> a = generate(empty, {1, 2}, o);
  o.kv_cache = false;
  EXPECT_EQ(generate(empty, {1, 2}, o), a);
}

}  // namespace
}  // namespace qkv
