// `qkv generate` with and without the KV cache: the same completion, --cache-dtype's values and
// its refusal of others (a usage error, exit status 2, naming the value), and the JSON timing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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
    EXPECT_EQ(a["ids"].size(), 30u);
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
