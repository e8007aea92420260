// Hostile input through the command line: `qkv decode` and `qkv generate` refuse it with a short
// message and exit status 1, never a crash (a signal's 128 + N) or a plausible wrong answer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "cli_runner.h"
#include "qkv/io/safetensors.h"
#include "test_support.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kTinyTrainNoSvg =
    "train --length 4 --symbols 6 --d-model 16 --num-heads 2 --num-layers 1 --batch-size 8 --eval-sequences 64 "
    "--quiet --svg \"\" ";

using HostileCli = CliTest;

TEST_F(HostileCli, ADeeplyNestedDecodeListIsRefusedWithoutRecursion) {
  // Crashed before (the error message printed the JSON, recursively, one frame per level).
  const Result r = run("decode", std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(r.status, 1) << r.err.substr(0, 400);
  EXPECT_THAT(r.err, HasSubstr("nest more than 64 deep (json_max_depth)"));
  EXPECT_LT(r.err.size(), 1000u);
}

TEST_F(HostileCli, DecodeNamesAnIdBeyondInt64AsWritten) {
  // Was "token id -1 is not in the vocabulary".
  const Result r = run("decode", "[7, 18446744073709551615]");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("18446744073709551615 in the array is not a token id"));
  EXPECT_THAT(r.err, Not(HasSubstr("-1")));
  const Result words = run("decode", "7 18446744073709551615");
  EXPECT_THAT(words.err, HasSubstr("'18446744073709551615' is not a token id (beyond the range of ids)"));
}

TEST_F(HostileCli, ADeeplyNestedCheckpointIsRefusedByGenerate) {
  const std::string header = std::string(100000, '[') + std::string(100000, ']');
  write("deep.st", testing_support::le64(header.size()) + header);
  const Result r = run("generate --checkpoint deep.st --prompt ab");
  EXPECT_EQ(r.status, 1) << r.err.substr(0, 400);
  EXPECT_THAT(r.err, HasSubstr("'deep.st': header: arrays and objects nest more than 64 deep (json_max_depth)"));
  EXPECT_LT(r.err.size(), 1000u);
}

TEST_F(HostileCli, ANonFiniteCheckpointIsRefusedByGenerate) {
  ASSERT_EQ(run(kTinyTrainNoSvg + "--steps 3 --checkpoint c.st").status, 0);
  TensorFile f = load_safetensors(path("c.st"));
  NamedTensors tensors;
  for (const std::string& name : f.names) {
    Tensor t = f.tensors.at(name).clone();
    if (name == "blocks.0.W_value.weight") t.data()[3] = std::numeric_limits<float>::quiet_NaN();
    tensors.push_back({name, t});
  }
  save_safetensors(path("nan.st"), tensors, f.metadata);
  // Generated plausible text and exited 0 before.
  const Result g = run("generate --checkpoint nan.st --prompt ab");
  EXPECT_EQ(g.status, 1);
  EXPECT_EQ(g.out, "");
  EXPECT_THAT(g.err, HasSubstr("'nan.st': tensor 'blocks.0.W_value.weight' holds a value that is not finite"));
  // Resuming from it is refused the same way.
  const Result resume = run(kTinyTrainNoSvg + "--steps 6 --resume nan.st");
  EXPECT_EQ(resume.status, 1);
  EXPECT_THAT(resume.err, HasSubstr("tensor 'blocks.0.W_value.weight' holds a value that is not finite"));
}

TEST_F(HostileCli, ANonRegularCheckpointIsRefusedAtOnce) {
  // /dev/zero was read until memory ran out; a directory gave "Is a directory" only after opening.
  const Result zero = run("generate --checkpoint /dev/zero --prompt ab");
  EXPECT_EQ(zero.status, 1);
  EXPECT_THAT(zero.err, HasSubstr("cannot read '/dev/zero': it is a character device; an input must be a regular file"));
  const Result dir = run("generate --checkpoint . --prompt ab");
  EXPECT_EQ(dir.status, 1);
  EXPECT_THAT(dir.err, HasSubstr("cannot read '.': it is a directory without model.safetensors"));
}

}  // namespace
}  // namespace qkv
