// byte_pair_encode: a scan over small arrays for short pieces; for long ones (runs of digits or
// spaces can be megabytes) a heap of candidate pairs ordered by (rank, position), which picks the
// same pair at every step as tiktoken's scan, in O(n log n) instead of O(n^2).
#include "bpe_merge.h"

#include <cstddef>
#include <queue>

namespace qkv::bpe_detail {
namespace {

constexpr size_t kShortPiece = 96;  // bytes; up to this the array scan wins

void merge_short(const TokenTable& ranks, const Rank* byte_rank, std::string_view piece,
                 std::vector<Rank>& out) {
  const char* s = piece.data();
  const size_t n = piece.size();
  uint32_t start[kShortPiece + 1];  // (k + 1) part boundaries
  Rank tok[kShortPiece];            // (k) the token of each part
  Rank pair[kShortPiece];           // (k - 1) the token part j and j + 1 would make, or kNoRank
  size_t k = n;
  for (size_t j = 0; j <= n; ++j) start[j] = static_cast<uint32_t>(j);
  for (size_t j = 0; j < n; ++j) tok[j] = byte_rank[static_cast<uint8_t>(s[j])];
  for (size_t j = 0; j + 1 < n; ++j) pair[j] = ranks.find(s + j, 2);
  while (k > 1) {
    Rank best = kNoRank;
    size_t i = 0;
    for (size_t j = 0; j + 1 < k; ++j)
      if (pair[j] < best) {
        best = pair[j];
        i = j;
      }
    if (best == kNoRank) break;
    tok[i] = best;
    for (size_t j = i + 1; j < k; ++j) start[j] = start[j + 1];
    for (size_t j = i + 1; j + 1 < k; ++j) tok[j] = tok[j + 1];
    for (size_t j = i + 1; j + 2 < k; ++j) pair[j] = pair[j + 1];
    --k;
    if (i + 1 < k) pair[i] = ranks.find(s + start[i], start[i + 2] - start[i]);
    if (i > 0) pair[i - 1] = ranks.find(s + start[i - 1], start[i + 1] - start[i - 1]);
  }
  out.insert(out.end(), tok, tok + k);
}

void merge_long(const TokenTable& ranks, const Rank* byte_rank, std::string_view piece, std::vector<Rank>& out) {
  const char* s = piece.data();
  const size_t n = piece.size();
  constexpr uint32_t kEnd = UINT32_MAX;
  // Part j starts at byte j and keeps that start while it lives (merging j with its successor).
  std::vector<uint32_t> next(n), prev(n);
  std::vector<Rank> tok(n), pair(n, kNoRank);
  std::vector<uint8_t> alive(n, 1);
  for (size_t j = 0; j < n; ++j) {
    next[j] = j + 1 < n ? static_cast<uint32_t>(j + 1) : kEnd;
    prev[j] = j > 0 ? static_cast<uint32_t>(j - 1) : kEnd;
    tok[j] = byte_rank[static_cast<uint8_t>(s[j])];
  }
  auto end_of = [&](uint32_t j) -> size_t { return next[j] == kEnd ? n : next[j]; };
  using Candidate = std::pair<Rank, uint32_t>;  // (rank, start): the lowest rank, then leftmost
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto rescore = [&](uint32_t j) {
    pair[j] = next[j] == kEnd ? kNoRank : ranks.find(s + j, end_of(next[j]) - j);
    if (pair[j] != kNoRank) heap.emplace(pair[j], j);
  };
  for (size_t j = 0; j + 1 < n; ++j) rescore(static_cast<uint32_t>(j));
  while (!heap.empty()) {
    const auto [rank, j] = heap.top();
    heap.pop();
    // A stale entry: its part was merged away, or its pair changed (a changed pair is a longer
    // byte string, so a different token and rank).
    if (!alive[j] || pair[j] != rank) continue;
    const uint32_t gone = next[j];
    tok[j] = rank;
    alive[gone] = 0;
    next[j] = next[gone];
    if (next[j] != kEnd) prev[next[j]] = j;
    rescore(j);
    if (prev[j] != kEnd) rescore(prev[j]);
  }
  for (uint32_t j = 0; j != kEnd; j = next[j]) out.push_back(tok[j]);
}

}  // namespace

void byte_pair_encode(const TokenTable& ranks, const Rank* byte_rank, std::string_view piece,
                      std::vector<Rank>& out) {
  if (piece.size() == 1) out.push_back(byte_rank[static_cast<uint8_t>(piece[0])]);
  else if (piece.size() <= kShortPiece) merge_short(ranks, byte_rank, piece, out);
  else merge_long(ranks, byte_rank, piece, out);
}

void byte_pair_encode_reference(const TokenTable& ranks, std::string_view piece, std::vector<Rank>& out) {
  // parts as (start) boundaries; every step rescans all pairs, as tiktoken's loop does
  std::vector<size_t> b;
  for (size_t j = 0; j <= piece.size(); ++j) b.push_back(j);
  for (;;) {
    Rank best = kNoRank;
    size_t i = 0;
    for (size_t j = 0; j + 2 < b.size(); ++j) {
      const Rank r = ranks.find(piece.substr(b[j], b[j + 2] - b[j]));
      if (r < best) {
        best = r;
        i = j;
      }
    }
    if (best == kNoRank) break;
    b.erase(b.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  for (size_t j = 0; j + 1 < b.size(); ++j) out.push_back(ranks.find(piece.substr(b[j], b[j + 1] - b[j])));
}

}  // namespace qkv::bpe_detail
