// Llama 3's RoPE frequency scaling (qkv/kernels/rope.h's RopeScaling) against PyTorch:
// tests/data/rope_fixtures.json, made by tests/pytorch/make_rope_fixtures.py in float64 as Hugging
// Face's _compute_llama3_parameters scales the frequencies (Llama 3.2 1B's and 3.1 8B's settings
// and 30 random ones).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/kernels/rope.h"
#include "test_json.h"

namespace qkv::kernels {
namespace {

using nlohmann::json;

RopeScaling scaling_of(const json& c) {
  RopeScaling s;
  s.factor = c["factor"].get<double>();
  s.low_freq_factor = c["low_freq_factor"].get<double>();
  s.high_freq_factor = c["high_freq_factor"].get<double>();
  s.original_max_positions = c["original_max_positions"].get<int64_t>();
  return s;
}

TEST(RopeScaling, FrequenciesAndTablesAreLlama3s) {
  const json doc = testing_support::load_python_json(std::string(QKV_TEST_DATA_DIR) + "/rope_fixtures.json");
  int cases = 0;
  double worst_freq = 0, worst_table = 0;
  int scaled = 0, kept = 0;
  for (const json& c : doc["cases"]) {
    const int64_t D = c["head_dim"].get<int64_t>();
    const double base = c["base"].get<double>();
    const RopeScaling s = scaling_of(c);
    const std::vector<double> inv = c["inv_freq"].get<std::vector<double>>();
    for (int64_t i = 0; i < D / 2; ++i) {
      const double f = rope_frequency(i, D, base, s), plain = rope_frequency(i, D, base);
      worst_freq = std::max(worst_freq, std::fabs(f - inv[static_cast<size_t>(i)]) / inv[static_cast<size_t>(i)]);
      scaled += f < plain * (1 - 1e-12);
      kept += f == plain;
    }
    const std::vector<int64_t> positions = c["positions"].get<std::vector<int64_t>>();
    const std::vector<double> cosv = c["cos"].get<std::vector<double>>(), sinv = c["sin"].get<std::vector<double>>();
    for (size_t k = 0; k < positions.size(); ++k) {
      const RopeTable t(1, D, base, positions[k], s);  // one row at that position
      for (int64_t i = 0; i < D / 2; ++i) {
        const size_t at = k * static_cast<size_t>(D / 2) + static_cast<size_t>(i);
        worst_table = std::max({worst_table, std::fabs(t.cos_row(0)[i] - cosv[at]), std::fabs(t.sin_row(0)[i] - sinv[at])});
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 32);
  EXPECT_LE(worst_freq, 1e-13);  // both in double
  EXPECT_LE(worst_table, 1e-6);  // the table holds float32 cos and sin of angles up to ~1e5
  EXPECT_GT(scaled, 100);        // the cases reach all three regimes
  EXPECT_GT(kept, 100);
  std::printf("  RoPE scaling vs PyTorch: %d cases, frequencies within %.2g (relative), tables within %.2g\n", cases,
              worst_freq, worst_table);
}

TEST(RopeScaling, NoScalingIsThePlainFrequencies) {
  EXPECT_EQ(rope_frequency(3, 16, 10000.0, RopeScaling{}), std::pow(10000.0, -6.0 / 16.0));
}

TEST(RopeScaling, SettingsOutOfRangeAreRefused) {
  RopeScaling s;
  s.factor = 0.5;
  EXPECT_THROW(rope_frequency(1, 8, 10000.0, s), Error);
  s.factor = 8;
  s.low_freq_factor = 4;
  s.high_freq_factor = 1;
  EXPECT_THROW(rope_frequency(1, 8, 10000.0, s), Error);
  s.high_freq_factor = 8;
  s.original_max_positions = 0;
  EXPECT_THROW(rope_frequency(1, 8, 10000.0, s), Error);
}

}  // namespace
}  // namespace qkv::kernels
