// PCRE2 pre-tokenisation (what --pattern uses), two ways:
//   - a fixed pattern (cl100k_base's, with possessive quantifiers and case-insensitive groups) on
//     the input as text;
//   - a pattern from the input: its first line is the pattern, the rest the text. A pattern PCRE2
//     rejects, or one that backtracks past the match limit, is a qkv::Error; nothing may hang or crash.
// Pieces must be in order and inside the text; an empty one (an empty match: a boundary) at most
// once at each place.
#include <algorithm>
#include <cstdint>

#include "fuzz_target.h"
#include "qkv/core/limits.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"

namespace {

constexpr std::string_view kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

void check_pieces(const qkv::Pretokenizer& p, std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t pos = 0, end = 0;
  while (pos < text.size()) {  // in rounds of at most 7 pieces, as the encoder's callers may ask
    const size_t before = pieces.size();
    const size_t next = p.split(text, pos, pieces, 7);
    QKV_FUZZ_EXPECT(next > pos || next == text.size());
    QKV_FUZZ_EXPECT(pieces.size() - before <= 7);
    pos = next;
  }
  size_t empty_at = SIZE_MAX;  // the last empty piece's place
  for (std::string_view piece : pieces) {
    const size_t at = static_cast<size_t>(piece.data() - text.data());
    QKV_FUZZ_EXPECT(piece.data() >= text.data() + end && piece.data() + piece.size() <= text.data() + text.size());
    if (piece.empty()) {
      QKV_FUZZ_EXPECT(empty_at == SIZE_MAX || at > empty_at);
      empty_at = at;
    }
    end = at + piece.size();
  }
}

}  // namespace

QKV_FUZZ_TARGET(data) {
  static const std::unique_ptr<qkv::Pretokenizer> cl100k = qkv::make_pretokenizer(std::string(kCl100kPattern));
  static const bool small_limits = [] {  // a bad pattern fails in milliseconds, not seconds
    qkv::Limits l = qkv::limits();
    l.regex_match_limit = 100'000;
    qkv::set_limits(l);
    return true;
  }();
  (void)small_limits;
  check_pieces(*cl100k, qkv::utf8::replace_invalid(data));

  const size_t nl = std::min(data.find('\n'), data.size());
  const std::string pattern = qkv::utf8::replace_invalid(data.substr(0, nl));
  const std::string text = qkv::utf8::replace_invalid(data.substr(std::min(nl + 1, data.size())));
  const std::unique_ptr<qkv::Pretokenizer> user = qkv::make_pretokenizer(pattern);
  check_pieces(*user, text);
}
