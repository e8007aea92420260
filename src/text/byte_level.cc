// GPT-2's byte-level alphabet. See include/qkv/text/byte_level.h.
#include "qkv/text/byte_level.h"

#include "qkv/text/utf8.h"

#include <algorithm>
#include <iterator>

namespace qkv {
namespace {

struct ByteLevel {
  uint32_t char_of[256];
  int byte_of[256 + 68];  // code point -> byte, or -1
  std::array<uint8_t, 256> order;
  ByteLevel() {
    std::fill(std::begin(byte_of), std::end(byte_of), -1);
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int k = 0, n = 0;
    for (int b = 0; b < 256; ++b)
      if (printable(b)) {
        char_of[b] = static_cast<uint32_t>(b);
        order[static_cast<size_t>(k++)] = static_cast<uint8_t>(b);
      }
    for (int b = 0; b < 256; ++b)
      if (!printable(b)) {
        char_of[b] = static_cast<uint32_t>(256 + n++);
        order[static_cast<size_t>(k++)] = static_cast<uint8_t>(b);
      }
    for (int b = 0; b < 256; ++b) byte_of[char_of[b]] = b;
  }
};

const ByteLevel& table() {
  static const ByteLevel t;
  return t;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return table().char_of[b]; }

int byte_level_byte(uint32_t cp) { return cp < 256 + 68 ? table().byte_of[cp] : -1; }

const std::array<uint8_t, 256>& byte_level_order() { return table().order; }

bool byte_level_decode(std::string_view token, std::string& out, uint32_t* bad) {
  for (size_t i = 0; i < token.size();) {
    const uint32_t cp = utf8::next(token, i);
    const int b = byte_level_byte(cp);
    if (b < 0) {
      if (bad) *bad = cp;
      return false;
    }
    out += static_cast<char>(b);
  }
  return true;
}

}  // namespace qkv
