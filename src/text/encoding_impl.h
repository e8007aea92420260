// What an Encoding holds (private to src/text), and the per-thread scratch its encoder uses.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/text/bpe.h"
#include "qkv/text/pretokenize.h"
#include "token_table.h"
#include "token_trie.h"

namespace qkv {

struct Encoding::Impl {
  using Rank = bpe_detail::Rank;
  // Which special tokens count in one call: in[k] for specials[k].
  struct SpecialSet {
    std::vector<uint8_t> in;
    bool any = false;
  };

  std::string name, pattern;
  std::unique_ptr<Pretokenizer> pretokenizer;
  bpe_detail::TokenTable ranks;  // mergeable token bytes -> rank
  Rank byte_rank[256];           // the rank of each single byte
  // id -> bytes, for mergeable and special tokens alike; length kAbsent: no such id
  static constexpr uint32_t kAbsent = UINT32_MAX;
  std::vector<uint32_t> token_offset, token_length;
  std::vector<uint8_t> token_is_special;
  std::string token_bytes;
  std::vector<std::pair<std::string, Rank>> specials;  // sorted by text
  text_detail::TokenTrie special_trie;                 // value: index in specials
  int64_t n_vocab = 0;
  uint64_t uid = 0;  // tells apart the encodings a thread's cache has served

  // The encoder proper, on well-formed UTF-8; appends to out.
  void encode_ordinary_into(std::string_view text, std::vector<TokenId>& out) const;
  void encode_into(std::string_view text, const SpecialSet& allowed, std::vector<TokenId>& out) const;
  // allowed / disallowed resolved as tiktoken.Encoding.encode does; throws for unknown names.
  void resolve_specials(const SpecialTokens& allowed, const SpecialTokens& disallowed, SpecialSet& allowed_out,
                        SpecialSet& disallowed_out) const;
  // Throws if text holds a disallowed special token, naming the first.
  void check_disallowed(std::string_view text, const SpecialSet& disallowed) const;
  std::string_view bytes_of(TokenId id, const char* caller) const;
};

}  // namespace qkv
