// UTF-8 repair as Python's bytes.decode("utf-8", "replace") does it (expected values from CPython
// 3.11), SHA-256 against FIPS 180-4's examples, and JSON string lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "qkv/core/error.h"
#include "qkv/text/hex.h"
#include "qkv/text/json_string.h"
#include "qkv/text/sha256.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

using namespace std::string_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BpeUtf8, ReplacesMaximalSubpartsAsPython) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\x61\xf0\x9f\x98\x62"s, "\x61\xef\xbf\xbd\x62"s},
      {"\xc0\xaf"s, "\xef\xbf\xbd\xef\xbf\xbd"s},
      {"\xed\xa0\x80"s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"s},
      {"\xe0\x80\x80"s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"s},
      {"\xf4\x90\x80\x80"s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"s},
      {"\xf5\x80"s, "\xef\xbf\xbd\xef\xbf\xbd"s},
      {"\xe2\x82"s, "\xef\xbf\xbd"s},
      {"\xe2\x82\xac"s, "\xe2\x82\xac"s},
      {"\xf0\x9f\x98\x80\xf0"s, "\xf0\x9f\x98\x80\xef\xbf\xbd"s},
      {"\x80\xbf\xc2"s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"s},
      {"\xc2\x41"s, "\xef\xbf\xbd\x41"s},
      {"\xef\xbf\xbd"s, "\xef\xbf\xbd"s},
      {"\xf0\x90\x80\x41\xe1\x80"s, "\xef\xbf\xbd\x41\xef\xbf\xbd"s},
      {"\xfe\xff"s, "\xef\xbf\xbd\xef\xbf\xbd"s},
      {"plain ascii, 16+ bytes long, really"s, "plain ascii, 16+ bytes long, really"s},
      {""s, ""s},
  };
  for (const auto& [in, out] : cases) {
    EXPECT_EQ(utf8::replace_invalid(in), out) << ::testing::PrintToString(in);
    EXPECT_EQ(utf8::is_valid(in), in == out) << ::testing::PrintToString(in);
  }
}

TEST(BpeUtf8, RandomBytesComeOutValidAndValidTextUnchanged) {
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    for (int n = static_cast<int>(rng() % 40); n > 0; --n)
      s += static_cast<char>(rng() % 4 == 0 ? rng() % 0x80 : 0x80 + rng() % 0x80);
    const std::string fixed = utf8::replace_invalid(s);
    EXPECT_TRUE(utf8::is_valid(fixed));
    EXPECT_EQ(utf8::replace_invalid(fixed), fixed);
    EXPECT_EQ(utf8::is_valid(s), fixed == s);
  }
  std::string all;
  for (uint32_t cp = 0; cp < 0x110000; cp += 7)
    if (cp < 0xD800 || cp >= 0xE000) utf8::append(all, cp);
  EXPECT_TRUE(utf8::is_valid(all));
  size_t i = 0;
  for (uint32_t cp = 0; cp < 0x110000; cp += 7) {
    if (cp < 0xD800 || cp >= 0xE000) {
      ASSERT_EQ(utf8::next(all, i), cp);
    }
  }
  EXPECT_EQ(i, all.size());
}

TEST(BpeSha256, KnownDigestsOnBothPaths) {
  const std::string million_a(1000000, 'a');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {million_a, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const auto& [in, digest] : cases) {
    EXPECT_EQ(sha256_hex(in), digest) << in.size() << " bytes";
    EXPECT_EQ(sha256_hex(in, /*portable=*/true), digest) << in.size() << " bytes";
  }
  // Fed in uneven pieces, every length around the block boundaries.
  std::string s;
  for (int n = 0; n < 200; ++n, s += static_cast<char>(n * 37)) {
    Sha256 a;
    for (size_t i = 0; i < s.size(); i += 7) a.update(std::string_view(s).substr(i, 7));
    std::string hex;
    for (uint8_t b : a.digest()) hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
    ASSERT_EQ(hex, sha256_hex(s, true)) << n;
  }
}

TEST(Hex, EncodesLowerCaseAndDecodesBackOrSaysWhatIsWrong) {
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  const std::string hex = hex_encode(all);
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(hex.size() - 6), "fdfeff");
  EXPECT_EQ(hex_decode(hex, "test"), all);
  EXPECT_EQ(hex_encode(std::vector<uint8_t>{}), "");
  std::string esc;
  append_hex(esc, 0x0a);
  EXPECT_EQ(esc, "0a");
  auto error_of = [](std::string_view h) {
    try {
      hex_decode(h, "generator state");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_of("abc"), "generator state: odd number of hex digits (3)");
  EXPECT_EQ(error_of("0A"), "generator state: 'A' is not a lowercase hex digit");
}

TEST(BpeJsonLines, StringsEscapesAndSurrogates) {
  const std::string doc = "\"plain\"\n  \"tab\\there\\n\"  \r\n\"\\u00e9\\ud83d\\ude00 \\ud800x \\\"q\\\" \\/\"\n\"\"";
  EXPECT_THAT(parse_json_string_lines(doc, "in"),
              ElementsAre("plain", "tab\there\n", "\xc3\xa9\xf0\x9f\x98\x80 \xef\xbf\xbdx \"q\" /", ""));
  EXPECT_TRUE(parse_json_string_lines("", "in").empty());
  EXPECT_THAT(parse_json_string_lines("\"a\"\n", "in"), ElementsAre("a"));
}

TEST(BpeJsonLines, BadLinesAreNamed) {
  auto message = [](const std::string& doc) {
    try {
      parse_json_string_lines(doc, "f.jsonl");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(message("\"ok\"\n\n\"x\""), HasSubstr("f.jsonl line 2"));
  EXPECT_THAT(message("\"ok\"\n[1, 2]"), HasSubstr("line 2: expected one JSON string"));
  EXPECT_THAT(message("\"unclosed"), HasSubstr("not closed"));
  EXPECT_THAT(message("\"a\" \"b\""), HasSubstr("more after"));
  EXPECT_THAT(message("\"\\q\""), HasSubstr("bad escape"));
  EXPECT_THAT(message("\"\\u12\""), HasSubstr("four hex digits"));
}

}  // namespace
}  // namespace qkv
