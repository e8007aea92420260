// Text from outside, fit for a message. See include/qkv/core/excerpt.h.
#include "qkv/core/excerpt.h"

#include <cstdio>

namespace qkv {
namespace {

// The length of the valid UTF-8 sequence (2 to 4 bytes, no overlongs, surrogates or values past
// U+10FFFF) starting at s[i], or 0.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1Fu;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0Fu;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07u;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (b(k) & 0x3Fu);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  // C1 controls (U+0080..U+009F) act on terminals too
  if (cp >= 0x80 && cp <= 0x9F) return 0;
  return n;
}

}  // namespace

std::string excerpt(std::string_view text, size_t max_bytes) {
  std::string out = "'";
  size_t i = 0;
  while (i < text.size() && i < max_bytes) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n') {
      out += "\\n", ++i;
    } else if (c == '\t') {
      out += "\\t", ++i;
    } else if (c == '\r') {
      out += "\\r", ++i;
    } else if (const size_t n = c >= 0x80 ? utf8_length(text, i) : 0; n > 0 && i + n <= max_bytes) {
      out.append(text.substr(i, n));
      i += n;
    } else if (n > 0) {
      break;  // a character that would cross the bound: counted with the rest
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02X", static_cast<unsigned>(c));
      out += hex;
      ++i;
    }
  }
  out += '\'';
  if (i < text.size()) out += " (+ " + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

}  // namespace qkv
