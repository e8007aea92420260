// qkv/text/json_string.h - JSON string literals, decoded to UTF-8 (for encoder.json and for
// `qkv encode --jsonl`, whose input has one JSON string per line).
//
// Escapes are RFC 8259's; a \uD83D\uDE00 surrogate pair becomes its code point, and a lone
// surrogate becomes U+FFFD, which is what tiktoken (Python and npm alike) encodes in its place.
// Raw bytes are kept as they are (invalid UTF-8 is repaired later, by the encoder).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qkv {

// The string literal at s[i] (which must be '"'); leaves i just after its closing quote. Errors
// say `what` and the byte offset.
std::string parse_json_string(std::string_view s, size_t& i, const std::string& what);

// Every line of contents holds one JSON string (spaces around it allowed); a final newline ends
// the last line rather than starting an empty one. Errors name `what` and the line (from 1).
std::vector<std::string> parse_json_string_lines(std::string_view contents, const std::string& what);

}  // namespace qkv
