// qkv/io/token_ids.h - a list of token ids as people and programs write them: a JSON array
// ("[7120, 7002]") or integers separated by spaces, tabs, newlines or commas ("7120 7002").
#pragma once

#include <string_view>
#include <vector>

#include "qkv/text/bpe.h"

namespace qkv {

// The ids in `text` (none for blank text). Throws qkv::Error naming the first entry that is not
// an integer in [0, 2^63) (quoted as written, bounded), or JSON that is not an array of integers
// or nests too deep (see json_read.h). Whether an id is in a vocabulary is the decoder's business.
std::vector<TokenId> parse_token_ids(std::string_view text);
// The other way: "[7120, 7002, 13]\n" appended to `out`, written straight into its buffer (this is
// half the work of encoding a batch of lines).
void append_token_ids(std::string& out, const std::vector<TokenId>& ids);

}  // namespace qkv
