// byte_pair_encode: a scan over small arrays for short pieces; for long ones (runs of digits or
// spaces can be megabytes) a heap of candidate pairs ordered by (rank, position), which picks the
// same pair at every step as tiktoken's scan, in O(n log n) instead of O(n^2).
#include "bpe_merge.h"

#include <cstddef>

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
  std::vector<Rank> tok(piece.size());
  for (size_t j = 0; j < piece.size(); ++j) tok[j] = byte_rank[static_cast<uint8_t>(s[j])];
  merge_by_heap(tok, [&](uint32_t start, uint32_t, size_t end, Rank, Rank) {
    const Rank r = ranks.find(s + start, end - start);  // the joined bytes' rank is the token
    return PairMerge{r, r};
  });
  out.insert(out.end(), tok.begin(), tok.end());
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
