// Hugging Face's tokenizer.json for byte-level BPE. See include/qkv/text/hf_tokenizer.h.
//
// Every step is linear in the text (or n log n): the merges by a heap over a piece's parts
// (hf_merges.h), NFC by a stable sort of each run of marks (nfc.h), the added tokens by one walk
// of a trie from each position (token_trie.h), at most kMaxAddedTokenBytes long. Tables are sized by the number of
// entries the file holds, never by the largest id it names.
#include "qkv/text/hf_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "hf_merges.h"
#include "nfc.h"
#include "token_trie.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/core/read_file.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"
#include "qkv/text/vocab_files.h"

namespace qkv {

using json = nlohmann::json;
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

}  // namespace

struct HfTokenizer::Impl {
  std::string where;
  std::unordered_map<TokenId, std::string> token_of;  // vocabulary id -> the bytes it stands for
  PieceMap<int32_t> ids;                              // bytes -> vocabulary id
  int32_t byte_id[256];                               // the single bytes' ids
  HfMerges merges;
  bool ignore_merges = false;
  bool nfc = false;
  std::string normalizer_name = "none";
  std::unique_ptr<Pretokenizer> split;
  std::vector<HfAddedToken> added;                // as the file lists them
  std::unordered_map<TokenId, size_t> added_at;   // id -> index in added
  text_detail::TokenTrie added_trie;              // value: index in added
  uint64_t serial = 0;                            // this tokenizer's number (the piece caches' key)
  int64_t vocab_size = 0;

  void bpe(std::string_view piece, std::vector<TokenId>& out) const;
  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;
};

namespace {

constexpr int kMaxPreTokenizerNesting = 16;

// The bytes a byte-level token spells, or nullopt when a character is not in the alphabet.
std::optional<std::string> bytes_of(std::string_view token) {
  std::string out;
  if (!byte_level_decode(token, out)) return std::nullopt;
  return out;
}

// j[key], or nullptr when it is absent or null. j is an object (checked by the callers).
const json* member(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// The typed members of an object, their errors naming "<where>: <field>.<key>".
bool flag(const json& j, const char* key, bool otherwise, const std::string& where, const std::string& field) {
  const json* v = member(j, key);
  if (!v) return otherwise;
  QKV_CHECK(v->is_boolean(), where, ": ", field, ".", key, " is ", json_excerpt(*v), "; expected true or false");
  return v->get<bool>();
}

std::string text_of(const json& j, const char* key, const std::string& where, const std::string& field,
                    const std::string& otherwise = "") {
  const json* v = member(j, key);
  if (!v) return otherwise;
  QKV_CHECK(v->is_string(), where, ": ", field, ".", key, " is ", json_excerpt(*v), "; expected a string");
  return v->get<std::string>();
}

const json& object_at(const json& j, const std::string& where, const std::string& field) {
  QKV_CHECK(j.is_object(), where, ": ", field, " is ", json_excerpt(j), "; expected an object");
  return j;
}

// An id: a whole number in 0 .. 2^31 - 2 (1.5, "3" and -1 are refused, not truncated).
int32_t id_of(const json& v, const std::string& where, const std::string& field) {
  QKV_CHECK(v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0) &&
                v.get<uint64_t>() < static_cast<uint64_t>(std::numeric_limits<int32_t>::max()),
            where, ": ", field, " is ", json_excerpt(v), "; ids are whole numbers 0 .. 2^31 - 2");
  return static_cast<int32_t>(v.get<int64_t>());
}

// A pre-tokenizer object: a byte-level one (with or without GPT-2's regex) or a regex Split.
struct PreTokenizer {
  std::string pattern;  // empty: none yet
  bool byte_level = false;
};

void read_pre_tokenizer(const json& j, const std::string& where, const std::string& field, int depth,
                        PreTokenizer& out) {
  QKV_CHECK(depth <= kMaxPreTokenizerNesting, where, ": ", field, " nests Sequences more than ",
            kMaxPreTokenizerNesting, " deep; qkv reads a Sequence of ByteLevel and Split steps");
  const json& p = object_at(j, where, field);
  const std::string type = text_of(p, "type", where, field);
  if (type == "Sequence") {
    const json* list = member(p, "pretokenizers");
    if (!list) return;
    QKV_CHECK(list->is_array(), where, ": ", field, ".pretokenizers is ", json_excerpt(*list), "; expected a list");
    for (size_t k = 0; k < list->size(); ++k)
      read_pre_tokenizer((*list)[k], where, field + ".pretokenizers[" + std::to_string(k) + "]", depth + 1, out);
    return;
  }
  if (type == "ByteLevel") {
    QKV_CHECK(!flag(p, "add_prefix_space", false, where, field), where, ": ", field,
              ".add_prefix_space is true; qkv reads byte-level pre-tokenizers without a prefix space");
    if (flag(p, "use_regex", true, where, field)) {
      QKV_CHECK(out.pattern.empty(), where, ": ", field, " splits by GPT-2's regex after another split");
      out.pattern = std::string(kGpt2Pattern);
    }
    out.byte_level = true;
    return;
  }
  if (type == "Split") {
    const json* pattern = member(p, "pattern");
    QKV_CHECK(pattern && pattern->is_object() && pattern->contains("Regex"), where, ": ", field,
              ".pattern is not a {\"Regex\": ...}; qkv splits by regular expressions");
    const std::string behavior = text_of(p, "behavior", where, field);
    QKV_CHECK(behavior == "Isolated", where, ": ", field, ".behavior is ", excerpt(behavior),
              "; qkv reads \"Isolated\" splits");
    QKV_CHECK(!flag(p, "invert", false, where, field), where, ": ", field,
              ".invert is true; qkv reads splits that keep the matches");
    QKV_CHECK(out.pattern.empty() && !out.byte_level, where, ": ", field,
              " splits again; qkv reads one regex split before the byte-level step");
    out.pattern = text_of(*pattern, "Regex", where, field + ".pattern");
    return;
  }
  fail(where, ": ", field, ".type is ", excerpt(type), "; qkv reads byte-level BPE tokenizers (pre-tokenizers "
       "ByteLevel, Split with a regex, or a Sequence of them)");
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void read_vocab(const json& m, const std::string& where, HfTokenizer::Impl& impl, int64_t& largest) {
  const json* vocab = member(m, "vocab");
  QKV_CHECK(vocab && vocab->is_object(), where, ": model.vocab is not an object of token -> id");
  impl.token_of.reserve(vocab->size());
  impl.ids.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const int32_t id = id_of(it.value(), where, "model.vocab[" + excerpt(it.key()) + "]");
    largest = std::max<int64_t>(largest, id);
    const auto bytes = bytes_of(it.key());
    QKV_CHECK(bytes.has_value(), where, ": model.vocab holds ", excerpt(it.key()),
              ", which is not spelled in the byte-level alphabet (a byte-level BPE vocabulary spells every byte "
              "as one character)");
    QKV_CHECK(impl.token_of.emplace(id, *bytes).second, where, ": model.vocab gives id ", id, " twice");
    impl.ids.emplace(*bytes, id);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = impl.ids.find(std::string(1, static_cast<char>(b)));
    QKV_CHECK(it != impl.ids.end(), where, ": model.vocab has no token for byte ", b,
              " (a byte-level vocabulary has all 256)");
    impl.byte_id[b] = it->second;
  }
}

void read_merges(const json& m, const std::string& where, HfTokenizer::Impl& impl) {
  const json* merges = member(m, "merges");
  QKV_CHECK(merges && merges->is_array(), where, ": model.merges is not a list");
  impl.merges.reserve(merges->size());
  for (size_t r = 0; r < merges->size(); ++r) {
    std::string left, right;
    const json& e = (*merges)[r];
    if (e.is_string()) {  // "left right"
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      QKV_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where, ": model.merges[", r,
                "] is ", excerpt(s), "; expected two tokens separated by one space");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else {
      QKV_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), where, ": model.merges[", r,
                "] is not a pair of tokens");
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    }
    Rank pair_ids[2];
    std::string joined;
    for (int k = 0; k < 2; ++k) {
      const std::string& tok = k == 0 ? left : right;
      const auto bytes = bytes_of(tok);
      const auto it = bytes ? impl.ids.find(*bytes) : impl.ids.end();
      QKV_CHECK(it != impl.ids.end(), where, ": model.merges[", r, "] names ", excerpt(tok),
                ", which is not in model.vocab");
      pair_ids[k] = static_cast<Rank>(it->second);
      joined += *bytes;
    }
    const auto merged = impl.ids.find(joined);
    QKV_CHECK(merged != impl.ids.end(), where, ": model.merges[", r, "] makes ", excerpt(left + right),
              ", which is not in model.vocab");
    impl.merges.add(pair_ids[0], pair_ids[1], static_cast<Rank>(r), static_cast<Rank>(merged->second));
  }
}

void read_normalizer(const json& j, const std::string& where, HfTokenizer::Impl& impl) {
  const json* n = member(j, "normalizer");
  if (!n) return;
  const std::string type = text_of(object_at(*n, where, "normalizer"), "type", where, "normalizer");
  std::vector<const json*> parts{n};
  if (type == "Sequence") {
    const json* list = member(*n, "normalizers");
    QKV_CHECK(!list || list->is_array(), where, ": normalizer.normalizers is ", json_excerpt(*list),
              "; expected a list");
    parts.clear();
    if (list)
      for (const json& x : *list) parts.push_back(&x);
  }
  for (size_t k = 0; k < parts.size(); ++k) {
    const std::string field = type == "Sequence" ? "normalizer.normalizers[" + std::to_string(k) + "]" : "normalizer";
    const std::string t = text_of(object_at(*parts[k], where, field), "type", where, field, "(none)");
    QKV_CHECK(t == "NFC", where, ": ", field, ".type is ", excerpt(t), "; qkv reads no normalizer, or NFC");
    impl.nfc = true;
    impl.normalizer_name = "NFC";
  }
}

void read_added_tokens(const json& j, const std::string& where, HfTokenizer::Impl& impl) {
  const json* list = member(j, "added_tokens");
  if (!list) return;
  QKV_CHECK(list->is_array(), where, ": added_tokens is ", json_excerpt(*list), "; expected a list");
  for (size_t k = 0; k < list->size(); ++k) {
    const std::string field = "added_tokens[" + std::to_string(k) + "]";
    const json& a = object_at((*list)[k], where, field);
    HfAddedToken t;
    const json* id = member(a, "id");
    QKV_CHECK(id, where, ": ", field, " has no id");
    t.id = id_of(*id, where, field + ".id");
    t.content = text_of(a, "content", where, field);
    t.special = flag(a, "special", false, where, field);
    t.lstrip = flag(a, "lstrip", false, where, field);
    t.rstrip = flag(a, "rstrip", false, where, field);
    QKV_CHECK(!t.content.empty(), where, ": ", field, " (id ", t.id, ") is empty");
    QKV_CHECK(t.content.size() <= HfTokenizer::kMaxAddedTokenBytes, where, ": ", field, " (id ", t.id, ") is ",
              t.content.size(), " bytes long; qkv matches added tokens of at most ", HfTokenizer::kMaxAddedTokenBytes);
    QKV_CHECK(!flag(a, "single_word", false, where, field), where, ": added token ", excerpt(t.content),
              " is single_word; qkv matches added tokens anywhere");
    QKV_CHECK(!impl.added_at.count(t.id), where, ": added token id ", t.id, " appears twice");
    // an added token may also be a vocabulary token (the same bytes): its id must agree
    if (const auto it = impl.token_of.find(t.id); it != impl.token_of.end())
      QKV_CHECK(it->second == t.content, where, ": added token ", excerpt(t.content), " has id ", t.id,
                ", which model.vocab gives to ", excerpt(it->second));
    impl.vocab_size = std::max<int64_t>(impl.vocab_size, int64_t{t.id} + 1);
    impl.added_at[t.id] = impl.added.size();
    impl.added_trie.add(t.content, static_cast<int32_t>(impl.added.size()));
    impl.added.push_back(std::move(t));
  }
}

std::shared_ptr<HfTokenizer::Impl> read_tokenizer(const json& j, const std::string& where) {
  QKV_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), where,
            " has no \"model\" object: not a Hugging Face tokenizer.json");
  auto impl = std::make_shared<HfTokenizer::Impl>();
  static std::atomic<uint64_t> tokenizers{0};
  impl->serial = ++tokenizers;
  impl->where = where;
  const json& m = j["model"];
  const std::string type = text_of(m, "type", where, "model", "(none)");
  QKV_CHECK(type == "BPE", where, ": model.type is ", excerpt(type),
            "; qkv reads BPE tokenizers (not WordPiece, Unigram or WordLevel)");
  QKV_CHECK(!flag(m, "byte_fallback", false, where, "model"), where, ": model.byte_fallback is true; qkv reads byte-level BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    QKV_CHECK(text_of(m, key, where, "model").empty(), where, ": model.", key,
              " is set; qkv reads byte-level BPE without word affixes");
  QKV_CHECK(!member(m, "dropout"), where, ": model.dropout is set; qkv encodes deterministically");
  impl->ignore_merges = flag(m, "ignore_merges", false, where, "model");
  int64_t largest = -1;
  read_vocab(m, where, *impl, largest);
  impl->vocab_size = largest + 1;
  read_merges(m, where, *impl);
  read_normalizer(j, where, *impl);
  const json* pre_tokenizer = member(j, "pre_tokenizer");
  QKV_CHECK(pre_tokenizer, where, ": pre_tokenizer is missing; qkv reads byte-level BPE tokenizers");
  PreTokenizer pre;
  read_pre_tokenizer(*pre_tokenizer, where, "pre_tokenizer", 0, pre);
  QKV_CHECK(pre.byte_level, where, ": pre_tokenizer has no ByteLevel step; qkv reads byte-level BPE tokenizers");
  QKV_CHECK(!pre.pattern.empty(), where, ": pre_tokenizer has no regex (a Split, or ByteLevel with use_regex)");
  impl->split = make_pretokenizer(pre.pattern);
  if (const json* decoder = member(j, "decoder")) {
    const std::string d = text_of(object_at(*decoder, where, "decoder"), "type", where, "decoder", "(none)");
    QKV_CHECK(d == "ByteLevel", where, ": decoder.type is ", excerpt(d), "; qkv reads ByteLevel decoders");
  }
  read_added_tokens(j, where, *impl);
  return impl;
}

}  // namespace

HfTokenizer HfTokenizer::load(const std::string& path) {
  // A vocabulary's name (qwen3, llama3) that is not a path here: the installed file, verified.
  if (!std::filesystem::exists(path))
    if (const std::optional<std::string> installed = find_hf_vocab(path)) {
      const std::string text = read_file(*installed);
      QKV_CHECK(hf_vocab_verified(path, text), "refusing to load ", *installed, ": its SHA-256 is not the ", path,
                " vocabulary's; the file is damaged or another version: delete it and reinstall (", kVocabInstallHint,
                ")");
      return parse(text, *installed);
    }
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "tokenizer.json").string();
  QKV_CHECK(std::filesystem::is_regular_file(file), excerpt(path), " is not a tokenizer.json (nor a folder holding one)");
  return parse(read_file(file), file);
}

HfTokenizer HfTokenizer::parse(std::string_view text, const std::string& where) {
  const json j = parse_json(text, where);  // no recursion, linear, nesting bounded (json_max_depth)
  try {
    return HfTokenizer(read_tokenizer(j, where));
  } catch (const json::exception& e) {  // (every member is checked for its type before it is read)
    fail(where, ": unexpected JSON: ", e.what());
  }
}

// One piece's bytes: merged pair by pair, the earliest merge first, leftmost among equals.
void HfTokenizer::Impl::bpe(std::string_view piece, std::vector<TokenId>& out) const {
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
  if (const auto it = ignore_merges ? ids.find(piece) : ids.end(); it != ids.end()) {
    sym.push_back(static_cast<Rank>(it->second));
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
    } else if (auto t = m.token_of.find(id); t != m.token_of.end()) {
      out += t->second;
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
  return impl_->added_at.count(id) > 0 || impl_->token_of.count(id) > 0;
}

const std::vector<HfAddedToken>& HfTokenizer::added_tokens() const { return impl_->added; }

std::optional<TokenId> HfTokenizer::added_token(std::string_view content) const {
  for (const HfAddedToken& t : impl_->added)
    if (t.content == content) return t.id;
  return std::nullopt;
}

const std::string& HfTokenizer::pattern() const { return impl_->split->pattern(); }

const std::string& HfTokenizer::normalizer() const { return impl_->normalizer_name; }

}  // namespace qkv
