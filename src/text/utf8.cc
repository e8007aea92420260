// UTF-8 validation and repair (Python's errors="replace"); see qkv/text/utf8.h.
#include "qkv/text/utf8.h"

#include <cstring>

namespace qkv::utf8 {
namespace {

// How a lead byte continues: the number of continuation bytes and the allowed range of the first
// one (the later ones are always 80..BF). need == 0 marks a byte that cannot start a sequence.
struct Lead {
  uint8_t need, lo, hi;
};

constexpr Lead lead_of(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};  // no overlong 3-byte forms
  if (b == 0xED) return {2, 0x80, 0x9F};  // no surrogates D800..DFFF
  if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};  // no overlong 4-byte forms
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

// The length of the well-formed sequence at s[i] (i < n, s[i] >= 0x80), or, when it is ill-formed,
// minus the length of its maximal subpart (at least 1).
inline ptrdiff_t sequence_at(const uint8_t* s, size_t n, size_t i) {
  const Lead l = lead_of(s[i]);
  if (l.need == 0) return -1;
  size_t j = i + 1;
  for (int k = 0; k < l.need; ++k, ++j) {
    if (j >= n) return -static_cast<ptrdiff_t>(j - i);
    const uint8_t c = s[j];
    const bool ok = k == 0 ? (c >= l.lo && c <= l.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return -static_cast<ptrdiff_t>(j - i);
  }
  return static_cast<ptrdiff_t>(j - i);
}

inline bool ascii8(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return (v & 0x8080808080808080ull) == 0;
}

}  // namespace

bool is_valid(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (i + 16 <= n && ascii8(s + i) && ascii8(s + i + 8)) {
      i += 16;
      continue;
    }
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    const ptrdiff_t len = sequence_at(s, n, i);
    if (len < 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

std::string replace_invalid(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  std::string out;
  out.reserve(n + n / 8);
  size_t i = 0;
  while (i < n) {
    size_t start = i;
    while (i < n && s[i] < 0x80) ++i;
    out.append(text.data() + start, i - start);
    if (i == n) break;
    const ptrdiff_t len = sequence_at(s, n, i);
    if (len > 0) {
      out.append(text.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      out.append(kReplacementCharacter);
      i += static_cast<size_t>(-len);
    }
  }
  return out;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t next(std::string_view text, size_t& i) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t b = s[i];
  if (b < 0x80) {
    ++i;
    return b;
  }
  const ptrdiff_t len = sequence_at(s, text.size(), i);
  if (len < 0) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = b & (0x7F >> len);
  for (ptrdiff_t k = 1; k < len; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
  i += static_cast<size_t>(len);
  return cp;
}

}  // namespace qkv::utf8
