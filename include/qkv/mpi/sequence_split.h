// qkv/mpi/sequence_split.h - which positions of a sequence of T tokens each of N ranks holds.
//
//   contiguous: rank r holds one run, [r T / N, (r + 1) T / N) give or take the remainder: the
//               first T mod N ranks hold one token more. Under a causal mask rank r's queries see
//               r + 1 of the N key blocks: the last rank does about 2N - 1 times the first's work.
//   zigzag:     the sequence is cut into 2N runs (the first T mod 2N one token longer); rank r holds
//               runs r and 2N - 1 - r, so every rank has one early and one late run and, under a
//               causal mask, the same work give or take one run's diagonal.
// A rank's tokens are its runs in position order, concatenated: its q, k and v are (B, H, tokens, D).
// T < N (or < 2N) leaves ranks with empty runs, and ranks with no tokens at all; they still pass
// the ring's blocks on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::mpi {

enum class SplitKind { kContiguous, kZigzag };

// "contiguous" or "zigzag" -> the kind; anything else: qkv::Error naming it.
SplitKind parse_split(const std::string& name);
const char* split_name(SplitKind kind);

struct Run {
  int64_t begin = 0, length = 0;  // positions [begin, begin + length)
};

class SequenceSplit {
 public:
  SequenceSplit(SplitKind kind, int64_t seq_len, int ranks);  // seq_len >= 0, ranks >= 1
  SplitKind kind() const { return kind_; }
  int64_t seq_len() const { return T_; }
  int ranks() const { return N_; }
  // Rank r's runs in position order (1 contiguous, 2 zigzag), empty ones included.
  std::vector<Run> runs(int rank) const;
  int64_t tokens(int rank) const;  // the sum of its runs' lengths

 private:
  Run piece(int64_t index, int64_t pieces) const;  // piece `index` of T cut into `pieces`
  SplitKind kind_;
  int64_t T_;
  int N_;
};

}  // namespace qkv::mpi
