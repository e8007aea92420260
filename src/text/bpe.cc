// Encoding: construction and checks, encode with tiktoken's special-token rules, decode.
#include "qkv/text/bpe.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "bpe_merge.h"
#include "encoding_impl.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/text/hex.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

using bpe_detail::kNoRank;
using bpe_detail::Rank;

constexpr int64_t kMaxId = (int64_t{1} << 31) - 1;

std::atomic<uint64_t> next_uid{1};

// Each thread's piece cache and buffers, for the last encoding it served.
struct ThreadScratch {
  uint64_t owner = 0;
  bpe_detail::PieceCache cache;
  std::vector<std::string_view> pieces;
  std::vector<Rank> merged;
};

ThreadScratch& scratch_for(uint64_t uid) {
  thread_local ThreadScratch s;
  if (s.owner != uid) {
    s.cache.clear();
    s.owner = uid;
  }
  return s;
}

std::string printable(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      append_hex(out, c);
    }
  }
  return out;
}

std::string list_specials(const std::vector<std::pair<std::string, Rank>>& specials) {
  if (specials.empty()) return "(none)";
  std::string s;
  for (const auto& [text, id] : specials) s += (s.empty() ? "" : ", ") + text;
  return s;
}

}  // namespace

SpecialTokens SpecialTokens::parse(std::string_view spec) {
  if (spec == "all") return all();
  if (spec == "none" || spec.empty()) return none();
  SpecialTokens s;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    if (comma > start) s.tokens.emplace_back(spec.substr(start, comma - start));
    start = comma + 1;
  }
  return s;
}

Encoding::Encoding(EncodingSpec spec) {
  auto impl = std::make_shared<Impl>();
  impl->name = spec.name;
  impl->pattern = spec.pattern;
  impl->uid = next_uid.fetch_add(1);
  const std::string who = "encoding " + (spec.name.empty() ? std::string("(unnamed)") : spec.name);
  impl->pretokenizer = make_pretokenizer(spec.pattern);

  int64_t max_id = -1;
  auto check_id = [&](TokenId id, const std::string& token, const char* kind) {
    QKV_CHECK(id >= 0 && id <= kMaxId, who, ": the ", kind, " token \"", printable(token), "\" has id ", id,
              ", outside 0..", kMaxId);
    QKV_CHECK(!token.empty(), who, ": a ", kind, " token with id ", id, " is empty");
    max_id = std::max(max_id, id);
  };
  for (const auto& [bytes, id] : spec.mergeable_ranks) check_id(id, bytes, "mergeable");
  for (const auto& [text, id] : spec.special_tokens) check_id(id, text, "special");
  QKV_CHECK(max_id >= 0, who, ": the vocabulary is empty");

  auto add_token = [&](const std::string& bytes, TokenId id, bool special) {
    const auto i = static_cast<size_t>(id);
    QKV_CHECK(impl->token_length[i] == Impl::kAbsent, who, ": id ", id, " is given to both \"",
              printable(std::string_view(impl->token_bytes).substr(impl->token_offset[i], impl->token_length[i])),
              "\" and \"", printable(bytes), "\"");
    QKV_CHECK(impl->token_bytes.size() + bytes.size() < UINT32_MAX, who, ": the tokens' bytes exceed 4 GiB");
    impl->token_offset[i] = static_cast<uint32_t>(impl->token_bytes.size());
    impl->token_length[i] = static_cast<uint32_t>(bytes.size());
    impl->token_is_special[i] = special;
    impl->token_bytes += bytes;
  };

  impl->ranks.reserve(spec.mergeable_ranks.size());
  for (const auto& [bytes, id] : spec.mergeable_ranks) {
    QKV_CHECK(impl->ranks.insert(bytes, static_cast<Rank>(id)), who, ": the token \"", printable(bytes),
              "\" appears twice (ranks ", impl->ranks.find(bytes), " and ", id, ")");
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    impl->byte_rank[b] = impl->ranks.find(&c, 1);
    QKV_CHECK(impl->byte_rank[b] != kNoRank, who, ": the single byte ", b, " is not a token; byte-level BPE ",
              "needs all 256");
  }

  // The id -> bytes tables have a slot for every id up to the largest, so ids may be sparse (as
  // tiktoken allows) but a file of 300 tokens with a rank of 4e9 would ask for 36 GB: a memory request.
  const std::string tables = who + "'s table of ids 0.." + std::to_string(max_id);
  check_memory_request(checked_bytes(max_id + 1, 2 * sizeof(uint32_t) + sizeof(uint8_t), tables.c_str()),
                       tables.c_str());
  impl->n_vocab = max_id + 1;
  impl->token_offset.assign(static_cast<size_t>(impl->n_vocab), 0);
  impl->token_length.assign(static_cast<size_t>(impl->n_vocab), Impl::kAbsent);
  impl->token_is_special.assign(static_cast<size_t>(impl->n_vocab), 0);
  for (const auto& [bytes, id] : spec.mergeable_ranks) add_token(bytes, id, false);
  std::map<std::string, Rank> specials;
  for (const auto& [text, id] : spec.special_tokens) {
    QKV_CHECK(specials.emplace(text, static_cast<Rank>(id)).second, who, ": the special token ", text,
              " appears twice");
    add_token(text, id, true);
  }
  impl->specials.assign(specials.begin(), specials.end());
  for (size_t k = 0; k < impl->specials.size(); ++k)
    if (!impl->specials[k].first.empty()) impl->special_trie.add(impl->specials[k].first, static_cast<int32_t>(k));

  if (spec.explicit_n_vocab >= 0) {
    const auto count = static_cast<int64_t>(spec.mergeable_ranks.size() + spec.special_tokens.size());
    QKV_CHECK(count == spec.explicit_n_vocab, who, ": ", spec.mergeable_ranks.size(), " mergeable and ",
              spec.special_tokens.size(), " special tokens make ", count, ", not the stated n_vocab ",
              spec.explicit_n_vocab);
    QKV_CHECK(max_id == spec.explicit_n_vocab - 1, who, ": the largest id is ", max_id, ", not n_vocab - 1 = ",
              spec.explicit_n_vocab - 1);
  }
  impl_ = std::move(impl);
}

const std::string& Encoding::name() const { return impl_->name; }
const std::string& Encoding::pattern() const { return impl_->pattern; }
int64_t Encoding::n_vocab() const { return impl_->n_vocab; }
const char* Encoding::pretokenizer_engine() const { return impl_->pretokenizer->engine(); }

TokenId Encoding::eot_token() const {
  for (const auto& [text, id] : impl_->specials)
    if (text == "<|endoftext|>") return id;
  fail("encoding ", impl_->name, " has no <|endoftext|> token (its special tokens: ", list_specials(impl_->specials),
       ")");
}

std::vector<std::string> Encoding::special_tokens_set() const {
  std::vector<std::string> out;
  for (const auto& [text, id] : impl_->specials) out.push_back(text);
  return out;
}

bool Encoding::is_special_token(TokenId id) const {
  return id >= 0 && id < impl_->n_vocab && impl_->token_is_special[static_cast<size_t>(id)];
}

// --- encoding -------------------------------------------------------------------------------

void Encoding::Impl::encode_ordinary_into(std::string_view text, std::vector<TokenId>& out) const {
  ThreadScratch& s = scratch_for(uid);
  size_t pos = 0;
  while (pos < text.size()) {
    s.pieces.clear();
    pos = pretokenizer->split(text, pos, s.pieces, 1024);
    for (std::string_view piece : s.pieces) {
      if (piece.empty()) continue;  // an empty match: nothing to encode
      if (piece.size() == 1) {
        out.push_back(byte_rank[static_cast<uint8_t>(piece[0])]);
        continue;
      }
      const Rank r = ranks.find(piece.data(), piece.size());
      if (r != kNoRank) {
        out.push_back(r);
        continue;
      }
      size_t n = 0;
      if (const Rank* cached = s.cache.find(piece, &n)) {
        out.insert(out.end(), cached, cached + n);
        continue;
      }
      s.merged.clear();
      bpe_detail::byte_pair_encode(ranks, byte_rank, piece, s.merged);
      s.cache.insert(piece, s.merged.data(), s.merged.size());
      out.insert(out.end(), s.merged.begin(), s.merged.end());
    }
  }
}

// Special tokens are found by one walk of special_trie per position (token_trie.h): the leftmost
// occurrence of any that counts, the longest of those starting there, in time linear in the text
// (times the longest special token), however many special tokens there are.
void Encoding::Impl::encode_into(std::string_view text, const SpecialSet& allowed, std::vector<TokenId>& out) const {
  if (!allowed.any) return encode_ordinary_into(text, out);
  auto counts = [&](int32_t k) { return allowed.in[static_cast<size_t>(k)] != 0; };
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [at, k] = special_trie.find(text, pos, counts);
    encode_ordinary_into(text.substr(pos, at - pos), out);
    if (k < 0) break;
    const auto& [token, id] = specials[static_cast<size_t>(k)];
    out.push_back(id);
    pos = at + token.size();
  }
}

void Encoding::Impl::resolve_specials(const SpecialTokens& allowed, const SpecialTokens& disallowed,
                                      SpecialSet& allowed_out, SpecialSet& disallowed_out) const {
  auto lookup = [&](const std::string& text, const char* which) -> size_t {
    auto it = std::lower_bound(specials.begin(), specials.end(), text,
                               [](const auto& e, const std::string& t) { return e.first < t; });
    QKV_CHECK(it != specials.end() && it->first == text, "encode: \"", printable(text), "\" in ", which,
              " is not a special token of ", name, " (its special tokens: ", list_specials(specials), ")");
    return static_cast<size_t>(it - specials.begin());
  };
  allowed_out.in.assign(specials.size(), allowed.is_all ? 1 : 0);
  if (!allowed.is_all)
    for (const std::string& t : allowed.tokens) allowed_out.in[lookup(t, "allowed_special")] = 1;
  disallowed_out.in.assign(specials.size(), 0);
  if (disallowed.is_all) {
    for (size_t k = 0; k < specials.size(); ++k) disallowed_out.in[k] = allowed_out.in[k] ? 0 : 1;
  } else {
    for (const std::string& t : disallowed.tokens) disallowed_out.in[lookup(t, "disallowed_special")] = 1;
  }
  auto any = [](const std::vector<uint8_t>& v) { return std::find(v.begin(), v.end(), 1) != v.end(); };
  allowed_out.any = any(allowed_out.in);
  disallowed_out.any = any(disallowed_out.in);
}

void Encoding::Impl::check_disallowed(std::string_view text, const SpecialSet& disallowed) const {
  if (!disallowed.any) return;
  const auto [at, k] =
      special_trie.find(text, 0, [&](int32_t v) { return disallowed.in[static_cast<size_t>(v)] != 0; });
  if (k < 0) return;
  const auto& [token, id] = specials[static_cast<size_t>(k)];
  throw DisallowedSpecialError(token, at, id);
}

DisallowedSpecialError::DisallowedSpecialError(std::string token_, size_t at_, TokenId id_)
    : Error(str("encode: the text contains the special token ", token_, " (at byte ", at_,
                "), which is disallowed. To encode it as the special token (id ", id_,
                "), put it in allowed_special (or allow all); to encode it as plain text, disallow none ",
                "(allowed_special / disallowed_special, as in tiktoken)")),
      token(std::move(token_)),
      at(at_),
      id(id_) {}

std::vector<TokenId> Encoding::encode(std::string_view text, const SpecialTokens& allowed_special,
                                      const SpecialTokens& disallowed_special) const {
  Impl::SpecialSet allowed, disallowed;
  impl_->resolve_specials(allowed_special, disallowed_special, allowed, disallowed);
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::replace_invalid(text);
    text = repaired;
  }
  impl_->check_disallowed(text, disallowed);
  std::vector<TokenId> out;
  out.reserve(text.size() / 4 + 8);
  impl_->encode_into(text, allowed, out);
  return out;
}

std::vector<TokenId> Encoding::encode_ordinary(std::string_view text) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::replace_invalid(text);
    text = repaired;
  }
  std::vector<TokenId> out;
  out.reserve(text.size() / 4 + 8);
  impl_->encode_ordinary_into(text, out);
  return out;
}

TokenId Encoding::encode_single_token(std::string_view token) const {
  const Rank r = impl_->ranks.find(token.data(), token.size());
  if (r != kNoRank) return r;
  for (const auto& [text, id] : impl_->specials)
    if (text == token) return id;
  fail("encode_single_token: \"", printable(token), "\" is not a single token of ", impl_->name);
}

// --- decoding -------------------------------------------------------------------------------

std::string_view Encoding::Impl::bytes_of(TokenId id, const char* caller) const {
  const bool known = id >= 0 && id < n_vocab && token_length[static_cast<size_t>(id)] != kAbsent;
  QKV_CHECK(known, caller, ": token id ", id, " is not in the vocabulary of ", name, " (ids 0..", n_vocab - 1,
            id >= 0 && id < n_vocab ? "; this one is unassigned" : "", ")");
  const auto i = static_cast<size_t>(id);
  return std::string_view(token_bytes).substr(token_offset[i], token_length[i]);
}

std::string Encoding::decode_bytes(std::span<const TokenId> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (TokenId id : ids) out += impl_->bytes_of(id, "decode");
  return out;
}

std::string Encoding::decode(std::span<const TokenId> ids) const {
  std::string bytes = decode_bytes(ids);
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::replace_invalid(bytes);
}

std::string Encoding::decode_single_token_bytes(TokenId id) const {
  return std::string(impl_->bytes_of(id, "decode_single_token_bytes"));
}

std::vector<std::string> Encoding::decode_tokens_bytes(std::span<const TokenId> ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (TokenId id : ids) out.emplace_back(impl_->bytes_of(id, "decode_tokens_bytes"));
  return out;
}

}  // namespace qkv
