// qkv/text/pretokenize.h - splitting text into the pieces that BPE then encodes one by one.
//
// An encoding's pattern is a regular expression; its pieces are the successive matches
// (tiktoken: regex.find_iter(text)), and text between matches belongs to no piece. GPT-2's:
//
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
//   "Your journey starts  with 12 steps!\n"
//     -> "Your" " journey" " starts" " " " with" " 12" " steps" "!" "\n"
//   that is: a contraction; an optional space and letters; an optional space and digits; an
//   optional space and other symbols; a whitespace run that does not swallow the space before a
//   word (it stops one character early); any other whitespace.
//
// make_pretokenizer(pattern) gives, for GPT-2's pattern (in either of tiktoken's spellings), a
// hand-written scanner with the Unicode classes of tiktoken's own regex engine (Unicode 16,
// \s = White_Space; src/text/unicode_classes.cc), and PCRE2 with its JIT for any other pattern.
// The PCRE2 matcher (make_pcre2_pretokenizer) is also the reference the scanner is tested against;
// its Unicode classes are PCRE2's (Unicode 14 in Debian 12's 10.42), so it may disagree with tiktoken
// on characters newer than that. An empty match yields no piece; the search resumes one character on.
//
// Text must be well-formed UTF-8 (qkv::utf8::replace_invalid makes it so).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv {

// GPT-2's pattern as tiktoken 0.x's Python package writes it (r50k_base, gpt2).
inline constexpr std::string_view kGpt2Pattern =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The same pattern as GPT-2's encoder.py and tiktoken's npm package write it.
inline constexpr std::string_view kGpt2PatternLong =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Pretokenizer {
 public:
  virtual ~Pretokenizer() = default;
  // Appends the pieces of text that start at or after pos, at most max of them, and returns the
  // position to continue from (text.size() once the text is done). An empty match is an empty piece
  // where it matched: a boundary between the text before and after it (Hugging Face's Split keeps
  // them apart; tiktoken's encoding of it is nothing).
  virtual size_t split(std::string_view text, size_t pos, std::vector<std::string_view>& pieces,
                       size_t max) const = 0;
  virtual const char* engine() const = 0;  // "gpt2-scanner" or "pcre2-jit"
  const std::string& pattern() const { return pattern_; }

 protected:
  explicit Pretokenizer(std::string pattern) : pattern_(std::move(pattern)) {}

 private:
  std::string pattern_;
};

// The scanner for GPT-2's pattern, PCRE2 for any other. Throws qkv::Error for a pattern PCRE2
// rejects, with PCRE2's message and the offset.
std::unique_ptr<Pretokenizer> make_pretokenizer(const std::string& pattern);
std::unique_ptr<Pretokenizer> make_pcre2_pretokenizer(const std::string& pattern);
std::unique_ptr<Pretokenizer> make_gpt2_scanner();

// All pieces of text at once.
std::vector<std::string_view> pretokenize(const Pretokenizer& p, std::string_view text);

}  // namespace qkv
