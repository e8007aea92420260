// How the explore page stores numbers. See include/qkv/explore/page_encoding.h.
#include "qkv/explore/page_encoding.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace qkv {

std::string base85_encode(const std::string& bytes) {
  static_assert(sizeof(kBase85Digits) == 86, "85 digits");
  std::string out;
  out.reserve((bytes.size() + 3) / 4 * 5);
  for (size_t i = 0; i < bytes.size(); i += 4) {
    uint32_t n = 0;
    for (size_t k = 0; k < 4; ++k) n = (n << 8) | (i + k < bytes.size() ? uint8_t(bytes[i + k]) : 0u);
    char group[5];
    for (int k = 4; k >= 0; --k) {
      group[k] = kBase85Digits[n % 85];
      n /= 85;
    }
    out.append(group, 5);
  }
  return out;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // a half subnormal (or zero): the mantissa with its implicit 1, shifted
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal: right
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: right
  return static_cast<uint16_t>(sign | h);
}

bool fits_half(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(v[i]) && (float_to_half(v[i]) & 0x7fffu) == 0x7c00u) return false;
  return true;
}

float half_to_float(uint16_t h) {
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  const int e = (h >> 10) & 31, m = h & 1023;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? std::numeric_limits<float>::quiet_NaN() : sign * std::numeric_limits<float>::infinity();
  return sign * std::ldexp(static_cast<float>(1024 + m), e - 25);
}

uint8_t quantise_u8(float x, float lo, float hi) {
  if (std::isnan(x)) return kU8NaN;
  if (std::isinf(x)) return x > 0 ? kU8PosInf : kU8NegInf;
  const double span = hi > lo ? static_cast<double>(hi) - lo : 1.0;
  const long code = std::lround((static_cast<double>(x) - lo) / span * kU8FiniteMax);
  return static_cast<uint8_t>(code < 0 ? 0 : code > kU8FiniteMax ? kU8FiniteMax : code);
}

}  // namespace qkv
