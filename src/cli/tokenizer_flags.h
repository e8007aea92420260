// The flags qkv encode, decode and tokens share: which vocabulary, which special tokens, which input.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include <optional>

#include "qkv/text/vocabulary.h"

namespace qkv::cli {

// --tokenizer, --vocab-dir, --ranks, --pattern, --special: a vocabulary's source (text/vocabulary.h).
using VocabFlags = VocabularySource;

void add_vocab_flags(CLI::App* sub, VocabFlags& f);

struct SpecialFlags {
  std::string allowed = "none", disallowed = "all";
};
void add_special_flags(CLI::App* sub, SpecialFlags& f);

// The vocabulary the flags name (--tokenizer refuses the tiktoken-style flags beside it).
Vocabulary vocabulary_of(const VocabFlags& f, const CLI::App& sub);

// The text of --text T or --file F ("-": standard input), or standard input when neither is given.
std::string read_text_input(const CLI::App& sub, const std::string& text, const std::string& file);
std::string read_stdin();

}  // namespace qkv::cli
