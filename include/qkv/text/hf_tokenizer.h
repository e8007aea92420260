// qkv/text/hf_tokenizer.h - Hugging Face's tokenizer.json for byte-level BPE (Qwen3's, Llama 3's,
// GPT-2's), encoding and decoding as Hugging Face's tokenizers library does.
//
//   HfTokenizer t = HfTokenizer::load("Qwen3-0.6B/tokenizer.json");   // or the folder
//   t.encode("Hello<|im_end|>")          // [9707, 151645]: added tokens are matched in the text
//   t.decode(ids)                        // the text; decode(ids, true) leaves special tokens out
//
// Encoding (encode() adds no template's tokens; prefix() names those a model reads before a text,
// the post-processor's: Llama 3's <|begin_of_text|>; chat formats add their tokens themselves):
//   1. added tokens (added_tokens): the text is cut at each occurrence of one, leftmost first, the
//      longest where two start together; each becomes its id (lstrip / rstrip take the whitespace
//      before / after it too); the text between is encoded alone. With AddedTokens::kPlain the
//      special ones are not matched: a user's text that spells <|im_end|> stays that text;
//   2. the normalizer: none, or NFC (utf8proc);
//   3. the pre-tokenizer: a Split by a regex with behaviour "Isolated" (each match a piece, and
//      text between matches a piece too; PCRE2), or ByteLevel with use_regex (GPT-2's pattern);
//      then each piece's bytes spelled in the byte-level alphabet (byte_level.h);
//   4. the model, BPE with merges: a piece that is a token in itself is that token when
//      ignore_merges is set; otherwise its bytes are merged pair by pair, the pair earliest in
//      `merges` first, leftmost among equals, until no adjacent pair is a merge.
// Text that is not well-formed UTF-8 is first repaired (utf8::replace_invalid).
//
// Decoding: an added token is its content; any other id its bytes; decode() repairs the joined
// bytes as errors="replace" (a token may end inside a character). An id in neither (a model's
// embedding rows beyond the tokenizer's: Qwen3 has 151,936, its tokenizer.json 151,669) is no text,
// as Hugging Face decodes it; a negative id is an error.
//
// Time and memory are linear in the text (merges n log n) and in the file: tables are sized by the
// entries the file holds, not by the largest id it names; an added token is at most
// kMaxAddedTokenBytes long, Sequences of pre-tokenizers nest at most 16 deep.
//
// Two readers, one engine: HfTokenizer::parse reads a tokenizer.json (text/hf_tokenizer_json.h),
// gguf_tokenizer_parts GGUF's tokenizer.ggml.* (models/gguf_model.h); each hands the same
// HfTokenizerParts to HfTokenizer::build, which checks them (every token spelled in the
// byte-level alphabet, all 256 bytes, no id twice, merges of two tokens making a third, added
// tokens' lengths and ids) and makes the tables.
//
// The post-processor: none, ByteLevel (offsets only), or TemplateProcessing whose `single` template
// puts special tokens before the text ($A) and none after (alone or in a Sequence of them).
// What else a tokenizer.json may hold (another model type, WordPiece or Unigram, a byte fallback, a
// normalizer, pre-tokenizer or post-processor other than these) is refused at load with the field's name, as are
// merges naming tokens that are not in the vocabulary. An HfTokenizer is immutable, cheap to copy
// (shared), and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/text/bpe.h"

namespace qkv {

struct HfAddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;  // decode(ids, true) leaves it out
  bool lstrip = false, rstrip = false;
};

// A byte-level BPE tokenizer as its file describes it, before it is checked (HfTokenizer::build).
struct HfTokenizerParts {
  struct Token {
    std::string text;  // spelled in the byte-level alphabet
    TokenId id = 0;
  };
  std::vector<Token> vocab;                                 // in the file's order
  std::vector<std::pair<std::string, std::string>> merges;  // (left, right), the earliest first
  std::vector<HfAddedToken> added;                          // in the file's order
  std::string pattern;         // the pre-tokenizer's regex (then each piece spelled byte by byte)
  bool nfc = false;            // the normalizer: NFC, or none
  bool ignore_merges = false;  // a piece that is a token is that token, unmerged
  // The ids a text gets before it when a model reads it (Llama 3's <|begin_of_text|>): the
  // post-processor's template (tokenizer.json) or add_bos_token (GGUF). encode() does not add them;
  // prefix() gives them to the model's reader (models/tokenizer.h's prompt_prefix).
  std::vector<TokenId> prefix;
  // Errors name the lists so: tokenizer.json's fields, or GGUF's keys.
  std::string vocab_name = "model.vocab", merges_name = "model.merges", added_name = "added_tokens";
  std::string prefix_name = "post_processor";
};

// Which added tokens encode() matches in the text: all, or only those that are not special.
enum class AddedTokens { kAll, kPlain };

class HfTokenizer {
 public:
  static constexpr size_t kMaxAddedTokenBytes = 1024;

  // path: a tokenizer.json, or a folder holding one; or the name of an installed vocabulary
  // (qwen3, llama3: vocab_files.h's kHfVocabs, verified by SHA-256) when no such path exists.
  static HfTokenizer load(const std::string& path);
  // The text of the tokenizer.json `path` names, found as load finds it, and the file it came from.
  struct File {
    std::string text, file;
  };
  static File read(const std::string& path);
  // The text of a tokenizer.json; `where` names it in errors.
  static HfTokenizer parse(std::string_view json, const std::string& where);
  // The tokenizer `parts` describe, checked (qkv::Error naming `where`, the list and the entry).
  static HfTokenizer build(HfTokenizerParts parts, const std::string& where);

  std::vector<TokenId> encode(std::string_view text, AddedTokens match = AddedTokens::kAll) const;
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;
  std::string decode_bytes(std::span<const TokenId> ids, bool skip_special = false) const;
  std::string token_text(TokenId id) const;  // one token decoded (repaired)

  int64_t vocab_size() const;  // the largest id + 1, of the vocabulary and the added tokens
  bool has_token(TokenId id) const;  // in the vocabulary or an added token
  const std::vector<HfAddedToken>& added_tokens() const;
  std::optional<TokenId> added_token(std::string_view content) const;
  const std::string& pattern() const;         // the pre-tokenizer's regex
  const std::string& normalizer() const;      // "none" or "NFC"
  // The ids a model reads before a text (HfTokenizerParts::prefix): Hugging Face's tokenizer(text)
  // and llama.cpp add them; encode() does not.
  const std::vector<TokenId>& prefix() const;

  struct Impl;

 private:
  explicit HfTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv
