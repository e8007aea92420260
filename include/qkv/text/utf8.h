// qkv/text/utf8.h - UTF-8 validation and repair, as Python and the WHATWG TextDecoder do it.
//
// replace_invalid(bytes) is Python's bytes.decode("utf-8", errors="replace") encoded back to UTF-8
// (and WHATWG TextDecoder's "replacement" mode): every maximal subpart of an ill-formed sequence
// becomes one U+FFFD (EF BF BD). A maximal subpart is a lead byte followed by as many bytes as
// could still continue it (Unicode 15, section 3.9, "U+FFFD Substitution of Maximal Subparts"):
//   "a\xF0\x9F\x98b"  -> "a\uFFFDb"          (a truncated 4-byte sequence: one U+FFFD)
//   "\xC0\xAF"        -> "\uFFFD\uFFFD"      (C0 can never lead; AF is a stray continuation)
//   "\xED\xA0\x80"    -> "\uFFFD" x 3        (a UTF-16 surrogate: ED may only be followed by 80..9F)
// Valid text comes back unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qkv::utf8 {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// True if s is well-formed UTF-8 (no surrogates, no overlong forms, nothing above U+10FFFF).
bool is_valid(std::string_view s);

// Python's bytes.decode("utf-8", "replace"), as UTF-8 bytes.
std::string replace_invalid(std::string_view s);

// Appends code point cp (<= 0x10FFFF, not a surrogate) to out as UTF-8.
void append(std::string& out, uint32_t cp);

// Decodes the code point at s[i] of well-formed UTF-8 and advances i past it. On an ill-formed
// byte it returns U+FFFD and advances one byte, so it never reads past the end or loops forever.
uint32_t next(std::string_view s, size_t& i);

}  // namespace qkv::utf8
