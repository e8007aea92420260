// parse_tiktoken_ranks: a tiktoken rank file ("<base64 of the token's bytes> <rank>" per line).
// What parses must also make an Encoding or be refused with a qkv::Error (duplicate ranks, missing
// single bytes, ...), and a rank file that makes one must round-trip every token it lists.
#include "fuzz_target.h"
#include "qkv/text/bpe.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/vocab_files.h"

QKV_FUZZ_TARGET(data) {
  auto ranks = qkv::parse_tiktoken_ranks(data, "fuzz.tiktoken");
  const auto listed = ranks;
  qkv::EncodingSpec spec;
  spec.name = "fuzz";
  spec.pattern = std::string(qkv::kGpt2Pattern);
  spec.mergeable_ranks = std::move(ranks);
  const qkv::Encoding enc(std::move(spec));
  for (const auto& [bytes, rank] : listed) QKV_FUZZ_EXPECT(enc.decode_single_token_bytes(rank) == bytes);
}
