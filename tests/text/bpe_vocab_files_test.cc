// Finding and trusting vocabulary files: the search path, the error that lists it, digests that
// refuse a damaged copy, encoder.json and vocab.bpe checked against each other, tiktoken's own
// rank format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "qkv/core/error.h"
#include "qkv/text/bpe.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/vocab_files.h"
#include "test_support.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class BpeVocabFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qkv_vocab_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The installed files, found the normal way (a missing install fails here, with the lookup error).
  static std::string installed(const std::string& name) {
    return read_verified_file((fs::path(find_gpt2_vocab(gpt2_vocab_places())) / name).string());
  }
  std::string write(const std::string& rel, const std::string& bytes) const {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  fs::path dir_;
};

TEST_F(BpeVocabFiles, SearchPathInOrder) {
  const char* saved = std::getenv("QKV_VOCAB_DIR");
  const std::string saved_value = saved ? saved : "";
  ::setenv("QKV_VOCAB_DIR", "/tmp/from-env", 1);
  const std::vector<VocabPlace> places = gpt2_vocab_places();
  if (saved) ::setenv("QKV_VOCAB_DIR", saved_value.c_str(), 1);
  else ::unsetenv("QKV_VOCAB_DIR");
  ASSERT_EQ(places.size(), 4u);
  EXPECT_EQ(places[0].dir, "/tmp/from-env");
  EXPECT_THAT(places[1].dir, HasSubstr("/qkv/gpt2"));  // the data directory
  EXPECT_EQ(places[2].dir, "/usr/local/share/qkv/gpt2");
  EXPECT_EQ(places[3].dir, "/usr/share/qkv/gpt2");
  // A given directory is the only place.
  ASSERT_EQ(gpt2_vocab_places("/some/dir").size(), 1u);
  EXPECT_EQ(gpt2_vocab_places("/some/dir")[0].why, "the given directory");
}

TEST_F(BpeVocabFiles, MissingFilesListEveryPlaceAndTheInstallCommand) {
  write("half/encoder.json", "{}");
  const std::vector<VocabPlace> places = {{(dir_ / "none").string(), "first"}, {(dir_ / "half").string(), "second"}};
  const std::string msg = testing_support::error_of([&] { find_gpt2_vocab(places); });
  EXPECT_THAT(msg, HasSubstr((dir_ / "none").string() + " (first): neither file"));
  EXPECT_THAT(msg, HasSubstr((dir_ / "half").string() + " (second): no vocab.bpe"));
  EXPECT_THAT(msg, HasSubstr("bash scripts/setup.sh"));
  EXPECT_THAT(testing_support::error_of([&] { load_gpt2((dir_ / "none").string()); }), HasSubstr("QKV_VOCAB_DIR"));
}

TEST_F(BpeVocabFiles, ADamagedCopyIsRefused) {
  std::string encoder = installed("encoder.json"), merges = installed("vocab.bpe");
  write("good/encoder.json", encoder);
  write("good/vocab.bpe", merges);
  EXPECT_EQ(load_gpt2((dir_ / "good").string()).n_vocab(), 50257);

  encoder[1000] ^= 1;
  write("bad/encoder.json", encoder);
  write("bad/vocab.bpe", merges);
  const std::string msg = testing_support::error_of([&] { load_gpt2((dir_ / "bad").string()); });
  EXPECT_THAT(msg, HasSubstr("refusing to load " + (dir_ / "bad" / "encoder.json").string()));
  EXPECT_THAT(msg, HasSubstr("SHA-256"));
  EXPECT_THAT(msg, HasSubstr(std::string(kGpt2EncoderJsonSha256)));

  write("bad2/encoder.json", installed("encoder.json"));
  write("bad2/vocab.bpe", merges.substr(0, merges.size() - 1));
  EXPECT_THAT(testing_support::error_of([&] { load_gpt2((dir_ / "bad2").string()); }), HasSubstr("vocab.bpe"));
}

TEST_F(BpeVocabFiles, EncoderJsonMustAgreeWithTheMerges) {
  const std::string encoder = installed("encoder.json"), merges = installed("vocab.bpe");
  EXPECT_EQ(data_gym_to_mergeable_ranks(merges, encoder).size(), 50256u);
  // Swap the first two merges: their ranks no longer match encoder.json.
  const size_t l1 = merges.find('\n') + 1, l2 = merges.find('\n', l1) + 1, l3 = merges.find('\n', l2) + 1;
  const std::string swapped =
      merges.substr(0, l1) + merges.substr(l2, l3 - l2) + merges.substr(l1, l2 - l1) + merges.substr(l3);
  EXPECT_THAT(testing_support::error_of([&] { data_gym_to_mergeable_ranks(swapped, encoder); }), HasSubstr("disagree"));
  EXPECT_THAT(testing_support::error_of([&] { data_gym_to_mergeable_ranks("#version: 0.2\na b c\n", "{}"); }),
              HasSubstr("vocab.bpe line 2"));
}

std::string base64(const std::string& bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += abc[(v >> (6 * k)) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    out += abc[v >> 18], out += abc[(v >> 12) & 63], out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += abc[v >> 18], out += abc[(v >> 12) & 63], out += abc[(v >> 6) & 63], out += '=';
  }
  return out;
}

TEST_F(BpeVocabFiles, TiktokenRankFilesGiveTheSameEncoding) {
  const auto ranks = data_gym_to_mergeable_ranks(installed("vocab.bpe"), installed("encoder.json"));
  std::string file;
  for (const auto& [bytes, rank] : ranks) file += base64(bytes) + " " + std::to_string(rank) + "\n";
  const std::string path = write("gpt2.tiktoken", file);
  const Encoding mine = load_tiktoken_encoding(path, std::string(kGpt2PatternLong), {{"<|endoftext|>", 50256}});
  const Encoding gpt2 = load_gpt2();
  EXPECT_EQ(mine.name(), "gpt2");
  EXPECT_EQ(mine.n_vocab(), 50257);
  for (const std::string text : {"Your journey starts with one step.", "I'm here  \n\n ok 123 ½ 🤗 <|endoftext|>"}) {
    EXPECT_EQ(mine.encode(text, SpecialTokens::all()), gpt2.encode(text, SpecialTokens::all()));
  }
  // The same through PCRE2 (any other spelling of the pattern takes it).
  const Encoding pcre = load_tiktoken_encoding(path, std::string(kGpt2Pattern) + "|(?!)", {});
  EXPECT_STREQ(pcre.pretokenizer_engine(), "pcre2-jit");
  EXPECT_EQ(pcre.encode_ordinary("Your journey starts  with one step."),
            gpt2.encode_ordinary("Your journey starts  with one step."));
  // A digest given and not matched: refused.
  EXPECT_THAT(testing_support::error_of([&] { load_tiktoken_encoding(path, "\\S+", {}, "x", std::string(64, '0')); }),
              HasSubstr("refusing to load"));
}

TEST_F(BpeVocabFiles, BadTiktokenLinesAreNamed) {
  EXPECT_THAT(testing_support::error_of([] { parse_tiktoken_ranks("IQ== 0\nnot-base64! 1\n", "f.tiktoken"); }),
              HasSubstr("f.tiktoken line 2"));
  EXPECT_THAT(testing_support::error_of([] { parse_tiktoken_ranks("IQ== zero\n", "f.tiktoken"); }), HasSubstr("not a rank"));
  EXPECT_THAT(testing_support::error_of([] { parse_tiktoken_ranks("IQ==\n", "f.tiktoken"); }), HasSubstr("line 1"));
  EXPECT_THAT(testing_support::error_of([] { parse_tiktoken_ranks("\n\n", "f.tiktoken"); }), HasSubstr("no ranks"));
  EXPECT_EQ(parse_tiktoken_ranks("IQ== 0\r\nIiM= 7\n", "f").at(1), (std::pair<std::string, TokenId>{"\"#", 7}));
}

}  // namespace
}  // namespace qkv
