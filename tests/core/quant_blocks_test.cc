// ggml's block formats (core/quant_blocks.h) against a reference written here from the published
// block layouts, one value at a time from its index (the library walks the blocks in loops): every
// readable type, bit for bit, on random blocks and on the edges - zero scales, the largest and
// smallest quants, the largest half scale, subnormal scales, infinite and NaN scales (which give
// inf and NaN values as the formula says: documented, not refused, as llama.cpp reads them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/quant_blocks.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;

// IEEE half to float, from the definition: (-1)^s 2^(e-15) (1 + m/1024), subnormals 2^-14 m/1024.
float half_ref(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 31) v = m == 0 ? INFINITY : NAN;
  else if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else v = std::ldexp(static_cast<float>(1024 + m), e - 25);
  return s ? -v : v;
}
float half_at(const uint8_t* p) { return half_ref(static_cast<uint16_t>(p[0] | p[1] << 8)); }

// The 6-bit scale and min of sub-block `sub` of a K-quant's 12 scale bytes (the layout's words:
// the first four of each in bytes 0-3 and 4-7, the last four split into nibbles of bytes 8-11 and
// the top two bits of bytes 0-3 / 4-7).
void k_scale(const uint8_t* sc, int sub, int& scale, int& min) {
  if (sub < 4) {
    scale = sc[sub] & 63;
    min = sc[4 + sub] & 63;
  } else {
    scale = (sc[4 + sub] & 15) | (sc[sub - 4] >> 6) << 4;
    min = (sc[4 + sub] >> 4) | (sc[sub] >> 6) << 4;
  }
}

// Value `idx` of one block of type `name`.
float value_ref(const std::string& name, const uint8_t* b, int idx) {
  const uint32_t b0 = b[0], b1 = b[1];  // every block has two bytes at least
  if (name == "F32") return std::bit_cast<float>(b0 | b1 << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24);
  if (name == "F16") return half_at(b);
  if (name == "BF16") return std::bit_cast<float>((b0 | b1 << 8) << 16);
  if (name == "Q8_0") return static_cast<float>(static_cast<int8_t>(b[2 + idx])) * half_at(b);
  if (name[0] == 'Q' && name[2] == '_' && name[3] != 'K') {  // Q4_0 Q4_1 Q5_0 Q5_1
    const bool with_min = name[3] == '1', five = name[1] == '5';
    const uint8_t* qs = b + 2 + (with_min ? 2 : 0) + (five ? 4 : 0);
    int q = idx < 16 ? qs[idx] & 15 : qs[idx - 16] >> 4;
    if (five) {
      const uint8_t* qh = b + 2 + (with_min ? 2 : 0);
      q |= ((qh[idx / 8] >> (idx % 8)) & 1) << 4;  // bit idx of the 32 bits
    }
    const float d = half_at(b);
    if (with_min) return static_cast<float>(q) * d + half_at(b + 2);
    return static_cast<float>(q - (five ? 16 : 8)) * d;
  }
  if (name == "Q4_K" || name == "Q5_K") {
    const bool five = name == "Q5_K";
    const int sub = idx / 32, pair = idx / 64, l = idx % 32;
    const uint8_t* qs = b + (five ? 48 : 16);
    int q = sub % 2 == 0 ? qs[32 * pair + l] & 15 : qs[32 * pair + l] >> 4;
    if (five) q += ((b[16 + l] >> sub) & 1) * 16;  // sub-block s's fifth bits: bit s of qh[l]
    int scale = 0, min = 0;
    k_scale(b + 4, sub, scale, min);
    return half_at(b) * static_cast<float>(scale) * static_cast<float>(q) - half_at(b + 2) * static_cast<float>(min);
  }
  if (name == "Q6_K") {
    const int half = idx / 128, r = idx % 128, quarter = r / 32, l = r % 32;
    const uint8_t byte = b[64 * half + l + (quarter % 2) * 32];
    const int low = quarter < 2 ? byte & 15 : byte >> 4;
    const int high = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
    const int scale = static_cast<int8_t>(b[192 + 8 * half + l / 16 + 2 * quarter]);
    return half_at(b + 208) * static_cast<float>(scale) * static_cast<float>((low | high << 4) - 32);
  }
  ADD_FAILURE() << "no reference for " << name;
  return 0;
}

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Offsets of a block's half-float scales (set to chosen values for the edge cases).
std::vector<int> half_fields(const std::string& name) {
  if (name == "F16") return {0};
  if (name == "Q4_1" || name == "Q5_1" || name == "Q4_K" || name == "Q5_K") return {0, 2};
  if (name == "Q6_K") return {208};
  if (name == "F32" || name == "BF16") return {};
  return {0};
}

void expect_blocks_match(const QuantType& t, const std::vector<uint8_t>& bytes, const std::string& what) {
  const int64_t blocks = static_cast<int64_t>(bytes.size()) / t.block_bytes;
  std::vector<float> got(static_cast<size_t>(blocks * t.block));
  dequantize(t, bytes.data(), blocks * t.block, got.data());
  for (int64_t k = 0; k < blocks; ++k)
    for (int i = 0; i < t.block; ++i) {
      const float want = value_ref(t.name, bytes.data() + k * t.block_bytes, i);
      const float have = got[static_cast<size_t>(k * t.block + i)];
      ASSERT_TRUE(same_bits(have, want)) << t.name << " " << what << ": block " << k << " value " << i << ": " << have
                                         << ", the layout says " << want;
    }
}

TEST(QuantBlocks, EveryReadableTypeIsItsLayoutBitForBit) {
  std::mt19937 rng(20261128);
  const std::string readable = readable_quant_types();
  EXPECT_EQ(readable, "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16");
  for (const char* name : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}) {
    const QuantType& t = quant_type_named(name);
    const int64_t blocks = t.block == 1 ? 4096 : 64;
    std::vector<uint8_t> bytes(static_cast<size_t>(blocks * t.block_bytes));
    for (uint8_t& x : bytes) x = static_cast<uint8_t>(rng());
    // random scales of ordinary size (random half bits would be mostly huge, inf or NaN)
    for (int64_t k = 0; k < blocks; ++k)
      for (int off : half_fields(name)) {
        const uint16_t h = static_cast<uint16_t>((rng() & 0x8000u) | (0x1000u + rng() % 0x3000u));  // 2^-11 .. 2^1
        bytes[static_cast<size_t>(k * t.block_bytes + off)] = static_cast<uint8_t>(h);
        bytes[static_cast<size_t>(k * t.block_bytes + off + 1)] = static_cast<uint8_t>(h >> 8);
      }
    expect_blocks_match(t, bytes, "random");
    // the edges: every quant byte 0x00, 0xFF, 0x80, 0x7F; scales 0, 65504, the smallest subnormal,
    // -0, inf and NaN
    if (t.block == 1) continue;
    for (const int fill : {0x00, 0xFF, 0x80, 0x7F})
      for (const int scale : {0x0000, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0x7E00}) {
        std::vector<uint8_t> edge(static_cast<size_t>(t.block_bytes), static_cast<uint8_t>(fill));
        for (int off : half_fields(name)) {
          edge[static_cast<size_t>(off)] = static_cast<uint8_t>(scale);
          edge[static_cast<size_t>(off + 1)] = static_cast<uint8_t>(scale >> 8);
        }
        expect_blocks_match(t, edge, str("fill ", static_cast<int>(fill), " scale ", scale));
      }
  }
}

TEST(QuantBlocks, KnownValuesOfHandMadeBlocks) {
  // Q8_0: d = 0.5, q = -128, 127, 3, ... -> -64, 63.5, 1.5
  std::vector<uint8_t> q8(34, 0);
  q8[0] = 0x00, q8[1] = 0x38;  // 0.5
  q8[2] = 0x80, q8[3] = 0x7F, q8[4] = 3;
  std::vector<float> y(32);
  dequantize(quant_type_named("q8_0"), q8.data(), 32, y.data());
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[1], 63.5f);
  EXPECT_EQ(y[2], 1.5f);
  EXPECT_EQ(y[3], 0.0f);
  // Q4_0: d = 2, byte 0 = 0xF0: value 0 is (0 - 8) 2 = -16, value 16 is (15 - 8) 2 = 14
  std::vector<uint8_t> q4(18, 0x88);
  q4[0] = 0x00, q4[1] = 0x40;  // 2.0
  q4[2] = 0xF0;
  dequantize(quant_type_named("Q4_0"), q4.data(), 32, y.data());
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[16], 14.0f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(QuantBlocks, SizesAndRefusals) {
  EXPECT_EQ(quant_bytes(quant_type_named("Q4_K"), 512, "w"), 288);
  EXPECT_EQ(quant_bytes(quant_type_named("Q8_0"), 64, "w"), 68);
  EXPECT_THAT(error_of([] { quant_bytes(quant_type_named("Q8_0"), 33, "blk.0.w"); }),
              HasSubstr("blk.0.w: 33 values of Q8_0 are not a whole number of its blocks of 32"));
  const int64_t many = std::numeric_limits<int64_t>::max() / 2;  // their 4 bytes each overflow
  EXPECT_THAT(error_of([&] { quant_bytes(quant_type_named("F32"), many, "w"); }), HasSubstr("exceeds"));
  EXPECT_THAT(error_of([] { quant_type(99); }), HasSubstr("tensor type 99 is not one of ggml's types; qkv reads F32"));
  EXPECT_THAT(error_of([] { quant_type_named("q3_k"); }), HasSubstr("unknown tensor type 'q3_k'"));
  EXPECT_EQ(std::string(quant_type(11).name), "Q3_K");  // known, not read
  std::vector<uint8_t> block(110, 0);
  std::vector<float> y(256);
  EXPECT_THAT(error_of([&] { dequantize(quant_type(11), block.data(), 256, y.data()); }),
              HasSubstr("qkv does not read Q3_K tensors"));
}

}  // namespace
}  // namespace qkv
