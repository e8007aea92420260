// Contiguous and zigzag splits of a sequence over the ranks (qkv/mpi/sequence_split.h).
#include "qkv/mpi/sequence_split.h"

#include "qkv/core/error.h"

namespace qkv::mpi {

SplitKind parse_split(const std::string& name) {
  if (name == "contiguous") return SplitKind::kContiguous;
  if (name == "zigzag") return SplitKind::kZigzag;
  fail("split '", name, "': expected contiguous or zigzag");
}

const char* split_name(SplitKind kind) { return kind == SplitKind::kZigzag ? "zigzag" : "contiguous"; }

SequenceSplit::SequenceSplit(SplitKind kind, int64_t seq_len, int ranks) : kind_(kind), T_(seq_len), N_(ranks) {
  QKV_CHECK(seq_len >= 0, "SequenceSplit: the sequence length (", seq_len, ") must not be negative");
  QKV_CHECK(ranks >= 1, "SequenceSplit: the number of ranks (", ranks, ") must be at least 1");
}

Run SequenceSplit::piece(int64_t index, int64_t pieces) const {
  const int64_t base = T_ / pieces, extra = T_ % pieces;  // the first `extra` pieces are one longer
  const int64_t begin = index * base + (index < extra ? index : extra);
  return {begin, base + (index < extra ? 1 : 0)};
}

std::vector<Run> SequenceSplit::runs(int rank) const {
  QKV_CHECK(rank >= 0 && rank < N_, "SequenceSplit: rank ", rank, " is outside [0, ", N_, ")");
  if (kind_ == SplitKind::kContiguous) return {piece(rank, N_)};
  return {piece(rank, 2 * int64_t{N_}), piece(2 * int64_t{N_} - 1 - rank, 2 * int64_t{N_})};
}

int64_t SequenceSplit::tokens(int rank) const {
  int64_t n = 0;
  for (const Run& r : runs(rank)) n += r.length;
  return n;
}

}  // namespace qkv::mpi
