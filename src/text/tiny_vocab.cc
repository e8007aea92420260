// Notebook 003's word vocabulary. See include/qkv/text/tiny_vocab.h.
#include "qkv/text/tiny_vocab.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "qkv/core/error.h"

namespace qkv {

std::vector<std::string> tiny_words(const std::string& text) {
  // Python's t.strip(".,!?").lower() for t in sentence.split()
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    size_t b = w.find_first_not_of(".,!?");
    size_t e = w.find_last_not_of(".,!?");
    w = b == std::string::npos ? std::string() : w.substr(b, e - b + 1);
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) {
      return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    });
    out.push_back(w);
  }
  return out;
}

TinyVocab::TinyVocab(const std::vector<std::string>& words) : words_{"<pad>", "<bos>", "<eos>"} {
  std::set<std::string> sorted(words.begin(), words.end());
  for (const std::string& w : sorted)
    if (w != "<pad>" && w != "<bos>" && w != "<eos>") words_.push_back(w);
  for (size_t i = 0; i < words_.size(); ++i) ids_[words_[i]] = static_cast<int64_t>(i);
}

int64_t TinyVocab::id(const std::string& word) const {
  auto it = ids_.find(word);
  QKV_CHECK(it != ids_.end(), "TinyVocab: the word '", word, "' is not in the vocabulary of ",
            size(), " words");
  return it->second;
}

const std::string& TinyVocab::word(int64_t id) const {
  QKV_CHECK(id >= 0 && id < size(), "TinyVocab: id ", id, " is outside [0, ", size(), ")");
  return words_[static_cast<size_t>(id)];
}

std::vector<int64_t> TinyVocab::encode(const std::vector<std::string>& words) const {
  std::vector<int64_t> ids{id("<bos>")};
  for (const std::string& w : words) ids.push_back(id(w));
  ids.push_back(id("<eos>"));
  return ids;
}

}  // namespace qkv
