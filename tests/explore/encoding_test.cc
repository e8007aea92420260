// The explore page's number storage (qkv/explore/page_encoding.h): float16 bits, 8-bit codes and
// base 85, against known answers (IEEE 754 binary16; base 85 digits worked out by hand).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "qkv/explore/page_encoding.h"
#include "test_support.h"

namespace qkv {
namespace {


TEST(ExploreEncoding, HalfOfExactValues) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(0.5f), 0x3800);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);         // the largest half
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal half
}

TEST(ExploreEncoding, HalfOfInfinitiesAndNaN) {
  EXPECT_EQ(float_to_half(kInf), 0x7c00);
  EXPECT_EQ(float_to_half(-kInf), 0xfc00);
  const uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);  // a NaN, not infinity
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);    // beyond the range: infinity
  EXPECT_EQ(float_to_half(-1e6f), 0xfc00);
}

TEST(ExploreEncoding, HalfOfSubnormals) {
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);         // the smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -24)), 0x0003);
  EXPECT_EQ(float_to_half(std::ldexp(1023.0f, -24)), 0x03ff);      // the largest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -26)), 0x0000);         // below half the smallest: 0
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -24)), 0x8001);
}

TEST(ExploreEncoding, HalfRoundsToNearestTiesToEven) {
  // 1 + 2^-11 is halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01): down to the even one
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 0x3c01 (odd) and 0x3c02: up to the even one
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  // just above a tie rounds up, just below rounds down
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11) - std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
  // ties among subnormals: 2^-25 between 0 and 0x0001 -> 0; 3 * 2^-25 between 0x0001 and 0x0002 -> 0x0002
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);
  // halfway between the largest subnormal (odd) and the smallest normal: up, into the normals
  EXPECT_EQ(float_to_half(std::ldexp(2047.0f, -25)), 0x0400);
  // 65520 is halfway between 65504 (0x7bff, odd) and 65536 (not a half): infinity; 65519 is not
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
}

// Expected digits worked out by hand from the definition (page_encoding.h): 0xffffffff =
// 82 85^4 + 23 85^3 + 54 85^2 + 12 85 + 0, digits 82 '_', 23 'n', 54 'S', 12 'c', 0 '0'.
TEST(ExploreEncoding, Base85GroupsOfFourBytes) {
  EXPECT_EQ(base85_encode(""), "");
  EXPECT_EQ(base85_encode(std::string("\xff\xff\xff\xff", 4)), "_nSc0");
  EXPECT_EQ(base85_encode(std::string("\x00\x00\x00\x00", 4)), "00000");
  EXPECT_EQ(base85_encode(std::string("\x00\x00\x00\x01", 4)), "00001");
  EXPECT_EQ(base85_encode(std::string("\x00\x00\x00\x55", 4)), "00010");  // 85
}

TEST(ExploreEncoding, Base85PadsTheLastGroupWithZeros) {
  EXPECT_EQ(base85_encode(std::string("\x00", 1)), "00000");
  EXPECT_EQ(base85_encode(std::string("\x00\x3c", 2)), "06ykY");  // float16 1.0, little-endian: 0x003c0000
  EXPECT_EQ(base85_encode(std::string("\x01\x02\x03\x04\x05", 5)).size(), 10u);
}

TEST(ExploreEncoding, Base85DigitsNeedNoEscapeInTheScriptElement) {
  const std::string digits = kBase85Digits;
  EXPECT_EQ(digits.size(), 85u);
  for (char c : std::string("\"\\<>&")) EXPECT_EQ(digits.find(c), std::string::npos) << c;
  for (char c : digits) EXPECT_TRUE(c > 32 && c < 127) << int(c);
  EXPECT_EQ(std::set<char>(digits.begin(), digits.end()).size(), 85u);  // every digit once
}

TEST(ExploreEncoding, EightBitCodes) {
  EXPECT_EQ(quantise_u8(-1.0f, -1.0f, 3.0f), 0);
  EXPECT_EQ(quantise_u8(3.0f, -1.0f, 3.0f), kU8FiniteMax);
  EXPECT_EQ(quantise_u8(1.0f, -1.0f, 3.0f), 126);
  EXPECT_EQ(quantise_u8(0.0f, 0.0f, 0.0f), 0);  // a constant tensor
  EXPECT_EQ(quantise_u8(-kInf, -1.0f, 3.0f), kU8NegInf);
  EXPECT_EQ(quantise_u8(kInf, -1.0f, 3.0f), kU8PosInf);
  EXPECT_EQ(quantise_u8(std::numeric_limits<float>::quiet_NaN(), -1.0f, 3.0f), kU8NaN);
  // the codes that are not numbers are above every finite one, and distinct
  EXPECT_LT(kU8FiniteMax, kU8NaN);
  EXPECT_NE(kU8NaN, kU8PosInf);
  EXPECT_NE(kU8PosInf, kU8NegInf);
}

}  // namespace
}  // namespace qkv
