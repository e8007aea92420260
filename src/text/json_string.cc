// JSON string literals to UTF-8; see qkv/text/json_string.h.
#include "qkv/text/json_string.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The four hex digits at s[at..at+4), or -1.
int32_t hex4(std::string_view s, size_t at) {
  if (at + 4 > s.size()) return -1;
  int32_t v = 0;
  for (size_t k = 0; k < 4; ++k) {
    const int d = hex_digit(s[at + k]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

std::string parse_json_string(std::string_view s, size_t& i, const std::string& what) {
  QKV_CHECK(i < s.size() && s[i] == '"', what, ": expected a JSON string at byte ", i);
  std::string out;
  ++i;
  for (;;) {
    const size_t start = i;
    while (i < s.size() && s[i] != '"' && s[i] != '\\' && static_cast<unsigned char>(s[i]) >= 0x20) ++i;
    out.append(s.data() + start, i - start);
    QKV_CHECK(i < s.size(), what, ": a JSON string is not closed");
    const char c = s[i];
    if (c == '"') break;
    QKV_CHECK(c == '\\', what, ": a raw control character (", static_cast<int>(c), ") inside a JSON string at byte ", i,
              "; JSON writes it as an escape");
    QKV_CHECK(i + 1 < s.size(), what, ": a JSON string ends inside an escape");
    const char e = s[i + 1];
    i += 2;
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        int32_t cp = hex4(s, i);
        QKV_CHECK(cp >= 0, what, ": a \\u escape needs four hex digits, at byte ", i - 2);
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
          const int32_t lo = hex4(s, i + 2);
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          }
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;  // a lone surrogate
        utf8::append(out, static_cast<uint32_t>(cp));
        break;
      }
      default: fail(what, ": a bad escape ", excerpt(std::string_view(&s[i - 2], 2)), " at byte ", i - 2);
    }
  }
  ++i;
  return out;
}

std::vector<std::string> parse_json_string_lines(std::string_view contents, const std::string& what) {
  std::vector<std::string> out;
  size_t line = 0;
  for (size_t start = 0; start < contents.size();) {
    size_t end = contents.find('\n', start);
    if (end == std::string_view::npos) end = contents.size();
    ++line;
    const std::string_view text = contents.substr(start, end - start);
    const std::string where = what + " line " + std::to_string(line);
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
    size_t i = 0;
    while (i < text.size() && space(text[i])) ++i;
    QKV_CHECK(i < text.size() && text[i] == '"', where, ": expected one JSON string, like \"text\"; got ",
              text.empty() ? std::string("an empty line") : excerpt(text));
    out.push_back(parse_json_string(text, i, where));
    while (i < text.size() && space(text[i])) ++i;
    QKV_CHECK(i == text.size(), where, ": more after the JSON string, at byte ", i);
    start = end + 1;
  }
  return out;
}

}  // namespace qkv
