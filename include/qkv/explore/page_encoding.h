// qkv/explore/page_encoding.h - how the explore page stores numbers: IEEE half floats, 8-bit
// codes, and base 85 of the bytes.
//
// 8-bit codes: a finite x in [lo, hi] is round((x - lo) / (hi - lo) * kU8FiniteMax), 0 ..
// kU8FiniteMax; the codes above are not numbers: kU8NaN, kU8PosInf and kU8NegInf (a masked score),
// so a masked cell never reads as a number and a number never reads as -inf.
#pragma once

#include <cstddef>
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

// Whether float16 holds every finite one of v[0, n) as a finite number (|x| < 65520).
bool fits_half(const float* v, size_t n);

// The float whose float16 bits are h (exact: every half is a float).
float half_to_float(uint16_t h);

// The 8-bit code of x for a tensor whose finite values span [lo, hi] (lo <= hi).
uint8_t quantise_u8(float x, float lo, float hi);

// The page's base 85 (a quarter smaller than base64's 4/3): the bytes zero-padded to a multiple of
// 4, each group of 4 as a big-endian 32-bit number written in 5 digits of kBase85Digits, most
// significant first. The digits leave out what JSON escapes inside a string or what the page's
// script element must not hold (" \ < > &).
inline constexpr char kBase85Digits[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%()*+,-./:;=?@[]^_|~";
std::string base85_encode(const std::string& bytes);

}  // namespace qkv
