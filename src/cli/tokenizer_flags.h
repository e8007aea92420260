// The flags qkv encode, decode and tokens share: which vocabulary, which special tokens, which input.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "qkv/text/bpe.h"

namespace qkv::cli {

struct VocabFlags {
  std::string vocab_dir;           // GPT-2's encoder.json + vocab.bpe
  std::string ranks;               // or a tiktoken rank file ...
  std::string pattern;             // ... with this pattern (default GPT-2's) ...
  std::vector<std::string> special;  // ... and these special tokens, TOKEN=ID
};

void add_vocab_flags(CLI::App* sub, VocabFlags& f);
Encoding load_encoding(const VocabFlags& f);

struct SpecialFlags {
  std::string allowed = "none", disallowed = "all";
};
void add_special_flags(CLI::App* sub, SpecialFlags& f);

// The text of --text T or --file F ("-": standard input), or standard input when neither is given.
std::string read_text_input(const CLI::App& sub, const std::string& text, const std::string& file);
std::string read_stdin();

// "Your" -> "\"Your\"": quoted, with control characters, quotes, backslashes and bytes that are not
// valid UTF-8 escaped (\n, \", \\, \x9f), so every byte of a token shows.
std::string quote_bytes(std::string_view bytes);

}  // namespace qkv::cli
