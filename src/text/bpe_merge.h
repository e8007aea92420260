// Byte-level BPE of one piece (private to src/text): tiktoken's byte_pair_merge.
//
// The piece starts as single bytes. While some adjacent pair of parts joins into a token, the
// pair whose joined token has the lowest rank is merged, the leftmost of equal ranks first. (In a
// vocabulary made by BPE training, ranks are merge order, so this replays the merges.) The parts
// left are the tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <string_view>
#include <utility>
#include <vector>

#include "token_table.h"

namespace qkv::bpe_detail {

// Appends the tokens of piece (non-empty) to out. byte_rank[b] is the rank of the single byte b.
void byte_pair_encode(const TokenTable& ranks, const Rank* byte_rank, std::string_view piece,
                      std::vector<Rank>& out);

// The same merges in the same order by a plain O(n^2) scan (tiktoken's loop), for any length:
// the reference the fast paths are tested against.
void byte_pair_encode_reference(const TokenTable& ranks, std::string_view piece, std::vector<Rank>& out);

// A merge of two adjacent parts: its rank (lower merges first; one rank, one token) and the
// token it makes; rank kNoRank for none.
struct PairMerge {
  Rank rank = kNoRank, token = kNoRank;
};

// The merge loop both engines share, in O(n log n): tok holds the n parts' tokens (one per byte of
// the piece) and ends holding the merged parts' tokens. pair_of(start, next, end, left, right)
// gives the merge of the part of bytes [start, next) and token `left` with the part of bytes
// [next, end) and token `right`. The lowest rank merges first, the leftmost among equal ranks: a
// heap of candidate pairs ordered by (rank, start), with stale entries skipped as they surface.
template <class PairOf>
void merge_by_heap(std::vector<Rank>& tok, PairOf&& pair_of) {
  const size_t n = tok.size();
  constexpr uint32_t kEnd = UINT32_MAX;
  // Part j starts at byte j and keeps that start while it lives (merging j with its successor).
  std::vector<uint32_t> next(n), prev(n);
  std::vector<Rank> pair(n, kNoRank), made(n, kNoRank);
  std::vector<uint8_t> alive(n, 1);
  for (size_t j = 0; j < n; ++j) {
    next[j] = j + 1 < n ? static_cast<uint32_t>(j + 1) : kEnd;
    prev[j] = j > 0 ? static_cast<uint32_t>(j - 1) : kEnd;
  }
  using Candidate = std::pair<Rank, uint32_t>;  // (rank, start): the lowest rank, then leftmost
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto rescore = [&](uint32_t j) {
    PairMerge m;
    if (next[j] != kEnd) {
      const uint32_t k = next[j];
      m = pair_of(j, k, next[k] == kEnd ? n : next[k], tok[j], tok[k]);
    }
    pair[j] = m.rank;
    made[j] = m.token;
    if (m.rank != kNoRank) heap.emplace(m.rank, j);
  };
  for (size_t j = 0; j + 1 < n; ++j) rescore(static_cast<uint32_t>(j));
  while (!heap.empty()) {
    const auto [rank, j] = heap.top();
    heap.pop();
    // A stale entry: its part was merged away, or its pair changed (another pair, another rank).
    if (!alive[j] || pair[j] != rank) continue;
    const uint32_t gone = next[j];
    tok[j] = made[j];
    alive[gone] = 0;
    next[j] = next[gone];
    if (next[j] != kEnd) prev[next[j]] = j;
    rescore(j);
    if (prev[j] != kEnd) rescore(prev[j]);
  }
  size_t k = 0;
  for (uint32_t j = 0; j != kEnd; j = next[j]) tok[k++] = tok[j];
  tok.resize(k);
}

}  // namespace qkv::bpe_detail
