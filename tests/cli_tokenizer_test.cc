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

namespace qkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using json = nlohmann::json;

struct Result {
  int status;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Single-quoted for the shell.
std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class CliTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qkv_cli_tok_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // Runs `qkv ARGS` with standard input from `stdin_bytes` (empty: /dev/null).
  Result run(const std::string& args, const std::string& stdin_bytes = "", const std::string& env = "") const {
    const std::string in = stdin_bytes.empty() ? "/dev/null" : write("stdin.txt", stdin_bytes);
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string cmd = env + " " + std::string(QKV_BINARY) + " " + args + " > " + out + " 2> " + err + " < " + in;
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw), slurp(out), slurp(err)};
  }

  fs::path dir_;
};

TEST_F(CliTokenizer, EncodeTheBooksSentence) {
  Result r = run("encode --text " + q("Your journey starts with one step."));
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
  const std::string text = q("tea? <|endoftext|> In");
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
  Result same = run("encode --text " + q("a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD"));
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
  EXPECT_THAT(run("decode 12 abc").err, HasSubstr("\"abc\" is not a token id"));
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
  Result r = run("tokens --allowed-special all --text " + q("Hi 🤗\n<|endoftext|>"));
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

}  // namespace
}  // namespace qkv
