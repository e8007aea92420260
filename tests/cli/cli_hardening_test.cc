// The command line against hostile or unlucky use: numbers beyond a flag's type, sizes whose
// product overflows, outputs that collide, fail, are links or devices, a full standard output,
// killed runs' temporaries, and the exit statuses qkv --help promises.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "cli_runner.h"
#include "qkv/core/error.h"
#include "qkv/core/read_file.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/io/gguf.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"
#include "qkv/models/gpt.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A forward run on text that needs no input file: (1, 2, 3) -> (1, 2, 2).
const std::string kForward =
    "forward --module mha --d-in 3 --d-out 2 --num-heads 1 --context-length 8 --seed 1 --text 'hi there' ";
const std::string kTinyTrain =
    "train --length 4 --symbols 6 --d-model 16 --num-heads 2 --num-layers 1 --batch-size 8 --eval-sequences 64 "
    "--quiet ";

class CliHardening : public CliTest {
 protected:
  // `qkv ARGS` with standard output on /dev/full (run() redirects it to a file).
  Result run_to_full(const std::string& args) const {
    const std::string err = path("full.err");
    const std::string cmd = "cd " + shell_quote(dir_.string()) + " && " + std::string(QKV_BINARY) + " " + args +
                            " > /dev/full 2> " + err + " < /dev/null";
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw), "", slurp(err)};
  }
};

TEST_F(CliHardening, UsageErrorsExitWith2) {
  for (const char* args :
       {"forward --bogus", "forward --d-in 3", "forward --module attention --d-in 3 --d-out 2 --seed 1 --input x",
        "nosuchcommand", "", "encode --threads x", "train --steps", "bench --module mha --seq-len 1e3",
        "walkthrough --max-tokens -1", "decode --bytes=maybe"}) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << "qkv " << args << "\n" << r.err;
    EXPECT_NE(r.err, "") << args;
  }
}

TEST_F(CliHardening, HelpAndVersionExitWith0AndHelpDocumentsTheExitStatuses) {
  const Result help = run("--help");
  EXPECT_EQ(help.status, 0);
  for (const char* code : {"0 success", "1 runtime error", "2 usage error", "130 interrupted"})
    EXPECT_THAT(help.out, HasSubstr(code));
  EXPECT_EQ(run("--version").status, 0);
  EXPECT_EQ(run("forward --help").status, 0);
}

TEST_F(CliHardening, ARuntimeErrorExitsWith1) {
  const Result r = run("forward --module mha --d-in 3 --d-out 2 --context-length 4 --seed 1 --input missing.st");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("missing.st"));
}

TEST_F(CliHardening, NumbersBeyondAFlagsTypeAreRefusedNotSaturated) {
  struct Case {
    std::string args, flag, value;
  };
  const std::vector<Case> cases = {
      {"forward --module mha --d-in 3 --d-out 2 --input x --seed 18446744073709551616", "--seed",
       "18446744073709551616"},
      {"forward --module mha --d-out 2 --seed 1 --input x --d-in 9223372036854775808", "--d-in",
       "9223372036854775808"},
      {"forward --module mha --d-in 3 --d-out 2 --input x --seed -1", "--seed", "-1"},
      {"forward --module mha --d-out 2 --seed 1 --input x --d-in 1e3", "--d-in", "1e3"},
      {"forward --module mha --d-out 2 --seed 1 --input x --d-in 12abc", "--d-in", "12abc"},
      {"forward --module mha --d-in 3 --d-out 2 --seed 1 --input x --dropout nan", "--dropout", "nan"},
      {"forward --module mha --d-in 3 --d-out 2 --seed 1 --input x --dropout inf", "--dropout", "inf"},
      {"train --seed 18446744073709551616", "--seed", "18446744073709551616"},
      {"train --steps 1.5", "--steps", "1.5"},
      {"train --lr nan", "--lr", "nan"},
      {"generate --checkpoint c.st --prompt a --top-k -1", "--top-k", "-1"},
      {"encode --text a --threads 4294967297", "--threads", "4294967297"},
      {"bench --module mha --seq-len 99999999999999999999", "--seq-len", "99999999999999999999"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.flag + ": '" + c.value + "' is not")) << c.args;
    EXPECT_THAT(r.err, HasSubstr(" in [")) << "the accepted range is not stated: " << r.err;
  }
  // The same flags take every value of their type.
  const Result max_seed = run(
      "forward --module mha --d-in 3 --d-out 2 --context-length 8 --text hi --seed 18446744073709551615");
  EXPECT_EQ(max_seed.status, 0) << max_seed.err;
  // A value quoted in an error is excerpted: escaped, bounded.
  const Result escaped = run("forward --module mha --d-out 2 --seed 1 --input x --d-in \"$(printf '1\\033[31m')\"");
  EXPECT_EQ(escaped.status, 2);
  EXPECT_THAT(escaped.err, HasSubstr("'1\\x1B[31m'"));
  EXPECT_THAT(escaped.err, Not(HasSubstr("\x1b")));
}

TEST_F(CliHardening, SizesWhoseProductOverflowsAreRefused) {
  for (const char* args :
       {"forward --module mha --d-in 2147483648 --d-out 2147483648 --seed 1 --context-length 8 --text hi",
        "forward --module causal-attention --d-in 4 --d-out 4 --seed 1 --text hi --context-length 4294967296",
        "forward --module causal-attention --d-in 4 --d-out 4 --seed 1 --text hi --context-length 4294967296 "
        "--save-weights w.st",
        "bench --module mha --batch 4294967296 --seq-len 4294967296 --d-model 768"}) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("qkv: error: ")) << args;
    EXPECT_TRUE(r.err.find("exceeds") != std::string::npos || r.err.find("memory limit") != std::string::npos)
        << args << "\n" << r.err;
  }
}

TEST_F(CliHardening, AMemoryLimitErrorSaysWhichFlagRaisesIt) {
  const Result r = run(kForward + "--max-memory 1K");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("max_memory_bytes"));
  EXPECT_THAT(r.err, HasSubstr("raise it with --max-memory"));
  EXPECT_EQ(run(kForward + "--max-memory 1G").status, 0);
  EXPECT_EQ(run(kForward + "--max-memory 12X").status, 2);
  const Result big = run("encode --max-file-size 4", "hello world");
  EXPECT_EQ(big.status, 1);
  EXPECT_THAT(big.err, HasSubstr("raise it with --max-file-size"));
}

TEST_F(CliHardening, ThreadsBeyondTheLimitAreRefusedNamingTheFlag) {
  const Result r = run("encode --jsonl - --threads 100000", "\"a\"\n");
  EXPECT_EQ(r.status, 2);  // a usage error (it was 1)
  EXPECT_THAT(r.err, HasSubstr("--threads: 100000"));
  EXPECT_THAT(r.err, HasSubstr("threads one command may start"));
}

TEST_F(CliHardening, AWalkthroughOfAVeryLongTextIsRefusedUnlessAsked) {
  std::string text;
  for (int i = 0; i < 300; ++i) text.append("w").append(std::to_string(i)).append(" ");
  const Result r = run("walkthrough --no-gpt --text '" + text + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("300 words, more than --max-tokens 256"));
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(run("walkthrough --no-gpt --max-tokens 300 --json --text '" + text + "'").status, 0);
}

TEST_F(CliHardening, AFailedRunLeavesEveryExistingOutputUntouched) {
  write("keep.st", "old output");
  write("attn.st", "old attention");
  const Result r = run(kForward + "--output keep.st --attn-weights attn.st --save-weights /nonexistent/w.st");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("--save-weights '/nonexistent/w.st'"));
  EXPECT_EQ(slurp(path("keep.st")), "old output");
  EXPECT_EQ(slurp(path("attn.st")), "old attention");
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_)) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"attn.st", "keep.st", "stderr.txt", "stdout.txt"}));
  // And the same outputs, all writable, are all written.
  const Result ok = run(kForward + "--output keep.st --attn-weights attn.st --save-weights w.st");
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(slurp(path("keep.st")), "old output");
  EXPECT_EQ(load_safetensors(path("w.st")).get("token_emb.weight").shape(), (Shape{50257, 3}));
}

TEST_F(CliHardening, OutputAndSaveWeightsNamingOneFileAreRefused) {
  write("a.st", "old");
  fs::create_directory(path("sub"));
  for (const std::string& second : std::vector<std::string>{"a.st", "./a.st", "sub/../a.st", path("a.st")}) {
    const Result r = run(kForward + "--output a.st --save-weights " + second);
    EXPECT_EQ(r.status, 1) << second;
    EXPECT_THAT(r.err, HasSubstr("--output 'a.st' and --save-weights '" + second + "' name the same file"));
    EXPECT_EQ(slurp(path("a.st")), "old");
  }
  // A hard link is the same file too.
  ASSERT_EQ(::link(path("a.st").c_str(), path("b.st").c_str()), 0);
  const Result hard = run(kForward + "--output a.st --attn-weights b.st");
  EXPECT_EQ(hard.status, 1);
  EXPECT_THAT(hard.err, HasSubstr("name the same file"));
  // train: the checkpoint and the loss curve.
  const Result train = run(kTinyTrain + "--steps 3 --checkpoint c.st --svg ./c.st");
  EXPECT_EQ(train.status, 1);
  EXPECT_THAT(train.err, HasSubstr("--checkpoint 'c.st' and --svg './c.st' name the same file"));
}

TEST_F(CliHardening, ASymlinkedOutputIsWrittenThrough) {
  fs::create_directory(path("real"));
  write("real/out.st", "old");
  fs::create_symlink("real/out.st", path("link.st"));
  fs::create_symlink("missing.st", path("dangling.st"));
  const Result r = run(kForward + "--output link.st --save-weights dangling.st");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(path("link.st")));
  EXPECT_TRUE(fs::is_symlink(path("dangling.st")));
  EXPECT_EQ(load_safetensors(path("real/out.st")).get("output").shape(), (Shape{1, 2, 2}));
  EXPECT_GT(load_safetensors(path("missing.st")).tensors.size(), 0u);
}

// The devices are made in the scratch directory (a null device, a link to this process's standard
// output) so that a qkv that replaced them would damage nothing outside it.
TEST_F(CliHardening, DevicesAndFifosAreWrittenDirectlyAndDirectoriesRefused) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  // qkv writes into the FIFO in the background while cat drains it; the status is qkv's.
  const Result fifo = run(kForward + "--output fifo 2> fifo.err & cat " + path("fifo") + " > " +
                          path("from_fifo.st") + "; wait $!");
  EXPECT_EQ(fifo.status, 0) << slurp(path("fifo.err"));
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  EXPECT_EQ(load_safetensors(path("from_fifo.st")).get("output").shape(), (Shape{1, 2, 2}));

  fs::create_symlink("/proc/self/fd/1", path("stdout"));  // what /dev/stdout is
  const Result out = run(kForward + "--output stdout");
  ASSERT_EQ(out.status, 0) << out.err;
  EXPECT_TRUE(fs::is_symlink(path("stdout")));
  ASSERT_GT(out.out.size(), 8u);
  EXPECT_EQ(out.out.substr(8, 1), "{") << "not a safetensors file on stdout";

  fs::create_directory(path("d"));
  const Result dir = run(kForward + "--output d");
  EXPECT_EQ(dir.status, 1);
  EXPECT_THAT(dir.err, HasSubstr("cannot write --output 'd': Is a directory"));
  EXPECT_TRUE(fs::is_directory(path("d")));

  if (::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "cannot make a character device here (not root): " << std::strerror(errno);
  const Result null = run(kForward + "--output null --save-weights null");
  EXPECT_EQ(null.status, 0) << null.err;
  EXPECT_TRUE(fs::is_character_file(path("null")));
}

// A preset of a family without a chat format is a usage error before the model is built (gpt2-xl
// was built whole, 6 GB, then refused with exit 1); chat's help lists only its families' presets.
TEST_F(CliHardening, ChatRefusesAPresetWithoutAChatFormatFirst) {
  const Result r = run("chat --model gpt2-xl < /dev/null");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--model: 'gpt2-xl' is a GPT preset, which has no chat format; chat's presets: "
                               "llama-3.2-1b"));
  const Result help = run("chat --help");
  EXPECT_THAT(help.out, HasSubstr("(a family with a chat format): llama-3.2-1b"));
  EXPECT_THAT(help.out, Not(HasSubstr("gpt2-small")));
}

// Usage errors that were runtime errors (exit 1) or named CLI11's internals: each is exit 2 naming the
// flag and what it takes.
TEST_F(CliHardening, FlagsWrongTogetherAreUsageErrorsNamingTheFlag) {
  write_file_atomically(path("x.st"), "not read");
  const std::pair<std::string, std::string> cases[] = {
      // a name that is no preset: chat listed every family's presets, and exited 1
      {"chat --model nonexist < /dev/null", "--model: 'nonexist' is not a preset; expected one of: llama-3.2-1b |"},
      {"explore --model nonexist --text hi --out e.html",
       "--model: 'nonexist' is not a preset; expected one of: gpt2-small |"},
      {"encode --pattern x --text hi", "--pattern: goes with --ranks FILE; GPT-2's encoding has its own"},
      {"encode --special a=1 --text hi", "--special: goes with --ranks FILE"},
      {"encode --ranks r.tiktoken --vocab-dir . --text hi", "--vocab-dir: names GPT-2's vocabulary; --ranks names another"},
      {"forward --module mha --d-in 4 --d-out 4 --num-heads 3 --context-length 4 --seed 1 --input x.st --output y.st",
       "--num-heads: MultiHeadAttention: d_out (4) must be divisible by num_heads (3)"},
      {"forward --module mha --d-in 4 --d-out 4 --num-heads 2 --context-length 4 --seed 1 --input x.st --output y.st "
       "--grad-output g.st",
       "--grad-output: --grad-output FILE (dL/doutput in) and --grads-out FILE (the gradients out) go together"},
      {"forward --module gpt --grads-out g.st --input x.st --output y.st", "--grads-out: --grad-output FILE"},
      {"bench --module attention-core --batch 1 --seq-len 8 --num-heads 1 --head-dim 8 --threads 100000",
       "--threads: 100000 is more than the "},
      // a flag given twice: CLI11's "At Most 1 required but received 2"
      {"train --steps 1 --steps 2", "--steps: given 2 times; give it once"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
  EXPECT_FALSE(fs::exists(path("y.st")));
  EXPECT_FALSE(fs::exists(path("e.html")));
}

// An output where no file can be created (/proc: root passes access() there) is refused before the
// work; train refused it only when writing its checkpoint, after every step.
TEST_F(CliHardening, AnOutputWhereNoFileCanBeCreatedIsRefusedBeforeTheWork) {
  // (not --quiet: the progress lines and the evaluations would show training)
  const Result r = run("train --length 4 --symbols 6 --d-model 16 --num-heads 2 --num-layers 1 --batch-size 8 "
                       "--eval-sequences 64 --steps 20 --eval-every 10 --checkpoint /proc/qkv-no.st --svg=");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("'/proc/qkv-no.st'"));
  EXPECT_THAT(r.err, Not(HasSubstr("held-out loss"))) << "it trained first: " << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("step 1"))) << "it trained first: " << r.err;
  const Result f = run(kForward + "--output /proc/qkv-no.st");
  EXPECT_EQ(f.status, 1) << f.err;
  EXPECT_THAT(f.err, HasSubstr("'/proc/qkv-no.st'"));
}

// A training run whose progress goes to a pipe nobody reads any more (`qkv train 2>&1 | head -1`
// after head exited): SIGPIPE killed it at its first line, before any checkpoint. Now the writes
// fail and the run ends with its checkpoint: exit 0 when only standard error was lost, 1 when the
// standard output was (its summary did not arrive).
TEST_F(CliHardening, AClosedPipeOnTheProgressDoesNotLoseATrainingRun) {
  for (const bool stdout_too : {false, true}) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    close(fds[0]);  // the reader is gone: every write to fds[1] raises SIGPIPE
    const std::string out = path("out.txt");
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      signal(SIGPIPE, SIG_DFL);
      if (chdir(dir_.c_str()) != 0) _exit(126);
      const int out_fd = stdout_too ? fds[1] : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out_fd, 1);
      dup2(fds[1], 2);
      execl(QKV_BINARY, "qkv", "train", "--length", "4", "--symbols", "6", "--d-model", "16", "--num-heads", "2",
            "--num-layers", "1", "--batch-size", "8", "--eval-sequences", "64", "--steps", "3", "--eval-every", "1",
            "--checkpoint", "c.st", "--svg=", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status) << " (stdout too: " << stdout_too << ")";
    EXPECT_EQ(WEXITSTATUS(status), stdout_too ? 1 : 0);
    EXPECT_TRUE(fs::exists(path("c.st"))) << "stdout too: " << stdout_too;
    if (!stdout_too) {
      EXPECT_THAT(read_file(out), HasSubstr("c.st"));
    }
    fs::remove(path("c.st"));
  }
}

// "--flag=" is the flag with an empty value (--checkpoint= : none, as --checkpoint ''); CLI11 took the
// next argument as the value: --checkpoint= --quiet wrote the checkpoint to a file named --quiet.
TEST_F(CliHardening, AnEmptyValueAfterAnEqualsSignIsEmpty) {
  const Result r = run(kTinyTrain + "--steps 1 --checkpoint= --svg= --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(fs::exists(path("--quiet")));
  EXPECT_FALSE(fs::exists(path("qkv-train.safetensors")));
  EXPECT_TRUE(r.err.empty()) << "--quiet was not taken as a flag: " << r.err;
  const Result text = run("encode --text=");
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(text.out, "[]\n");
  EXPECT_EQ(run("encode --text=a=b").out, "[64, 28, 65]\n");  // a value holding '=' stays whole
}

// "-" reads standard input; as an output it would be a file named "-", so it is refused (the
// explorer's page and forward's tensors alike), and ./- is that file when meant.
TEST_F(CliHardening, ADashAsAnOutputIsRefusedNamingStandardOutput) {
  const Result forward = run(kForward + "--output -");
  EXPECT_EQ(forward.status, 1);
  EXPECT_THAT(forward.err, HasSubstr("cannot write --output '-': \"-\" is standard input for qkv's inputs"));
  EXPECT_THAT(forward.err, HasSubstr("/dev/stdout"));
  const Result page = run("explore --text 'Your journey starts with one step' --out -");
  EXPECT_EQ(page.status, 1);
  EXPECT_THAT(page.err, HasSubstr("cannot write --out '-'"));
  EXPECT_FALSE(fs::exists(path("-")));
  const Result file = run(kForward + "--output ./-");
  EXPECT_EQ(file.status, 0) << file.err;
  EXPECT_TRUE(fs::exists(path("-")));
}

TEST_F(CliHardening, AFullStdoutIsAnError) {
  const std::string full_error = "qkv: error: writing to standard output: No space left on device";
  for (const std::string& args :
       {kForward, std::string("walkthrough --no-gpt"), std::string("walkthrough --no-gpt --json"), std::string("encode --text hello"),
        std::string("decode 31373"), std::string("tokens --text hello"), kTinyTrain + "--steps 3 --svg '' --json"}) {
    const Result r = run_to_full(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(full_error)) << args;
    EXPECT_EQ(r.err.find(full_error), r.err.rfind(full_error)) << "reported twice: " << r.err;
  }
}

TEST_F(CliHardening, StaleTemporariesOfKilledRunsAreCleaned) {
  // A pid that is surely gone: a child that has exited and been reaped.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  write("out.st.tmp." + dead + ".0", "half a file");
  write("out.st.tmp." + dead + ".17", "another half");
  write("out.st.tmp." + alive + ".3", "a live run's");  // this test process: alive, kept
  write("other.st.tmp." + dead + ".0", "not this output's");
  write("out.st.tmp.x.0", "not a temporary's name");
  const Result r = run(kForward + "--output out.st");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(fs::exists(path("out.st.tmp." + dead + ".0")));
  EXPECT_FALSE(fs::exists(path("out.st.tmp." + dead + ".17")));
  EXPECT_TRUE(fs::exists(path("out.st.tmp." + alive + ".3")));
  EXPECT_TRUE(fs::exists(path("other.st.tmp." + dead + ".0")));
  EXPECT_TRUE(fs::exists(path("out.st.tmp.x.0")));
}

TEST_F(CliHardening, TwoRunsWritingOneCheckpointLeaveOneWholeCheckpoint) {
  // Two qkv train at once on the same --checkpoint, each writing it every 2 steps: every write
  // replaces the file whole (write_files_atomically: a temporary of the writer's own, then a
  // rename), so the file is always one run's whole checkpoint, and no temporary is left.
  const std::string one = kTinyTrain + "--steps 300 --checkpoint-every 2 --checkpoint c.st --svg \"\" ";
  // (run() puts "cd DIR &&" before the first command only: the second, after the "&", cds too.)
  const Result r = run(one + "--seed 1 > a.txt 2>&1 & cd " + shell_quote(dir_.string()) + " && " +
                       std::string(QKV_BINARY) + " " + one + "--seed 2 > b.txt 2>&1; wait $!");
  EXPECT_THAT(slurp(path("a.txt")), HasSubstr("checkpoint: c.st"));
  EXPECT_THAT(slurp(path("b.txt")), HasSubstr("checkpoint: c.st"));
  ASSERT_EQ(r.status, 0) << r.err;
  const Result gen = run("generate --checkpoint c.st --prompt abcd --max-new-tokens 4 --temperature 0 --json");
  EXPECT_EQ(gen.status, 0) << gen.err;
  const Result info = run("generate --checkpoint c.st --prompt abcd --max-new-tokens 1 --json");
  EXPECT_THAT(info.out, HasSubstr("step 300")) << "the file is a finished run's last checkpoint";
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST_F(CliHardening, AnUnwritableCheckpointDirectoryIsRefusedBeforeTraining) {
  for (const std::string& args : {std::string("--checkpoint /nonexistent/c.st"),
                                 std::string("--checkpoint c.st --svg /nonexistent/loss.svg")}) {
    // Many steps: refused at the start, the run would take minutes otherwise.
    const Result r = run(kTinyTrain + "--steps 100000000 " + args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_THAT(r.err, HasSubstr("cannot write"));
    EXPECT_THAT(r.err, HasSubstr("'/nonexistent"));
    EXPECT_FALSE(fs::exists(path("c.st")));
  }
  write("file", "");
  const Result not_dir = run(kTinyTrain + "--steps 100000000 --checkpoint file/c.st");
  EXPECT_EQ(not_dir.status, 1);
  EXPECT_THAT(not_dir.err, HasSubstr("Not a directory"));
}

// A run that fails before it trains leaves no new --checkpoint folder behind (a Hugging Face
// folder is made first so its files can be checked); a folder that was there stays.
TEST_F(CliHardening, ATrainingThatFailsLeavesNoNewCheckpointFolder) {
  write("t.txt", "the cat sat on the mat. ");
  fs::create_directory(path("not-a-model"));
  write("not-a-model/config.json", "{\"model_type\": \"mistral\"}");
  fs::create_directory(path("empty"));
  for (const char* family : {"qwen3", "llama"})
    for (const char* init : {"missing", "not-a-model", "empty"}) {
      const Result r = run(str("train --model ", family, " --init ", init, " --text-file t.txt --checkpoint out"));
      EXPECT_EQ(r.status, 1) << family << " " << init << "\n" << r.err;
      EXPECT_THAT(r.err, HasSubstr(init)) << family << " " << init;
      EXPECT_FALSE(fs::exists(path("out"))) << family << " " << init;
    }
  fs::create_directory(path("kept"));
  EXPECT_EQ(run("train --model qwen3 --init missing --text-file t.txt --checkpoint kept").status, 1);
  EXPECT_TRUE(fs::is_directory(path("kept")));
}

// generate --json writes the prompt as JSON text: a prompt that is not UTF-8 is refused before the model loads.
TEST_F(CliHardening, AJsonGenerationOfAPromptThatIsNotUtf8IsRefusedFirst) {
  for (const char* prompt : {"\\377", "ab\\303", "\\355\\240\\200"}) {  // a lone byte, a cut character, a surrogate
    const Result r = run(str("generate --model gpt2-small --prompt \"$(printf '", prompt, "')\" --json"));
    EXPECT_EQ(r.status, 2) << prompt << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("--prompt: not UTF-8 text, and --json writes the prompt as a JSON string"));
  }
}

// A file size limit (ulimit -f) turns into a clear error with no temporary left behind: qkv
// ignores SIGXFSZ, so the write fails with EFBIG and the atomic write cleans up (issue 26).
TEST_F(CliHardening, AFileSizeLimitIsAnErrorAndLeavesNoTemporary) {
  std::string text;
  for (int i = 0; i < 120; ++i) text += "a ";
  const Result r = run("forward --module mha --d-in 64 --d-out 64 --num-heads 2 --context-length 128 --seed 1 "
                       "--text '" + text + "' --save-weights w.st",
                       "", "ulimit -f 8 &&");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path() << " was left behind";
  EXPECT_FALSE(fs::exists(path("w.st")));
}

// The outputs a run writes late and large: an explorer page, a forward's output tensors, a
// training run's loss curve. (args, the file it writes)
std::vector<std::pair<std::string, std::string>> late_outputs() {
  std::string text;
  for (int i = 0; i < 80; ++i) text += "the cat sat on the mat ";
  return {{"explore --module mha --d-in 16 --d-out 16 --num-heads 2 --context-length 2048 --seed 1 --precision f32 "
           "--text '" + text + "' --out p.html", "p.html"},
          {"forward --module mha --d-in 64 --d-out 64 --num-heads 2 --context-length 2048 --seed 1 "
           "--text '" + text + "' --output o.st", "o.st"},
          {kTinyTrain + "--steps 60 --eval-every 2 --checkpoint '' --svg loss.svg", "loss.svg"}};
}

// kill -9 at moments through a run: the output is then the file that was there before, or the
// whole new one, never a part (every output is written to a temporary and renamed), and the next
// run clears the killed runs' temporaries (issue 26).
TEST_F(CliHardening, AKilledRunLeavesTheOldOutputOrTheWholeNewOne) {
  for (const auto& [args, file] : late_outputs()) {
    const Result whole = run(args);
    ASSERT_EQ(whole.status, 0) << args << "\n" << whole.err;
    const std::string want = slurp(path(file));
    ASSERT_GT(want.size(), 1000u) << file;
    int old = 0, replaced = 0;
    for (const char* delay : {"0", "0.01", "0.03", "0.06", "0.1", "0.2", "0.3", "0.5", "0.8"}) {
      write(file, "the file before");
      const Result r = run(args + " > /dev/null 2>&1 & p=$!; sleep " + std::string(delay) +
                           "; kill -9 $p 2> /dev/null; wait $p; true");
      ASSERT_EQ(r.status, 0) << r.err;
      const std::string got = slurp(path(file));
      EXPECT_TRUE(got == "the file before" || got == want)
          << file << " after kill -9 at " << delay << " s: " << got.size() << " bytes, neither the old file nor the whole new one";
      old += got == "the file before";
      replaced += got == want;
    }
    std::printf("%s: kill -9 left the old file %d times and the whole new one %d times\n", file.c_str(), old,
                replaced);
    const Result again = run(args);
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_EQ(slurp(path(file)), want);
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path() << " was left behind";
  }
}

// A full disk (here a file size limit: ulimit -f, SIGXFSZ ignored by qkv, so the write fails
// with EFBIG) while a page, tensors or a loss curve are written: a clear error, the file that was
// there before untouched, no temporary left.
TEST_F(CliHardening, AFullDiskWhileWritingAPageTensorsOrACurveIsAnError) {
  for (const auto& [args, file] : late_outputs()) {
    write(file, "the file before");
    const Result r = run(args, "", "ulimit -f 1 &&");
    EXPECT_EQ(r.status, 1) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("File too large")) << args;
    EXPECT_THAT(r.err, HasSubstr(file)) << "the error names the file";
    EXPECT_EQ(slurp(path(file)), "the file before") << file;
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path() << " was left behind";
  }
}

// CLI11's own refusals (a required flag missing, a value outside its set) carry qkv's prefix.
TEST_F(CliHardening, ParserErrorsReadLikeEveryOtherError) {
  for (const char* args : {"forward --module mha", "explore --precision f64 --out p.html", "bench --module nope"}) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err.rfind("qkv: error: ", 0), 0u) << args << ": " << r.err;
  }
}

// A family qkv writes no GGUF of is refused from its description alone: a preset before its weights
// are drawn, a folder before its weights are read (this one has none: reading them would fail on
// the missing file instead); nothing is written.
TEST_F(CliHardening, ConvertRefusesAFamilyWithoutGgufBeforeItsWeights) {
  // qkv train's attention LM has no GGUF architecture: its checkpoint is refused on its header's
  // word alone (this one holds none of the model's tensors: read, it would fail on those instead)
  const std::string refused =
      "qkv writes GGUF files of GPT, Llama 3, Qwen2.5, Qwen3 and Qwen3.5 models, not of attention LM models";
  save_safetensors(path("lm.st"), {{"junk", Tensor::zeros({2})}}, {{"qkv", "train-checkpoint"}});
  Result r = run("convert --weights lm.st --to gguf --out q.gguf");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(refused));
  EXPECT_FALSE(fs::exists(path("q.gguf")));
}

// --tokenizer: the tokenizer.json the GGUF file holds in place of the model's (GPT-2's vocabulary,
// for the book's GPT: here one of 50,300 ids); read before the weights.
TEST_F(CliHardening, ConvertWritesTheTokenizerItIsGiven) {
  Generator gen(3);
  DecoderModel m(gpt_spec(50300, 16, 32, 2, 1, 0.0, true), gen);
  write_files_atomically(model_family("gpt").checkpoint(m, path("g.safetensors"), ""));
  nlohmann::json vocab = nlohmann::json::object();  // the 256 bytes as GPT-2 spells them, then one merge
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    utf8::append(spelled, byte_level_char(static_cast<uint8_t>(b)));
    vocab[spelled] = b;
  }
  ASSERT_EQ(vocab.size(), 256u);
  vocab["ab"] = 256;
  const nlohmann::json tokenizer = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}},
      {"added_tokens", nlohmann::json::array()},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
  write("tok.json", tokenizer.dump());
  Result r = run("convert --weights g.safetensors --num-heads 2 --to gguf --type f32 --out g.gguf --tokenizer tok.json");
  ASSERT_EQ(r.status, 0) << r.err;
  const GgufFile f(path("g.gguf"));
  const std::vector<std::string>& tokens = f.strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 50300u);
  EXPECT_EQ(tokens[256], "ab");
  EXPECT_EQ(f.strings("tokenizer.ggml.merges"), std::vector<std::string>{"a b"});
  EXPECT_EQ(f.string("tokenizer.ggml.pre"), "gpt-2");
  r = run("convert --weights g.safetensors --num-heads 2 --to gguf --out h.gguf");  // the model's own: GPT-2's
  ASSERT_EQ(r.status, 0) << r.err;
  const GgufFile own(path("h.gguf"));
  EXPECT_EQ(own.strings("tokenizer.ggml.tokens")[256], "\xc4\xa0t");  // GPT-2's first merge
  EXPECT_EQ(own.strings("tokenizer.ggml.merges").size(), 50000u);
  // a GPT of another vocabulary than GPT-2's: the tokenizer given stands in for GPT-2's, which
  // would not fit it
  DecoderModel small(gpt_spec(300, 16, 32, 2, 1, 0.0, true), gen);
  write_files_atomically(model_family("gpt").checkpoint(small, path("s.safetensors"), ""));
  r = run("convert --weights s.safetensors --num-heads 2 --to gguf --type f32 --out s.gguf --tokenizer tok.json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(GgufFile(path("s.gguf")).strings("tokenizer.ggml.tokens").size(), 300u);
  r = run("convert --weights g.safetensors --num-heads 2 --to gguf --out i.gguf --tokenizer none.json");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("none.json"));
  EXPECT_FALSE(fs::exists(path("i.gguf")));
  r = run("convert --weights g.safetensors --to book --out b.safetensors --tokenizer tok.json");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--tokenizer: is the GGUF file's tokenizer: it goes with --to gguf"));
  // a tokenizer the loader would refuse is not written (the file was written, and then did not load
  // or, its normalizer dropped, tokenized otherwise)
  for (const auto& [key, value, words] :
       {std::tuple<std::string, nlohmann::json, std::string>{"merges", {"a b", "zz qq"}, "names 'zz'"},
        {"normalizer", {{"type", "Lowercase"}}, "normalizer"}}) {
    nlohmann::json bad = tokenizer;
    (key == "merges" ? bad["model"]["merges"] : bad[key]) = value;
    write("bad.json", bad.dump());
    r = run("convert --weights s.safetensors --num-heads 2 --to gguf --type f32 --out bad.gguf --tokenizer bad.json");
    EXPECT_EQ(r.status, 1) << key;
    EXPECT_THAT(r.err, HasSubstr(words)) << key;
    EXPECT_FALSE(fs::exists(path("bad.gguf"))) << key;
  }
}

// An output that is one of the run's inputs, or an existing file of an input folder, would destroy
// what the run reads: refused, naming both (convert wrote GGUF over a folder's model.safetensors,
// explore its page over the text it read).
TEST_F(CliHardening, AnOutputOntoAnInputIsRefused) {
  Generator gen(3);
  DecoderModel m(gpt_spec(300, 16, 32, 2, 1, 0.0, true), gen);
  write_files_atomically(model_family("gpt").checkpoint(m, path("g.safetensors"), ""));
  const std::string weights = read_file(path("g.safetensors"));
  Result r = run("convert --weights g.safetensors --num-heads 2 --to gguf --type f32 --out g.safetensors");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--out 'g.safetensors' is the input --weights 'g.safetensors': writing it would "
                               "replace what this run reads"));
  EXPECT_EQ(read_file(path("g.safetensors")), weights);
  r = run("convert --weights g.safetensors --num-heads 2 --to book --out g.safetensors");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is the input --weights"));
  fs::create_directory(path("folder"));
  fs::copy_file(path("g.safetensors"), path("folder/model.safetensors"));
  write("folder/config.json", R"({"n_head": 2})");
  r = run("convert --weights folder --to gguf --type f32 --out folder/config.json");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is a file of the input folder --weights"));
  EXPECT_EQ(read_file(path("folder/config.json")), R"({"n_head": 2})");
  write("text.txt", "Every effort moves you");
  r = run("explore --text-file text.txt --out text.txt");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is the input --text-file"));
  EXPECT_EQ(read_file(path("text.txt")), "Every effort moves you");
  r = run("explore --text-file text.txt --out page.html");  // a new file beside them is fine
  EXPECT_EQ(r.status, 0) << r.err;
  // train's text and data, forward's input tensor and weights (each replaced, exit 0, before)
  const std::string text = "Every effort moves you forward, step by step, until the book is done. " +
                           std::string(300, 'a');
  write("story.txt", text);
  for (const std::string flags : {"--checkpoint story.txt", "--checkpoint c.st --svg story.txt"}) {
    r = run("train --text-file story.txt --context-length 8 --steps 1 --quiet " + std::string(flags) +
            (flags.find("--svg") == std::string::npos ? " --svg ''" : ""));
    EXPECT_EQ(r.status, 1) << flags << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("is the input --text-file 'story.txt'")) << flags;
    EXPECT_EQ(read_file(path("story.txt")), text) << flags;
  }
  r = run("train --model gpt --text-file story.txt --d-model 16 --num-heads 2 --num-layers 1 --context-length 8 "
          "--epochs 1 --quiet --svg '' --checkpoint story.txt");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is the input --text-file"));
  EXPECT_EQ(read_file(path("story.txt")), text);
  ASSERT_EQ(run(kForward + "--output x.safetensors").status, 0);
  const std::string x = read_file(path("x.safetensors"));
  r = run("forward --module mha --d-in 3 --d-out 4 --context-length 6 --num-heads 2 --seed 1 "
          "--input x.safetensors --output x.safetensors");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is the input --input"));
  EXPECT_EQ(read_file(path("x.safetensors")), x);
  r = run("forward --module gpt --weights g.safetensors --num-heads 2 --text hi --save-weights g.safetensors");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is the input --weights"));
  EXPECT_EQ(read_file(path("g.safetensors")), weights);
}

TEST(OutputFiles, EveryFileIsWrittenOrNone) {
  const fs::path dir = fs::temp_directory_path() / ("qkv_output_files_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string a = (dir / "a").string(), b = (dir / "b").string();
  write_files_atomically({{a, "A1", "first"}, {b, "B1", "second"}});
  EXPECT_EQ(slurp(a), "A1");
  EXPECT_EQ(slurp(b), "B1");
  EXPECT_THROW(write_files_atomically({{a, "A2", "first"}, {(dir / "no/c").string(), "C", "third"}}), Error);
  EXPECT_EQ(slurp(a), "A1");
  EXPECT_THROW(write_files_atomically({{a, "A2", "first"}, {(dir / "./a").string(), "A3", "again"}}), Error);
  EXPECT_EQ(slurp(a), "A1");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv
