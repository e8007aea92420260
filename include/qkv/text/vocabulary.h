// qkv/text/vocabulary.h - a vocabulary by where it comes from, behind one face: GPT-2's encoder.json
// and vocab.bpe, a tiktoken rank file with its pattern and special tokens (Llama 3's
// tokenizer.model), or a Hugging Face tokenizer.json (Qwen3's, Llama 3's). What qkv encode, decode
// and tokens read text with.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/text/bpe.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv {

struct VocabularySource {
  std::string tokenizer;             // a tokenizer.json, its folder, or an installed one's name; else below
  std::string vocab_dir;             // GPT-2's encoder.json + vocab.bpe ("": searched, text/vocab_files.h)
  std::string ranks;                 // or a tiktoken rank file ...
  std::string pattern;               // ... with this pattern (default GPT-2's) ...
  std::vector<std::string> special;  // ... and these special tokens, TOKEN=ID
};

// The tiktoken-style Encoding of a source without `tokenizer`: GPT-2's, or the rank file's. Errors
// name the flag-like field that says what is wrong (--vocab-dir, --ranks, --special).
Encoding load_encoding(const VocabularySource& s);

class Vocabulary {
 public:
  explicit Vocabulary(const VocabularySource& s);
  // allowed / disallowed: tiktoken's allowed_special / disallowed_special ("all", "none", or a
  // comma-separated list); a tokenizer.json matches its added tokens wherever the text spells them.
  std::vector<TokenId> encode(const std::string& text, const std::string& allowed = "none",
                              const std::string& disallowed = "all") const;
  // Texts on `threads` threads (0: the default pool), in order.
  std::vector<std::vector<TokenId>> encode_batch(const std::vector<std::string>& texts, int threads,
                                                 const std::string& allowed = "none",
                                                 const std::string& disallowed = "all") const;
  std::string decode(const std::vector<TokenId>& ids, bool raw_bytes = false) const;
  std::string token_bytes(TokenId id) const;
  bool is_special(TokenId id) const;
  std::string name() const;
  bool is_tokenizer_json() const { return hf_.has_value(); }

 private:
  std::optional<Encoding> tiktoken_;
  std::optional<HfTokenizer> hf_;
  std::string hf_path_;
};

// "Your" -> "\"Your\"": quoted, with control characters, quotes, backslashes and bytes that are not
// valid UTF-8 escaped (\n, \", \\, \x9f), so every byte of a token shows.
std::string quote_bytes(std::string_view bytes);

}  // namespace qkv
