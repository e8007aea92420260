// Special and added tokens found in a text in one pass (private to src/text).
//
// The tokens' bytes as a trie: from a position of the text, one walk finds the longest token that
// starts there, in at most as many steps as the longest token has bytes; a scan finds the leftmost
// position where one starts, skipping bytes no token starts with. Encoding's special tokens and
// tokenizer.json's added tokens both use it, with a predicate saying which tokens count in a call
// (allowed_special; special or not).
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qkv::text_detail {

class TokenTrie {
 public:
  TokenTrie() : value_(1, -1) {}

  // `value` (>= 0) for the token `bytes` (non-empty); of two equal tokens the first stands.
  void add(std::string_view bytes, int32_t value) {
    int32_t node = 0;
    for (char c : bytes) {
      auto [it, fresh] = child_.emplace(edge(node, c), static_cast<int32_t>(value_.size()));
      if (fresh) value_.push_back(-1);
      node = it->second;
    }
    if (value_[static_cast<size_t>(node)] < 0) value_[static_cast<size_t>(node)] = value;
    starts_[static_cast<unsigned char>(bytes[0])] = true;
  }
  bool empty() const { return value_.size() == 1; }

  // The value of the longest accepted token text[i..] starts with, or -1.
  template <class Accept>
  int32_t longest_at(std::string_view text, size_t i, const Accept& accept) const {
    int32_t node = 0, found = -1;
    for (size_t k = i; k < text.size(); ++k) {
      const auto it = child_.find(edge(node, text[k]));
      if (it == child_.end()) break;
      node = it->second;
      const int32_t v = value_[static_cast<size_t>(node)];
      if (v >= 0 && accept(v)) found = v;
    }
    return found;
  }

  // The leftmost position at or after `from` where an accepted token starts, and its value (the
  // longest there); {text.size(), -1} when there is none.
  template <class Accept>
  std::pair<size_t, int32_t> find(std::string_view text, size_t from, const Accept& accept) const {
    for (size_t i = from; i < text.size(); ++i) {
      if (!starts_[static_cast<unsigned char>(text[i])]) continue;
      if (const int32_t v = longest_at(text, i, accept); v >= 0) return {i, v};
    }
    return {text.size(), -1};
  }

 private:
  static uint64_t edge(int32_t node, char c) {
    return (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
  }
  std::vector<int32_t> value_;                   // node -> the value of the token ending there, or -1
  std::unordered_map<uint64_t, int32_t> child_;  // (node, byte) -> node
  bool starts_[256] = {};                        // a byte some token starts with
};

}  // namespace qkv::text_detail
