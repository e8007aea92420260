// Tests of qkv::Generator against PyTorch 1.13's CPU generator, bit for bit.
//
// tests/data/rng_fixtures.json is made by tests/pytorch/make_rng_fixtures.py (its docstring
// describes the layout); tests/data/book.json holds the cases of the seed notebooks.
#include "qkv/core/generator.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "test_json.h"

namespace {

using nlohmann::json;

// The fixtures, parsed once per file (test_json.h copes with Python's bare Infinity / NaN).
const json& load(const std::string& file) {
  static std::map<std::string, json> cache;
  auto it = cache.find(file);
  if (it == cache.end())
    it = cache.emplace(file, qkv::testing_support::load_python_json(std::string(QKV_TEST_DATA_DIR) + "/" + file)).first;
  return it->second;
}

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t fnv1a64(const uint32_t* words, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < 4; ++b) {
      h ^= (words[i] >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

std::string mismatch(const std::string& where, size_t i, uint32_t want, float got) {
  return qkv::str(where, ": first mismatch at index ", i, ": want bits ", want, " (",
                  std::bit_cast<float>(want), "), got bits ", bits_of(got), " (", got, ")");
}

// "" if `got` matches the fixture tensor record bit for bit, else what differs first.
std::string compare(const json& rec, const std::vector<float>& got, const std::string& where) {
  const size_t n = rec.at("n").get<size_t>();
  if (got.size() != n) return qkv::str(where, ": size ", got.size(), ", want ", n);
  if (rec.contains("bits")) {
    const auto& bits = rec.at("bits");
    for (size_t i = 0; i < n; ++i) {
      const auto want = bits[i].get<uint32_t>();
      if (bits_of(got[i]) != want) return mismatch(where, i, want, got[i]);
    }
    return "";
  }
  const auto& head = rec.at("head");
  for (size_t i = 0; i < head.size(); ++i) {
    const auto want = head[i].get<uint32_t>();
    if (bits_of(got[i]) != want) return mismatch(where + " (head)", i, want, got[i]);
  }
  const auto& tail = rec.at("tail");
  for (size_t k = 0; k < tail.size(); ++k) {
    const size_t i = n - tail.size() + k;
    const auto want = tail[k].get<uint32_t>();
    if (bits_of(got[i]) != want) return mismatch(where + " (tail)", i, want, got[i]);
  }
  std::vector<uint32_t> words(n);
  for (size_t i = 0; i < n; ++i) words[i] = bits_of(got[i]);
  const std::string hash = hex64(fnv1a64(words.data(), n));
  if (hash != rec.at("fnv1a64").get<std::string>()) {
    return qkv::str(where, ": head and tail match but the FNV-1a hash of all ", n,
                    " elements differs (want ", rec.at("fnv1a64").get<std::string>(), ", got ",
                    hash, ")");
  }
  return "";
}

// Replays one fixture case; returns "" or the first difference, naming case and op.
std::string run_case(const json& c) {
  const std::string name = c.at("name").get<std::string>();
  qkv::Generator g;
  if (!c.at("seed").is_string()) g.manual_seed(c.at("seed").get<uint64_t>());
  if (g.initial_seed() != c.at("initial_seed").get<uint64_t>()) {
    return qkv::str(name, ": initial_seed ", g.initial_seed(), ", want ",
                    c.at("initial_seed").get<uint64_t>());
  }
  const auto& ops = c.at("ops");
  for (size_t k = 0; k < ops.size(); ++k) {
    const json& op = ops[k];
    const std::string kind = op.at("op").get<std::string>();
    const std::string where = qkv::str(name, " op ", k, " (", kind, ")");
    std::vector<std::vector<float>> out;
    if (kind == "rand" || kind == "randn" || kind == "uniform" || kind == "normal" ||
        kind == "bernoulli") {
      std::vector<float> v(op.at("n").get<size_t>());
      const auto n = static_cast<int64_t>(v.size());
      if (kind == "rand") g.uniform(v.data(), n);
      if (kind == "randn") g.normal(v.data(), n);
      if (kind == "uniform") g.uniform(v.data(), n, op.at("from"), op.at("to"));
      if (kind == "normal") g.normal(v.data(), n, op.at("mean"), op.at("std"));
      if (kind == "bernoulli") g.bernoulli(v.data(), n, op.at("p"));
      out.push_back(std::move(v));
    } else if (kind == "dropout") {
      // nn.Dropout(q) on ones: bernoulli_(1 - q) mask, kept elements scaled by 1 / (1 - q).
      const double q = op.at("q");
      std::vector<float> v(op.at("n").get<size_t>());
      g.bernoulli(v.data(), static_cast<int64_t>(v.size()), 1.0 - q);
      const float scale = 1.0f / static_cast<float>(1.0 - q);
      for (float& x : v) x = x * scale;
      out.push_back(std::move(v));
    } else if (kind == "linear") {
      const int64_t in = op.at("in_features"), o = op.at("out_features");
      const bool bias = op.at("bias");
      std::vector<float> w(static_cast<size_t>(in * o)), b(bias ? static_cast<size_t>(o) : 0);
      g.linear_init(w.data(), bias ? b.data() : nullptr, o, in);
      out.push_back(std::move(w));
      if (bias) out.push_back(std::move(b));
    } else if (kind == "embedding") {
      const int64_t num = op.at("num"), dim = op.at("dim");
      std::vector<float> w(static_cast<size_t>(num * dim));
      g.embedding_init(w.data(), num, dim);
      out.push_back(std::move(w));
    } else if (kind == "seed") {
      g.manual_seed(op.at("seed").get<uint64_t>());
    } else if (kind == "state") {
      if (g.mt_index() != op.at("index").get<int>()) {
        return qkv::str(where, ": MT index ", g.mt_index(), ", want ", op.at("index").get<int>());
      }
      const auto& mt = g.mt_state();
      const std::string hash = hex64(fnv1a64(mt.data(), mt.size()));
      if (hash != op.at("mt_fnv1a64").get<std::string>()) {
        return qkv::str(where, ": MT state hash ", hash, ", want ",
                        op.at("mt_fnv1a64").get<std::string>());
      }
      const auto cached = g.cached_normal();
      const std::string got = cached ? hex64(std::bit_cast<uint64_t>(*cached)) : "null";
      const std::string want = op.at("cached_normal").is_null()
                                   ? "null"
                                   : op.at("cached_normal").get<std::string>();
      if (got != want) return qkv::str(where, ": cached normal ", got, ", want ", want);
    } else {
      return qkv::str(where, ": unknown op in fixture");
    }
    const auto& recs = op.at("out");
    if (recs.size() != out.size()) {
      return qkv::str(where, ": ", out.size(), " outputs, fixture has ", recs.size());
    }
    for (size_t t = 0; t < out.size(); ++t) {
      std::string err = compare(recs[t], out[t], qkv::str(where, " output ", t));
      if (!err.empty()) return err;
    }
  }
  return "";
}

// Runs every fixture case whose name starts with `prefix`; returns how many ran.
int run_family(const std::string& prefix) {
  int count = 0;
  for (const json& c : load("rng_fixtures.json").at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    if (name.rfind(prefix, 0) != 0) continue;
    ++count;
    const std::string err = run_case(c);
    EXPECT_TRUE(err.empty()) << err;
  }
  return count;
}

TEST(GeneratorFixtures, Rand) { EXPECT_GT(run_family("rand."), 300); }
TEST(GeneratorFixtures, Randn) { EXPECT_GT(run_family("randn."), 300); }
TEST(GeneratorFixtures, Uniform) { EXPECT_GT(run_family("uniform."), 100); }
TEST(GeneratorFixtures, Normal) { EXPECT_GT(run_family("normal."), 80); }
TEST(GeneratorFixtures, Bernoulli) { EXPECT_GT(run_family("bernoulli."), 80); }
TEST(GeneratorFixtures, SequenceCarriesStateAndNormalCache) {
  EXPECT_GE(run_family("sequence."), 7);
}
TEST(GeneratorFixtures, NormalCacheDoubleBits) { EXPECT_EQ(run_family("normal_cache."), 300); }
TEST(GeneratorFixtures, DefaultGenerator) { EXPECT_EQ(run_family("default_generator"), 1); }
TEST(GeneratorFixtures, Linear) { EXPECT_GE(run_family("linear."), 24); }
TEST(GeneratorFixtures, Embedding) { EXPECT_GE(run_family("embedding."), 16); }
TEST(GeneratorFixtures, Dropout) { EXPECT_GE(run_family("dropout."), 6); }
TEST(GeneratorFixtures, Modules) { EXPECT_GE(run_family("modules."), 3); }

TEST(GeneratorFixtures, EveryCaseBelongsToAFamily) {
  const char* families[] = {"rand.",      "randn.",    "uniform.",      "normal.",
                            "bernoulli.", "sequence.", "normal_cache.", "default_generator",
                            "linear.",    "embedding.", "dropout.",     "modules."};
  for (const json& c : load("rng_fixtures.json").at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    int hits = 0;
    for (const char* f : families) hits += name.rfind(f, 0) == 0 ? 1 : 0;
    EXPECT_EQ(hits, 1) << name;
  }
}

// ---- book.json (the seed notebooks' numbers) ------------------------------------------------

const json& book_case(const std::string& name) {
  for (const json& c : load("book.json").at("cases")) {
    if (c.at("name") == name) return c;
  }
  throw std::runtime_error("book.json has no case " + name);
}

// Book values are float64 renderings of float32 results: compare the float32 bits.
void expect_book(const std::string& name, const json& expected, const std::vector<float>& got) {
  ASSERT_EQ(expected.size(), got.size()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = static_cast<float>(expected[i].get<double>());
    ASSERT_EQ(bits_of(want), bits_of(got[i]))
        << name << ": first mismatch at index " << i << ": want " << want << ", got " << got[i];
  }
}

TEST(GeneratorBook, RandRandnSerialAndVectorised) {
  for (const char* name : {"rng.rand_seed123_5x7", "rng.randn_seed123_3x2",
                           "rng.randn_seed123_4x8"}) {
    const json& c = book_case(name);
    const auto& data = c.at("expected").at("data");
    std::vector<float> got(data.size());
    qkv::Generator g(123);
    if (std::string(name).find("randn") != std::string::npos) {
      g.normal(got.data(), static_cast<int64_t>(got.size()));
    } else {
      g.uniform(got.data(), static_cast<int64_t>(got.size()));
    }
    expect_book(name, data, got);
  }
}

TEST(GeneratorBook, TrainableWeightsAreThreeRand3x2) {
  qkv::Generator g(123);
  for (const char* name : {"trainable.W_query", "trainable.W_key", "trainable.W_value"}) {
    std::vector<float> w(6);
    g.uniform(w.data(), 6);
    expect_book(name, book_case(name).at("expected").at("data"), w);
  }
}

TEST(GeneratorBook, Embedding9x3) {
  const json& data = book_case("embedding.seed123_9x3").at("expected").at("data");
  std::vector<float> w(27);
  qkv::Generator g(123);
  g.embedding_init(w.data(), 9, 3);
  expect_book("embedding.seed123_9x3", data, w);
}

TEST(GeneratorBook, Linear768) {
  const json& e = book_case("linear.seed123_768.head").at("expected");
  std::vector<float> w(768 * 768), b(768);
  qkv::Generator g(123);
  g.linear_init(w.data(), b.data(), 768, 768);
  expect_book("linear.seed123_768.head weight[0,:8]", e.at("weight_row0_first8"),
              std::vector<float>(w.begin(), w.begin() + 8));
  expect_book("linear.seed123_768.head bias[:8]", e.at("bias_first8"),
              std::vector<float>(b.begin(), b.begin() + 8));
  // The sums were taken in double over the float32 values; a long double sum rounds the same.
  long double ws = 0, bs = 0;
  for (float x : w) ws += x;
  for (float x : b) bs += x;
  EXPECT_EQ(static_cast<double>(ws), e.at("weight_sum").get<double>());
  EXPECT_EQ(static_cast<double>(bs), e.at("bias_sum").get<double>());
}

TEST(GeneratorBook, SelfAttentionV2Seed789QueryWeight) {
  // torch.manual_seed(789); SelfAttention_v2(3, 2): W_query = nn.Linear(3, 2, bias=False) first.
  const json& data = book_case("sa_v2.seed789.W_query.weight").at("expected").at("data");
  std::vector<float> w(6);
  qkv::Generator g(789);
  g.linear_init(w.data(), nullptr, 2, 3);
  expect_book("sa_v2.seed789.W_query.weight", data, w);
}

TEST(GeneratorBook, DropoutOnesP05) {
  const json& data = book_case("dropout.ones_p05_seed123").at("expected").at("data");
  std::vector<float> mask(36);
  qkv::Generator g(123);
  g.bernoulli(mask.data(), 36, 1.0 - 0.5);
  std::vector<float> got(36);
  for (size_t i = 0; i < 36; ++i) got[i] = 1.0f * (mask[i] / static_cast<float>(1.0 - 0.5));
  expect_book("dropout.ones_p05_seed123", data, got);
}

// ---- state, seeding, errors -----------------------------------------------------------------

std::vector<float> draw_mix(qkv::Generator& g) {
  std::vector<float> v(3 + 5 + 20 + 9 + 1 + 40);
  float* p = v.data();
  g.uniform(p, 3);
  g.normal(p + 3, 5);
  g.normal(p + 8, 20);
  g.bernoulli(p + 28, 9, 0.3);
  g.normal(p + 37, 1);
  g.uniform(p + 38, 40, -2.0, 3.0);
  return v;
}

TEST(GeneratorState, RoundTripResumesTheSameDraws) {
  qkv::Generator g(42);
  std::vector<float> warmup(777);
  g.uniform(warmup.data(), 700);      // 700 words: past the first 624-word block
  g.normal(warmup.data(), 3);         // leaves a cached serial sample
  ASSERT_TRUE(g.cached_normal().has_value());
  const std::vector<uint8_t> saved = g.get_state();
  ASSERT_EQ(saved.size(), qkv::Generator::kStateBytes);

  const std::vector<float> straight = draw_mix(g);

  qkv::Generator restored(7);  // different seed; set_state must replace everything
  restored.set_state(saved);
  EXPECT_EQ(restored.initial_seed(), 42u);
  EXPECT_EQ(restored.get_state(), saved);
  const std::vector<float> resumed = draw_mix(restored);
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    ASSERT_EQ(bits_of(straight[i]), bits_of(resumed[i])) << "index " << i;
  }
  // And the same generator rewound with its own state.
  g.set_state(saved);
  EXPECT_EQ(draw_mix(g), straight);
}

TEST(GeneratorState, FreshSeedAndNoCacheRoundTrip) {
  qkv::Generator a(123);
  qkv::Generator b(5);
  b.set_state(a.get_state());
  EXPECT_FALSE(b.cached_normal().has_value());
  EXPECT_EQ(b.mt_index(), qkv::Generator::kStateWords);
  for (int i = 0; i < 1300; ++i) ASSERT_EQ(a.random(), b.random()) << "draw " << i;
}

TEST(GeneratorState, SetStateRejectsBadInput) {
  qkv::Generator g(1);
  const std::vector<uint8_t> good = g.get_state();
  auto expect_error = [&](std::vector<uint8_t> bad, const std::string& needle) {
    const std::vector<uint8_t> before = g.get_state();
    try {
      g.set_state(bad);
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(g.get_state(), before) << "a rejected state must leave the generator unchanged";
  };
  expect_error({}, "expected 2528 bytes, got 0");
  expect_error(std::vector<uint8_t>(good.begin(), good.end() - 1), "got 2527");
  auto grown = good;
  grown.push_back(0);
  expect_error(grown, "got 2529");
  auto bad_magic = good;
  bad_magic[0] = 'X';
  expect_error(bad_magic, "magic");
  auto bad_version = good;
  bad_version[4] = 9;
  expect_error(bad_version, "version 9");
  auto bad_index = good;
  bad_index[16] = 0x71;  // 625
  bad_index[17] = 0x02;
  expect_error(bad_index, "index 625");
  auto bad_flags = good;
  bad_flags[20] = 2;
  expect_error(bad_flags, "flag");
  auto nan_cache = good;
  nan_cache[20] = 1;
  for (int i = 24; i < 32; ++i) nan_cache[i] = 0xff;
  expect_error(nan_cache, "not finite");
  auto stray_cache = good;
  stray_cache[24] = 1;
  expect_error(stray_cache, "flag is not");
  auto zero_mt = good;
  for (size_t i = 32; i < zero_mt.size(); ++i) zero_mt[i] = 0;
  expect_error(zero_mt, "all zero");
}

TEST(GeneratorBasics, SeedingAndDefaults) {
  qkv::Generator d;
  EXPECT_EQ(d.initial_seed(), qkv::Generator::kDefaultSeed);
  qkv::Generator a((uint64_t{1} << 40) + 7);
  qkv::Generator b(7);  // only the low 32 bits enter the engine
  EXPECT_EQ(a.initial_seed(), (uint64_t{1} << 40) + 7);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.random(), b.random());
  // random64 is the first draw in the high half.
  qkv::Generator c(9), e(9);
  const uint64_t hi = e.random(), lo = e.random();
  EXPECT_EQ(c.random64(), (hi << 32) | lo);
}

// The engine against the standard library's MT19937 (seeded the same way), past several twists:
// the one-at-a-time draws and the block draws, from every offset into a block.
TEST(GeneratorBasics, DrawsAreTheStandardMt19937s) {
  for (uint32_t seed : {5489u, 123u, 0u, 0xffffffffu}) {
    std::mt19937 ref(seed);
    qkv::Generator g(seed);
    for (int i = 0; i < 3000; ++i) ASSERT_EQ(g.random(), ref()) << "seed " << seed << " draw " << i;
  }
  std::mt19937 standard(5489u);
  standard.discard(9999);
  EXPECT_EQ(standard(), 4123659995u);  // the value the C++ standard gives for the 10000th
  for (int offset : {0, 1, 226, 396, 623, 624, 1000}) {
    for (int n : {0, 1, 17, 623, 624, 625, 2500}) {
      std::mt19937 ref(77u);
      qkv::Generator g(77);
      for (int i = 0; i < offset; ++i) ASSERT_EQ(g.random(), ref());
      std::vector<uint32_t> got(static_cast<size_t>(n));
      g.random(got.data(), n);
      for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], ref()) << "offset " << offset << " n " << n << " i " << i;
      EXPECT_EQ(g.random(), ref()) << "the draw after a block, offset " << offset << " n " << n;
    }
  }
}

// uniform's block path against uniform_(from, to)'s definition, element by element from random():
// fmaf((draw & 0xffffff) * 2^-24, float(to) - float(from), float(from)), across its 1,024-draw
// chunks and the engine's twists; and normal's vectorised path keeps drawing n uniforms first.
TEST(GeneratorBasics, UniformBlocksAreTheDefinitionElementByElement) {
  for (int n : {1, 5, 1023, 1024, 1025, 3001}) {
    qkv::Generator g(31), ref(31);
    std::vector<float> got(static_cast<size_t>(n));
    g.uniform(got.data(), n, -0.3, 0.7);
    const float from = -0.3f, width = 0.7f - from;
    for (int i = 0; i < n; ++i) {
      const float want = std::fmaf(static_cast<float>(ref.random() & 0xffffffu) * (1.0f / 16777216.0f), width, from);
      ASSERT_EQ(bits_of(got[i]), bits_of(want)) << "n " << n << " i " << i;
    }
    EXPECT_EQ(g.random(), ref.random());
  }
  for (int n : {16, 33, 2000}) {  // n uniforms, then 16 more when n % 16 != 0
    qkv::Generator g(8), ref(8);
    std::vector<float> v(static_cast<size_t>(n));
    g.normal(v.data(), n);
    ref.discard(static_cast<uint64_t>(n + (n % 16 != 0 ? 16 : 0)));
    EXPECT_EQ(g.random(), ref.random()) << "n " << n;
  }
}

TEST(GeneratorBasics, ManualSeedClearsTheNormalCache) {
  qkv::Generator g(3);
  float x[3];
  g.normal(x, 1);
  EXPECT_TRUE(g.cached_normal().has_value());
  g.manual_seed(3);
  EXPECT_FALSE(g.cached_normal().has_value());
  float y[2];
  g.normal(y, 2);
  EXPECT_EQ(bits_of(x[0]), bits_of(y[0]));
}

TEST(GeneratorBasics, ArgumentChecks) {
  qkv::Generator g;
  float v[4];
  EXPECT_THROW(g.uniform(v, 4, 1.0, 0.0), qkv::Error);
  EXPECT_THROW(g.uniform(v, 4, -3e38, 3e38), qkv::Error);
  EXPECT_THROW(g.normal(v, 4, 0.0, -1.0), qkv::Error);
  EXPECT_THROW(g.bernoulli(v, 4, 1.5), qkv::Error);
  EXPECT_THROW(g.bernoulli(v, -1, 0.5), qkv::Error);
  EXPECT_THROW(g.uniform(nullptr, 4), qkv::Error);
  EXPECT_NO_THROW(g.uniform(nullptr, 0));
  EXPECT_NO_THROW(g.linear_init(nullptr, nullptr, 0, 5));
}

}  // namespace
