// Both tokenizer engines take time linear in their input on the texts that made them quadratic:
// one long word, runs of spaces, newlines or punctuation, CJK without spaces, combining marks (in
// alternating classes, the worst case of canonical ordering), and the prefix many added / special
// tokens share. Each case is timed at n and at 4n (the text, and for the added tokens their number
// too) and the ratio judged, not the time: linear work gives about 4, quadratic 16. Each time is
// the process's CPU time, the least of five runs taken in turn with the other size (noise only
// adds), and the bound, 10, sits between the two.
#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/text/bpe.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

using json = nlohmann::json;

constexpr double kLinearBound = 10.0;  // t(4n) / t(n): about 4 when linear, 16 when quadratic

// The process's CPU time (all its threads), not the wall clock: other processes on a busy machine
// (ctest -j, a build beside it) do not count against it. A timing test of wall-clock time failed
// once, at a ratio of 10.2, with two builds and two tests sharing two cores.
double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds_of(const std::function<void()>& f) {
  const double t0 = cpu_seconds();
  f();
  return cpu_seconds() - t0;
}

std::string byte_level_spelling(std::string_view bytes) {
  std::string out;
  for (char c : bytes) utf8::append(out, byte_level_char(static_cast<uint8_t>(c)));
  return out;
}

// A vocabulary grown by merges, in order: the 256 bytes, then each unit built from its bytes and
// doubled eight times (so long runs merge many times), and every pair of the letters a..j.
struct Merges {
  std::vector<std::pair<std::string, std::string>> pairs;  // in rank order
  std::vector<std::string> tokens;                         // the merged tokens, in order

  void add(const std::string& left, const std::string& right) {
    pairs.emplace_back(left, right);
    const std::string joined = left + right;
    if (std::find(tokens.begin(), tokens.end(), joined) == tokens.end()) tokens.push_back(joined);
  }
  Merges() {
    for (const std::string unit : {"a", " ", "\n", "!", "\xE4\xB8\x80", "\xCC\x81", "\xCC\x96"}) {
      std::string built(1, unit[0]);
      for (size_t k = 1; k < unit.size(); ++k) {
        add(built, std::string(1, unit[k]));
        built += unit[k];
      }
      for (int d = 0; d < 8; ++d) {
        add(built, built);
        built += built;
      }
    }
    for (char x = 'a'; x <= 'j'; ++x)
      for (char y = 'a'; y <= 'j'; ++y)
        if (!(x == 'a' && y == 'a')) add(std::string(1, x), std::string(1, y));
  }
};

const Merges& merges() {
  static const Merges m;
  return m;
}

// Qwen3's pattern and its NFC normalizer, the vocabulary above, `added` added tokens <|t0|>, ...
HfTokenizer hf_tokenizer(int added) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_spelling(std::string(1, static_cast<char>(b)))] = b;
  int next = 256;
  for (const std::string& t : merges().tokens) vocab[byte_level_spelling(t)] = next++;
  json list = json::array();
  for (const auto& [l, r] : merges().pairs) list.push_back(byte_level_spelling(l) + " " + byte_level_spelling(r));
  json added_tokens = json::array();
  for (int k = 0; k < added; ++k)
    added_tokens.push_back({{"id", next++}, {"content", "<|t" + std::to_string(k) + "|>"}, {"special", true}});
  const json j = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", list}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"},
                       {"pattern",
                        {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                       {"behavior", "Isolated"}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", added_tokens}};
  return HfTokenizer::parse(j.dump(), "linear.json");
}

// GPT-2's pattern, the same merges as ranks, `specials` special tokens <|s0|>, ...
Encoding tiktoken_encoding(int specials) {
  EncodingSpec s;
  s.name = "linear";
  s.pattern = std::string(kGpt2Pattern);
  for (int b = 0; b < 256; ++b) s.mergeable_ranks.emplace_back(std::string(1, static_cast<char>(b)), b);
  TokenId next = 256;
  for (const std::string& t : merges().tokens) s.mergeable_ranks.emplace_back(t, next++);
  for (int k = 0; k < specials; ++k) s.special_tokens.emplace_back("<|s" + std::to_string(k) + "|>", next++);
  return Encoding(s);
}

// The texts, each of about `n` bytes.
std::vector<std::pair<std::string, std::string>> texts(size_t n) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string word;
  uint32_t x = 7;
  while (word.size() < n) {
    x = x * 1103515245u + 12345u;
    word += static_cast<char>('a' + (x >> 16) % 10);
  }
  out.emplace_back("one long word", word);
  out.emplace_back("spaces", std::string(n, ' '));
  out.emplace_back("newlines", std::string(n, '\n'));
  out.emplace_back("punctuation", std::string(n, '!'));
  std::string cjk, marks = "a";
  while (cjk.size() < n) cjk += "\xE4\xB8\x80";
  while (marks.size() < n) marks += "\xCC\x81\xCC\x96";  // U+0301 (class 230), U+0316 (class 220), ...
  out.emplace_back("CJK", cjk);
  out.emplace_back("combining marks", marks);
  return out;
}

// The least of 5 runs of each size, the sizes taken in turn so that both see the same machine.
void expect_linear(const std::string& what, const std::function<void(size_t)>& run, size_t n) {
  double small = 1e30, large = 1e30;
  for (int k = 0; k < 5; ++k) {
    small = std::min(small, seconds_of([&] { run(n); }));
    large = std::min(large, seconds_of([&] { run(4 * n); }));
  }
  EXPECT_LT(large / small, kLinearBound) << what << ": " << small * 1e3 << " ms at n = " << n << ", " << large * 1e3
                                         << " ms at 4n";
}

constexpr size_t kN = 16 * 1024;

TEST(TokenizerLinear, TokenizerJsonOnLongPieces) {
  const HfTokenizer t = hf_tokenizer(0);
  const auto small = texts(kN), large = texts(4 * kN);
  for (size_t k = 0; k < small.size(); ++k)
    expect_linear("tokenizer.json, " + small[k].first, [&](size_t n) { (void)t.encode(n == kN ? small[k].second : large[k].second); }, kN);
  EXPECT_EQ(t.decode(t.encode(small[0].second)), small[0].second);
}

TEST(TokenizerLinear, TiktokenOnLongPieces) {
  const Encoding e = tiktoken_encoding(1);
  const auto small = texts(kN), large = texts(4 * kN);
  for (size_t k = 0; k < small.size(); ++k)
    expect_linear("tiktoken, " + small[k].first,
                  [&](size_t n) { (void)e.encode(n == kN ? small[k].second : large[k].second, SpecialTokens::all()); }, kN);
  EXPECT_EQ(e.decode(e.encode_ordinary(small[0].second)), small[0].second);
}

std::string prefixes(size_t n) {
  std::string s;
  while (s.size() < n) s += "<|";
  return s;
}

TEST(TokenizerLinear, AddedTokensSharingAPrefix) {
  // n bytes of "<|<|..." against n / 16 added tokens <|tK|>, then four times both.
  const HfTokenizer small = hf_tokenizer(kN / 16), large = hf_tokenizer(4 * kN / 16);
  const std::string a = prefixes(kN) + "<|t3|>", b = prefixes(4 * kN) + "<|t3|>";
  expect_linear("tokenizer.json, added-token prefixes",
                [&](size_t n) { (void)(n == kN ? small.encode(a) : large.encode(b)); }, kN);
  EXPECT_EQ(small.encode(a).back(), small.added_token("<|t3|>"));
  // the same with the special ones left as text (a chat message's)
  expect_linear("tokenizer.json, added-token prefixes as text",
                [&](size_t n) { (void)(n == kN ? small.encode(a, AddedTokens::kPlain) : large.encode(b, AddedTokens::kPlain)); },
                kN);
}

TEST(TokenizerLinear, SpecialTokensSharingAPrefix) {
  const Encoding small = tiktoken_encoding(kN / 16), large = tiktoken_encoding(4 * kN / 16);
  const std::string a = prefixes(kN) + "<|s3|>", b = prefixes(4 * kN) + "<|s3|>";
  expect_linear("tiktoken, special-token prefixes, allowed",
                [&](size_t n) { (void)(n == kN ? small : large).encode(n == kN ? a : b, SpecialTokens::all()); }, kN);
  expect_linear("tiktoken, special-token prefixes, disallowed",
                [&](size_t n) {
                  try {
                    (void)(n == kN ? small : large).encode(n == kN ? a : b);
                    ADD_FAILURE() << "<|s3|> is disallowed";
                  } catch (const DisallowedSpecialError& e) {
                    EXPECT_EQ(e.token, "<|s3|>");
                  }
                },
                kN);
}

}  // namespace
}  // namespace qkv
