// tokenizer.json's BPE merges and the merge loop over one piece (private to src/text).
//
// A merge joins two adjacent tokens (left id, right id) into one (the merged id); its rank is its
// place in model.merges. A piece starts as its bytes' ids; while some adjacent pair has a merge,
// the lowest-ranked one is applied, the leftmost among equals (Hugging Face's BPE::merge_word).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "bpe_merge.h"

namespace qkv::hf_detail {

using bpe_detail::PairMerge;
using bpe_detail::Rank;

class HfMerges {
 public:
  void reserve(size_t n) { merges_.reserve(n); }
  // A pair listed twice in model.merges takes its last place, as Hugging Face's BpeBuilder (a map
  // built in order) and transformers.js give it; false when it replaced an earlier one.
  bool add(Rank left, Rank right, Rank rank, Rank merged) {
    return merges_.insert_or_assign(key(left, right), PairMerge{rank, merged}).second;
  }
  PairMerge find(Rank left, Rank right) const {
    const auto it = merges_.find(key(left, right));
    return it == merges_.end() ? PairMerge{} : it->second;
  }

 private:
  static uint64_t key(Rank a, Rank b) { return (static_cast<uint64_t>(a) << 32) | b; }
  std::unordered_map<uint64_t, PairMerge> merges_;
};

// Merges the tokens `sym` (a piece's byte ids) in place: a scan of the pairs for short pieces,
// bpe_detail::merge_by_heap for long ones, O(n log n).
void merge_piece(const HfMerges& merges, std::vector<Rank>& sym);
// The same merges by a rescan of every pair after each merge, O(n^2), for any length: the
// reference merge_piece is tested against.
void merge_piece_reference(const HfMerges& merges, std::vector<Rank>& sym);

}  // namespace qkv::hf_detail
