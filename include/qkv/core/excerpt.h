// qkv/core/excerpt.h - text from outside (a file, a tensor name, a flag's value), fit to put into a
// message: escaped and bounded.
//
//   fail("tensor ", excerpt(name), " has ...");   // 'abc\x1b[31m...' (+ 39,999,950 more bytes)
//
// Quotes the text in single quotes; printable ASCII stays as it is, valid UTF-8 beyond ASCII
// stays as it is, and everything else (control characters such as NUL, ESC and newlines, the
// quote and backslash themselves, invalid bytes) is escaped (\n, \t, \\, \', \xNN). At most
// `max_bytes` bytes of the text are shown; the rest is counted, never printed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace qkv {

inline constexpr size_t kExcerptBytes = 80;

std::string excerpt(std::string_view text, size_t max_bytes = kExcerptBytes);

}  // namespace qkv
