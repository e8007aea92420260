// The flags qkv encode, decode and tokens share: which vocabulary, which special tokens, which input.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include <optional>

#include "qkv/text/bpe.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv::cli {

struct VocabFlags {
  std::string tokenizer;           // a Hugging Face tokenizer.json (or its folder), instead of all below
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

// The vocabulary the flags name: a tiktoken-style Encoding (GPT-2's, or --ranks), or with
// --tokenizer a Hugging Face tokenizer.json, behind one face for encode, decode and tokens.
class CliTokenizer {
 public:
  // sub: the command, to refuse the flags that do not go with --tokenizer
  CliTokenizer(const VocabFlags& f, const CLI::App& sub);
  std::vector<TokenId> encode(const std::string& text, const SpecialFlags& s) const;
  std::vector<std::vector<TokenId>> encode_batch(const std::vector<std::string>& texts, int threads,
                                                 const SpecialFlags& s) const;
  std::string decode(const std::vector<TokenId>& ids, bool raw_bytes) const;
  std::string token_bytes(TokenId id) const;
  bool is_special(TokenId id) const;
  std::string name() const;

 private:
  std::optional<Encoding> tiktoken_;
  std::optional<HfTokenizer> hf_;
  std::string hf_path_;
};

// The text of --text T or --file F ("-": standard input), or standard input when neither is given.
std::string read_text_input(const CLI::App& sub, const std::string& text, const std::string& file);
std::string read_stdin();

// "Your" -> "\"Your\"": quoted, with control characters, quotes, backslashes and bytes that are not
// valid UTF-8 escaped (\n, \", \\, \x9f), so every byte of a token shows.
std::string quote_bytes(std::string_view bytes);

}  // namespace qkv::cli
