// `qkv train` and `qkv generate` run as a user runs them: a short training run, stopping and
// resuming (also by Ctrl-C) giving exactly the uninterrupted run, and every bad input the issue
// names getting a clear error that keeps the last good checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/checkpoint.h"
#include "cli_runner.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;


// A tiny model and task, so that every run takes well under a second (also under sanitizers).
const std::string kTinyModel =
    "train --length 4 --symbols 6 --d-model 16 --num-heads 2 --num-layers 1 --batch-size 8 --eval-sequences 64 --quiet ";
const std::string kTiny = kTinyModel + "--svg \"\" ";

class TrainCli : public CliTest {
 protected:
  static std::string last_line(const std::string& s) {
    std::string t = s;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
  }

  // Every tensor of two checkpoints bit for bit, and the same step.
  static void expect_identical(const std::string& a, const std::string& b) {
    Checkpoint x = load_checkpoint(a), y = load_checkpoint(b);
    EXPECT_EQ(x.step, y.step);
    ASSERT_EQ(x.losses.size(), y.losses.size());
    for (size_t i = 0; i < x.losses.size(); ++i) EXPECT_EQ(x.losses[i], y.losses[i]) << "loss of step " << i + 1;
    ASSERT_EQ(x.model.size(), y.model.size());
    for (const auto& [name, t] : x.model) EXPECT_EQ(max_abs_diff(t, y.model.at(name)), 0.0) << name;
    ASSERT_EQ(x.optimizer.size(), y.optimizer.size());
    for (const auto& [name, t] : x.optimizer) EXPECT_EQ(max_abs_diff(t, y.optimizer.at(name)), 0.0) << name;
    EXPECT_EQ(x.model_rng, y.model_rng);
    EXPECT_EQ(x.data_state, y.data_state);
  }
};

TEST_F(TrainCli, HelpListsEveryFlagWithDefaults) {
  Result r = run("train --help");
  ASSERT_EQ(r.status, 0);
  for (const char* flag : {"--task", "--length", "--text-file", "--d-model", "--num-heads", "--num-layers", "--dropout",
                           "--optimizer", "--steps", "--batch-size", "--lr", "--min-lr", "--warmup", "--weight-decay",
                           "--clip", "--seed", "--checkpoint", "--resume", "--svg", "--json", "--stop-after"})
    EXPECT_THAT(r.out, HasSubstr(flag));
  EXPECT_THAT(r.out, HasSubstr("=copy"));
  Result g = run("generate --help");
  ASSERT_EQ(g.status, 0);
  for (const char* flag : {"--checkpoint", "--prompt", "--temperature", "--top-k", "--seed", "--max-new-tokens"})
    EXPECT_THAT(g.out, HasSubstr(flag));
}

TEST_F(TrainCli, ShortRunLearnsTheCopyTaskAndReportsJson) {
  Result r = run(kTinyModel + "--steps 300 --eval-every 100 --json --checkpoint c.st --svg loss.svg");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["steps"], 300);
  for (const char* key : {"final_loss", "accuracy", "tokens_per_s", "seconds"}) EXPECT_TRUE(j[key].is_number()) << key;
  EXPECT_GT(j["accuracy"].get<double>(), 0.99) << "the copy task of 4 symbols is learnt in 300 steps";
  EXPECT_LT(j["final_loss"].get<double>(), 0.1);
  Checkpoint c = load_checkpoint(path("c.st"));
  EXPECT_EQ(c.step, 300);
  EXPECT_EQ(c.losses.size(), 300u);
  EXPECT_EQ(c.evals.size(), 3u);
  EXPECT_TRUE(c.model.count("blocks.0.W_query.weight") && c.model.count("tok_emb.weight"));
  EXPECT_TRUE(c.optimizer.count("exp_avg.out_head.bias"));
  std::string svg = read_file(path("loss.svg"));
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("<polyline"));

  Result g = run("generate --checkpoint c.st --prompt \"dbca|\" --temperature 0");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(g.out, "dbca|dbca\n");
  Result bad = run("generate --checkpoint c.st --prompt \"xyz|\"");
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("'x' is not in it"));
}

TEST_F(TrainCli, StoppingAndResumingReproducesTheUninterruptedRunExactly) {
  // Dropout on, so the model's generator must be restored too; SGD momentum as the optimiser state
  // in one run and AdamW in the other.
  for (const std::string opt : {"--optimizer adamw", "--optimizer sgd --momentum 0.9 --lr 0.05"}) {
    SCOPED_TRACE(opt);
    const std::string common = kTiny + opt + " --dropout 0.1 --steps 40 --warmup 5 --eval-every 10 ";
    ASSERT_EQ(run(common + "--checkpoint full.st").status, 0);
    Result stop = run(common + "--checkpoint part.st --stop-after 17");
    ASSERT_EQ(stop.status, 0) << stop.err;
    EXPECT_THAT(stop.out, HasSubstr("stopped (--stop-after) at step 17 of 40"));
    EXPECT_THAT(stop.out, HasSubstr("qkv train --resume part.st"));
    // the held-out accuracy is step 10's, and says so (it read as the run's final one)
    EXPECT_THAT(stop.out, ContainsRegex("held-out accuracy [0-9.]+% at step 10\n"));
    EXPECT_EQ(load_checkpoint(path("part.st")).step, 17);
    Result resume = run("train --resume part.st --quiet --svg \"\"");
    ASSERT_EQ(resume.status, 0) << resume.err;
    expect_identical(path("full.st"), path("part.st"));
  }
}

TEST_F(TrainCli, CtrlCLeavesACheckpointThatResumesToTheSameRun) {
  const std::string args = kTiny + "--steps 3000 --checkpoint-every 0 --eval-every 0 ";
  ASSERT_EQ(run(args + "--checkpoint full.st").status, 0);
  // Start the same run with its progress lines on (on stderr, one every 300 steps when not on a
  // terminal), interrupt it once the first one shows it under way, resume it.
  std::string loud = args;
  loud.erase(loud.find("--quiet "), 8);
  const std::string cmd = "cd " + dir_.string() + " && exec " + std::string(QKV_BINARY) + " " + loud +
                          "--checkpoint part.st > int.out 2> int.err";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int waited = 0; waited < 60000 && slurp(path("int.err")).find("step ") == std::string::npos; ++waited)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string out = read_file(path("int.out"));
  ASSERT_TRUE(WIFEXITED(status)) << "qkv died of signal " << WTERMSIG(status);
  ASSERT_EQ(WEXITSTATUS(status), 128 + SIGINT) << "the run was not interrupted:\n" << out << read_file(path("int.err"));
  EXPECT_THAT(out, HasSubstr("interrupted (Ctrl-C) at step"));
  const int64_t stopped = load_checkpoint(path("part.st")).step;
  EXPECT_GE(stopped, 300);
  EXPECT_LT(stopped, 3000);
  Result resume = run("train --resume part.st --quiet --svg \"\"");
  ASSERT_EQ(resume.status, 0) << resume.err;
  expect_identical(path("full.st"), path("part.st"));
}

TEST_F(TrainCli, NonFiniteLossStopsNamingTheStepAndTensorAndKeepsTheLastGoodCheckpoint) {
  // A learning rate of 1e30 sends the weights to ~1e30 after one step; the next forward overflows.
  Result r = run(kTiny + "--steps 20 --warmup 0 --lr 1e30 --min-lr 1e30 --checkpoint-every 1 --checkpoint c.st");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("the loss is"));
  EXPECT_THAT(r.err, HasSubstr("the first tensor that is not finite is '"));
  int64_t step = 0;
  ASSERT_EQ(std::sscanf(r.err.c_str(), "qkv: error: step %lld:", reinterpret_cast<long long*>(&step)), 1) << r.err;
  ASSERT_GE(step, 2);
  EXPECT_THAT(r.err, HasSubstr("the last good one is 'c.st' (step " + std::to_string(step - 1) + ")"));
  Checkpoint c = load_checkpoint(path("c.st"));
  EXPECT_EQ(c.step, step - 1);
  for (float loss : c.losses) EXPECT_TRUE(std::isfinite(loss));
}

TEST_F(TrainCli, CheckpointOfAnotherConfigurationNamesTheTensorAndBothShapes) {
  ASSERT_EQ(run(kTiny + "--steps 3 --checkpoint c.st").status, 0);
  Result r = run("train --resume c.st --d-model 32 --quiet --svg \"\"");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("tok_emb.weight"));
  EXPECT_THAT(r.err, HasSubstr("(7, 16)"));
  EXPECT_THAT(r.err, HasSubstr("(7, 32)"));
  // A state dict that is not a training checkpoint is refused by name.
  write_file_atomically(path("w.st"), serialize_safetensors({{"W_query.weight", Tensor::zeros({2, 3})}}));
  Result g = run("generate --checkpoint w.st --prompt ab");
  EXPECT_EQ(g.status, 1);
  EXPECT_THAT(g.err, HasSubstr("not a qkv training checkpoint"));
  Result t = run("train --resume w.st");
  EXPECT_EQ(t.status, 1);
  EXPECT_THAT(t.err, HasSubstr("w.st"));
}

// A grouped-query model with RoPE trains, generates from its checkpoint (rebuilt from the config it
// stores), and resumes; a model flag that disagrees with the checkpoint is refused by name.
TEST_F(TrainCli, AttentionVariantsAreStoredAndAResumeMustAgreeWithThem) {
  const std::string gqa = "train --length 4 --symbols 6 --d-model 16 --num-heads 4 --num-kv-heads 2 --rope half "
                          "--num-layers 1 --batch-size 8 --eval-sequences 64 --quiet --svg \"\" --attention textbook ";
  ASSERT_EQ(run(gqa + "--steps 300 --eval-every 0 --checkpoint g.st").status, 0);
  Checkpoint c = load_checkpoint(path("g.st"));
  EXPECT_EQ(c.options.model.attention.kv_heads, 2);
  EXPECT_EQ(c.options.model.attention.rope, kernels::RopeLayout::kHalf);
  EXPECT_EQ(c.model.at("blocks.0.W_key.weight").shape(), (Shape{8, 16}));
  ASSERT_GT(c.evals.size(), 0u);
  EXPECT_GT(c.evals.back().accuracy, 0.99) << "the copy task of 4 symbols is learnt with GQA + RoPE too";
  Result g = run("generate --checkpoint g.st --prompt \"dbca|\" --temperature 0");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(g.out, "dbca|dbca\n");

  Result rope = run("train --resume g.st --rope interleaved --steps 301 --quiet --svg \"\"");
  EXPECT_EQ(rope.status, 2);
  EXPECT_THAT(rope.err, HasSubstr("--rope: interleaved disagrees with the checkpoint 'g.st', whose model was trained "
                                  "with rope half"));
  Result kv = run("train --resume g.st --num-kv-heads 4 --steps 301 --quiet --svg \"\"");
  EXPECT_EQ(kv.status, 2);
  EXPECT_THAT(kv.err, HasSubstr("--num-kv-heads: 4 disagrees with the checkpoint 'g.st', whose model was trained "
                                "with num_kv_heads 2"));
  ASSERT_EQ(run(kTiny + "--steps 2 --checkpoint p.st --attention textbook").status, 0);
  for (const std::string flag : {"--alibi", "--window 3", "--softcap 5", "--rope-base 500"}) {
    Result r = run("train --resume p.st " + flag + " --steps 3 --quiet --svg \"\"");
    EXPECT_EQ(r.status, 2) << flag;
    EXPECT_THAT(r.err, HasSubstr(flag.substr(0, flag.find(' ')) + ": ")) << flag;
    EXPECT_THAT(r.err, HasSubstr("disagrees with the checkpoint 'p.st'")) << flag;
  }
  // Flags that agree with the checkpoint are fine.
  Result same = run("train --resume g.st --rope half --num-kv-heads 2 --steps 302 --quiet --svg \"\"");
  EXPECT_EQ(same.status, 0) << same.err;
  EXPECT_EQ(load_checkpoint(path("g.st")).step, 302);
}

TEST_F(TrainCli, BadAttentionVariantFlagsAreUsageErrorsNamingTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"--num-kv-heads 3", "--num-kv-heads (3) must divide --num-heads (2)"},
      {"--num-kv-heads -1", "--num-kv-heads (-1) must divide --num-heads (2)"},
      {"--rope sideways", "--rope: 'sideways' is not a RoPE layout; expected none, half or interleaved"},
      {"--rope half --d-model 6", "--rope (half) needs an even head dim, got 3"},
      {"--rope half --rope-base 0", "--rope-base (0) must be a positive finite number"},
      {"--rope-base 500", "--rope-base: 500 needs --rope half or --rope interleaved"},
      {"--window -2", "--window (-2) must be positive (or 0 for none)"},
      {"--window 9 --context-length 8", "--window: 9 must be at most --context-length (8)"},
      {"--softcap -1", "--softcap (-1) must be positive and at most 1e+30"},
      {"--softcap 3.4e38", "--softcap (3.4e+38) must be positive and at most 1e+30"},
      {"--softcap nan", "--softcap: 'nan' is not a finite number"},
      {"--context-length 0", "--context-length: 0 must be at least 1 (leave the flag out for the task's length)"},
  };
  const std::string base = "train --length 4 --symbols 6 --num-heads 2 --num-layers 1 --steps 1 --quiet --svg \"\" ";
  for (const auto& [flags, message] : cases) {
    Result r = run(base + (std::string(flags).find("--d-model") == std::string::npos ? "--d-model 16 " : "") + flags);
    EXPECT_EQ(r.status, 2) << flags << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << flags;
  }
  EXPECT_FALSE(fs::exists(path("qkv-train.safetensors")));
}

// The run's options out of their ranges (each field's one declaration, train_options.h) are usage
// errors naming the flag and the key; they were runtime errors naming "batch size", "AdamW: lr".
TEST_F(TrainCli, OptionsOutOfTheirRangesAreUsageErrorsNamingTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"--batch-size 0", "batch_size (--batch-size) is 0; expected at least 1"},
      {"--lr -1", "lr (--lr) is -1.0; expected at least 0.0"},
      {"--min-lr 0.5 --lr 0.1", "min_lr (--min-lr) is 0.5; expected at most lr (--lr), 0.1"},
      {"--beta2 1", "beta2 (--beta2) is 1.0; expected in [0.0, 1.0)"},
      {"--eval-every -1", "eval_every (--eval-every) is -1; expected at least 0"},
      {"--symbols 27", "task_symbols (--symbols) is 27; expected in [2, 26]"},
      {"--length 0", "task_length (--length) is 0; expected at least 1"},
      {"--clip -0.5", "clip (--clip) is -0.5; expected at least 0.0"},
      // the model's sizes, before the head width is derived from them (--d-model -1 named --num-heads,
      // --d-model 0 "head dim (0)", and --num-heads 0 a divisibility by 0)
      {"--d-model -1", "model.d_model (--d-model) is -1; expected at least 1"},
      {"--d-model 0", "model.d_model (--d-model) is 0; expected at least 1"},
      {"--num-heads 0", "model.num_heads (--num-heads) is 0; expected at least 1"},
      {"--num-layers 0", "model.num_layers (--num-layers) is 0; expected at least 1"},
      // SGD's Nesterov momentum without a momentum (a runtime error, exit 1, in the optimizer's words)
      {"--optimizer sgd --nesterov", "nesterov (--nesterov) needs momentum (--momentum) above 0 and dampening "
                                     "(--dampening) 0, as PyTorch's SGD does; momentum is 0"},
      {"--optimizer sgd --nesterov --momentum 0.9 --dampening 0.1", "; momentum is 0.9 and dampening 0.1"},
  };
  const std::string base = "train --steps 1 --quiet --svg \"\" ";  // each case fails before the model is built
  for (const auto& [flags, message] : cases) {
    Result r = run(base + flags);
    EXPECT_EQ(r.status, 2) << flags << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << flags;
  }
  EXPECT_FALSE(fs::exists(path("qkv-train.safetensors")));
  // chapter 5's loop (--model gpt): its own options and the shared ones, before the model is built
  // (these were runtime errors, exit 1, in the library's words)
  write_file_atomically(path("t.txt"), "Every effort moves you forward, one step at a time.");
  const std::pair<const char*, const char*> book_cases[] = {
      {"--train-ratio 1", "train_ratio (--train-ratio) is 1.0; expected in (0.0, 1.0)"},
      {"--train-ratio 0", "train_ratio (--train-ratio) is 0.0; expected in (0.0, 1.0)"},
      {"--eval-iter 0", "eval_iter (--eval-iter) is 0; expected at least 1"},
      {"--eval-freq 0", "eval_freq (--eval-freq) is 0; expected at least 1"},
      {"--epochs -1", "epochs (--epochs) is -1; expected at least 0"},
      {"--batch-size 0", "batch_size (--batch-size) is 0; expected at least 1"},
      {"--lr -1", "lr (--lr) is -1.0; expected at least 0.0"},
  };
  const std::string book = "train --model gpt --text-file t.txt --context-length 16 --d-model 16 --num-heads 2 "
                           "--num-layers 1 --quiet --checkpoint= --svg= ";
  for (const auto& [flags, message] : book_cases) {
    Result r = run(book + flags);
    EXPECT_EQ(r.status, 2) << flags << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << flags;
  }
}

// --steps 0 writes the untrained model; its summary has no loss to give (it printed "final loss nan").
TEST_F(TrainCli, NoStepsReportsNoLoss) {
  Result r = run(kTinyModel + "--steps 0 --svg \"\"");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("trained 0 steps (0 in this run)"));
  EXPECT_THAT(r.out, HasSubstr("; no loss (no step taken)"));
  EXPECT_THAT(r.out, Not(HasSubstr("nan")));
}

TEST_F(TrainCli, TextTooShortForOneWindowSaysTheLengthNeeded) {
  write_file_atomically(path("short.txt"), "Your journey starts with one step.");  // 7 GPT-2 tokens
  Result r = run("train --text-file short.txt --context-length 32 --steps 2 --quiet --svg \"\"");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("is 7 tokens long; one training window needs context_length + 1 = 33 tokens"));
  EXPECT_THAT(r.err, HasSubstr("a smaller context_length (--context-length 32)")) << "the flag that sets it";
  EXPECT_FALSE(fs::exists(path("qkv-train.safetensors")));
}

// A text run's checkpoint names its text by an absolute path: resumed from another directory (one
// with a different file of the same name), the run reads the text it started on, and equals the run
// made in one go.
TEST_F(TrainCli, ATextRunResumedFromAnotherDirectoryReadsItsOwnText) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += "the cat sat on the mat. the dog sat on the log. ";
  write_file_atomically(path("t.txt"), text);
  std::filesystem::create_directories(path("elsewhere"));
  write_file_atomically(path("elsewhere/t.txt"), "an other text, with other words in it, and more of them.");
  const std::string flags = "--context-length 16 --d-model 16 --num-heads 2 --num-layers 1 --batch-size 4 --quiet "
                            "--svg \"\" ";
  ASSERT_EQ(run("train --text-file t.txt " + flags + "--steps 6 --checkpoint whole.st").status, 0);
  ASSERT_EQ(run("train --text-file t.txt " + flags + "--steps 3 --checkpoint part.st").status, 0);
  EXPECT_EQ(load_checkpoint(path("part.st")).options.text_file,
            std::filesystem::path(path("t.txt")).lexically_normal().string());
  // (the runner starts in the scratch directory: `env` goes first on its command line)
  const Result r = run("train --resume ../part.st --steps 6 --checkpoint ../resumed.st " + flags, "", "cd elsewhere &&");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_identical(path("whole.st"), path("resumed.st"));
}

TEST_F(TrainCli, TrainsOnATextFileAndGeneratesFromIt) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat. the dog sat on the log. ";
  write_file_atomically(path("t.txt"), text);
  Result r = run("train --text-file t.txt --context-length 16 --d-model 16 --num-heads 2 --num-layers 1 --steps 60 "
                 "--batch-size 8 --quiet --svg \"\" --json --checkpoint t.st");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(last_line(r.out));
  EXPECT_TRUE(j["accuracy"].is_null()) << "no held-out accuracy for text";
  EXPECT_LT(j["final_loss"].get<double>(), 1.5);
  Checkpoint c = load_checkpoint(path("t.st"));
  EXPECT_EQ(c.vocab.size(), static_cast<size_t>(c.options.model.vocab_size));
  Result g = run("generate --checkpoint t.st --prompt \"the cat\" --max-new-tokens 5 --temperature 0");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_THAT(g.out, HasSubstr("the cat sat on the"));
  Result unknown = run("generate --checkpoint t.st --prompt \"zebra\"");
  EXPECT_EQ(unknown.status, 1);
  EXPECT_THAT(unknown.err, HasSubstr("does not occur in the text the model was trained on"));
  // the built-in tasks' flags on a text run were ignored without a word (exit 0)
  const std::pair<const char*, const char*> moot[] = {
      {"--task copy", "--task: copy is a built-in task, but --text-file gives the run its data"},
      {"--length 8", "--length: is a flag of the built-in tasks (copy, reverse); this run trains on --text-file"},
      {"--symbols 4", "--symbols: is a flag of the built-in tasks"},
      {"--eval-every 5", "--eval-every: is a flag of the built-in tasks"},
      {"--eval-sequences 8", "--eval-sequences: is a flag of the built-in tasks"},
  };
  for (const auto& [flag, message] : moot) {
    const Result m = run(std::string("train --text-file t.txt --context-length 16 --d-model 16 --num-heads 2 "
                                     "--num-layers 1 --steps 1 --quiet --svg= --checkpoint= ") + flag);
    EXPECT_EQ(m.status, 2) << flag << ": " << m.err;
    EXPECT_THAT(m.err, HasSubstr(message)) << flag;
  }
}

// --checkpoint "" is none for chapter 5's loop too (it wrote the family's default qkv-gpt.safetensors,
// over an existing file); without the flag, the default name.
TEST_F(TrainCli, ABookRunWithAnEmptyCheckpointWritesNone) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat. the dog sat on the log. ";
  write_file_atomically(path("t.txt"), text);
  write_file_atomically(path("qkv-gpt.safetensors"), "precious");
  const std::string flags = "train --model gpt --text-file t.txt --context-length 16 --d-model 16 --num-heads 2 "
                            "--num-layers 1 --eval-freq 5 --eval-iter 1 --batch-size 2 --sample-tokens 2 --epochs 1 "
                            "--quiet --svg '' ";
  const Result none = run(flags + "--checkpoint ''");
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_EQ(read_file(path("qkv-gpt.safetensors")), "precious");
  EXPECT_THAT(none.out, Not(HasSubstr("weights: ")));
  fs::remove(path("qkv-gpt.safetensors"));
  const Result named = run(flags);
  ASSERT_EQ(named.status, 0) << named.err;
  EXPECT_TRUE(load_safetensors(path("qkv-gpt.safetensors")).contains("tok_emb.weight"));
}

// Chapter 5's loop whose loss goes non-finite - a learning rate of 1e30, or a model to fine-tune that
// holds a NaN - stops at that step, before it changes anything, naming the step and the first tensor
// that is not finite, exit status 1 and no checkpoint (a NaN model is not written as a result).
TEST_F(TrainCli, ABookRunWhoseLossGoesNonFiniteStopsNamingTheStepAndWritesNothing) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat. the dog sat on the log. ";
  write_file_atomically(path("t.txt"), text);
  const std::string run_flags = "--text-file t.txt --seed 1 --eval-freq 5 --eval-iter 1 --batch-size 2 "
                                "--sample-tokens 5 ";
  const std::string sizes = "--context-length 16 --d-model 16 --num-heads 2 --num-layers 1 ";
  const Result r = run("train --model gpt " + sizes + run_flags +
                       "--epochs 2 --lr 1e30 --checkpoint nan.st");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(": the training loss is "));
  EXPECT_THAT(r.err, HasSubstr("the first tensor that is not finite is '"));
  EXPECT_FALSE(fs::exists(path("nan.st")));
  // A finite model trained at a sane rate, then one of its weights made NaN: refused at step 0.
  const Result ok = run("train --model gpt " + sizes + run_flags +
                        "--epochs 1 --checkpoint good.st");
  ASSERT_EQ(ok.status, 0) << ok.err;
  TensorFile good = load_safetensors(path("good.st"));
  ASSERT_TRUE(good.contains("trf_blocks.0.att.W_query.weight"));
  good.tensors.at("trf_blocks.0.att.W_query.weight").data()[3] = std::nanf("");
  NamedTensors state;
  for (const std::string& name : good.names) state.push_back({name, good.tensors.at(name)});
  save_safetensors(path("poisoned.st"), state, good.metadata);
  const Result bad = run("train --model gpt --init poisoned.st " + run_flags + "--epochs 1 --checkpoint out.st");
  EXPECT_EQ(bad.status, 1) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("step 0: the training loss is "));
  EXPECT_THAT(bad.err, HasSubstr("'trf_blocks.0.att.W_query.weight'"));
  EXPECT_FALSE(fs::exists(path("out.st")));
}

TEST_F(TrainCli, ForwardGradOutputWritesEveryGradientAndChecksItsShape) {
  Generator g(3);
  Tensor x = Tensor::empty({2, 5, 3}), dy = Tensor::empty({2, 5, 4});
  g.normal(x.data(), x.numel());
  g.normal(dy.data(), dy.numel());
  save_safetensors(path("x.st"), {{"input", x}});
  save_safetensors(path("dy.st"), {{"grad_output", dy}});
  const std::string mha = "forward --module mha --d-in 3 --d-out 4 --context-length 6 --num-heads 2 --qkv-bias --seed 1 "
                          "--input x.st --output y.st ";
  Result r = run(mha + "--grad-output dy.st --grads-out grads.st");
  ASSERT_EQ(r.status, 0) << r.err;
  TensorFile grads = load_safetensors(path("grads.st"));
  EXPECT_EQ(grads.names, (std::vector<std::string>{"input", "W_query.weight", "W_query.bias", "W_key.weight",
                                                   "W_key.bias", "W_value.weight", "W_value.bias", "out_proj.weight",
                                                   "out_proj.bias"}));
  EXPECT_EQ(grads.get("input").shape(), x.shape());
  save_safetensors(path("bad.st"), {{"grad_output", Tensor::zeros({2, 5, 3})}});
  Result bad = run(mha + "--grad-output bad.st --grads-out g2.st");
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("'grad_output' in 'bad.st' has shape (2, 5, 3); it must have the output's shape (2, 5, 4)"));
  EXPECT_FALSE(fs::exists(path("g2.st")));
  Result half = run(mha + "--grad-output dy.st");
  EXPECT_EQ(half.status, 2);
  EXPECT_THAT(half.err, HasSubstr("--grad-output FILE (dL/doutput in) and --grads-out FILE (the gradients out) go together"));
}

}  // namespace
}  // namespace qkv
