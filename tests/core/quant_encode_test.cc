// Floats into ggml's blocks (quantize(), src/core/quant_encode.cc), judged through the reference
// reader (dequantize(), itself checked bit for bit in quant_blocks_test.cc) and the definitions:
//   F16    every half is its own float's rounding, halfway cases go to the even half, past 65504
//          (from 65520 on) is infinity;
//   Q8_0   the bytes are the definition's: d = f16(amax / 127), q = round-half-away(x / (amax / 127));
//          so each value is within d/2 of x, plus q's 127 steps of d's rounding to f16 (2^-11 d each);
//   Q4_0, Q4_K, Q6_K  each value is the nearest the block's stored scales can give (within half a
//          step of x), or the end of the block's range for an x beyond it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/quant_blocks.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;

float stored_half(const uint8_t* p) { return f16_to_float(static_cast<uint16_t>(p[0] | p[1] << 8)); }

TEST(QuantEncode, HalvesRoundToNearestEven) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite non-negative half, and its negative
    const float x = f16_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(float_to_f16(x), h) << x;
    ASSERT_EQ(float_to_f16(-x), h | 0x8000u) << -x;
    if (h + 1 < 0x7c00) {  // halfway to the next half: the even one of the two
      const float next = f16_to_float(static_cast<uint16_t>(h + 1));
      const float mid = x + (next - x) / 2;  // exact: halves have 11 significant bits
      ASSERT_EQ(float_to_f16(mid), (h & 1) ? h + 1 : h) << mid;
      ASSERT_EQ(float_to_f16(std::nextafter(mid, 0.0f)), h) << mid;
      ASSERT_EQ(float_to_f16(std::nextafter(mid, INFINITY)), h + 1) << mid;
    }
  }
  EXPECT_EQ(float_to_f16(65519.99f), 0x7bffu);  // 65504
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00u);   // halfway to 2^16: even, which is infinity
  EXPECT_EQ(float_to_f16(1e30f), 0x7c00u);
  EXPECT_EQ(float_to_f16(-INFINITY), 0xfc00u);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(NAN))));
  EXPECT_EQ(float_to_f16(1e-10f), 0u);  // below half the smallest subnormal
}

// Blocks of varied data: normal, wide, all equal, one outlier, all zero, tiny.
std::vector<float> data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t block = i / 256;
    switch (block % 6) {
      case 0: x[i] = normal(rng); break;
      case 1: x[i] = 1000.0f * normal(rng); break;
      case 2: x[i] = -0.75f; break;
      case 3: x[i] = i % 256 == 7 ? 50.0f : 0.01f * normal(rng); break;
      case 4: x[i] = 0.0f; break;
      default: x[i] = 1e-6f * normal(rng); break;
    }
  }
  return x;
}

TEST(QuantEncode, Q8_0IsTheDefinitionsBytes) {
  const std::vector<float> x = data(6 * 256, 1);
  const QuantType& t = quant_type_named("Q8_0");
  std::vector<uint8_t> b(static_cast<size_t>(quant_bytes(t, 6 * 256, "x")));
  quantize(t, x.data(), 6 * 256, b.data());
  for (int64_t blk = 0; blk < 6 * 256 / 32; ++blk) {
    const float* v = x.data() + 32 * blk;
    const uint8_t* p = b.data() + 34 * blk;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float d = amax / 127.0f;
    ASSERT_EQ(p[0] | p[1] << 8, float_to_f16(d)) << blk;
    for (int i = 0; i < 32; ++i)
      ASSERT_EQ(static_cast<int8_t>(p[2 + i]), d == 0 ? 0 : std::lround(v[i] * (1.0f / d))) << blk << " " << i;
  }
}

// Each type: every value within the half step of the scales the block stores (or the end of its
// range); the step and range of value i read from the block by the layout.
struct Step {
  float step, lo, hi;
  float extra = 0;  // beyond half a step: q chosen from the unrounded scale (Q8_0, Q4_0)
};
// How far a scale d32 may be from its half d16: half an ulp of the half, 2^-11 d16 relative, or
// 2^-25 absolute where d16 is subnormal (a block of tiny values).
float half_rounding(float d16) { return std::max(std::fabs(d16) / 2048.0f, 0x1p-25f); }
Step step_of(const std::string& type, const uint8_t* block, int i) {
  if (type == "Q8_0") {
    const float d = stored_half(block);
    // q = round(x / d32) then times d16: half a step, plus up to 127 steps of |d32 - d16|
    return {d, -127 * d, 127 * d, 127 * half_rounding(d)};
  }
  if (type == "Q4_0") {  // q - 8 in -8..7 times a signed d; q from x / d32 as Q8_0's (8 steps of d's rounding)
    const float d = stored_half(block);
    return {std::fabs(d), -8 * d, 7 * d, 8 * half_rounding(d)};
  }
  if (type == "Q4_K") {
    const float d = stored_half(block), dmin = stored_half(block + 2);
    const uint8_t* s = block + 4;
    const int j = i / 32;
    const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    const int mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    const float step = d * static_cast<float>(sc), off = dmin * static_cast<float>(mn);
    return {step, -off, 15 * step - off};
  }
  const float d = stored_half(block + 208);  // Q6_K
  const float step = d * static_cast<float>(static_cast<int8_t>(block[192 + i / 16]));
  return {step, -32 * step, 31 * step};
}

TEST(QuantEncode, EveryWrittenTypeReadsBackWithinHalfAStep) {
  const int64_t n = 12 * 256;
  const std::vector<float> x = data(n, 2);
  for (const std::string& name : writable_quant_types()) {
    const QuantType& t = quant_type_named(name);
    std::vector<uint8_t> b(static_cast<size_t>(quant_bytes(t, n, name)));
    quantize(t, x.data(), n, b.data());
    std::vector<float> y(static_cast<size_t>(n));
    dequantize(t, b.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      if (name == "F32") {
        ASSERT_EQ(y[i], x[i]);
      } else if (name == "F16" || name == "BF16") {
        const uint16_t bits = static_cast<uint16_t>(b[2 * i] | b[2 * i + 1] << 8);
        ASSERT_EQ(bits, name == "F16" ? float_to_f16(x[i]) : float_to_bf16(x[i])) << i;
      } else {
        const int64_t blk = i / t.block;
        const Step s = step_of(name, b.data() + blk * t.block_bytes, static_cast<int>(i % t.block));
        const float clamped = std::clamp(x[i], std::min(s.lo, s.hi), std::max(s.lo, s.hi));
        // half a step of x (clamped to the range), and the float rounding of the decode (a few ulps)
        const float bound =
            0.5f * s.step + s.extra + 4 * std::numeric_limits<float>::epsilon() * std::fabs(x[i]) + 1e-30f;
        ASSERT_LE(std::fabs(y[i] - clamped), bound)
            << name << " value " << i << ": x " << x[i] << " read back " << y[i] << " step " << s.step;
        if (x[i] == 0.0f && name != "Q4_K") {  // zero stays zero (Q4_K's offset need not hit it)
          ASSERT_EQ(y[i], 0.0f) << name << " " << i;
        }
      }
    }
  }
}

TEST(QuantEncode, RefusesWhatItCannotWrite) {
  std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> b(1024);
  x[5] = NAN;
  EXPECT_THAT(error_of([&] { quantize(quant_type_named("Q8_0"), x.data(), 32, b.data(), "tensor 'w'"); }),
              HasSubstr("tensor 'w' holds nan at value 5; only finite values can be written as Q8_0"));
  // a matrix names the row and the column (the tensor's own, not the row's block)
  std::vector<float> m(3 * 64, 1.0f);
  m[2 * 64 + 40] = INFINITY;
  EXPECT_THAT(error_of([&] {
                quantize_matrix(quant_type_named("Q8_0"), 3, 64, [&](int64_t r, float* out) {
                  std::copy_n(m.data() + r * 64, 64, out);
                }, "tensor 'blk.0.attn_q.weight' of 'm.gguf'");
              }),
              HasSubstr("tensor 'blk.0.attn_q.weight' of 'm.gguf' holds inf at row 2, column 40; only finite values "
                        "can be quantized (to Q8_0)"));
  x[5] = 1.0f;
  EXPECT_THAT(error_of([&] { quantize(quant_type_named("Q8_0"), x.data(), 16, b.data()); }),
              HasSubstr("16 values are not whole blocks of 32 (Q8_0)"));
  std::vector<float> z(256, 1.0f);
  EXPECT_THAT(error_of([&] { quantize(quant_type_named("Q5_K"), z.data(), 256, b.data()); }),
              HasSubstr("qkv does not write Q5_K blocks"));
}

}  // namespace
}  // namespace qkv
