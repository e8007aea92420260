// Hugging Face's byte-level BPE: the tables and the encoding. See include/qkv/text/hf_tokenizer.h
// (tokenizer.json's reader: hf_tokenizer_json.cc).
//
// Every step is linear in the text (or n log n): the merges by a heap over a piece's parts
// (hf_merges.h), NFC by a stable sort of each run of marks (nfc.h), the added tokens by one walk
// of a trie from each position (token_trie.h), at most kMaxAddedTokenBytes long. Tables are sized by the number of
// entries the file holds, never by the largest id it names.
//
// The vocabulary is held flat (a Qwen's 151,643 tokens in about 5 MB, where maps of strings took
// 22): its bytes one after another, entries sorted by id, and an open-addressed table of the entries
// by bytes.
#include "qkv/text/hf_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <functional>
#include <limits>
#include <unordered_map>

#include "hf_merges.h"
#include "nfc.h"
#include "token_trie.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"

namespace qkv {

using hf_detail::HfMerges;
using Rank = bpe_detail::Rank;

namespace {

// Hash and equality that take a std::string_view as well: lookups by a piece need no string copy.
struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using PieceMap = std::unordered_map<std::string, V, PieceHash, std::equal_to<>>;

// The vocabulary: each token's bytes by id, and its id by bytes.
class VocabTable {
 public:
  struct Entry {
    int32_t id;         // (ids are 0 .. 2^31 - 2)
    uint32_t at, size;  // its bytes in text_
  };
  // entries: (id, bytes), any order; ids distinct (checked by the caller). Of two equal byte
  // strings the first in `order` is found by id_of.
  void build(std::string text, std::vector<Entry> entries) {
    text_ = std::move(text);
    entries_ = std::move(entries);
    slots_.assign(std::bit_ceil(std::max<size_t>(2 * entries_.size(), 16)), -1);
    const size_t mask = slots_.size() - 1;
    for (size_t k = 0; k < entries_.size(); ++k) {  // in the file's order: the first stands
      size_t s = PieceHash{}(bytes(entries_[k])) & mask;
      bool taken = false;
      for (; slots_[s] >= 0; s = (s + 1) & mask)
        if (bytes(entries_[static_cast<size_t>(slots_[s])]) == bytes(entries_[k])) {
          taken = true;
          break;
        }
      if (!taken) slots_[s] = static_cast<int32_t>(k);
    }
    // then sorted by id (the slots follow their entries)
    std::vector<int32_t> place(entries_.size());
    std::vector<uint32_t> order(entries_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<uint32_t>(k);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return entries_[a].id < entries_[b].id; });
    std::vector<Entry> sorted(entries_.size());
    for (size_t k = 0; k < order.size(); ++k) {
      sorted[k] = entries_[order[k]];
      place[order[k]] = static_cast<int32_t>(k);
    }
    entries_ = std::move(sorted);
    for (int32_t& s : slots_)
      if (s >= 0) s = place[static_cast<size_t>(s)];
  }
  std::string_view bytes(const Entry& e) const { return std::string_view(text_).substr(e.at, e.size); }
  // The entry of id, or null.
  const Entry* find(TokenId id) const {
    const auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                                     [](const Entry& e, TokenId x) { return int64_t{e.id} < x; });
    return it != entries_.end() && it->id == id ? &*it : nullptr;
  }
  // The id of the token that is these bytes, or -1.
  int32_t id_of(std::string_view b) const {
    if (slots_.empty()) return -1;
    const size_t mask = slots_.size() - 1;
    for (size_t s = PieceHash{}(b) & mask; slots_[s] >= 0; s = (s + 1) & mask) {
      const Entry& e = entries_[static_cast<size_t>(slots_[s])];
      if (bytes(e) == b) return e.id;
    }
    return -1;
  }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::string text_;
  std::vector<Entry> entries_;  // by id
  std::vector<int32_t> slots_;  // an index into entries_, or -1; linear probing
};

}  // namespace

struct HfTokenizer::Impl {
  std::string where;
  VocabTable vocab;         // vocabulary id <-> the bytes it stands for
  int32_t byte_id[256];     // the single bytes' ids
  HfMerges merges;
  bool ignore_merges = false;
  bool nfc = false;
  std::string normalizer_name = "none";
  std::unique_ptr<Pretokenizer> split;
  std::vector<HfAddedToken> added;                // as the file lists them
  std::vector<TokenId> prefix;                    // the ids a model reads before a text
  std::unordered_map<TokenId, size_t> added_at;   // id -> index in added
  text_detail::TokenTrie added_trie;              // value: index in added
  uint64_t serial = 0;                            // this tokenizer's number (the piece caches' key)
  int64_t vocab_size = 0;

  void bpe(std::string_view piece, std::vector<TokenId>& out) const;
  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;
};

namespace {

constexpr TokenId kMaxTokenId = std::numeric_limits<int32_t>::max() - 1;  // 2^31 - 2

void build_vocab(HfTokenizerParts& p, const std::string& where, HfTokenizer::Impl& impl) {
  std::string text;
  std::vector<VocabTable::Entry> entries;
  entries.reserve(p.vocab.size());
  int64_t largest = -1;
  for (HfTokenizerParts::Token& t : p.vocab) {
    QKV_CHECK(t.id >= 0 && t.id <= kMaxTokenId, where, ": ", p.vocab_name, "[", excerpt(t.text), "] is ", t.id,
              "; ids are whole numbers 0 .. 2^31 - 2");
    largest = std::max<int64_t>(largest, t.id);
    const size_t at = text.size();
    QKV_CHECK(byte_level_decode(t.text, text), where, ": ", p.vocab_name, " holds ", excerpt(t.text),
              ", which is not spelled in the byte-level alphabet (a byte-level BPE vocabulary spells every byte "
              "as one character)");
    QKV_CHECK(text.size() <= std::numeric_limits<uint32_t>::max(), where, ": ", p.vocab_name, "'s tokens spell more ",
              "than 4 GiB");
    entries.push_back({static_cast<int32_t>(t.id), static_cast<uint32_t>(at), static_cast<uint32_t>(text.size() - at)});
    std::string().swap(t.text);  // given back as it is read
  }
  std::vector<HfTokenizerParts::Token>().swap(p.vocab);
  impl.vocab.build(std::move(text), std::move(entries));
  const auto& sorted = impl.vocab.entries();
  for (size_t k = 1; k < sorted.size(); ++k)
    QKV_CHECK(sorted[k].id != sorted[k - 1].id, where, ": ", p.vocab_name, " gives id ", sorted[k].id, " twice");
  impl.vocab_size = largest + 1;
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    impl.byte_id[b] = impl.vocab.id_of(std::string_view(&c, 1));
    QKV_CHECK(impl.byte_id[b] >= 0, where, ": ", p.vocab_name, " has no token for byte ", b,
              " (a byte-level vocabulary has all 256)");
  }
}

void build_merges(HfTokenizerParts& p, const std::string& where, HfTokenizer::Impl& impl) {
  impl.merges.reserve(p.merges.size());
  std::string joined;
  for (size_t r = 0; r < p.merges.size(); ++r) {
    Rank pair_ids[2];
    joined.clear();
    for (int k = 0; k < 2; ++k) {
      const std::string& tok = k == 0 ? p.merges[r].first : p.merges[r].second;
      const size_t at = joined.size();
      const int32_t id = byte_level_decode(tok, joined) ? impl.vocab.id_of(std::string_view(joined).substr(at)) : -1;
      QKV_CHECK(id >= 0, where, ": ", p.merges_name, "[", r, "] names ", excerpt(tok), ", which is not in ",
                p.vocab_name);
      pair_ids[k] = static_cast<Rank>(id);
    }
    const int32_t merged = impl.vocab.id_of(joined);
    QKV_CHECK(merged >= 0, where, ": ", p.merges_name, "[", r, "] makes ",
              excerpt(p.merges[r].first + p.merges[r].second), ", which is not in ", p.vocab_name);
    impl.merges.add(pair_ids[0], pair_ids[1], static_cast<Rank>(r), static_cast<Rank>(merged));
  }
  std::vector<std::pair<std::string, std::string>>().swap(p.merges);
}

void build_added_tokens(HfTokenizerParts& p, const std::string& where, HfTokenizer::Impl& impl) {
  for (size_t k = 0; k < p.added.size(); ++k) {
    HfAddedToken& t = p.added[k];
    const std::string field = p.added_name + "[" + std::to_string(k) + "]";
    QKV_CHECK(t.id >= 0 && t.id <= kMaxTokenId, where, ": ", field, ".id is ", t.id, "; ids are whole numbers 0 .. 2^31 - 2");
    QKV_CHECK(!t.content.empty(), where, ": ", field, " (id ", t.id, ") is empty");
    QKV_CHECK(t.content.size() <= HfTokenizer::kMaxAddedTokenBytes, where, ": ", field, " (id ", t.id, ") is ",
              t.content.size(), " bytes long; qkv matches added tokens of at most ", HfTokenizer::kMaxAddedTokenBytes);
    QKV_CHECK(!impl.added_at.count(t.id), where, ": added token id ", t.id, " appears twice");
    // an added token may also be a vocabulary token (the same bytes): its id must agree
    if (const VocabTable::Entry* e = impl.vocab.find(t.id))
      QKV_CHECK(impl.vocab.bytes(*e) == t.content, where, ": added token ", excerpt(t.content), " has id ", t.id,
                ", which ", p.vocab_name, " gives to ", excerpt(impl.vocab.bytes(*e)));
    impl.vocab_size = std::max<int64_t>(impl.vocab_size, int64_t{t.id} + 1);
    impl.added_at[t.id] = impl.added.size();
    impl.added_trie.add(t.content, static_cast<int32_t>(impl.added.size()));
    impl.added.push_back(std::move(t));
  }
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

HfTokenizer HfTokenizer::build(HfTokenizerParts parts, const std::string& where) {
  auto impl = std::make_shared<Impl>();
  static std::atomic<uint64_t> tokenizers{0};
  impl->serial = ++tokenizers;
  impl->where = where;
  impl->ignore_merges = parts.ignore_merges;
  build_vocab(parts, where, *impl);
  build_merges(parts, where, *impl);
  impl->nfc = parts.nfc;
  impl->normalizer_name = parts.nfc ? "NFC" : "none";
  impl->split = make_pretokenizer(parts.pattern);
  build_added_tokens(parts, where, *impl);
  for (const TokenId id : parts.prefix)
    QKV_CHECK(impl->added_at.count(id) != 0 || impl->vocab.find(id) != nullptr, where, ": ", parts.prefix_name,
              " puts id ", id, " before the text, which is no token of the vocabulary or the added tokens");
  impl->prefix = std::move(parts.prefix);
  return HfTokenizer(std::move(impl));
}

// One piece's bytes: merged pair by pair, the earliest merge first, leftmost among equals.
void HfTokenizer::Impl::bpe(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;  // (an empty match: a boundary, no token)
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  // Pieces repeat (words of a text): each thread keeps the short ones it has merged, per tokenizer.
  constexpr size_t kCachedPiece = 256;  // bytes; longer pieces rarely repeat
  struct Cache {
    uint64_t owner = 0;  // a number, not an address: a new tokenizer may reuse a freed one's
    PieceMap<std::vector<int32_t>> pieces;
  };
  thread_local Cache cache;
  const bool cached = piece.size() <= kCachedPiece;
  if (cached) {
    if (cache.owner != serial || cache.pieces.size() > (1u << 17)) {
      cache.pieces.clear();
      cache.owner = serial;
    }
    if (auto hit = cache.pieces.find(piece); hit != cache.pieces.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  thread_local std::vector<Rank> sym;
  sym.clear();
  if (const int32_t id = ignore_merges ? vocab.id_of(piece) : -1; id >= 0) {
    sym.push_back(static_cast<Rank>(id));
  } else {
    for (char c : piece) sym.push_back(static_cast<Rank>(byte_id[static_cast<unsigned char>(c)]));
    hf_detail::merge_piece(merges, sym);
  }
  const size_t first = out.size();
  for (Rank r : sym) out.push_back(static_cast<TokenId>(r));
  if (cached) cache.pieces.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

// Text without added tokens: normalised, split (matches and the text between them), merged.
void HfTokenizer::Impl::encode_plain(std::string_view raw, std::vector<TokenId>& out) const {
  if (raw.empty()) return;
  const std::string normalised = nfc ? text_detail::nfc(raw) : std::string();
  const std::string_view text = nfc ? std::string_view(normalised) : raw;
  std::vector<std::string_view> pieces;
  split->split(text, 0, pieces, std::numeric_limits<size_t>::max());
  size_t done = 0;  // "Isolated": text between matches is a piece of its own
  for (std::string_view p : pieces) {
    const size_t start = static_cast<size_t>(p.data() - text.data());
    if (start > done) bpe(text.substr(done, start - done), out);
    bpe(p, out);
    done = start + p.size();
  }
  if (done < text.size()) bpe(text.substr(done), out);
}

std::vector<TokenId> HfTokenizer::encode(std::string_view input, AddedTokens match) const {
  const Impl& m = *impl_;
  const std::string repaired = utf8::is_valid(input) ? std::string() : utf8::replace_invalid(input);
  const std::string_view text = repaired.empty() ? input : std::string_view(repaired);
  auto counts = [&](int32_t k) { return match == AddedTokens::kAll || !m.added[static_cast<size_t>(k)].special; };
  std::vector<TokenId> out;
  size_t start = 0;  // of the text not yet encoded
  size_t i = 0;
  while (i < text.size() && !m.added_trie.empty()) {
    const auto [at, k] = m.added_trie.find(text, i, counts);  // leftmost first, the longest there
    if (k < 0) break;
    i = at;
    const HfAddedToken& hit = m.added[static_cast<size_t>(k)];
    size_t before = i, after = i + hit.content.size();
    if (hit.lstrip)
      while (before > start && is_space_byte(text[before - 1])) --before;
    if (hit.rstrip)
      while (after < text.size() && is_space_byte(text[after])) ++after;
    m.encode_plain(text.substr(start, before - start), out);
    out.push_back(hit.id);
    start = i = after;
  }
  m.encode_plain(text.substr(start), out);
  return out;
}

std::string HfTokenizer::decode_bytes(std::span<const TokenId> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string out;
  for (const TokenId id : ids) {
    QKV_CHECK(id >= 0, "token id ", id, " is negative (", m.where, "'s ids are 0 .. ", m.vocab_size - 1, ")");
    if (auto it = m.added_at.find(id); it != m.added_at.end()) {
      if (!(skip_special && m.added[it->second].special)) out += m.added[it->second].content;
    } else if (const auto* e = m.vocab.find(id)) {
      out += m.vocab.bytes(*e);
    }  // an id the file does not hold (a model's padding ids) is no text, as Hugging Face decodes it
  }
  return out;
}

std::string HfTokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  return utf8::replace_invalid(decode_bytes(ids, skip_special));
}

std::string HfTokenizer::token_text(TokenId id) const { return decode(std::span<const TokenId>(&id, 1)); }

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }

bool HfTokenizer::has_token(TokenId id) const {
  return impl_->added_at.count(id) > 0 || impl_->vocab.find(id) != nullptr;
}

const std::vector<HfAddedToken>& HfTokenizer::added_tokens() const { return impl_->added; }

std::optional<TokenId> HfTokenizer::added_token(std::string_view content) const {
  for (const HfAddedToken& t : impl_->added)
    if (t.content == content) return t.id;
  return std::nullopt;
}

const std::string& HfTokenizer::pattern() const { return impl_->split->pattern(); }

const std::string& HfTokenizer::normalizer() const { return impl_->normalizer_name; }
const std::vector<TokenId>& HfTokenizer::prefix() const { return impl_->prefix; }

}  // namespace qkv
