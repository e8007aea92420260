// Hugging Face's tokenizer.json for byte-level BPE. See include/qkv/text/hf_tokenizer.h.
#include "qkv/text/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/read_file.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"
#include "qkv/text/vocab_files.h"

namespace qkv {

using json = nlohmann::json;

// Hash and equality that take a std::string_view as well: lookups by a piece need no string copy.
struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using PieceMap = std::unordered_map<std::string, V, PieceHash, std::equal_to<>>;

struct HfTokenizer::Impl {
  std::string where;
  std::vector<std::string> token_bytes;           // id -> the bytes it stands for (vocabulary ids)
  std::vector<bool> in_vocab;                     // id -> a vocabulary id
  PieceMap<int32_t> ids;                          // bytes -> vocabulary id
  int32_t byte_id[256];                           // the single bytes' ids
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges;     // (left id, right id) -> rank and the merged id
  bool ignore_merges = false;
  bool nfc = false;
  std::string normalizer_name = "none";
  std::unique_ptr<Pretokenizer> split;
  std::vector<HfAddedToken> added;                // longest content first
  std::unordered_map<TokenId, size_t> added_at;   // id -> index in added
  bool starts_added[256] = {};                    // a byte an added token starts with
  uint64_t serial = 0;                            // this tokenizer's number (the piece caches' key)
  int64_t vocab_size = 0;

  void bpe(std::string_view piece, std::vector<TokenId>& out) const;
  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;
};

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

// The bytes a byte-level token spells, or nullopt when a character is not in the alphabet.
std::optional<std::string> bytes_of(std::string_view token) {
  std::string out;
  if (!byte_level_decode(token, out)) return std::nullopt;
  return out;
}

bool flag(const json& j, const char* key, bool otherwise) {
  if (!j.contains(key) || j[key].is_null()) return otherwise;
  return j[key].get<bool>();
}

// A pre-tokenizer object: a byte-level one (with or without GPT-2's regex) or a regex Split.
struct PreTokenizer {
  std::string pattern;  // empty: none yet
  bool byte_level = false;
};

void read_pre_tokenizer(const json& p, const std::string& where, const std::string& field, PreTokenizer& out) {
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    const json& list = p.contains("pretokenizers") ? p["pretokenizers"] : json::array();
    for (size_t k = 0; k < list.size(); ++k)
      read_pre_tokenizer(list[k], where, field + ".pretokenizers[" + std::to_string(k) + "]", out);
    return;
  }
  if (type == "ByteLevel") {
    QKV_CHECK(!flag(p, "add_prefix_space", false), where, ": ", field,
              ".add_prefix_space is true; qkv reads byte-level pre-tokenizers without a prefix space");
    if (flag(p, "use_regex", true)) {
      QKV_CHECK(out.pattern.empty(), where, ": ", field, " splits by GPT-2's regex after another split");
      out.pattern = std::string(kGpt2Pattern);
    }
    out.byte_level = true;
    return;
  }
  if (type == "Split") {
    QKV_CHECK(p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex"), where, ": ", field,
              ".pattern is not a {\"Regex\": ...}; qkv splits by regular expressions");
    QKV_CHECK(p.value("behavior", "") == "Isolated", where, ": ", field, ".behavior is ",
              excerpt(p.value("behavior", "")), "; qkv reads \"Isolated\" splits");
    QKV_CHECK(!flag(p, "invert", false), where, ": ", field, ".invert is true; qkv reads splits that keep the matches");
    QKV_CHECK(out.pattern.empty() && !out.byte_level, where, ": ", field,
              " splits again; qkv reads one regex split before the byte-level step");
    out.pattern = p["pattern"]["Regex"].get<std::string>();
    return;
  }
  fail(where, ": ", field, ".type is ", excerpt(type), "; qkv reads byte-level BPE tokenizers (pre-tokenizers "
       "ByteLevel, Split with a regex, or a Sequence of them)");
}

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);  // ASCII is its own NFC
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  QKV_CHECK(n >= 0, "NFC normalisation failed: ", utf8proc_errmsg(n));
  std::string s(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return s;
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

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
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(where, " is not JSON: ", e.what());
  }
  QKV_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), where,
            " has no \"model\" object: not a Hugging Face tokenizer.json");
  auto impl = std::make_shared<Impl>();
  static std::atomic<uint64_t> tokenizers{0};
  impl->serial = ++tokenizers;
  impl->where = where;
  try {
    const json& m = j["model"];
    QKV_CHECK(m.value("type", "") == "BPE", where, ": model.type is ", excerpt(m.value("type", "(none)")),
              "; qkv reads BPE tokenizers (not WordPiece, Unigram or WordLevel)");
    QKV_CHECK(!flag(m, "byte_fallback", false), where, ": model.byte_fallback is true; qkv reads byte-level BPE");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      QKV_CHECK(!m.contains(key) || m[key].is_null() || m[key].get<std::string>().empty(), where, ": model.", key,
                " is set; qkv reads byte-level BPE without word affixes");
    QKV_CHECK(!m.contains("dropout") || m["dropout"].is_null(), where, ": model.dropout is set; qkv encodes deterministically");
    impl->ignore_merges = flag(m, "ignore_merges", false);
    QKV_CHECK(m.contains("vocab") && m["vocab"].is_object(), where, ": model.vocab is not an object of token -> id");
    const json& vocab = m["vocab"];
    int64_t largest = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const int64_t id = it.value().get<int64_t>();
      QKV_CHECK(id >= 0 && id < std::numeric_limits<int32_t>::max(), where, ": model.vocab[", excerpt(it.key()),
                "] is ", id, "; ids are 0 .. 2^31 - 2");
      largest = std::max(largest, id);
    }
    impl->token_bytes.resize(static_cast<size_t>(largest + 1));
    impl->in_vocab.assign(static_cast<size_t>(largest + 1), false);
    impl->ids.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const auto bytes = bytes_of(it.key());
      QKV_CHECK(bytes.has_value(), where, ": model.vocab holds ", excerpt(it.key()),
                ", which is not spelled in the byte-level alphabet (a byte-level BPE vocabulary spells every byte "
                "as one character)");
      const int32_t id = it.value().get<int32_t>();
      QKV_CHECK(!impl->in_vocab[static_cast<size_t>(id)], where, ": model.vocab gives id ", id, " twice");
      impl->token_bytes[static_cast<size_t>(id)] = *bytes;
      impl->in_vocab[static_cast<size_t>(id)] = true;
      impl->ids.emplace(*bytes, id);
    }
    for (int b = 0; b < 256; ++b) {
      const auto it = impl->ids.find(std::string(1, static_cast<char>(b)));
      QKV_CHECK(it != impl->ids.end(), where, ": model.vocab has no token for byte ", b,
                " (a byte-level vocabulary has all 256)");
      impl->byte_id[b] = it->second;
    }
    QKV_CHECK(m.contains("merges") && m["merges"].is_array(), where, ": model.merges is not a list");
    const json& merges = m["merges"];
    impl->merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string left, right;
      const json& e = merges[r];
      if (e.is_string()) {  // "left right"
        const std::string s = e.get<std::string>();
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
      int32_t pair_ids[2];
      std::string joined;
      for (int k = 0; k < 2; ++k) {
        const std::string& tok = k == 0 ? left : right;
        const auto bytes = bytes_of(tok);
        const auto it = bytes ? impl->ids.find(*bytes) : impl->ids.end();
        QKV_CHECK(it != impl->ids.end(), where, ": model.merges[", r, "] names ", excerpt(tok),
                  ", which is not in model.vocab");
        pair_ids[k] = it->second;
        joined += *bytes;
      }
      const auto merged = impl->ids.find(joined);
      QKV_CHECK(merged != impl->ids.end(), where, ": model.merges[", r, "] makes ", excerpt(left + right),
                ", which is not in model.vocab");
      impl->merges.emplace(pair_key(pair_ids[0], pair_ids[1]), Impl::Merge{static_cast<int32_t>(r), merged->second});
    }
    // normalizer: none or NFC (alone or in a Sequence)
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const json& n = j["normalizer"];
      std::vector<json> parts;
      if (n.value("type", "") == "Sequence") {
        for (const json& x : n.value("normalizers", json::array())) parts.push_back(x);
      } else {
        parts.push_back(n);
      }
      for (const json& x : parts) {
        QKV_CHECK(x.value("type", "") == "NFC", where, ": normalizer type ", excerpt(x.value("type", "(none)")),
                  " is not one qkv reads (none, or NFC)");
        impl->nfc = true;
        impl->normalizer_name = "NFC";
      }
    }
    QKV_CHECK(j.contains("pre_tokenizer") && j["pre_tokenizer"].is_object(), where,
              ": pre_tokenizer is missing; qkv reads byte-level BPE tokenizers");
    PreTokenizer pre;
    read_pre_tokenizer(j["pre_tokenizer"], where, "pre_tokenizer", pre);
    QKV_CHECK(pre.byte_level, where, ": pre_tokenizer has no ByteLevel step; qkv reads byte-level BPE tokenizers");
    QKV_CHECK(!pre.pattern.empty(), where, ": pre_tokenizer has no regex (a Split, or ByteLevel with use_regex)");
    impl->split = make_pretokenizer(pre.pattern);
    if (j.contains("decoder") && !j["decoder"].is_null())
      QKV_CHECK(j["decoder"].value("type", "") == "ByteLevel", where, ": decoder type ",
                excerpt(j["decoder"].value("type", "(none)")), " is not ByteLevel");
    // added tokens
    impl->vocab_size = largest + 1;
    for (const json& a : j.value("added_tokens", json::array())) {
      HfAddedToken t;
      t.id = a.at("id").get<int64_t>();
      t.content = a.at("content").get<std::string>();
      t.special = flag(a, "special", false);
      t.lstrip = flag(a, "lstrip", false);
      t.rstrip = flag(a, "rstrip", false);
      QKV_CHECK(t.id >= 0 && t.id < std::numeric_limits<int32_t>::max(), where, ": added token ", excerpt(t.content),
                " has id ", t.id);
      QKV_CHECK(!t.content.empty(), where, ": an added token (id ", t.id, ") is empty");
      QKV_CHECK(!flag(a, "single_word", false), where, ": added token ", excerpt(t.content),
                " is single_word; qkv matches added tokens anywhere");
      QKV_CHECK(!impl->added_at.count(t.id), where, ": added token id ", t.id, " appears twice");
      // an added token may also be a vocabulary token (the same bytes): its id must agree
      if (static_cast<size_t>(t.id) < impl->in_vocab.size() && impl->in_vocab[static_cast<size_t>(t.id)])
        QKV_CHECK(impl->token_bytes[static_cast<size_t>(t.id)] == t.content, where, ": added token ",
                  excerpt(t.content), " has id ", t.id, ", which model.vocab gives to ",
                  excerpt(impl->token_bytes[static_cast<size_t>(t.id)]));
      impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
      impl->added.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    fail(where, ": unexpected JSON: ", e.what());
  }
  std::stable_sort(impl->added.begin(), impl->added.end(),
                   [](const HfAddedToken& a, const HfAddedToken& b) { return a.content.size() > b.content.size(); });
  for (size_t k = 0; k < impl->added.size(); ++k) {
    impl->added_at[impl->added[k].id] = k;
    impl->starts_added[static_cast<unsigned char>(impl->added[k].content[0])] = true;
  }
  return HfTokenizer(std::move(impl));
}

// One piece's bytes: merged pair by pair, the earliest merge first, leftmost among equals.
void HfTokenizer::Impl::bpe(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  // Pieces repeat (words of a text): each thread keeps the ones it has merged, per tokenizer.
  struct Cache {
    uint64_t owner = 0;  // a number, not an address: a new tokenizer may reuse a freed one's
    PieceMap<std::vector<int32_t>> pieces;
  };
  thread_local Cache cache;
  if (cache.owner != serial || cache.pieces.size() > (1u << 17)) {
    cache.pieces.clear();
    cache.owner = serial;
  }
  if (auto hit = cache.pieces.find(piece); hit != cache.pieces.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  if (ignore_merges)
    if (auto it = ids.find(piece); it != ids.end()) {
      out.push_back(it->second);
      cache.pieces.emplace(std::string(piece), std::vector<int32_t>{it->second});
      return;
    }
  thread_local std::vector<int32_t> sym;
  sym.clear();
  for (char c : piece) sym.push_back(byte_id[static_cast<unsigned char>(c)]);
  while (sym.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
    size_t at = 0;
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      const auto it = merges.find(pair_key(sym[k], sym[k + 1]));
      if (it != merges.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best_id = it->second.id;
        at = k;
      }
    }
    if (best_id < 0) break;
    sym[at] = best_id;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
  cache.pieces.emplace(std::string(piece), sym);
}

// Text without added tokens: normalised, split (matches and the text between them), merged.
void HfTokenizer::Impl::encode_plain(std::string_view raw, std::vector<TokenId>& out) const {
  if (raw.empty()) return;
  const std::string normalised = nfc ? qkv::nfc(raw) : std::string();
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

std::vector<TokenId> HfTokenizer::encode(std::string_view input) const {
  const Impl& m = *impl_;
  const std::string repaired = utf8::is_valid(input) ? std::string() : utf8::replace_invalid(input);
  const std::string_view text = repaired.empty() ? input : std::string_view(repaired);
  std::vector<TokenId> out;
  size_t start = 0;  // of the text not yet encoded
  size_t i = 0;
  while (i < text.size()) {
    if (!m.starts_added[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const HfAddedToken* hit = nullptr;
    for (const HfAddedToken& t : m.added)  // longest first: the longest that starts here
      if (text.compare(i, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    size_t before = i, after = i + hit->content.size();
    if (hit->lstrip)
      while (before > start && is_space_byte(text[before - 1])) --before;
    if (hit->rstrip)
      while (after < text.size() && is_space_byte(text[after])) ++after;
    m.encode_plain(text.substr(start, before - start), out);
    out.push_back(hit->id);
    start = i = after;
  }
  m.encode_plain(text.substr(start), out);
  return out;
}

std::string HfTokenizer::decode_bytes(std::span<const TokenId> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string out;
  for (const TokenId id : ids) {
    if (auto it = m.added_at.find(id); it != m.added_at.end()) {
      if (!(skip_special && m.added[it->second].special)) out += m.added[it->second].content;
      continue;
    }
    QKV_CHECK(id >= 0 && static_cast<size_t>(id) < m.in_vocab.size() && m.in_vocab[static_cast<size_t>(id)], "token id ",
              id, " is not in ", m.where, "'s vocabulary (ids 0 .. ", m.vocab_size - 1, ")");
    out += m.token_bytes[static_cast<size_t>(id)];
  }
  return out;
}

std::string HfTokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  return utf8::replace_invalid(decode_bytes(ids, skip_special));
}

std::string HfTokenizer::token_text(TokenId id) const { return decode(std::span<const TokenId>(&id, 1)); }

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }

const std::vector<HfAddedToken>& HfTokenizer::added_tokens() const { return impl_->added; }

std::optional<TokenId> HfTokenizer::added_token(std::string_view content) const {
  for (const HfAddedToken& t : impl_->added)
    if (t.content == content) return t.id;
  return std::nullopt;
}

const std::string& HfTokenizer::pattern() const { return impl_->split->pattern(); }

const std::string& HfTokenizer::normalizer() const { return impl_->normalizer_name; }

}  // namespace qkv
