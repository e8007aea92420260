// Pre-tokenisation and BPE on arbitrary bytes, with GPT-2's encoding when its files are installed
// (load_gpt2(): QKV_VOCAB_DIR or the usual places), else a small table (the 256 bytes and a few
// merges of English). Checks, on every input:
//   - GPT-2's hand-written scanner gives the same pieces as PCRE2 with GPT-2's pattern (on text
//     below U+0800, where tiktoken's Unicode 16 and Debian PCRE2's Unicode 14 agree);
//   - decode(encode(bytes)) is the bytes as errors="replace" repairs them, with special tokens
//     allowed and as plain text;
//   - encode_batch on the input's lines, on 3 threads, equals encoding each line alone.
#include <algorithm>

#include "fuzz_target.h"
#include "qkv/text/bpe.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"
#include "qkv/text/vocab_files.h"

namespace {

qkv::Encoding small_encoding() {
  qkv::EncodingSpec spec;
  spec.name = "small";
  spec.pattern = std::string(qkv::kGpt2Pattern);
  for (int b = 0; b < 256; ++b) spec.mergeable_ranks.emplace_back(std::string(1, static_cast<char>(b)), b);
  for (const char* m : {"th", "he", "in", " t", "the", " the", "er", "an", " a", "on", "re", "ing", "\xC3\xA9"})
    spec.mergeable_ranks.emplace_back(m, static_cast<qkv::TokenId>(spec.mergeable_ranks.size()));
  spec.special_tokens.emplace_back("<|endoftext|>", static_cast<qkv::TokenId>(spec.mergeable_ranks.size()));
  return qkv::Encoding(std::move(spec));
}

const qkv::Encoding& encoding() {
  static const qkv::Encoding enc = [] {
    try {
      qkv::Encoding gpt2 = qkv::load_gpt2();
      std::fprintf(stderr, "bpe_gpt2: GPT-2's vocabulary (%lld tokens)\n", static_cast<long long>(gpt2.n_vocab()));
      return gpt2;
    } catch (const qkv::Error&) {
      std::fprintf(stderr, "bpe_gpt2: GPT-2's vocabulary is not installed; a small table instead\n");
      return small_encoding();
    }
  }();
  return enc;
}

bool below_u0800(std::string_view text) {
  for (size_t i = 0; i < text.size();)
    if (qkv::utf8::next(text, i) >= 0x800) return false;
  return true;
}

}  // namespace

QKV_FUZZ_TARGET(data) {
  static const std::unique_ptr<qkv::Pretokenizer> scanner = qkv::make_gpt2_scanner();
  static const std::unique_ptr<qkv::Pretokenizer> pcre2 = qkv::make_pcre2_pretokenizer(std::string(qkv::kGpt2Pattern));
  const std::string text = qkv::utf8::replace_invalid(data);

  const std::vector<std::string_view> pieces = qkv::pretokenize(*scanner, text);
  size_t end = 0;
  for (std::string_view p : pieces) {  // non-empty, in order, inside the text
    QKV_FUZZ_EXPECT(!p.empty() && p.data() >= text.data() + end && p.data() + p.size() <= text.data() + text.size());
    end = static_cast<size_t>(p.data() + p.size() - text.data());
  }
  if (below_u0800(text)) QKV_FUZZ_EXPECT(pieces == qkv::pretokenize(*pcre2, text));

  const qkv::Encoding& enc = encoding();
  const std::vector<qkv::TokenId> plain = enc.encode_ordinary(data);
  QKV_FUZZ_EXPECT(enc.decode(plain) == text);
  QKV_FUZZ_EXPECT(enc.decode_bytes(plain) == text);
  const std::vector<qkv::TokenId> special = enc.encode(data, qkv::SpecialTokens::all());
  QKV_FUZZ_EXPECT(enc.decode(special) == text);
  QKV_FUZZ_EXPECT(special.size() <= plain.size());

  std::vector<std::string> lines;
  for (size_t i = 0; i <= data.size() && lines.size() < 64;) {
    const size_t nl = std::min(data.find('\n', i), data.size());
    lines.emplace_back(data.substr(i, nl - i));
    i = nl + 1;
  }
  const std::vector<std::vector<qkv::TokenId>> batch = enc.encode_ordinary_batch(lines, 3);
  QKV_FUZZ_EXPECT(batch.size() == lines.size());
  for (size_t k = 0; k < lines.size(); ++k) QKV_FUZZ_EXPECT(batch[k] == enc.encode_ordinary(lines[k]));
}
