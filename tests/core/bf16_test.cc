// bf16 values (qkv/core/bf16.h): rounding to nearest even with known answers, NaN and infinity,
// the bulk conversions against the scalar ones, and the dtype names.
#include <gtest/gtest.h>

#include <algorithm>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/kernels/simd.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

uint16_t round_bits(uint32_t f32_bits) { return float_to_bf16(std::bit_cast<float>(f32_bits)); }

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(round_bits(0x3f808000u), 0x3f80) << "a tie goes to the even neighbour (down)";
  EXPECT_EQ(round_bits(0x3f818000u), 0x3f82) << "a tie goes to the even neighbour (up)";
  EXPECT_EQ(round_bits(0x3f808001u), 0x3f81) << "above the tie rounds up";
  EXPECT_EQ(round_bits(0x3f807fffu), 0x3f80) << "below the tie rounds down";
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(round_bits(0x7f7fffffu), 0x7f80) << "the largest float rounds up to infinity, as IEEE does";
  const uint16_t nan = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  EXPECT_TRUE(std::isnan(bf16_to_float(round_bits(0x7f800001u)))) << "a NaN whose payload is in the low bits stays NaN";
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

// (floats_to_bf16 is vectorised per SIMD target: each one the CPU runs, and odd lengths for the tails.)
TEST(Bf16, BulkConversionsAreTheScalarOnes) {
  std::mt19937 rng(3);
  std::vector<float> x(4099);
  for (float& v : x) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));  // every class of float, NaNs included
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = -std::numeric_limits<float>::quiet_NaN();
  x[2] = std::bit_cast<float>(0x7f800001u);  // a NaN whose payload is in the low bits
  x[3] = std::bit_cast<float>(0x3f808000u);  // a tie, to even (down)
  x[4] = std::bit_cast<float>(0x3f818000u);  // a tie, to even (up)
  std::vector<uint16_t> b(x.size());
  for (int64_t target : kernels::available_simd_targets()) {
    kernels::force_simd_target(target);
    for (size_t n : {x.size(), size_t{1}, size_t{17}, size_t{0}}) {
      std::fill(b.begin(), b.end(), uint16_t{0x1234});
      floats_to_bf16(x.data(), b.data(), n);
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(b[i], i < n ? float_to_bf16(x[i]) : 0x1234) << kernels::simd_target_name(target) << " n " << n << " " << i;
    }
  }
  kernels::force_simd_target(0);
  std::vector<float> back(x.size());
  bf16_to_floats(b.data(), back.data(), b.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), static_cast<uint32_t>(b[i]) << 16) << i;
}

TEST(Bf16, DtypesAreNamedAndAnUnknownOneIsRefused) {
  EXPECT_EQ(parse_dtype("bf16"), Dtype::kBF16);
  EXPECT_EQ(parse_dtype("f32"), Dtype::kF32);
  EXPECT_STREQ(dtype_name(Dtype::kBF16), "bf16");
  try {
    parse_dtype("fp16");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown dtype 'fp16': expected f32 or bf16");
  }
}

TEST(Bf16, TheDotProductCanBeForcedOff) {
  const bool was = set_bf16_dot_allowed(false);
  EXPECT_FALSE(bf16_dot_allowed());
  set_bf16_dot_allowed(true);
  EXPECT_EQ(bf16_dot_allowed(), cpu_has_bf16_dot());
  // Kernels capped below AVX-512 ($QKV_SIMD=avx2, a test's forced target) never reach the dot
  // paths' AVX-512 code, whatever the CPU has.
  for (int64_t t : kernels::available_simd_targets()) {
    kernels::force_simd_target(t);
    const bool wide = kernels::simd_target_vector_bits(t) == 512;
    EXPECT_EQ(bf16_dot_allowed(), cpu_has_bf16_dot() && wide) << kernels::simd_target_name(t);
  }
  kernels::force_simd_target(0);
  set_bf16_dot_allowed(was);
}

}  // namespace
}  // namespace qkv
