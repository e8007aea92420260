// qkv/text/tiny_vocab.h - notebook 003's word vocabulary.
//
// words(text): split on whitespace, strip ".,!?" from both ends, lower-case
//   "Your journey starts with one step." -> your journey starts with one step
// TinyVocab(words): "<pad>" 0, "<bos>" 1, "<eos>" 2, then the distinct words sorted
// encode(words): <bos>, the words' ids, <eos>   -> [1, 8, 3, 5, 7, 4, 6, 2]
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace qkv {

std::vector<std::string> tiny_words(const std::string& text);

class TinyVocab {
 public:
  explicit TinyVocab(const std::vector<std::string>& words);
  int64_t id(const std::string& word) const;  // throws for a word not in the vocabulary
  const std::string& word(int64_t id) const;  // throws for an id out of range
  std::vector<int64_t> encode(const std::vector<std::string>& words) const;  // with <bos>, <eos>
  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  const std::vector<std::string>& words() const { return words_; }

 private:
  std::vector<std::string> words_;
  std::map<std::string, int64_t> ids_;
};

}  // namespace qkv
