// merge_piece: see hf_merges.h.
#include "hf_merges.h"

namespace qkv::hf_detail {

namespace {
constexpr size_t kShortPiece = 96;  // tokens; up to this the rescan beats the heap's bookkeeping
}  // namespace

void merge_piece_reference(const HfMerges& merges, std::vector<Rank>& sym) {
  while (sym.size() > 1) {
    PairMerge best;
    size_t at = 0;
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      const PairMerge m = merges.find(sym[k], sym[k + 1]);
      if (m.rank < best.rank) {
        best = m;
        at = k;
      }
    }
    if (best.rank == bpe_detail::kNoRank) break;
    sym[at] = best.token;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
}

void merge_piece(const HfMerges& merges, std::vector<Rank>& sym) {
  if (sym.size() <= kShortPiece) return merge_piece_reference(merges, sym);
  bpe_detail::merge_by_heap(sym, [&](uint32_t, uint32_t, size_t, Rank left, Rank right) {
    return merges.find(left, right);
  });
}

}  // namespace qkv::hf_detail
