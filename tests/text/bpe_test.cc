// GPT-2's BPE against tiktoken: the book's cases, fixtures tiktoken made (tests/data/gpt2_cases.json,
// tests/tiktoken/make_gpt2_cases.js), special-token rules, errors, bad bytes, batches, and the merge
// rule itself on small made-up vocabularies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "text/bpe_merge.h"
#include "qkv/core/error.h"
#include "qkv/text/bpe.h"
#include "qkv/text/utf8.h"
#include "qkv/text/vocab_files.h"
#include "test_json.h"
#include "test_support.h"

namespace qkv {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

// GPT-2's encoding through the normal lookup; if the files are missing every test using it fails
// with the lookup error (which lists where it looked and how to install them).
const Encoding& gpt2() {
  static const Encoding e = load_gpt2();
  return e;
}

const json& book_case(const std::string& name) {
  static const json doc = testing_support::load_python_json(std::string(QKV_TEST_DATA_DIR) + "/book.json");
  for (const json& c : doc["cases"])
    if (c["name"] == name) return c["expected"];
  throw std::runtime_error("no case " + name + " in book.json");
}

const json& tiktoken_cases() {
  static const json doc = testing_support::load_python_json(std::string(QKV_TEST_DATA_DIR) + "/gpt2_cases.json");
  return doc["cases"];
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

SpecialTokens special_arg(const json& j) {
  if (j.is_string()) return SpecialTokens::parse(j.get<std::string>());
  return SpecialTokens::only(j.get<std::vector<std::string>>());
}

TEST(BpeBook, EncodeTheSentence) {
  const json& c = book_case("gpt2.encode");
  const std::vector<TokenId> ids = gpt2().encode(c["text"].get<std::string>(), SpecialTokens::only({"<|endoftext|>"}));
  EXPECT_EQ(ids, c["ids"].get<std::vector<TokenId>>());
  std::vector<std::string> pieces;
  for (TokenId id : ids) pieces.push_back(gpt2().decode_single_token_bytes(id));
  EXPECT_EQ(pieces, c["pieces"].get<std::vector<std::string>>());
  EXPECT_EQ(gpt2().n_vocab(), c["n_vocab"].get<int64_t>());
  EXPECT_EQ(gpt2().decode(ids), c["text"].get<std::string>());
}

TEST(BpeBook, DecodeSingleTokens) {
  const json& c = book_case("gpt2.decode_single_token");
  ASSERT_EQ(c.size(), 10u);
  for (const auto& [id, text] : c.items())
    EXPECT_EQ(utf8::replace_invalid(gpt2().decode_single_token_bytes(std::stoll(id))), text.get<std::string>()) << id;
}

TEST(BpeBook, EncodeWithEndOfText) {
  const json& c = book_case("gpt2.encode_special");
  EXPECT_EQ(gpt2().encode(c["text"].get<std::string>(), SpecialTokens::only({"<|endoftext|>"})),
            c["ids"].get<std::vector<TokenId>>());
}

TEST(BpeEncode, VocabularyFacts) {
  EXPECT_EQ(gpt2().n_vocab(), 50257);
  EXPECT_EQ(gpt2().eot_token(), 50256);
  EXPECT_EQ(gpt2().name(), "gpt2");
  EXPECT_THAT(gpt2().special_tokens_set(), ElementsAre("<|endoftext|>"));
  EXPECT_STREQ(gpt2().pretokenizer_engine(), "gpt2-scanner");
  EXPECT_EQ(gpt2().decode_single_token_bytes(0), "!");
  EXPECT_EQ(gpt2().decode_single_token_bytes(188), std::string(1, '\0'));  // first non-printable byte
  EXPECT_EQ(gpt2().decode_single_token_bytes(220), " ");
  EXPECT_EQ(gpt2().decode_single_token_bytes(50256), "<|endoftext|>");
  EXPECT_TRUE(gpt2().is_special_token(50256));
  EXPECT_FALSE(gpt2().is_special_token(220));
  EXPECT_EQ(gpt2().encode_single_token(" journey"), 7002);
  EXPECT_EQ(gpt2().encode_single_token("<|endoftext|>"), 50256);
  EXPECT_THAT(testing_support::error_of([] { gpt2().encode_single_token("journeys starts"); }), HasSubstr("not a single token"));
}

TEST(BpeEncode, MatchesTiktokenFixtures) {
  int checked = 0;
  for (const json& c : tiktoken_cases()) {
    const std::string why = c["why"];
    const std::vector<TokenId> expected = c["ids"].get<std::vector<TokenId>>();
    if (c.contains("bytes_hex")) {
      const std::string bytes = from_hex(c["bytes_hex"]);
      EXPECT_EQ(gpt2().encode_ordinary(bytes), expected) << why;
      EXPECT_EQ(gpt2().encode(bytes), expected) << why;
    } else if (c.contains("allowed")) {
      EXPECT_EQ(gpt2().encode(c["text"].get<std::string>(), special_arg(c["allowed"]), special_arg(c["disallowed"])),
                expected)
          << why;
    } else {
      const std::string text = c["text"];
      EXPECT_EQ(gpt2().encode_ordinary(text), expected) << why;
      EXPECT_EQ(gpt2().decode(expected), text) << why;
    }
    ++checked;
  }
  EXPECT_GE(checked, 420);
}

TEST(BpeEncode, EmptyTextIsNoTokens) {
  EXPECT_TRUE(gpt2().encode("").empty());
  EXPECT_TRUE(gpt2().encode_ordinary("").empty());
  EXPECT_EQ(gpt2().decode(std::vector<TokenId>{}), "");
}

TEST(BpeEncode, RoundTripsValidUtf8) {
  std::mt19937 rng(7);
  const std::vector<uint32_t> starts = {0x20, 0xA0, 0x370, 0x600, 0x900, 0x3040, 0x4E00, 0xAC00, 0x1F300, 0x10000};
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (int n = static_cast<int>(rng() % 40); n > 0; --n) {
      uint32_t cp = starts[rng() % starts.size()] + static_cast<uint32_t>(rng() % 96);
      if (rng() % 4 == 0) cp = static_cast<uint32_t>(rng() % 0x80);
      if (rng() % 50 == 0) cp = static_cast<uint32_t>(rng() % 0x110000);
      if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
      utf8::append(s, cp);
    }
    const std::vector<TokenId> ids = gpt2().encode_ordinary(s);
    EXPECT_EQ(gpt2().decode(ids), s);
    EXPECT_EQ(gpt2().decode_bytes(ids), s);
  }
}

TEST(BpeSpecial, DefaultRefusesSpecialTextNamingTokenAndFlag) {
  const std::string msg = testing_support::error_of([] { gpt2().encode("Hello <|endoftext|> there"); });
  EXPECT_THAT(msg, HasSubstr("<|endoftext|>"));
  EXPECT_THAT(msg, HasSubstr("disallowed"));
  EXPECT_THAT(msg, HasSubstr("allowed_special"));
  EXPECT_THAT(msg, HasSubstr("at byte 6"));
  // Disallowing one by name, and with the others allowed, refuses just the same.
  EXPECT_THAT(testing_support::error_of([] {
                gpt2().encode("<|endoftext|>", SpecialTokens::none(), SpecialTokens::only({"<|endoftext|>"}));
              }),
              HasSubstr("<|endoftext|>"));
  // encode_ordinary never looks for special tokens.
  EXPECT_EQ(gpt2().encode_ordinary("<|endoftext|>").size(), 7u);
}

TEST(BpeSpecial, AllowedAllAndNoneAsTiktoken) {
  const Encoding& e = gpt2();
  EXPECT_THAT(e.encode("<|endoftext|>", SpecialTokens::all()), ElementsAre(50256));
  EXPECT_THAT(e.encode("<|endoftext|>", SpecialTokens::parse("<|endoftext|>")), ElementsAre(50256));
  const std::vector<TokenId> plain = e.encode("<|endoftext|>", SpecialTokens::none(), SpecialTokens::none());
  EXPECT_EQ(plain, e.encode_ordinary("<|endoftext|>"));
  EXPECT_EQ(e.decode(plain), "<|endoftext|>");
  // Text around a special token is encoded on its own: the space before it is a token by itself.
  EXPECT_THAT(e.encode("a <|endoftext|>", SpecialTokens::all()), ElementsAre(64, 220, 50256));
  EXPECT_THAT(e.encode("<|endoftext|><|endoftext|>", SpecialTokens::all()), ElementsAre(50256, 50256));
  EXPECT_THAT(e.encode("<|endoftext|", SpecialTokens::all()), ::testing::Not(::testing::Contains(50256)));
}

TEST(BpeSpecial, ParseAndUnknownNames) {
  EXPECT_TRUE(SpecialTokens::parse("all").is_all);
  EXPECT_FALSE(SpecialTokens::parse("none").is_all);
  EXPECT_TRUE(SpecialTokens::parse("none").tokens.empty());
  EXPECT_THAT(SpecialTokens::parse("<|a|>,<|b|>").tokens, ElementsAre("<|a|>", "<|b|>"));
  const std::string msg = testing_support::error_of([] { gpt2().encode("x", SpecialTokens::only({"<|fim_prefix|>"})); });
  EXPECT_THAT(msg, HasSubstr("<|fim_prefix|>"));
  EXPECT_THAT(msg, HasSubstr("not a special token of gpt2"));
  EXPECT_THAT(msg, HasSubstr("<|endoftext|>"));  // lists the ones there are
}

TEST(BpeDecode, IdOutsideTheVocabularyIsNamed) {
  for (TokenId bad : {TokenId{50257}, TokenId{-1}, TokenId{1} << 40}) {
    const std::string msg = testing_support::error_of([&] { gpt2().decode(std::vector<TokenId>{15496, bad}); });
    EXPECT_THAT(msg, HasSubstr("token id " + std::to_string(bad)));
    EXPECT_THAT(msg, HasSubstr("0..50256"));
    EXPECT_THAT(testing_support::error_of([&] { gpt2().decode_single_token_bytes(bad); }), HasSubstr(std::to_string(bad)));
  }
}

TEST(BpeDecode, InvalidUtf8IsReplacedLikePython) {
  // 12520 is " \xf0\x9f", the first half of an emoji: decode replaces, decode_bytes keeps.
  EXPECT_EQ(gpt2().decode_bytes(std::vector<TokenId>{12520}), " \xf0\x9f");
  EXPECT_EQ(gpt2().decode(std::vector<TokenId>{12520}), " \xEF\xBF\xBD");  // b" \xf0\x9f".decode(errors="replace")
  EXPECT_EQ(gpt2().decode(std::vector<TokenId>{12520, 97, 245}), " \xF0\x9F\xA4\x97");  // the whole emoji
  EXPECT_THAT(gpt2().decode_tokens_bytes(std::vector<TokenId>{12520, 97}), ElementsAre(" \xf0\x9f", "\xa4"));
}

TEST(BpeUtf8Input, InvalidBytesNeverCrashAndAreReplacedFirst) {
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    std::string s;
    for (int n = static_cast<int>(rng() % 30); n > 0; --n) s += static_cast<char>(rng() % 256);
    const std::vector<TokenId> ids = gpt2().encode(s);
    EXPECT_EQ(ids, gpt2().encode_ordinary(utf8::replace_invalid(s)));
    EXPECT_EQ(gpt2().decode(ids), utf8::replace_invalid(s));
  }
  EXPECT_EQ(gpt2().encode("\xff"), gpt2().encode("\xEF\xBF\xBD"));
}

TEST(BpeBatch, ThreadsGiveTheSerialResult) {
  std::vector<std::string> texts;
  for (const json& c : tiktoken_cases())
    if (c.contains("text")) texts.push_back(c["text"]);
  texts.push_back("");
  texts.push_back(std::string(100000, 'z') + " end");
  std::vector<std::vector<TokenId>> serial;
  for (const std::string& t : texts) serial.push_back(gpt2().encode_ordinary(t));
  for (int threads : {1, 2, 3, 8}) {
    EXPECT_EQ(gpt2().encode_ordinary_batch(texts, threads), serial) << threads << " threads";
    EXPECT_EQ(gpt2().encode_batch(texts, threads, SpecialTokens::none(), SpecialTokens::none()), serial);
  }
  EXPECT_TRUE(gpt2().encode_batch({}, 2).empty());
}

// encode_batch_into, refilling one TokenBatch with batches of different sizes and thread counts,
// gives encode_batch's ids; an invalid UTF-8 text is repaired as encode repairs it.
TEST(BpeBatch, IntoAReusedTokenBatch) {
  std::vector<std::string> texts;
  for (const json& c : tiktoken_cases())
    if (c.contains("text")) texts.push_back(c["text"]);
  texts.push_back("bad \xff bytes <|endoftext|>");
  std::vector<std::string_view> views(texts.begin(), texts.end());
  const SpecialTokens all = SpecialTokens::all();
  TokenBatch batch;
  for (int threads : {1, 3, 2}) {
    for (size_t n : {views.size(), size_t{5}, size_t{0}}) {
      gpt2().encode_batch_into(std::span(views).first(n), batch, threads, all);
      ASSERT_EQ(batch.size(), n);
      for (size_t i = 0; i < n; ++i) {
        const std::span<const TokenId> ids = batch.ids(i);
        EXPECT_EQ(std::vector<TokenId>(ids.begin(), ids.end()), gpt2().encode(texts[i], all))
            << "text " << i << ", " << threads << " threads";
      }
    }
  }
  EXPECT_THAT(testing_support::error_of([&] { gpt2().encode_batch_into(views, batch, 2); }), HasSubstr("<|endoftext|>"));
}

TEST(BpeBatch, AnErrorNamesTheText) {
  const std::string msg = testing_support::error_of([] { gpt2().encode_batch({"fine", "also fine", "bad <|endoftext|>"}, 2); });
  EXPECT_THAT(msg, HasSubstr("text 3 of 3"));
  EXPECT_THAT(msg, HasSubstr("<|endoftext|>"));
  EXPECT_THAT(testing_support::error_of([] { gpt2().encode_batch({"x"}, -1); }), HasSubstr("threads"));
}

// --- the merge rule on small vocabularies --------------------------------------------------------

// The 256 single bytes (rank = byte value + offset) plus the given merges at the given ranks.
EncodingSpec tiny_spec(const std::vector<std::pair<std::string, TokenId>>& merges, const std::string& pattern = "\\S+|\\s+") {
  EncodingSpec s;
  s.name = "tiny";
  s.pattern = pattern;
  for (int b = 0; b < 256; ++b) s.mergeable_ranks.emplace_back(std::string(1, static_cast<char>(b)), 1000 + b);
  for (const auto& m : merges) s.mergeable_ranks.push_back(m);
  return s;
}

std::vector<std::string> token_texts(const Encoding& e, const std::vector<TokenId>& ids) {
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(e.decode_single_token_bytes(id));
  return out;
}

TEST(BpeMerge, LowestRankFirstLeftmostAmongEquals) {
  const Encoding e(tiny_spec({{"bc", 1}, {"ab", 2}, {"aa", 3}}));
  // "abc": bc (1) beats ab (2)
  EXPECT_THAT(token_texts(e, e.encode_ordinary("abc")), ElementsAre("a", "bc"));
  // "aaa": both pairs are aa (3): the leftmost merges
  EXPECT_THAT(token_texts(e, e.encode_ordinary("aaa")), ElementsAre("aa", "a"));
  EXPECT_THAT(token_texts(e, e.encode_ordinary("aaaaa")), ElementsAre("aa", "aa", "a"));
}

TEST(BpeMerge, APieceThatIsATokenIsThatTokenEvenIfMergesWouldNotReachIt) {
  // No pair of "abc" is a token, so merging leaves a, b, c; tiktoken looks the whole piece up first.
  const Encoding e(tiny_spec({{"abc", 3}}));
  EXPECT_THAT(token_texts(e, e.encode_ordinary("abc")), ElementsAre("abc"));
  EXPECT_THAT(token_texts(e, e.encode_ordinary("abcx")), ElementsAre("a", "b", "c", "x"));
}

TEST(BpeMerge, LongPiecesMergeAsTheReferenceScan) {
  // Random vocabularies over a 3-letter alphabet, pieces long enough for the heap path.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::pair<std::string, TokenId>> merges;
    std::vector<std::string> known = {"a", "b", "c"};
    for (TokenId r = 0; r < 40; ++r) {
      const std::string t = known[rng() % known.size()] + known[rng() % known.size()];
      bool dup = false;
      for (const auto& m : merges) dup |= m.first == t;
      if (dup || t.size() == 1) continue;
      merges.emplace_back(t, r);
      known.push_back(t);
    }
    EncodingSpec spec = tiny_spec(merges);
    bpe_detail::TokenTable table;
    for (const auto& [bytes, id] : spec.mergeable_ranks) table.insert(bytes, static_cast<bpe_detail::Rank>(id));
    bpe_detail::Rank byte_rank[256];
    for (int b = 0; b < 256; ++b) byte_rank[b] = static_cast<bpe_detail::Rank>(1000 + b);
    for (size_t len : {2u, 5u, 17u, 96u, 97u, 300u, 1000u}) {
      std::string piece;
      for (size_t i = 0; i < len; ++i) piece += "abc"[rng() % 3];
      std::vector<bpe_detail::Rank> fast, reference;
      bpe_detail::byte_pair_encode(table, byte_rank, piece, fast);
      bpe_detail::byte_pair_encode_reference(table, piece, reference);
      EXPECT_EQ(fast, reference) << "trial " << trial << ", length " << len;
    }
  }
}

TEST(BpeEncodingSpec, BadSpecsSayWhatIsWrong) {
  EncodingSpec missing_byte = tiny_spec({});
  missing_byte.mergeable_ranks.erase(missing_byte.mergeable_ranks.begin() + 0x41);
  EXPECT_THAT(testing_support::error_of([&] { Encoding e(missing_byte); }), HasSubstr("single byte"));
  EXPECT_THAT(testing_support::error_of([] { Encoding e(tiny_spec({{"ab", 1}, {"ab", 2}})); }), HasSubstr("appears twice"));
  EXPECT_THAT(testing_support::error_of([] { Encoding e(tiny_spec({{"ab", 1}, {"cd", 1}})); }), HasSubstr("id 1 is given to both"));
  EncodingSpec clash = tiny_spec({{"ab", 1}});
  clash.special_tokens = {{"<|end|>", 1}};
  EXPECT_THAT(testing_support::error_of([&] { Encoding e(clash); }), HasSubstr("id 1"));
  EXPECT_THAT(testing_support::error_of([] { Encoding e(tiny_spec({}, "(unclosed")); }), HasSubstr("PCRE2"));
  EncodingSpec n_vocab = tiny_spec({{"ab", 1}});
  n_vocab.explicit_n_vocab = 5;
  EXPECT_THAT(testing_support::error_of([&] { Encoding e(n_vocab); }), HasSubstr("n_vocab"));
}

TEST(BpeEncodingSpec, OtherPatternsAndSpecialTokens) {
  EncodingSpec s = tiny_spec({{"ab", 1}, {"abab", 2}}, "[a-z]+|[0-9]");
  s.special_tokens = {{"<|x|>", 5000}, {"<|x|>y", 5001}};
  const Encoding e(s);
  EXPECT_STREQ(e.pretokenizer_engine(), "pcre2-jit");
  EXPECT_THAT(token_texts(e, e.encode_ordinary("abab ab12")), ElementsAre("abab", "ab", "1", "2"));  // " " matches nothing
  // Of two special tokens starting at the same place, the longer wins.
  EXPECT_THAT(e.encode("ab<|x|>yab", SpecialTokens::all()), ElementsAre(1, 5001, 1));
  EXPECT_THAT(e.encode("ab<|x|>ab", SpecialTokens::all()), ElementsAre(1, 5000, 1));
  EXPECT_THROW(e.eot_token(), Error);
  EXPECT_EQ(e.n_vocab(), 5002);
  EXPECT_THAT(testing_support::error_of([&] { e.decode(std::vector<TokenId>{500}); }), HasSubstr("unassigned"));
}

}  // namespace
}  // namespace qkv
