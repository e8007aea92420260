// HfTokenizer::parse on the bytes as a tokenizer.json, then encoding a few texts (added-token
// prefixes, a long word, spaces, CJK, combining marks) and decoding the ids back: any input either
// gives a tokenizer whose ids are in its vocabulary and decode, or is a qkv::Error.
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "qkv/text/hf_tokenizer.h"

QKV_FUZZ_TARGET(data) {
  const qkv::HfTokenizer t = qkv::HfTokenizer::parse(data, "fuzz tokenizer.json");
  const std::vector<std::string> texts = {"Hello, world! <|im_end|> <|<|<", std::string(300, 'a'),
                                          std::string(64, ' ') + "\n\n\t", "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96",
                                          "e\xCC\x81\xCC\x81\xCC\x81 caf\xC3\xA9", "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D"};
  for (const std::string& text : texts)
    for (qkv::AddedTokens match : {qkv::AddedTokens::kAll, qkv::AddedTokens::kPlain}) {
      std::vector<qkv::TokenId> ids;
      try {
        ids = t.encode(text, match);
      } catch (const qkv::Error&) {
        continue;  // a vocabulary without a byte the text needs: a clear refusal is an answer
      }
      for (qkv::TokenId id : ids) QKV_FUZZ_EXPECT(id >= 0 && id < t.vocab_size());
      (void)t.decode(ids);
    }
}
