// qkv/text/hex.h - bytes as lower-case hex digits and back: the one encoder behind sha256_hex, the
// generator states in checkpoints (train/data.h) and the \xNN escapes of printable byte strings.
//   hex_encode({0x0f, 0xa0}) == "0fa0";  hex_decode("0fa0", "what") == {0x0f, 0xa0}
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

namespace qkv {

// Appends the two digits of one byte.
inline void append_hex(std::string& out, uint8_t byte) {
  static constexpr char kDigits[] = "0123456789abcdef";
  out += kDigits[byte >> 4];
  out += kDigits[byte & 15];
}

inline std::string hex_encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve(2 * bytes.size());
  for (uint8_t b : bytes) append_hex(out, b);
  return out;
}

// The bytes of an even number of lower-case hex digits; throws qkv::Error starting with `what`
// on an odd count or another character.
inline std::vector<uint8_t> hex_decode(std::string_view hex, const char* what) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    fail(what, ": ", excerpt(std::string_view(&c, 1)), " is not a lowercase hex digit");
  };
  QKV_CHECK(hex.size() % 2 == 0, what, ": odd number of hex digits (", hex.size(), ")");
  std::vector<uint8_t> bytes;
  bytes.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) bytes.push_back(static_cast<uint8_t>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  return bytes;
}

}  // namespace qkv
