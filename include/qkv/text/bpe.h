// qkv/text/bpe.h - byte-level BPE encodings with tiktoken's semantics; GPT-2's is qkv::load_gpt2().
//
//   Encoding gpt2 = load_gpt2();                       // vocab_files.h: finds and verifies the files
//   gpt2.encode("Your journey starts with one step.")  // [7120, 7002, 4940, 351, 530, 2239, 13]
//   gpt2.decode(std::vector<TokenId>{7120, 7002})      // "Your journey"
//   gpt2.encode("<|endoftext|>")                       // Error: disallowed special token
//   gpt2.encode("<|endoftext|>", SpecialTokens::all()) // [50256]
//   gpt2.encode("<|endoftext|>", SpecialTokens::none(), SpecialTokens::none())  // as plain text
//
// Encoding, as tiktoken's CoreBPE does it:
//   1. special tokens: the text is cut at every allowed special token (leftmost first; the longest
//      when two start at the same place), which becomes its id; the text between is encoded alone,
//      so a pattern's look-ahead never sees across a special token;
//   2. each stretch is split into pieces by the encoding's pattern (pretokenize.h);
//   3. a piece that is a token in itself is that token; any other is byte-pair merged (lowest rank
//      first, leftmost among equals) and the result cached per thread.
// allowed_special / disallowed_special follow tiktoken.Encoding.encode: the defaults allow no special
// token and disallow all, so text that spells one is an error naming it; "all" allows every special
// token; a special token neither allowed nor disallowed is encoded as the plain text it is. Naming a
// token that is not a special token of the encoding is an error (tiktoken ignores it silently).
//
// Text that is not well-formed UTF-8 is first repaired as Python's bytes.decode("utf-8",
// "replace") does (utf8.h: each maximal ill-formed subpart -> U+FFFD), then encoded: the ids are
// those tiktoken gives for the decoded string. Encoding never fails on bad bytes.
//
// Decoding joins the tokens' bytes; decode() then repairs them as errors="replace" does (a token
// can end inside a multi-byte character), decode_bytes() returns them as they are. An id that is not
// in the vocabulary is an error naming it.
//
// An Encoding is immutable, cheap to copy (shared), and safe to use from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/core/error.h"

namespace qkv {

using TokenId = int64_t;  // as torch.long, what embeddings and the data loader take

// tiktoken's allowed_special / disallowed_special argument: "all", or a set of special tokens.
struct SpecialTokens {
  bool is_all = false;
  std::vector<std::string> tokens;  // when !is_all

  static SpecialTokens all() { return {true, {}}; }
  static SpecialTokens none() { return {false, {}}; }
  static SpecialTokens only(std::vector<std::string> tokens) { return {false, std::move(tokens)}; }
  // "all", "none" (or ""), or tokens separated by commas: "<|endoftext|>,<|fim_prefix|>".
  static SpecialTokens parse(std::string_view spec);
};

// What an encoding is made of (tiktoken.Encoding's constructor arguments).
struct EncodingSpec {
  std::string name;
  std::string pattern;                                       // pre-tokenisation regex
  std::vector<std::pair<std::string, TokenId>> mergeable_ranks;  // token bytes -> rank
  std::vector<std::pair<std::string, TokenId>> special_tokens;   // token text -> id
  int64_t explicit_n_vocab = -1;                             // if >= 0, checked as tiktoken does
};

// The text holds a special token that encode was told to refuse (tiktoken's ValueError).
class DisallowedSpecialError : public Error {
 public:
  DisallowedSpecialError(std::string token, size_t at, TokenId id);
  std::string token;  // e.g. "<|endoftext|>"
  size_t at;          // its first byte in the text
  TokenId id;         // its id, had it been allowed
};

// The ids of a batch of texts (Encoding::encode_batch_into) in one buffer per worker thread:
// ids(i) is text i's. Filling it again keeps its memory.
class TokenBatch {
 public:
  size_t size() const { return where_.size(); }
  std::span<const TokenId> ids(size_t i) const {
    const Where& w = where_[i];
    return {buffers_[w.buffer].data() + w.begin, w.count};
  }

 private:
  friend class Encoding;
  struct Where {
    size_t buffer = 0, begin = 0, count = 0;
  };
  std::vector<std::vector<TokenId>> buffers_;  // one per worker
  std::vector<Where> where_;
};

class Encoding {
 public:
  // Checks the spec: ranks and ids distinct and in 0..2^32-2, every single byte a token, the
  // pattern valid, n_vocab as stated. Errors say which entry is wrong.
  explicit Encoding(EncodingSpec spec);

  const std::string& name() const;
  const std::string& pattern() const;
  int64_t n_vocab() const;            // the largest id + 1 (GPT-2: 50257)
  TokenId eot_token() const;          // the id of <|endoftext|> (GPT-2: 50256); fails if there is none
  std::vector<std::string> special_tokens_set() const;  // sorted
  const char* pretokenizer_engine() const;              // "gpt2-scanner", "pcre2-jit", ...

  std::vector<TokenId> encode(std::string_view text, const SpecialTokens& allowed_special = SpecialTokens::none(),
                              const SpecialTokens& disallowed_special = SpecialTokens::all()) const;
  std::vector<TokenId> encode_ordinary(std::string_view text) const;  // special tokens as plain text
  // The id of a text that is exactly one token (mergeable or special); fails otherwise.
  TokenId encode_single_token(std::string_view token) const;

  // texts encoded on `threads` threads (0: one per hardware thread; never more than
  // limits().max_threads nor than there are texts), results in order; equal to
  // encoding each in turn. An error names the text (1-based) it came from.
  std::vector<std::vector<TokenId>> encode_batch(const std::vector<std::string>& texts, int threads = 0,
                                                 const SpecialTokens& allowed_special = SpecialTokens::none(),
                                                 const SpecialTokens& disallowed_special = SpecialTokens::all()) const;
  std::vector<std::vector<TokenId>> encode_ordinary_batch(const std::vector<std::string>& texts,
                                                          int threads = 0) const;
  // encode_batch into a TokenBatch, whose buffers a caller that keeps it reuses from call to call
  // (no allocation per text); texts are views (for a binding that has the bytes already).
  void encode_batch_into(std::span<const std::string_view> texts, TokenBatch& out, int threads = 0,
                         const SpecialTokens& allowed_special = SpecialTokens::none(),
                         const SpecialTokens& disallowed_special = SpecialTokens::all()) const;

  std::string decode(std::span<const TokenId> ids) const;        // errors="replace"
  std::string decode_bytes(std::span<const TokenId> ids) const;  // the raw bytes
  std::string decode_single_token_bytes(TokenId id) const;
  std::vector<std::string> decode_tokens_bytes(std::span<const TokenId> ids) const;
  bool is_special_token(TokenId id) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv
