// `qkv decode`'s token-id parser (a JSON array, or integers separated by spaces or commas), then
// decoding the ids with a small byte-level encoding (the 256 single bytes and <|endoftext|>).
#include "fuzz_target.h"
#include "qkv/io/token_ids.h"
#include "qkv/text/pretokenize.h"

namespace {

const qkv::Encoding& byte_encoding() {
  static const qkv::Encoding enc = [] {
    qkv::EncodingSpec spec;
    spec.name = "bytes";
    spec.pattern = std::string(qkv::kGpt2Pattern);
    for (int b = 0; b < 256; ++b) spec.mergeable_ranks.emplace_back(std::string(1, static_cast<char>(b)), b);
    spec.special_tokens.emplace_back("<|endoftext|>", 256);
    return qkv::Encoding(std::move(spec));
  }();
  return enc;
}

}  // namespace

QKV_FUZZ_TARGET(data) {
  const std::vector<qkv::TokenId> ids = qkv::parse_token_ids(data);
  const std::string raw = byte_encoding().decode_bytes(ids);
  QKV_FUZZ_EXPECT(raw.size() <= ids.size() * 13);  // "<|endoftext|>" is the longest token
  (void)byte_encoding().decode(ids);
}
