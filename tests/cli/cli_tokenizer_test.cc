// qkv encode / decode / tokens, run as a user runs them (the binary at QKV_BINARY), with the
// vocabulary found the normal way.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using json = nlohmann::json;


class CliTokenizer : public CliTest {};

TEST_F(CliTokenizer, EncodeTheBooksSentence) {
  Result r = run("encode --text " + shell_quote("Your journey starts with one step."));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[7120, 7002, 4940, 351, 530, 2239, 13]\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(CliTokenizer, EncodeFromFileAndStdinTakesTheBytesAsTheyAre) {
  const std::string text = "Hello, do you like tea?\n";
  const std::string expected = "[15496, 11, 466, 345, 588, 8887, 30, 198]\n";
  EXPECT_EQ(run("encode --file " + write("t.txt", text)).out, expected);
  EXPECT_EQ(run("encode", text).out, expected);
  EXPECT_EQ(run("encode --file -", text).out, expected);
  Result empty = run("encode");
  EXPECT_EQ(empty.status, 0) << empty.err;
  EXPECT_EQ(empty.out, "[]\n");
  EXPECT_EQ(run("encode --text ''").out, "[]\n");
}

TEST_F(CliTokenizer, SpecialTokenFlags) {
  const std::string text = shell_quote("tea? <|endoftext|> In");
  Result refused = run("encode --text " + text);
  EXPECT_EQ(refused.status, 1);
  EXPECT_EQ(refused.out, "");
  EXPECT_THAT(refused.err, HasSubstr("<|endoftext|>"));
  EXPECT_THAT(refused.err, HasSubstr("--allowed-special"));
  EXPECT_EQ(run("encode --allowed-special all --text " + text).out, "[660, 64, 30, 220, 50256, 554]\n");
  EXPECT_EQ(run("encode --allowed-special '<|endoftext|>' --text " + text).out, "[660, 64, 30, 220, 50256, 554]\n");
  EXPECT_EQ(run("encode --disallowed-special none --text " + text).out,
            "[660, 64, 30, 1279, 91, 437, 1659, 5239, 91, 29, 554]\n");
  Result unknown = run("encode --allowed-special '<|fim|>' --text x");
  EXPECT_EQ(unknown.status, 1);
  EXPECT_THAT(unknown.err, HasSubstr("<|fim|>"));
}

TEST_F(CliTokenizer, JsonlKeepsLinesInOrderOnAnyThreadCount) {
  std::string lines;
  std::vector<std::string> texts = {"Your journey starts with one step.", "", "tab\there\n", "é 🤗 <|endoftext|>"};
  for (int i = 0; i < 200; ++i) texts.push_back("line " + std::to_string(i) + std::string(i % 7, ' ') + "x");
  for (const std::string& t : texts) lines += json(t).dump() + "\n";
  const std::string file = write("in.jsonl", lines);
  Result one = run("encode --disallowed-special none --threads 1 --jsonl " + file);
  ASSERT_EQ(one.status, 0) << one.err;
  std::istringstream out(one.out);
  std::string line;
  size_t n = 0;
  for (; std::getline(out, line); ++n) {
    ASSERT_LT(n, texts.size());
    const std::vector<int64_t> ids = json::parse(line).get<std::vector<int64_t>>();
    std::string ids_text;
    for (int64_t id : ids) ids_text += std::to_string(id) + " ";
    EXPECT_EQ(run("decode " + ids_text).out, texts[n]) << n;
    if (n > 5) break;  // decoding every line through the binary is slow; the first ones suffice
  }
  EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), static_cast<long>(texts.size()));
  for (const char* threads : {"2", "3", "0"})
    EXPECT_EQ(run(std::string("encode --disallowed-special none --threads ") + threads + " --jsonl " + file).out,
              one.out);
  EXPECT_EQ(run("encode --disallowed-special none --jsonl -", lines).out, one.out);
  EXPECT_THAT(run("encode --jsonl " + file).err, HasSubstr("text 4 of 204"));  // the <|endoftext|> line
}

TEST_F(CliTokenizer, JsonlBadLineIsNamed) {
  Result r = run("encode --jsonl " + write("bad.jsonl", "\"ok\"\nnot json\n"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.jsonl line 2"));
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTokenizer, InvalidUtf8IsReplacedNotACrash) {
  Result r = run("encode", "a\xff\xfe" "b\xe2\x82");
  EXPECT_EQ(r.status, 0) << r.err;
  Result same = run("encode --text " + shell_quote("a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD"));
  EXPECT_EQ(r.out, same.out);
}

TEST_F(CliTokenizer, DecodeArgumentsJsonAndStdin) {
  EXPECT_EQ(run("decode 7120 7002 4940 351 530 2239 13").out, "Your journey starts with one step.");
  EXPECT_EQ(run("decode '[7120, 7002]'").out, "Your journey");
  EXPECT_EQ(run("decode", "[7120, 7002]\n").out, "Your journey");
  EXPECT_EQ(run("decode", "7120\n7002,4940\n").out, "Your journey starts");
  EXPECT_EQ(run("decode", "").out, "");
  EXPECT_EQ(run("decode 12520").out, " \xEF\xBF\xBD");     // half an emoji, replaced
  EXPECT_EQ(run("decode --bytes 12520").out, " \xf0\x9f");  // or raw
}

TEST_F(CliTokenizer, DecodeErrorsNameTheId) {
  Result r = run("decode 15496 50257");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("token id 50257"));
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(run("decode 12 abc").err, HasSubstr("'abc' is not a token id"));
  EXPECT_THAT(run("decode '[1, \"x\"]'").err, HasSubstr("is not a token id"));
  EXPECT_THAT(run("decode '[1, 2'").err, HasSubstr("not a valid JSON array"));
}

TEST_F(CliTokenizer, RoundTripThroughBothCommands) {
  const std::string text = "Ünïcödé, emoji 👨‍👩‍👧 and\ttabs\n\n  trailing  ";
  const std::string file = write("t.txt", text);
  Result enc = run("encode --file " + file);
  ASSERT_EQ(enc.status, 0) << enc.err;
  EXPECT_EQ(run("decode", enc.out).out, text);
}

TEST_F(CliTokenizer, TokensTableShowsPiecesAndEscapes) {
  Result r = run("tokens --allowed-special all --text " + shell_quote("Hi 🤗\n<|endoftext|>"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("17250  \"Hi\""));
  EXPECT_THAT(r.out, HasSubstr("12520  \" \\xf0\\x9f\""));
  EXPECT_THAT(r.out, HasSubstr("198  \"\\n\""));
  EXPECT_THAT(r.out, HasSubstr("50256  \"<|endoftext|>\"  (special)"));
  EXPECT_THAT(r.out, HasSubstr("6 tokens, 21 bytes (gpt2)"));
}

TEST_F(CliTokenizer, MissingVocabularySaysWhereItLookedAndHowToInstall) {
  Result r = run("encode --text hi --vocab-dir " + path("nowhere"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr(path("nowhere")));
  EXPECT_THAT(r.err, HasSubstr("bash scripts/setup.sh"));
  // Without --vocab-dir, every place of the search path is listed.
  Result env = run("encode --text hi", "", "QKV_VOCAB_DIR=" + path("env") + " XDG_DATA_HOME=" + path("xdg"));
  if (env.status != 0) {  // unless the system directories hold a copy
    EXPECT_THAT(env.err, HasSubstr(path("env") + " ($QKV_VOCAB_DIR)"));
    EXPECT_THAT(env.err, HasSubstr(path("xdg") + "/qkv/gpt2"));
    EXPECT_THAT(env.err, HasSubstr("/usr/local/share/qkv/gpt2"));
    EXPECT_THAT(env.err, HasSubstr("/usr/share/qkv/gpt2"));
  }
}

TEST_F(CliTokenizer, HelpDescribesTheFlags) {
  Result r = run("encode --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--text", "--file", "--jsonl", "--allowed-special", "--disallowed-special", "--threads",
                           "--vocab-dir", "--ranks", "U+FFFD"})
    EXPECT_THAT(r.out, HasSubstr(flag));
  EXPECT_THAT(run("--help").out, HasSubstr("encode"));
  Result both = run("encode --text a --file b");  // mutually exclusive
  EXPECT_NE(both.status, 0);
  EXPECT_THAT(both.err, HasSubstr("excludes"));
}

// --tokenizer: a Hugging Face tokenizer.json (here a small one: every byte, "ab" = 256, merge "a b",
// the split \w+|\s+, one added token) for encode, decode and tokens; flags of the tiktoken
// vocabularies do not go with it.
TEST_F(CliTokenizer, HuggingFaceTokenizerJson) {
  json vocab = json::object();
  for (int b = 0x21; b <= 0x7E; ++b) vocab[std::string(1, static_cast<char>(b))] = b;
  int next = 0;
  for (int b = 0; b < 256; ++b) {  // the other bytes as GPT-2 spells them: U+0100 + n
    if (b >= 0x21 && b <= 0x7E) continue;
    if ((b >= 0xA1 && b <= 0xAC) || b >= 0xAE) {
      std::string c;
      c += static_cast<char>(0xC0 | (b >> 6));
      c += static_cast<char>(0x80 | (b & 0x3F));
      vocab[c] = b;
      continue;
    }
    const int cp = 256 + next++;
    std::string c;
    c += static_cast<char>(0xC0 | (cp >> 6));
    c += static_cast<char>(0x80 | (cp & 0x3F));
    vocab[c] = b;
  }
  vocab["ab"] = 256;
  const json tok = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\w+|\\s+"}}}, {"behavior", "Isolated"}},
                                      {{"type", "ByteLevel"}, {"use_regex", false}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array({{{"id", 257}, {"content", "<|end|>"}, {"special", true}}})}};
  fs::create_directories(path("model"));
  write("model/tokenizer.json", tok.dump());
  Result r = run("encode --tokenizer " + path("model") + " --text " + shell_quote("ab ba<|end|>"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[256, 32, 98, 97, 257]\n");
  r = run("decode --tokenizer " + path("model/tokenizer.json") + " 256 32 98 97 257");
  EXPECT_EQ(r.out, "ab ba<|end|>");
  r = run("tokens --tokenizer " + path("model") + " --text " + shell_quote("ab<|end|>"));
  EXPECT_THAT(r.out, HasSubstr("257  \"<|end|>\"  (special)"));
  EXPECT_THAT(r.out, HasSubstr("2 tokens, 9 bytes"));
  r = run("encode --jsonl - --tokenizer " + path("model"), "\"ab\"\n\"ba\"\n");
  EXPECT_EQ(r.out, "[256]\n[98, 97]\n");
  r = run("encode --tokenizer " + path("model") + " --allowed-special all --text x");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--allowed-special: does not go with --tokenizer"));
  r = run("decode --tokenizer " + path("model") + " 97 258 98");  // 258: in no table, no text (as Hugging Face)
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "ab");
  r = run("decode --tokenizer " + path("model") + " 97 -1");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("token id -1 is negative"));
  r = run("encode --tokenizer " + path("nowhere") + " --text x");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("is not a tokenizer.json (nor a folder holding one)"));
}

}  // namespace
}  // namespace qkv
