// Hugging Face tokenizer.json (qkv/text/hf_tokenizer.h) on small handmade files whose encodings are
// worked out by hand: merge priority, ignore_merges, "Isolated" splits, added tokens, NFC; and every
// kind of file it must refuse. The real vocabularies: tests/tokenizers (against @lenml/tokenizers).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/hf_tokenizer_json.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

using json = nlohmann::json;

std::string spelled(std::string_view bytes) {  // bytes in the byte-level alphabet
  std::string out;
  for (char c : bytes) utf8::append(out, byte_level_char(static_cast<uint8_t>(c)));
  return out;
}

// Every byte as id = its value; then ab 256, abc 257, bc 258, " a" 259, xy 260 (no merge makes it).
// Merges, earliest first: a b, ab c, b c, Ġ a. The split: each match of `pattern`, and the text
// between matches.
json tiny(const std::string& pattern = "\\w+|\\s+") {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spelled(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["bc"] = 258;
  vocab[spelled(" a")] = 259;
  vocab["xy"] = 260;
  return {{"model",
           {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", "ab c", "b c", spelled(" ") + " a"})}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", json::array()}};
}

HfTokenizer make(const json& j) { return HfTokenizer::parse(j.dump(), "tiny.json"); }
using Ids = std::vector<TokenId>;

TEST(HfTokenizer, MergesApplyEarliestFirst) {
  const HfTokenizer t = make(tiny());
  EXPECT_EQ(t.encode("abc"), (Ids{257}));  // a b (rank 0), then ab c (rank 1): not a + bc
  EXPECT_EQ(t.encode("bc"), (Ids{258}));
  EXPECT_EQ(t.encode("cab"), (Ids{'c', 256}));
  EXPECT_EQ(t.encode("xy"), (Ids{'x', 'y'}));  // in the vocabulary, but no merge makes it
  EXPECT_EQ(t.encode(""), (Ids{}));
  EXPECT_EQ(t.vocab_size(), 261);
}

TEST(HfTokenizer, IgnoreMergesTakesAWholePieceThatIsAToken) {
  json j = tiny();
  j["model"]["ignore_merges"] = true;
  const HfTokenizer t = make(j);
  EXPECT_EQ(t.encode("xy"), (Ids{260}));
  EXPECT_EQ(t.encode("xyz"), (Ids{'x', 'y', 'z'}));
}

TEST(HfTokenizer, IsolatedSplitsKeepTheTextBetweenMatches) {
  const HfTokenizer t = make(tiny("b"));  // pieces: a | b | c, and no merge across them
  EXPECT_EQ(t.encode("abc"), (Ids{'a', 'b', 'c'}));
  const HfTokenizer u = make(tiny("\\s+"));  // " " is a match, "ac" the text after it: " a" cannot merge
  EXPECT_EQ(u.encode(" ac"), (Ids{' ', 'a', 'c'}));
  const HfTokenizer w = make(tiny("x"));  // no match: the whole text is one piece
  EXPECT_EQ(w.encode(" ac"), (Ids{259, 'c'}));
  EXPECT_EQ(w.encode(" abc"), (Ids{' ', 257}));  // a b (rank 0) before " a" (rank 3), then ab c
}

// An empty match of a Split is a boundary, as Hugging Face's find_matches makes it: "\b" cuts " ac"
// before a (it was dropped, and " a" merged across it).
TEST(HfTokenizer, EmptyMatchesSplitTheText) {
  const HfTokenizer t = make(tiny("\\b"));
  EXPECT_EQ(t.encode(" ac"), (Ids{' ', 'a', 'c'}));
  EXPECT_EQ(t.encode(" ab c"), (Ids{' ', 256, ' ', 'c'}));
  EXPECT_EQ(make(tiny("(?=c)")).encode("abc"), (Ids{256, 'c'}));  // a lookahead: ab | c, not abc
  EXPECT_EQ(make(tiny("x*")).encode(" abc"), (Ids{' ', 'a', 'b', 'c'}));  // empty everywhere: every character
  // (*NO_JIT) compiles to no machine code: the interpreter matches it (it failed: "bad JIT option")
  EXPECT_EQ(make(tiny("(*NO_JIT)\\w+|\\s+")).encode("abc ab"), (Ids{257, ' ', 256}));
}

// A merge listed twice takes its last place, as Hugging Face's BpeBuilder and transformers.js take
// it (the first place stood): a b after b c, so "abc" is a + bc.
TEST(HfTokenizer, AMergeListedTwiceTakesItsLastRank) {
  json j = tiny();
  j["model"]["merges"].push_back("a b");
  EXPECT_EQ(make(j).encode("abc"), (Ids{'a', 258}));
  EXPECT_EQ(make(tiny()).encode("abc"), (Ids{257}));
}

TEST(HfTokenizer, AddedTokensAreMatchedInTheTextLongestFirst) {
  json j = tiny();
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 301}, {"content", "<s>x"}, {"special", false}},
                                   {{"id", 302}, {"content", "[L]"}, {"special", true}, {"lstrip", true}},
                                   {{"id", 303}, {"content", "[R]"}, {"special", true}, {"rstrip", true}}});
  const HfTokenizer t = make(j);
  EXPECT_EQ(t.encode("ab<s>abc"), (Ids{256, 300, 257}));
  EXPECT_EQ(t.encode("<s>x<s>"), (Ids{301, 300}));
  EXPECT_EQ(t.encode("c  [L]c"), (Ids{'c', 302, 'c'}));  // lstrip: the spaces before go with it
  EXPECT_EQ(t.encode("c[R]  c"), (Ids{'c', 303, 'c'}));
  EXPECT_EQ(t.encode("c [R]"), (Ids{'c', ' ', 303}));
  EXPECT_EQ(t.vocab_size(), 304);
  EXPECT_EQ(t.added_token("<s>x"), std::optional<TokenId>(301));
  EXPECT_EQ(t.decode(Ids{256, 300, 257, 301}), "ab<s>abc<s>x");
  EXPECT_EQ(t.decode(Ids{256, 300, 257, 301}, true), "ababc<s>x");  // <s>x is not special
  // AddedTokens::kPlain (a chat message's text): the special ones stay text, the others match
  EXPECT_EQ(t.encode("ab<s>abc", AddedTokens::kPlain), (Ids{256, '<', 's', '>', 257}));
  EXPECT_EQ(t.encode("<s>x[L]", AddedTokens::kPlain), (Ids{301, '[', 'L', ']'}));
}

TEST(HfTokenizer, NfcComposesBeforeSplitting) {
  json j = tiny();
  const HfTokenizer plain = make(j);
  j["normalizer"] = {{"type", "NFC"}};
  const HfTokenizer nfc = make(j);
  EXPECT_EQ(nfc.normalizer(), "NFC");
  EXPECT_EQ(nfc.encode("e\xCC\x81"), (Ids{0xC3, 0xA9}));  // e + U+0301 -> U+00E9
  EXPECT_EQ(plain.encode("e\xCC\x81"), (Ids{'e', 0xCC, 0x81}));
}

TEST(HfTokenizer, DecodingJoinsBytesAndRepairsThem) {
  const HfTokenizer t = make(tiny());
  EXPECT_EQ(t.decode(Ids{259, 'b'}), " ab");
  EXPECT_EQ(t.decode_bytes(Ids{0xC3}), "\xC3");
  EXPECT_EQ(t.decode(Ids{0xC3}), "\xEF\xBF\xBD");  // half a character: U+FFFD
  EXPECT_EQ(t.encode("\xC3("), (Ids{0xEF, 0xBF, 0xBD, '('}));  // invalid UTF-8 repaired first
  // An id the file does not hold (a model's rows beyond its tokenizer) is no text, as Hugging Face
  // decodes it, wherever it stands; a negative id is an error.
  EXPECT_EQ(t.decode(Ids{'a', 261, 'b', 1 << 30}), "ab");
  EXPECT_FALSE(t.has_token(261));
  EXPECT_TRUE(t.has_token(260));
  try {
    t.decode(Ids{-1});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id -1 is negative (tiny.json's ids are 0 .. 260)"), std::string::npos)
        << e.what();
  }
}

std::string testing_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void refused(const json& j, const std::string& what) {
  try {
    make(j);
    ADD_FAILURE() << "accepted; expected: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(HfTokenizer, FilesItCannotReadAreRefusedNamingTheField) {
  json j = tiny();
  j["model"]["type"] = "WordPiece";
  refused(j, "model.type is 'WordPiece'");
  j = tiny();
  j["model"]["merges"].push_back("a q7");
  refused(j, "model.merges[4] names 'q7', which is not in model.vocab");
  j = tiny();
  j["model"]["merges"].push_back(json::array({"x", "y"}));  // arrays as Qwen writes them: fine
  EXPECT_NO_THROW(make(j));
  j["model"]["merges"].push_back(json::array({"y", "x"}));
  refused(j, "model.merges[5] makes 'yx', which is not in model.vocab");
  j = tiny();
  j["model"]["vocab"].erase(spelled("\n"));
  refused(j, "has no token for byte 10");
  j = tiny();
  j["model"]["byte_fallback"] = true;
  refused(j, "model.byte_fallback");
  j = tiny();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  refused(j, "pre_tokenizer.type is 'Metaspace'");
  j = tiny();
  j["normalizer"] = {{"type", "NFKC"}};
  refused(j, "normalizer.type is 'NFKC'; qkv reads no normalizer, or NFC");
  j = tiny();
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"single_word", true}}});
  refused(j, "single_word");
  j = tiny();
  j["added_tokens"] = json::array({{{"id", 97}, {"content", "<s>"}}});
  refused(j, "added token '<s>' has id 97, which model.vocab gives to 'a'");
  j = tiny("(");
  refused(j, "missing closing parenthesis");
  EXPECT_THROW(HfTokenizer::parse("{\"model\": ", "broken.json"), Error);
  EXPECT_THROW(HfTokenizer::parse("[]", "list.json"), Error);
}

// The post-processor's template for one text: the special tokens before $A are prefix(), which
// encode() does not add (Hugging Face's tokenizer(text) does; a model reads them: LoadedModel::encode).
TEST(HfTokenizer, TheTemplatesTokensBeforeTheTextAreItsPrefix) {
  auto templ = [](const json& single, const json& specials) {
    return json{{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  };
  const json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  const json text = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const json specials = {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}}};
  json j = tiny();
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}}});
  EXPECT_EQ(make(j).prefix(), (Ids{}));
  j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  EXPECT_EQ(make(j).prefix(), (Ids{}));
  j["post_processor"] = templ(json::array({bos, text}), specials);
  EXPECT_EQ(make(j).prefix(), (Ids{300}));
  EXPECT_EQ(make(j).encode("abc"), (Ids{257}));
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors", json::array({json{{"type", "ByteLevel"}}, templ(json::array({bos, bos, text}), specials)})}};
  EXPECT_EQ(make(j).prefix(), (Ids{300, 300}));
  const json base = j;
  j["post_processor"] = templ(json::array({text, bos}), specials);
  refused(j, "post_processor.single[1] puts '<s>' after the text; qkv reads templates that add tokens before a text only");
  j["post_processor"] = templ(json::array({bos}), specials);
  refused(j, "post_processor.single has no sequence \"A\" (the text itself)");
  j["post_processor"] = templ(json::array({bos, text}), json::object());
  refused(j, "post_processor.single[0] names the special token '<s>', which post_processor.special_tokens does not hold");
  j["post_processor"] = templ(json::array({bos, text}), {{"<s>", {{"id", "<s>"}, {"ids", {301}}}}});
  refused(j, "post_processor puts id 301 before the text, which is no token of the vocabulary or the added tokens");
  j["post_processor"] = templ(json::array({bos, text}), {{"<s>", {{"id", "<s>"}, {"ids", {-1}}}}});
  refused(j, "post_processor.special_tokens['<s>'].ids[0] is -1; ids are whole numbers");
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  refused(j, "post_processor.type is 'RobertaProcessing'; qkv reads ByteLevel and TemplateProcessing post-processors");
  j["post_processor"] = {{"type", "Sequence"}, {"processors", json::array({templ(json::array({bos, text}), specials), templ(json::array({bos, text}), specials)})}};
  refused(j, "post_processor.processors[1] is a second TemplateProcessing; expected one");
  j["post_processor"] = templ(json::array({json{{"Sequence", {{"id", "B"}}}}}), specials);
  refused(j, "post_processor.single[0] is the sequence 'B'; a template for one text holds the sequence \"A\" once");
  j["post_processor"] = templ(json::array({json{{"Special", 1}}}), specials);
  refused(j, "post_processor.single[0] is {\"Special\":1}; expected {\"SpecialToken\": {...}} or {\"Sequence\": {...}}");
  // what hf_tokenizer_json writes back reads the same prefix
  EXPECT_EQ(HfTokenizer::parse(hf_tokenizer_json(hf_tokenizer_parts(base, "t")).dump(), "back").prefix(), (Ids{300, 300}));
}

TEST(HfTokenizer, HostileFilesAreRefusedNamingTheFieldAndTheLimit) {
  json j = tiny();
  j["model"]["vocab"]["xy"] = 1.5;  // not truncated to 1 (and then called a duplicate)
  refused(j, "model.vocab['xy'] is 1.5; ids are whole numbers 0 .. 2^31 - 2");
  j = tiny();
  j["model"]["vocab"]["xy"] = "260";
  refused(j, "model.vocab['xy'] is \"260\"; ids are whole numbers");
  j = tiny();
  j["model"]["ignore_merges"] = "yes";
  refused(j, "model.ignore_merges is \"yes\"; expected true or false");
  j = tiny();
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", "true"}}});
  refused(j, "added_tokens[0].special is \"true\"; expected true or false");
  j = tiny();
  j["added_tokens"] = json::array({{{"id", 300}, {"content", 7}}});
  refused(j, "added_tokens[0].content is 7; expected a string");
  j = tiny();
  j["added_tokens"] = json::array({{{"id", 300}, {"content", std::string(HfTokenizer::kMaxAddedTokenBytes + 1, '<')}}});
  refused(j, "added_tokens[0] (id 300) is 1025 bytes long; qkv matches added tokens of at most 1024");
  // Sequences nested past 16 (the JSON itself within its depth limit), and far past JSON's limit
  for (const int depth : {20, 100000}) {
    std::string text;
    for (int k = 0; k < depth; ++k) text += "{\"type\":\"Sequence\",\"pretokenizers\":[";
    text += tiny()["pre_tokenizer"].dump();
    for (int k = 0; k < depth; ++k) text += "]}";
    j = tiny();
    j["pre_tokenizer"] = nullptr;
    std::string file = j.dump();
    file.replace(file.find("\"pre_tokenizer\":null"), 20, "\"pre_tokenizer\":" + text);
    try {
      HfTokenizer::parse(file, "deep.json");
      ADD_FAILURE() << depth << " deep: accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(depth == 20 ? "nests Sequences more than 16 deep"
                                                              : "nest more than 64 deep (json_max_depth)"));
    }
  }
  // An id of 10^8: a table by entries, not by the largest id (a dense one was 3 GB).
  j = tiny();
  j["model"]["vocab"]["xy"] = 100000000;
  const HfTokenizer sparse = make(j);
  EXPECT_EQ(sparse.vocab_size(), 100000001);
  EXPECT_EQ(sparse.decode(Ids{100000000, 260}), "xy");  // 260 is in no table now
}

// One engine for both readers: the parts a tokenizer.json holds, built straight, encode and decode
// as the file parsed does; written back as tokenizer.json they read back the same; and build's
// checks name the lists as the parts name them (GGUF's keys for a GGUF file).
TEST(HfTokenizer, PartsBuildWhatTheFileParsesTo) {
  json j = tiny("\\w+|\\s+");
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 301}, {"content", "<t>"}, {"rstrip", true}}});
  const HfTokenizerParts parts = hf_tokenizer_parts(j, "tiny.json");
  EXPECT_EQ(parts.vocab.size(), 261u);
  ASSERT_EQ(parts.merges.size(), 4u);
  EXPECT_EQ(parts.merges[1], (std::pair<std::string, std::string>{"ab", "c"}));
  EXPECT_TRUE(parts.nfc);
  const HfTokenizer parsed = make(j), built = HfTokenizer::build(parts, "tiny.json");
  const HfTokenizer written = HfTokenizer::parse(hf_tokenizer_json(parts).dump(), "written.json");
  for (const std::string text : {"abc bc", " a<s>xy", "<t>  abcabc", "e\xcc\x81", "abcbcab"}) {
    EXPECT_EQ(built.encode(text), parsed.encode(text)) << text;
    EXPECT_EQ(written.encode(text), parsed.encode(text)) << text;
    EXPECT_EQ(built.decode(parsed.encode(text)), parsed.decode(parsed.encode(text))) << text;
  }
  EXPECT_EQ(built.vocab_size(), 302);
  EXPECT_EQ(built.normalizer(), "NFC");
  const HfTokenizerParts back = hf_tokenizer_parts(hf_tokenizer_json(parts), "written.json");
  EXPECT_EQ(back.merges, parts.merges);
  EXPECT_EQ(back.pattern, parts.pattern);
  ASSERT_EQ(back.added.size(), 2u);
  EXPECT_TRUE(back.added[0].special && !back.added[1].special && back.added[1].rstrip);

  HfTokenizerParts gguf = parts;
  gguf.vocab_name = "tokenizer.ggml.tokens";
  gguf.merges_name = "tokenizer.ggml.merges";
  gguf.merges.emplace_back("a", "q7");
  EXPECT_THAT(testing_error([&] { HfTokenizer::build(gguf, "t.gguf"); }),
              ::testing::HasSubstr("t.gguf: tokenizer.ggml.merges[4] names 'q7', which is not in tokenizer.ggml.tokens"));
  gguf = parts;
  gguf.vocab_name = "tokenizer.ggml.tokens";
  gguf.vocab.push_back({"ab", 7});
  EXPECT_THAT(testing_error([&] { HfTokenizer::build(gguf, "t.gguf"); }),
              ::testing::HasSubstr("tokenizer.ggml.tokens gives id 7 twice"));
}

TEST(HfTokenizer, LoadNamesAPathThatHoldsNoTokenizer) {
  const std::string dir = ::testing::TempDir() + "/no_tokenizer_here";
  std::filesystem::create_directories(dir);
  try {
    HfTokenizer::load(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a tokenizer.json (nor a folder holding one)"), std::string::npos)
        << e.what();
  }
  // a GGUF file is named as one (it was "not valid JSON", with its binary bytes in the message)
  const std::string gguf = dir + "/model.gguf";
  std::ofstream(gguf) << std::string("GGUF\x03\x00\x00\x00\xff\xfe", 10);
  EXPECT_THAT(testing_error([&] { HfTokenizer::load(gguf); }),
              ::testing::HasSubstr("model.gguf' is a GGUF file (llama.cpp's format), not a tokenizer.json: its "
                                   "tokenizer is read with its model"));
}

// An installed vocabulary by name: found under $XDG_DATA_HOME/qkv/<name>, refused unless its
// SHA-256 is the expected one; a name qkv does not know is a path like any other.
TEST(HfTokenizer, InstalledVocabulariesAreFoundByNameAndVerified) {
  const std::string home = ::testing::TempDir() + "/xdg_hf";
  std::filesystem::create_directories(home + "/qkv/qwen3");
  {
    std::ofstream f(home + "/qkv/qwen3/tokenizer.json");
    f << tiny().dump();  // a valid tokenizer.json, but not Qwen3's
  }
  const char* before = std::getenv("XDG_DATA_HOME");
  const std::string saved = before ? before : "";
  setenv("XDG_DATA_HOME", home.c_str(), 1);
  std::string qwen3, llama3, other;
  try {
    HfTokenizer::load("qwen3");
  } catch (const Error& e) {
    qwen3 = e.what();
  }
  try {
    HfTokenizer::load("llama3");
  } catch (const Error& e) {
    llama3 = e.what();
  }
  try {
    HfTokenizer::load("qwen4");
  } catch (const Error& e) {
    other = e.what();
  }
  if (before) setenv("XDG_DATA_HOME", saved.c_str(), 1);
  else unsetenv("XDG_DATA_HOME");
  EXPECT_NE(qwen3.find("refusing to load " + home + "/qkv/qwen3/tokenizer.json: its SHA-256 is not the qwen3 "
                       "vocabulary's"),
            std::string::npos)
      << qwen3;
  EXPECT_NE(llama3.find("the llama3 vocabulary (tokenizer.json) is not installed; looked in:\n  " + home + "/qkv/llama3"),
            std::string::npos)
      << llama3;
  EXPECT_NE(other.find("'qwen4' is not a tokenizer.json"), std::string::npos) << other;
}

}  // namespace
}  // namespace qkv
