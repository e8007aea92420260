// Byte-level BPE of one piece (private to src/text): tiktoken's byte_pair_merge.
//
// The piece starts as single bytes. While some adjacent pair of parts joins into a token, the
// pair whose joined token has the lowest rank is merged, the leftmost of equal ranks first. (In a
// vocabulary made by BPE training, ranks are merge order, so this replays the merges.) The parts
// left are the tokens.
#pragma once

#include <string_view>
#include <vector>

#include "token_table.h"

namespace qkv::bpe_detail {

// Appends the tokens of piece (non-empty) to out. byte_rank[b] is the rank of the single byte b.
void byte_pair_encode(const TokenTable& ranks, const Rank* byte_rank, std::string_view piece,
                      std::vector<Rank>& out);

// The same merges in the same order by a plain O(n^2) scan (tiktoken's loop), for any length:
// the reference the fast paths are tested against.
void byte_pair_encode_reference(const TokenTable& ranks, std::string_view piece, std::vector<Rank>& out);

}  // namespace qkv::bpe_detail
