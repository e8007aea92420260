// Text <-> model ids. See include/qkv/models/tokenizer.h.
#include "qkv/models/tokenizer.h"

#include <algorithm>
#include <limits>
#include <string_view>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

namespace qkv {

LetterTokenizer::LetterTokenizer(int64_t symbols) : symbols_(symbols) {
  QKV_CHECK(symbols >= 2 && symbols <= 26, "LetterTokenizer: symbols (", symbols, ") must be in [2, 26]");
}

std::string LetterTokenizer::describe() const {
  return str("the letters 'a'..'", static_cast<char>('a' + symbols_ - 1), "' and the separator '|'");
}

std::vector<int64_t> LetterTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (char c : text) {
    if (c == ' ') continue;
    if (c == '|') ids.push_back(separator());
    else if (c >= 'a' && c < 'a' + symbols_) ids.push_back(c - 'a');
    else fail("the task's alphabet is 'a'..'", static_cast<char>('a' + symbols_ - 1), "' and the separator '|'; ",
              excerpt(std::string_view(&c, 1)), " is not in it");
  }
  return ids;
}

std::string LetterTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t id : ids) {
    QKV_CHECK(id >= 0 && id <= symbols_, "id ", id, " is outside the task's ", symbols_ + 1, " ids");
    s += id == separator() ? '|' : static_cast<char>('a' + id);
  }
  return s;
}

Gpt2Tokenizer::Gpt2Tokenizer(Encoding encoding) : encoding_(std::move(encoding)) {}

std::vector<int64_t> Gpt2Tokenizer::encode(const std::string& text) const {
  return encoding_.encode(text, SpecialTokens::all());
}

std::vector<int64_t> Gpt2Tokenizer::encode_text(const std::string& text) const {
  const std::vector<TokenId> ids = encoding_.encode_ordinary(text);
  return {ids.begin(), ids.end()};
}

std::string Gpt2Tokenizer::decode(const std::vector<int64_t>& ids) const {
  return encoding_.decode(std::vector<TokenId>(ids.begin(), ids.end()));
}

VocabularyTokenizer::VocabularyTokenizer(Encoding encoding, std::vector<int64_t> vocab, std::string source)
    : encoding_(std::move(encoding)), vocab_(std::move(vocab)), source_(std::move(source)) {
  QKV_CHECK(std::is_sorted(vocab_.begin(), vocab_.end()) &&
                std::adjacent_find(vocab_.begin(), vocab_.end()) == vocab_.end(),
            "VocabularyTokenizer: the vocabulary must be increasing GPT-2 ids");
}

std::string VocabularyTokenizer::describe() const {
  return str("GPT-2's byte-level BPE, the ", vocab_.size(), " tokens of ", source_);
}

std::vector<int64_t> VocabularyTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (int64_t t : encoding_.encode(text, SpecialTokens::all())) {
    auto it = std::lower_bound(vocab_.begin(), vocab_.end(), t);
    QKV_CHECK(it != vocab_.end() && *it == t, "the token ", t, " (",
              excerpt(encoding_.decode(std::vector<TokenId>{t})), ") does not occur in the text the model was ",
              "trained on (", source_, "), so the model has no embedding for it");
    ids.push_back(it - vocab_.begin());
  }
  return ids;
}

std::string VocabularyTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<TokenId> original;
  original.reserve(ids.size());
  for (int64_t id : ids) {
    QKV_CHECK(id >= 0 && id < vocab_size(), "id ", id, " is outside the model's vocabulary of ", vocab_size());
    original.push_back(vocab_[static_cast<size_t>(id)]);
  }
  return encoding_.decode(original);
}

HfTextTokenizer::HfTextTokenizer(HfTokenizer tokenizer, std::string source)
    : tokenizer_(std::move(tokenizer)), source_(std::move(source)) {}

std::vector<int64_t> HfTextTokenizer::encode(const std::string& text) const {
  const std::vector<TokenId> ids = tokenizer_.encode(text);
  return {ids.begin(), ids.end()};
}

std::vector<int64_t> HfTextTokenizer::encode_text(const std::string& text) const {
  const std::vector<TokenId> ids = tokenizer_.encode(text, AddedTokens::kPlain);
  return {ids.begin(), ids.end()};
}

std::string HfTextTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<TokenId> t;
  t.reserve(ids.size());
  for (int64_t id : ids) {  // ids the file does not hold are no text (HfTokenizer::decode); negative: an error
    QKV_CHECK(id >= 0 && id <= std::numeric_limits<int32_t>::max(), "token id ", id, " is not an id (0 .. 2^31 - 1)");
    t.push_back(static_cast<TokenId>(id));
  }
  return tokenizer_.decode(t);
}

}  // namespace qkv

namespace qkv {

std::optional<int64_t> Gpt2Tokenizer::special_id(const std::string& text) const {
  for (const std::string& s : encoding_.special_tokens_set())
    if (s == text) return encoding_.encode_single_token(text);
  return std::nullopt;
}

// Only the ids since the text was last whole are decoded again: the bytes before them ended a
// character, so decoding the rest alone gives the same text (linear in a long generation).
std::string TextStream::add(int64_t id) {
  ids_.push_back(id);
  const std::string text = t_.decode(ids_);
  static const std::string kReplacement = "\xEF\xBF\xBD";
  size_t stable = text.size();
  while (stable >= given_ + kReplacement.size() &&
         text.compare(stable - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
    stable -= kReplacement.size();
  std::string out = take(text, stable);
  if (stable == text.size()) {  // whole: start afresh after it
    ids_.clear();
    given_ = 0;
  }
  return out;
}

std::string TextStream::finish() {
  std::string out = take(t_.decode(ids_), std::string::npos);
  ids_.clear();
  given_ = 0;
  return out;
}

std::string TextStream::take(const std::string& text, size_t end) {
  end = std::min(end, text.size());
  std::string out = end > given_ ? text.substr(given_, end - given_) : std::string();
  given_ = std::max(given_, end);
  return out;
}

}  // namespace qkv
