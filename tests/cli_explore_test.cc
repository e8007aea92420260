// qkv explore: a page for each source, and bad input refused with the right exit status and no
// page written. The page in a real browser: tests/explore (explore.browser).
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_runner.h"

namespace qkv {
namespace {

class ExploreCli : public CliTest {
 protected:
  // Runs the command and checks it failed with `status`, saying `words`, writing no page.
  void refused(const std::string& args, int status, const std::string& words) {
    const Result r = run(args + " --out page.html");
    EXPECT_EQ(r.status, status) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << args << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("page.html"))) << args;
  }
  const std::string mha = "--module mha --d-in 6 --d-out 6 --num-heads 2 --context-length 16 --seed 123";
};

TEST_F(ExploreCli, WritesTheChapterPageAndReportsItsSize) {
  const Result r = run("explore --out page.html");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("bytes"), std::string::npos) << r.out;
  const std::string html = slurp(path("page.html"));
  EXPECT_EQ(r.out.find(std::to_string(html.size()) + " bytes"), r.out.find("page.html: ") + 11) << r.out;
  EXPECT_NE(html.find("causal.attn_weights"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);  // nothing to fetch (http:// is only the SVG namespace)
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST_F(ExploreCli, LabelsThatAreMarkupStayInsideTheData) {
  const Result r = run("explore --text " + shell_quote("x </script><img src=x onerror=alert(1)> y") +
                       " --module mha --d-in 6 --d-out 6 --num-heads 2 --context-length 32 --seed 1 --out page.html");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = slurp(path("page.html"));
  EXPECT_EQ(html.find("</script><img"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
}

TEST_F(ExploreCli, EmptyTextIsRefused) { refused("explore --text ''", 1, "empty"); }

TEST_F(ExploreCli, TextLongerThanTheContextIsRefused) {
  refused("explore --text 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen' " + mha, 1, "--context-length is 16");
}

TEST_F(ExploreCli, ACheckpointThatIsNotAnAttentionLMIsRefused) {
  ASSERT_EQ(run("forward --module mha --d-in 4 --d-out 4 --num-heads 2 --context-length 8 --seed 1 --text hi "
                "--save-weights w.safetensors --output y.safetensors").status, 0);
  refused("explore --checkpoint w.safetensors --text hi", 1, "w.safetensors");
}

TEST_F(ExploreCli, ModuleFlagsThatDoNotFitAreUsageErrors) {
  refused("explore --d-in 4", 2, "needs --module");
  refused("explore --module self-attention-v1 --d-in 4 --d-out 4 --context-length 8 --num-heads 2 --seed 1", 2,
          "--num-heads");
  refused("explore --module mha --d-in 4 --d-out 6 --num-heads 4 --context-length 8 --seed 1", 1, "divisible");
  refused("explore --module causal-attention --d-in 4 --d-out 4 --seed 1", 2, "--context-length");
  refused("explore --module mha --d-in 4 --d-out 4 --num-heads 2 --context-length 8 --seed 1 --rope half --alibi "
          "--window 0", 2, "--window");
  refused("explore --checkpoint c.safetensors --module mha", 2, "does not apply to --checkpoint");
}

TEST_F(ExploreCli, APageOverTheSizeLimitIsRefusedNamingTheFlags) {
  refused("explore " + mha + " --max-page-size 20K", 1, "--precision u8");
}

}  // namespace
}  // namespace qkv
