// qkv/explore/page_encoding.h - how the explore page stores numbers: IEEE half floats, 8-bit
// codes, and base64 (RFC 4648, with '=' padding) of the bytes.
//
// 8-bit codes: a finite x in [lo, hi] is round((x - lo) / (hi - lo) * kU8FiniteMax), 0 ..
// kU8FiniteMax; the codes above are not numbers: kU8NaN, kU8PosInf and kU8NegInf (a masked score),
// so a masked cell never reads as a number and a number never reads as -inf.
#pragma once

#include <cstdint>
#include <string>

namespace qkv {

inline constexpr uint8_t kU8FiniteMax = 252;
inline constexpr uint8_t kU8NaN = 253;
inline constexpr uint8_t kU8PosInf = 254;
inline constexpr uint8_t kU8NegInf = 255;

// The float16 bits of f: round to nearest, ties to even; beyond 65504 (after rounding) infinity;
// subnormals kept; NaN stays NaN (quiet), the sign kept.
uint16_t float_to_half(float f);

// The 8-bit code of x for a tensor whose finite values span [lo, hi] (lo <= hi).
uint8_t quantise_u8(float x, float lo, float hi);

// base64 of the bytes.
std::string base64_encode(const std::string& bytes);

}  // namespace qkv
