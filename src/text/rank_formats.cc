// The two rank formats tiktoken reads: OpenAI's "data gym" files (GPT-2's vocab.bpe + encoder.json)
// and its own .tiktoken files (base64 token, rank).
#include <algorithm>
#include <charconv>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/json_string.h"
#include "qkv/text/vocab_files.h"

namespace qkv {
namespace {

// Appends the bytes a data gym token stands for to out.
void decode_data_gym(std::string_view token, const char* file, size_t line, std::string& out) {
  uint32_t cp = 0;
  QKV_CHECK(byte_level_decode(token, out, &cp), file, " line ", line, ": the character with code point ", cp,
            " stands for no byte in GPT-2's byte encoding");
}

void skip_space(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
}

// A flat JSON object of string -> non-negative integer, as encoder.json is: calls
// entry(key, value) for each member in order.
template <typename Entry>
void parse_flat_object(std::string_view s, const char* file, const Entry& entry) {
  size_t i = 0;
  skip_space(s, i);
  QKV_CHECK(i < s.size() && s[i] == '{', file, ": expected a JSON object");
  ++i;
  skip_space(s, i);
  if (i < s.size() && s[i] == '}') return;
  for (;;) {
    skip_space(s, i);
    const std::string key = parse_json_string(s, i, file);
    skip_space(s, i);
    QKV_CHECK(i < s.size() && s[i] == ':', file, ": expected ':' at byte ", i);
    ++i;
    skip_space(s, i);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    QKV_CHECK(ec == std::errc() && v >= 0, file, ": expected a non-negative integer at byte ", i);
    i = static_cast<size_t>(p - s.data());
    entry(key, v);
    skip_space(s, i);
    QKV_CHECK(i < s.size(), file, ": the object is not closed");
    if (s[i] == '}') break;
    QKV_CHECK(s[i] == ',', file, ": expected ',' or '}' at byte ", i);
    ++i;
  }
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0) return false;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '=') {
      if (i + 2 < in.size()) return false;
      ++pad;
      continue;
    }
    if (pad > 0) return false;
    const int v = base64_value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return pad <= 2;
}

}  // namespace

std::vector<std::pair<std::string, TokenId>> data_gym_to_mergeable_ranks(std::string_view vocab_bpe,
                                                                        std::string_view encoder_json) {
  const std::array<uint8_t, 256>& order = byte_level_order();
  std::vector<std::pair<std::string, TokenId>> ranks;
  ranks.reserve(50257);
  for (int r = 0; r < 256; ++r) ranks.emplace_back(std::string(1, static_cast<char>(order[static_cast<size_t>(r)])), r);

  // tiktoken: vocab_bpe.split("\n")[1:-1] -- the first line is "#version: ...", the last is empty
  std::vector<std::string_view> lines;
  for (size_t start = 0;;) {
    const size_t nl = vocab_bpe.find('\n', start);
    lines.push_back(vocab_bpe.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  TokenId next = 256;
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  for (size_t l = 1; l + 1 < lines.size(); ++l) {
    // merge_str.split(): exactly two words
    const std::string_view line = lines[l];
    std::string_view words[2];
    size_t count = 0;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && is_space(line[i])) ++i;
      const size_t start = i;
      while (i < line.size() && !is_space(line[i])) ++i;
      if (i > start) {
        if (count < 2) words[count] = line.substr(start, i - start);
        ++count;
      }
    }
    QKV_CHECK(count == 2, "vocab.bpe line ", l + 1, ": expected two tokens (a merge), got ", count);
    std::string bytes;
    decode_data_gym(words[0], "vocab.bpe", l + 1, bytes);
    decode_data_gym(words[1], "vocab.bpe", l + 1, bytes);
    ranks.emplace_back(std::move(bytes), next++);
  }

  // encoder.json must hold exactly these, besides <|endoftext|> and <|startoftext|>. The ranks are
  // 0..n-1 in order, so ranks[v] is the token of rank v.
  std::vector<uint8_t> seen(ranks.size(), 0);
  size_t matched = 0;
  std::string bytes;
  parse_flat_object(encoder_json, "encoder.json", [&](const std::string& key, int64_t value) {
    if (key == "<|endoftext|>" || key == "<|startoftext|>") return;
    bytes.clear();
    decode_data_gym(key, "encoder.json", 1, bytes);
    const bool in_range = value >= 0 && static_cast<size_t>(value) < ranks.size();
    QKV_CHECK(in_range && ranks[static_cast<size_t>(value)].first == bytes && !seen[static_cast<size_t>(value)],
              "encoder.json and vocab.bpe disagree: encoder.json has ", excerpt(key), " = ", value, ", but vocab.bpe ",
              in_range ? "gives rank " + std::to_string(value) + " to another token" : std::string("makes no such rank"));
    seen[static_cast<size_t>(value)] = 1;
    ++matched;
  });
  QKV_CHECK(matched == ranks.size(), "encoder.json and vocab.bpe disagree: encoder.json has ", matched,
            " mergeable tokens, vocab.bpe makes ", ranks.size());
  return ranks;
}

std::vector<std::pair<std::string, TokenId>> parse_tiktoken_ranks(std::string_view contents, const std::string& what) {
  std::vector<std::pair<std::string, TokenId>> ranks;
  size_t line_no = 0;
  std::string bytes;
  for (size_t start = 0; start < contents.size();) {
    size_t nl = contents.find('\n', start);
    if (nl == std::string_view::npos) nl = contents.size();
    std::string_view line = contents.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    QKV_CHECK(space != std::string_view::npos, what, " line ", line_no,
              ": expected \"<base64 token> <rank>\", got ", excerpt(line));
    std::string_view b64 = line.substr(0, space), rank_text = line.substr(space + 1);
    QKV_CHECK(base64_decode(b64, bytes) && !bytes.empty(), what, " line ", line_no, ": ", excerpt(b64), " is not base64 of a token");
    TokenId rank = -1;
    auto [p, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    QKV_CHECK(ec == std::errc() && p == rank_text.data() + rank_text.size() && rank >= 0, what, " line ", line_no,
              ": ", excerpt(rank_text), " is not a rank (a non-negative integer)");
    ranks.emplace_back(bytes, rank);
  }
  QKV_CHECK(!ranks.empty(), what, ": no ranks in the file");
  return ranks;
}

}  // namespace qkv
