// The hand-written scanner for GPT-2's pattern, alternative by alternative (first match wins, as
// in the regex):
//   1 '(?:[sdmt]|ll|ve|re)   a contraction, case-sensitive
//   2  ?\p{L}+               an optional U+0020 and a run of letters
//   3  ?\p{N}+               an optional U+0020 and a run of numbers
//   4  ?[^\s\p{L}\p{N}]+     an optional U+0020 and a run of anything else
//   5 \s+(?!\S)              a whitespace run reaching the end or, by backtracking, all of a run
//                            but its last character when a non-space follows (so that character
//                            can lead the next piece: "a  b" -> "a" " " " b")
//   6 \s+                    a single whitespace character before a non-space
// Classes come from unicode_classes.h (tiktoken's). ASCII takes a 128-entry table.
#include <array>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"
#include "unicode_classes.h"

namespace qkv {
namespace {

using unicode::CharClass;

constexpr std::array<uint8_t, 128> ascii_classes() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    uint8_t k = unicode::kOther;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k = unicode::kLetter;
    else if (c >= '0' && c <= '9') k = unicode::kNumber;
    else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) k = unicode::kSpace;
    t[c] = k;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAscii = ascii_classes();

class Gpt2Scanner final : public Pretokenizer {
 public:
  Gpt2Scanner() : Pretokenizer(std::string(kGpt2Pattern)), table_(unicode::class_table()) {}
  const char* engine() const override { return "gpt2-scanner"; }

  size_t split(std::string_view text, size_t pos, std::vector<std::string_view>& pieces,
               size_t max) const override {
    const size_t n = text.size();
    for (size_t count = 0; pos < n && count < max; ++count) {
      const size_t end = piece_end(text, pos);
      pieces.emplace_back(text.data() + pos, end - pos);
      pos = end;
    }
    return pos;
  }

 private:
  // The class of the code point at i, and the position after it.
  CharClass class_at(std::string_view text, size_t i, size_t& after) const {
    const auto b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      after = i + 1;
      return static_cast<CharClass>(kAscii[b]);
    }
    after = i;
    return table_(utf8::next(text, after));
  }

  // The end of the run of class c (not kSpace) that starts at i: ASCII stretches 16 bytes at a
  // time, so that a word's length costs no branch per byte, other characters one by one.
  size_t run_end(std::string_view text, size_t i, CharClass c) const {
    const size_t n = text.size();
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    for (;;) {
      i = ascii_run_end(s, i, n, c);
      if (i >= n || s[i] < 0x80) return i;
      size_t after;
      if (class_at(text, i, after) != c) return i;
      i = after;
    }
  }

  // The first position from i that is not an ASCII byte of class c.
  static size_t ascii_run_end(const uint8_t* s, size_t i, size_t n, CharClass c) {
#if defined(__SSE2__)
    while (i + 16 <= n) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const unsigned in_class = static_cast<unsigned>(_mm_movemask_epi8(ascii_class_mask(x, c)));
      if (in_class != 0xFFFF) return i + static_cast<size_t>(__builtin_ctz(~in_class));
      i += 16;
    }
#endif
    while (i < n && s[i] < 0x80 && kAscii[s[i]] == c) ++i;
    return i;
  }

#if defined(__SSE2__)
  // 0xFF in each byte of x that is ASCII of class c (kLetter, kNumber or kOther).
  static __m128i ascii_class_mask(__m128i x, CharClass c) {
    auto at_most = [](__m128i v, char k) { return _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(k)), v); };
    const __m128i letter = at_most(_mm_sub_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8('a')), 25);
    if (c == unicode::kLetter) return letter;
    const __m128i digit = at_most(_mm_sub_epi8(x, _mm_set1_epi8('0')), 9);
    if (c == unicode::kNumber) return digit;
    const __m128i space =
        _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(' ')), at_most(_mm_sub_epi8(x, _mm_set1_epi8(0x09)), 4));
    const __m128i high = _mm_cmplt_epi8(x, _mm_setzero_si128());  // >= 0x80: not ASCII
    return _mm_andnot_si128(_mm_or_si128(_mm_or_si128(letter, digit), _mm_or_si128(space, high)),
                            _mm_set1_epi8(-1));
  }
#endif

  size_t piece_end(std::string_view text, size_t p) const {
    const size_t n = text.size();
    const char c0 = text[p];
    if (c0 == '\'' && p + 1 < n) {  // 1
      const char a = text[p + 1];
      if (a == 's' || a == 'd' || a == 'm' || a == 't') return p + 2;
      if (p + 2 < n) {
        const char b = text[p + 2];
        if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return p + 3;
      }
    }
    size_t after;
    CharClass k = class_at(text, p, after);
    if (c0 == ' ' && after < n) {  // 2, 3, 4 with their optional space
      size_t next_after;
      const CharClass k1 = class_at(text, after, next_after);
      if (k1 != unicode::kSpace) return run_end(text, next_after, k1);
    }
    if (k != unicode::kSpace) return run_end(text, after, k);  // 2, 3, 4 without it
    // 5 and 6: the whitespace run from p; last = where its last character starts
    size_t last = p, i = after;
    while (i < n) {
      size_t next_i;
      if (class_at(text, i, next_i) != unicode::kSpace) break;
      last = i;
      i = next_i;
    }
    if (i == n) return n;       // 5: the run reaches the end
    if (last > p) return last;  // 5: backtrack one character, a space follows
    return i;                   // 6: one whitespace character before a non-space
  }

  const unicode::ClassTable& table_;
};

}  // namespace

std::unique_ptr<Pretokenizer> make_gpt2_scanner() { return std::make_unique<Gpt2Scanner>(); }

std::unique_ptr<Pretokenizer> make_pretokenizer(const std::string& pattern) {
  if (pattern == kGpt2Pattern || pattern == kGpt2PatternLong) return make_gpt2_scanner();
  return make_pcre2_pretokenizer(pattern);
}

std::vector<std::string_view> pretokenize(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  while (pos < text.size()) pos = p.split(text, pos, pieces, SIZE_MAX);
  return pieces;
}

}  // namespace qkv
