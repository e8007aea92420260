// Lists of token ids. See include/qkv/io/token_ids.h.
#include "qkv/io/token_ids.h"

#include <charconv>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"

namespace qkv {

std::vector<TokenId> parse_token_ids(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  std::vector<TokenId> ids;
  if (s[first] == '[') {
    const nlohmann::json j = parse_json(s, "decode: not a valid JSON array of ids");
    QKV_CHECK(j.is_array(), "decode: expected a JSON array of token ids, not ", json_excerpt(j));
    for (const nlohmann::json& v : j) {
      QKV_CHECK(v.is_number_integer(), "decode: ", json_excerpt(v), " in the array is not a token id (an integer)");
      // An unsigned id beyond int64 (2^64 - 1, say) is named as written, not as the -1 it would wrap to.
      QKV_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<TokenId>::max()),
                "decode: ", v.get<uint64_t>(), " in the array is not a token id (ids are below 2^63)");
      ids.push_back(v.get<TokenId>());
    }
    return ids;
  }
  for (size_t i = first; i < s.size();) {
    const size_t end = s.find_first_of(" \t\r\n,", i);
    const std::string_view word = s.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (!word.empty()) {
      TokenId id = 0;
      const auto r = std::from_chars(word.data(), word.data() + word.size(), id);
      QKV_CHECK(r.ec == std::errc() && r.ptr == word.data() + word.size(), "decode: ", excerpt(word), " is not a token id (",
                r.ec == std::errc::result_out_of_range ? "beyond the range of ids" : "an integer",
                "); give a JSON array or integers separated by spaces");
      ids.push_back(id);
    }
    if (end == std::string::npos) break;
    i = end + 1;
  }
  return ids;
}

void append_token_ids(std::string& out, const std::vector<TokenId>& ids) {
  const size_t start = out.size();
  out.resize(start + 3 + ids.size() * 22);
  char* p = out.data() + start;
  char* const end = out.data() + out.size();
  *p++ = '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) {
      *p++ = ',';
      *p++ = ' ';
    }
    p = std::to_chars(p, end, ids[i]).ptr;
  }
  *p++ = ']';
  *p++ = '\n';
  out.resize(static_cast<size_t>(p - out.data()));
}

}  // namespace qkv
