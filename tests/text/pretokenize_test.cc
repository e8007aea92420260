// Pre-tokenisation: the GPT-2 scanner on hand-checked examples, and against PCRE2 running GPT-2's
// pattern (the reference) on random text wherever the two engines' Unicode tables agree (PCRE2 in
// Debian 12 is Unicode 14; the scanner has tiktoken's Unicode 16 classes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "text/unicode_classes.h"
#include "qkv/core/error.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"
#include "test_json.h"

namespace qkv {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

std::vector<std::string> pieces(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view v : pretokenize(p, text)) out.emplace_back(v);
  return out;
}

const Pretokenizer& scanner() {
  static const std::unique_ptr<Pretokenizer> p = make_gpt2_scanner();
  return *p;
}
const Pretokenizer& pcre2_gpt2() {
  static const std::unique_ptr<Pretokenizer> p = make_pcre2_pretokenizer(std::string(kGpt2Pattern));
  return *p;
}

TEST(BpePretokenize, Gpt2Examples) {
  EXPECT_THAT(pieces(scanner(), "Your journey starts  with 12 steps!\n"),
              ElementsAre("Your", " journey", " starts", " ", " with", " 12", " steps", "!", "\n"));
  EXPECT_THAT(pieces(scanner(), "I'm you'RE they'll 'tis ''s"),
              ElementsAre("I", "'m", " you", "'", "RE", " they", "'ll", " '", "tis", " ''", "s"));
  EXPECT_THAT(pieces(scanner(), "a  \n\n  b   "), ElementsAre("a", "  \n\n ", " b", "   "));
  EXPECT_THAT(pieces(scanner(), "x\ty\n z"), ElementsAre("x", "\t", "y", "\n", " z"));
  EXPECT_THAT(pieces(scanner(), "3.14 ½ ٣٤ abc123"), ElementsAre("3", ".", "14", " ½", " ٣٤", " abc", "123"));
  EXPECT_THAT(pieces(scanner(), "e\u0301 !?! --x"), ElementsAre("e", "\u0301", " !?!", " --", "x"));
  EXPECT_THAT(pieces(scanner(), "a\u00a0b\u3000\u3000c"), ElementsAre("a", "\u00a0", "b", "\u3000", "\u3000", "c"));
  EXPECT_THAT(pieces(scanner(), " "), ElementsAre(" "));
  EXPECT_THAT(pieces(scanner(), ""), ElementsAre());
  // tiktoken's Unicode 16 letters (U+1C89 CYRILLIC CAPITAL LETTER TJE) are letters here.
  EXPECT_THAT(pieces(scanner(), "a\u1c89b"), ElementsAre("a\u1c89b"));
}

TEST(BpePretokenize, BothSpellingsOfGpt2sPatternGetTheScanner) {
  EXPECT_STREQ(make_pretokenizer(std::string(kGpt2Pattern))->engine(), "gpt2-scanner");
  EXPECT_STREQ(make_pretokenizer(std::string(kGpt2PatternLong))->engine(), "gpt2-scanner");
  EXPECT_STREQ(make_pretokenizer("\\w+")->engine(), "pcre2-jit");
}

// Code points on which PCRE2 and the scanner's table agree, drawn from many blocks.
std::vector<uint32_t> agreeing_alphabet() {
  const auto letter = make_pcre2_pretokenizer("\\p{L}"), number = make_pcre2_pretokenizer("\\p{N}"),
             space = make_pcre2_pretokenizer("\\s");
  const unicode::ClassTable& table = unicode::class_table();
  std::vector<uint32_t> candidates;
  for (uint32_t cp = 0; cp < 0x250; ++cp) candidates.push_back(cp);
  for (uint32_t cp : {0x85u, 0xA0u, 0x1680u, 0x180Eu, 0x2000u, 0x200Au, 0x200Bu, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu,
                      0x3000u, 0xFEFFu, 0x1C89u, 0xA7CBu})
    candidates.push_back(cp);
  std::mt19937 rng(3);
  for (int i = 0; i < 3000; ++i) candidates.push_back(static_cast<uint32_t>(rng() % 0x30000));
  std::vector<uint32_t> out;
  for (uint32_t cp : candidates) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    std::string s;
    utf8::append(s, cp);
    const int pcre = !pretokenize(*space, s).empty()    ? unicode::kSpace
                     : !pretokenize(*letter, s).empty() ? unicode::kLetter
                     : !pretokenize(*number, s).empty() ? unicode::kNumber
                                                        : unicode::kOther;
    if (pcre == table(cp)) out.push_back(cp);
  }
  return out;
}

TEST(BpePretokenize, ScannerMatchesPcre2OnRandomText) {
  const std::vector<uint32_t> alphabet = agreeing_alphabet();
  ASSERT_GT(alphabet.size(), 2500u);
  std::mt19937 rng(9);
  const std::vector<std::string> words = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", " ", "  ", "\n", " '", "''"};
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    for (int n = static_cast<int>(rng() % 20); n > 0; --n) {
      const auto pick = static_cast<unsigned>(rng() % 10);
      if (pick < 3) s += words[rng() % words.size()];
      else if (pick < 6) s += static_cast<char>(0x20 + rng() % 0x60);
      else utf8::append(s, alphabet[rng() % alphabet.size()]);
    }
    ASSERT_EQ(pieces(scanner(), s), pieces(pcre2_gpt2(), s)) << "text: " << ::testing::PrintToString(s);
  }
}

TEST(BpePretokenize, ScannerMatchesPcre2OnLongRuns) {
  for (const std::string& unit : {std::string(" "), std::string("\n"), std::string(" \t"), std::string("ab"),
                                  std::string("9"), std::string("!"), std::string("\u3000")}) {
    std::string s = "x";
    for (int i = 0; i < 5000; ++i) s += unit;
    s += "y";
    EXPECT_EQ(pieces(scanner(), s), pieces(pcre2_gpt2(), s)) << ::testing::PrintToString(unit);
    s.pop_back();
    EXPECT_EQ(pieces(scanner(), s), pieces(pcre2_gpt2(), s)) << ::testing::PrintToString(unit);
  }
}

TEST(BpePretokenize, SplitResumesWhereItStopped) {
  const std::string text = "one two  three\n\nfour 5 6!";
  std::vector<std::string_view> got;
  for (size_t pos = 0; pos < text.size();) pos = scanner().split(text, pos, got, 2);
  EXPECT_EQ(got, pretokenize(scanner(), text));
  got.clear();
  for (size_t pos = 0; pos < text.size();) pos = pcre2_gpt2().split(text, pos, got, 1);
  EXPECT_EQ(got, pretokenize(scanner(), text));
}

TEST(BpePretokenize, Pcre2OtherPatternsUnmatchedTextAndEmptyMatches) {
  const auto words = make_pcre2_pretokenizer("[a-z]+");
  EXPECT_THAT(pieces(*words, "ab, cd!"), ElementsAre("ab", "cd"));
  // empty matches are empty pieces where they matched (boundaries for Hugging Face's Split), one
  // character apart: before b, after aa (before b), before the 2-byte e-acute
  const auto maybe = make_pcre2_pretokenizer("a*");
  const std::string text = "baab\u00e9a";
  std::vector<std::string_view> got;
  maybe->split(text, 0, got, SIZE_MAX);
  EXPECT_THAT(got, ElementsAre("", "aa", "", "", "a"));
  std::vector<size_t> at;
  for (std::string_view p : got) at.push_back(static_cast<size_t>(p.data() - text.data()));
  EXPECT_THAT(at, ElementsAre(0u, 1u, 3u, 4u, 6u));
  EXPECT_THROW(make_pcre2_pretokenizer("(?<"), Error);
}

}  // namespace
}  // namespace qkv
