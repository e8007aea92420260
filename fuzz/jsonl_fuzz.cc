// parse_json_string_lines: `qkv encode --jsonl`'s input, one JSON string per line.
#include "fuzz_target.h"
#include "qkv/text/json_string.h"

QKV_FUZZ_TARGET(data) {
  const std::vector<std::string> lines = qkv::parse_json_string_lines(data, "fuzz.jsonl");
  // A line holds at least its two quotes, and its string is at most as long as the line's escapes
  // make it (a 6-byte \uXXXX gives at most 3 bytes, a 12-byte pair 4).
  size_t total = 0;
  for (const std::string& s : lines) total += s.size() + 2;
  QKV_FUZZ_EXPECT(total <= data.size() + 2 * lines.size());
}
