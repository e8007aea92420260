// data_gym_to_mergeable_ranks: GPT-2's vocab.bpe and encoder.json. The input is both files, split
// at the first "\n=====\n" (vocab.bpe before it, encoder.json after; no separator: all vocab.bpe
// and an empty encoder.json).
#include "fuzz_target.h"
#include "qkv/text/vocab_files.h"

QKV_FUZZ_TARGET(data) {
  constexpr std::string_view kSeparator = "\n=====\n";
  const size_t cut = data.find(kSeparator);
  const std::string_view vocab_bpe = data.substr(0, cut);
  const std::string_view encoder_json =
      cut == std::string_view::npos ? std::string_view() : data.substr(cut + kSeparator.size());
  const auto ranks = qkv::data_gym_to_mergeable_ranks(vocab_bpe, encoder_json);
  QKV_FUZZ_EXPECT(ranks.size() >= 256);  // every single byte is a token
}
