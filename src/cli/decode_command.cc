// qkv decode [IDS...] [--bytes] [--vocab-dir D | --ranks F ...]
//
// Reads token ids (a JSON array, or numbers separated by spaces or commas) from the arguments or,
// without any, from standard input, and prints the text they decode to.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "standard_output.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/json_read.h"
#include "tokenizer_flags.h"

namespace qkv::cli {
namespace {

struct DecodeFlags {
  std::vector<std::string> ids;
  bool raw_bytes = false;
  VocabFlags vocab;
};

std::vector<TokenId> parse_ids(const std::string& s) {
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
    const std::string word = s.substr(i, end == std::string::npos ? std::string::npos : end - i);
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

int run_decode(const DecodeFlags& f) {
  std::string input;
  for (const std::string& a : f.ids) input += a + " ";
  if (f.ids.empty()) input = read_stdin();
  const std::vector<TokenId> ids = parse_ids(input);
  const Encoding enc = load_encoding(f.vocab);
  std::string text = f.raw_bytes ? enc.decode_bytes(ids) : enc.decode(ids);
  if (::isatty(STDOUT_FILENO) && (text.empty() || text.back() != '\n')) text += '\n';
  write_stdout(text);
  return 0;
}

}  // namespace

Command add_decode(CLI::App& app) {
  auto f = std::make_shared<DecodeFlags>();
  CLI::App* sub = app.add_subcommand("decode", "GPT-2 token ids back to text");
  sub->add_option("ids", f->ids,
                  "Token ids: a JSON array ('[7120, 7002]') or integers ('7120 7002'); default: read them from "
                  "standard input");
  sub->add_flag("--bytes", f->raw_bytes,
                "Write the tokens' bytes as they are (default: invalid UTF-8 replaced by U+FFFD, as Python's "
                "errors='replace')");
  add_vocab_flags(sub, f->vocab);
  sub->footer(
      "The text is written exactly, with no newline added, so `qkv encode --file F | qkv decode` gives F back\n"
      "(for valid UTF-8); on a terminal a final newline is added for readability.\n"
      "An id outside the vocabulary is an error that names it.");
  return {sub, [f]() { return run_decode(*f); }};
}

}  // namespace qkv::cli
