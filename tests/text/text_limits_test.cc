// Limits on what user input may make the tokenizer do: a --pattern that backtracks
// catastrophically fails with an error naming the limit; encode_batch never starts more threads
// than limits().max_threads, however many it is asked for or however many texts there are.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/text/bpe.h"
#include "qkv/text/pretokenize.h"
#include "test_support.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

using testing_support::ScopedLimits;

using testing_support::error_of;

TEST(TextLimits, ACatastrophicallyBacktrackingPatternFailsWithTheMatchLimitError) {
  // (a+)+$ on 40 a's and a b tries every way of splitting the a's: 2^40 steps without a limit.
  const auto p = make_pcre2_pretokenizer("(a+)+$");
  const std::string text = std::string(40, 'a') + "b";
  const std::string message = error_of([&] { pretokenize(*p, text); });
  EXPECT_THAT(message, HasSubstr("exceeded the match limit"));
  EXPECT_THAT(message, HasSubstr("(regex_match_limit)"));
  EXPECT_THAT(message, HasSubstr("'(a+)+$'"));
}

TEST(TextLimits, TheMatchLimitIsTheOneInLimits) {
  // 14 a's: about 2^14 steps a match, well under PCRE2's default limit, over a limit of 1000.
  const auto p = make_pcre2_pretokenizer("(a+)+$");
  const std::string text = std::string(14, 'a') + "b";
  EXPECT_NO_THROW(pretokenize(*p, text));
  Limits l = limits();
  l.regex_match_limit = 1000;
  ScopedLimits scoped(l);
  EXPECT_THAT(error_of([&] { pretokenize(*p, text); }), HasSubstr("match limit of 1000 "));
  // An ordinary pattern on ordinary text stays far below it.
  const auto words = make_pcre2_pretokenizer(R"(\p{L}+|\s+|[^\s\p{L}]+)");
  EXPECT_EQ(pretokenize(*words, "Your journey starts with one step.").size(), 12u);
}

TEST(TextLimits, APatternThatSucceedsJustUnderTheMatchLimitEveryTimeStopsAtTheRateFloor) {
  // At each 'a' of a run, (?:a|aa)+b tries every way of splitting the rest of the run into a's
  // and aa's (Fibonacci-many), fails for want of a 'b', and the second alternative takes one 'a':
  // every match succeeds under the match limit, but each costs up to fib(28) steps: a few KB per
  // second. The 116 KB below would take half a minute; the default floor of 1,000,000 bytes per
  // second stops it after about a second.
  const auto p = make_pcre2_pretokenizer("(?:a|aa)+b|a|c");
  std::string text;
  for (int run = 0; run < 4000; ++run) text += std::string(28, 'a') + "c";
  ASSERT_EQ(limits().regex_min_bytes_per_second, 1'000'000);
  const std::string message = error_of([&] { pretokenize(*p, text); });
  EXPECT_THAT(message, HasSubstr("slower than the 1000000 bytes per second"));
  EXPECT_THAT(message, HasSubstr("(regex_min_bytes_per_second)"));
  // The same pattern on a text it splits quickly stays under the floor.
  EXPECT_EQ(pretokenize(*p, std::string(5, 'a') + "c").size(), 6u);
}

TEST(TextLimits, SlowMatchesMeetTheRateFloorOneMatchAfterItIsPassed) {
  // A back-reference pattern on prose: (.+)\1 tries every split of the rest of the text at every
  // start, so one match costs milliseconds to a good part of a second under the match limit. The
  // rate floor used to be checked every 64 matches (found some 20 s in, where the budget is about
  // one second); the clock is now read before every match once matches are this slow, so the run
  // is refused one match past its budget: well under two seconds on any machine where one match
  // takes less than a second (the budget itself is 1 s plus the bytes over 1,000,000 per second).
  const auto p = make_pcre2_pretokenizer(R"((.+)\1)");
  const char* words[] = {"the", "cat", "sat", "on", "mat", "dog", "log"};
  std::string text;
  uint32_t x = 1;
  for (int i = 0; i < 30000; ++i) {
    x = x * 1103515245u + 12345u;
    text += std::string(words[(x >> 16) % 7]) + " ";
  }
  const std::string message = error_of([&] { pretokenize(*p, text); });
  ASSERT_THAT(message, HasSubstr("(regex_min_bytes_per_second)"));
  const size_t at = message.find("it ran for ");
  ASSERT_NE(at, std::string::npos) << message;
  const double seconds = std::stod(message.substr(at + 11));
  EXPECT_GT(seconds, 1.0) << message;  // not before the budget (a first second) ran out
  EXPECT_LT(seconds, 2.0) << message;
}

TEST(TextLimits, ARegexMatchLimitOutsidePcre2sRangeIsRefused) {
  Limits l = limits();
  l.regex_match_limit = 0;
  EXPECT_THROW(set_limits(l), Error);
  l.regex_match_limit = int64_t{1} << 32;
  EXPECT_THROW(set_limits(l), Error);
  l = limits();
  l.regex_min_bytes_per_second = 0;
  EXPECT_THROW(set_limits(l), Error);
}

// The threads of this process, from /proc/self/status.
int process_threads() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

Encoding byte_encoding() {
  EncodingSpec spec;
  spec.name = "bytes";
  spec.pattern = std::string(kGpt2Pattern);
  for (int b = 0; b < 256; ++b) spec.mergeable_ranks.emplace_back(std::string(1, static_cast<char>(b)), b);
  return Encoding(std::move(spec));
}

TEST(TextLimits, EncodeBatchNeverStartsMoreThreadsThanMaxThreads) {
  if (process_threads() < 0) GTEST_SKIP() << "no /proc/self/status";
  const Encoding enc = byte_encoding();
  const std::vector<std::string> texts(3000, "Your journey starts with one step.");
  Limits l = limits();
  l.max_threads = 3;
  ScopedLimits scoped(l);
  // A watcher samples the thread count while the batch runs (one thread per text would show
  // hundreds at once); it counts itself in the baseline.
  std::atomic<bool> done{false};
  std::atomic<int> most{0};
  std::atomic<int> baseline{0};
  std::thread watcher([&] {
    baseline = process_threads();
    while (!done) most = std::max(most.load(), process_threads());
  });
  while (baseline == 0) std::this_thread::yield();
  const auto ids = enc.encode_ordinary_batch(texts, 100000);
  done = true;
  watcher.join();
  ASSERT_EQ(ids.size(), texts.size());
  EXPECT_EQ(ids.back(), enc.encode_ordinary(texts.back()));
  // The calling thread works too: at most 3 threads in all, so 2 started beside it.
  EXPECT_LE(most.load() - baseline.load(), 2) << "baseline " << baseline << ", most " << most;
}

TEST(TextLimits, EncodeBatchOnMoreThreadsThanTextsGivesEveryTextItsIds) {
  const Encoding enc = byte_encoding();
  const std::vector<std::string> texts = {"a", "bb", "ccc"};
  const auto ids = enc.encode_batch(texts, 100000);
  ASSERT_EQ(ids.size(), 3u);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(ids[i], enc.encode(texts[i]));
}

TEST(TextLimits, AnEncodingWithASparseHugeIdAsksForItsTablesWithinTheMemoryLimit) {
  // 256 byte tokens and one at rank 50,000,000: the id tables would take 450 MB (found by the
  // tiktoken_ranks fuzzer: a 57-byte rank file with a rank of 3e8 asked for 2.7 GB).
  EncodingSpec spec;
  spec.name = "sparse";
  spec.pattern = std::string(kGpt2Pattern);
  for (int b = 0; b < 256; ++b) spec.mergeable_ranks.emplace_back(std::string(1, static_cast<char>(b)), b);
  spec.mergeable_ranks.emplace_back("ab", 50'000'000);
  Limits l = limits();
  l.max_memory_bytes = 1 << 20;
  ScopedLimits scoped(l);
  const std::string message = error_of([&] { Encoding enc(spec); });
  EXPECT_THAT(message, HasSubstr("encoding sparse's table of ids 0..50000000 needs 450000009 bytes"));
  EXPECT_THAT(message, HasSubstr("max_memory_bytes)"));
}

}  // namespace
}  // namespace qkv
