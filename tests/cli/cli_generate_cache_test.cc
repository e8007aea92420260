// `qkv generate` with and without the KV cache: the same completion, --cache-dtype's values and
// its refusal of others (a usage error, exit status 2, naming the value), and the JSON timing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

class GenerateCacheCli : public CliTest {
 protected:
  // A tiny text model of context 16, so that 30 new tokens slide the window.
  void SetUp() override {
    CliTest::SetUp();
    std::string text;
    for (int i = 0; i < 40; ++i) text += "the cat sat on the mat. the dog sat on the log. ";
    write("t.txt", text);
    Result r = run("train --text-file t.txt --context-length 16 --d-model 16 --num-heads 2 --num-layers 2 "
                   "--steps 20 --batch-size 4 --quiet --svg \"\" --checkpoint t.st");
    ASSERT_EQ(r.status, 0) << r.err;
  }
  static nlohmann::json last_json(const std::string& out) {
    std::string t = out;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    return nlohmann::json::parse(t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1));
  }
};

TEST_F(GenerateCacheCli, CachedAndUncachedWriteTheSameTextAndReportTiming) {
  const std::string g = "generate --checkpoint t.st --prompt \"the dog sat\" --max-new-tokens 30 --json ";
  for (const std::string& sampling : {std::string("--temperature 0"), std::string("--temperature 0.9 --seed 5")}) {
    Result cached = run(g + sampling);
    Result uncached = run(g + sampling + " --no-kv-cache");
    Result bf16 = run(g + sampling + " --cache-dtype bf16");
    ASSERT_EQ(cached.status, 0) << cached.err;
    ASSERT_EQ(uncached.status, 0) << uncached.err;
    ASSERT_EQ(bf16.status, 0) << bf16.err;
    const nlohmann::json a = last_json(cached.out), b = last_json(uncached.out), c = last_json(bf16.out);
    EXPECT_EQ(a["ids"], b["ids"]) << sampling;
    EXPECT_EQ(a["completion"], b["completion"]) << sampling;
    EXPECT_EQ(a["new_ids"].size(), 30u);
    EXPECT_EQ(a["new_tokens"], 30);
    EXPECT_EQ(a["prompt_tokens"], 3);
    EXPECT_EQ(a["kv_cache"], true);
    EXPECT_EQ(b["kv_cache"], false);
    EXPECT_EQ(a["cache_dtype"], "f32");
    EXPECT_EQ(c["cache_dtype"], "bf16");
    for (const char* key : {"seconds", "tokens_per_s"}) {
      EXPECT_TRUE(a[key].is_number()) << key;
      EXPECT_GE(a[key].get<double>(), 0.0) << key;
    }
  }
}

TEST_F(GenerateCacheCli, BadCacheDtypeIsAUsageErrorNamingIt) {
  Result r = run("generate --checkpoint t.st --prompt \"the cat\" --cache-dtype f16");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--cache-dtype: 'f16' is not a cache type; expected f32 or bf16"));
  Result help = run("generate --help");
  ASSERT_EQ(help.status, 0);
  for (const char* flag : {"--no-kv-cache", "--cache-dtype", "tokens_per_s"}) EXPECT_THAT(help.out, HasSubstr(flag));
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

// Text comes out as it is generated, and Ctrl-C stops a long generation with what it made printed
// (issue 26: --max-new-tokens 1000000 ran for minutes with nothing to see and no way out).
TEST_F(GenerateCacheCli, TokensStreamAndCtrlCStopsWithWhatWasGenerated) {
  const std::string cmd = "cd " + dir_.string() + " && exec " + std::string(QKV_BINARY) +
                          " generate --checkpoint t.st --prompt \"the cat\" --max-new-tokens 100000000 "
                          "--temperature 1 --seed 3 --no-kv-cache > gen.out 2> gen.err";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // The prompt and some generated text reach the file while the command runs.
  std::string seen;
  for (int waited = 0; waited < 60000 && (seen = slurp(path("gen.out"))).size() < 200; ++waited)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "qkv died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  EXPECT_GE(seen.size(), 200u) << "nothing was printed while generating";
  EXPECT_EQ(seen.rfind("the cat", 0), 0u) << seen;
  const std::string out = slurp(path("gen.out")), err = slurp(path("gen.err"));
  EXPECT_EQ(out.rfind(seen, 0), 0u) << "what was printed while running is the start of the final text";
  EXPECT_EQ(out.back(), '\n');
  EXPECT_THAT(err, HasSubstr("interrupted (Ctrl-C) after "));
  EXPECT_THAT(err, HasSubstr(" of 100000000 new tokens"));
}

// The streamed text is the text a whole decode gives (no half characters, nothing lost): the same
// bytes as --json's prompt + completion.
TEST_F(GenerateCacheCli, StreamedTextEqualsTheJsonCompletion) {
  const std::string g = "generate --checkpoint t.st --prompt \"the dog\" --max-new-tokens 40 --temperature 1.2 --seed 9";
  const Result plain = run(g), json_run = run(g + " --json");
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(json_run.status, 0) << json_run.err;
  const nlohmann::json j = last_json(json_run.out);
  EXPECT_EQ(plain.out, "the dog" + j["completion"].get<std::string>() + "\n");
  EXPECT_EQ(j["stopped"], false);
}

}  // namespace
}  // namespace qkv
