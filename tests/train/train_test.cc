// The training layer's pieces: the learning-rate schedule, gradient clipping, the built-in tasks and
// other data, checkpoints, generation. (Optimisers and the model against PyTorch:
// tests/pytorch/test_train_vs_pytorch.py; gradients: tests/modules/backward_*_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numbers>
#include <set>

#include "qkv/models/decoder.h"
#include "qkv/core/ops.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss_curve.h"
#include "qkv/models/generation.h"
#include "qkv/train/trainer.h"
#include "test_support.h"
#include "tiny_training.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing_support::error_of;

TEST(LrSchedule, LinearWarmupThenCosineToTheMinimum) {
  LrSchedule s{1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);                                          // cosine starts at the peak
  EXPECT_NEAR(s.at(9), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5)), 1e-15);  // half way
  EXPECT_DOUBLE_EQ(s.at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);                                        // clamped after the end
  LrSchedule constant{0.5, 0.5, 0, 10};
  for (int i = 0; i < 12; ++i) EXPECT_DOUBLE_EQ(constant.at(i), 0.5);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheLimitAndReportsTheNormBefore) {
  Tensor w1 = Tensor::zeros({2}), w2 = Tensor::zeros({1});
  Tensor g1 = Tensor::from({2}, {3.0f, 0.0f}), g2 = Tensor::from({1}, {4.0f});
  std::vector<Param> params = {{"a", &w1, &g1}, {"b", &w2, &g2}};
  EXPECT_FLOAT_EQ(clip_grad_norm(params, 10.0), 5.0f);
  EXPECT_EQ(g1.at({0}), 3.0f);  // under the limit: untouched
  EXPECT_FLOAT_EQ(clip_grad_norm(params, 1.0), 5.0f);
  EXPECT_NEAR(g1.at({0}), 3.0f / (5.0f + 1e-6f), 1e-7);
  EXPECT_NEAR(g2.at({0}), 4.0f / (5.0f + 1e-6f), 1e-7);
  g2.at({0}) = NAN;
  EXPECT_TRUE(std::isnan(clip_grad_norm(params, 1.0)));
  EXPECT_EQ(first_non_finite(params, /*grads=*/true), "b");
  EXPECT_EQ(first_non_finite(params, /*grads=*/false), "");
}

TEST(SequenceTask, CopyAndReverseCountOnlyTheAnswer) {
  for (TaskKind kind : {TaskKind::kCopy, TaskKind::kReverse}) {
    SequenceTask task(kind, 5, 10, 42);
    EXPECT_EQ(task.vocab_size(), 11);
    EXPECT_EQ(task.tokens(), 10);
    Batch b = task.next(3);
    ASSERT_EQ(b.inputs.size(), 30u);
    for (int s = 0; s < 3; ++s) {
      const int64_t* in = b.inputs.data() + s * 10;
      const int64_t* tg = b.targets.data() + s * 10;
      EXPECT_EQ(in[5], task.separator());
      for (int t = 0; t < 5; ++t) EXPECT_EQ(tg[t], kIgnoreIndex);
      for (int i = 0; i < 5; ++i) EXPECT_EQ(tg[5 + i], in[kind == TaskKind::kCopy ? i : 4 - i]) << "answer " << i;
      for (int i = 1; i < 5; ++i) EXPECT_EQ(in[5 + i], tg[5 + i - 1]) << "the input continues with the answer";
    }
  }
  SequenceTask task(TaskKind::kCopy, 3, 4, 1);
  EXPECT_EQ(task.decode(task.encode("abd|ab")), "abd|ab");
  EXPECT_THAT(error_of([&] { task.encode("abe"); }), HasSubstr("'e' is not in it"));
  EXPECT_THAT(error_of([] { SequenceTask(TaskKind::kCopy, 3, 27, 1); }), HasSubstr("[2, 26]"));
}

TEST(SequenceTask, StateRestoresTheStream) {
  SequenceTask a(TaskKind::kCopy, 4, 8, 9), b(TaskKind::kCopy, 4, 8, 123);
  a.next(5);
  b.set_state(a.state());
  EXPECT_EQ(a.next(4).inputs, b.next(4).inputs);
}

TEST(TokenWindows, WindowsAreShiftedByOneAndTooShortTextsSayWhatIsNeeded) {
  std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  TokenWindows w(ids, 10, 4, 3, "ten ids");
  Batch b = w.next(6);
  for (int s = 0; s < 6; ++s)
    for (int t = 0; t < 4; ++t) EXPECT_EQ(b.targets[s * 4 + t], b.inputs[s * 4 + t] + 1);
  const std::string short_text = error_of([] { TokenWindows({1, 2, 3}, 5, 8, 1, "'x.txt'"); });
  EXPECT_THAT(short_text, HasSubstr("'x.txt' is 3 tokens long; one training window needs context_length + 1 = 9 tokens"));
  EXPECT_THAT(short_text, Not(HasSubstr("--"))) << "the library names no command-line flag";
  CompactTokens c = compact_vocabulary({50256, 7, 7, 300, 50256});
  EXPECT_EQ(c.vocab, (std::vector<int64_t>{7, 300, 50256}));
  EXPECT_EQ(c.ids, (std::vector<int64_t>{2, 0, 0, 1, 2}));
}

TEST(Checkpoint, RoundTripsEverythingAResumeNeeds) {
  Trainer t(testing_support::tiny_copy_task());
  for (int i = 0; i < 3; ++i) t.step();
  t.record_eval(t.evaluate());
  const std::string path = std::filesystem::temp_directory_path() / ("qkv_ckpt_" + std::to_string(::getpid()) + ".st");
  save_checkpoint(path, t.checkpoint());
  Checkpoint c = load_checkpoint(path);
  TensorFile raw = load_safetensors(path);
  std::filesystem::remove(path);
  EXPECT_EQ(c.step, 3);
  EXPECT_EQ(c.losses, t.losses());
  ASSERT_EQ(c.evals.size(), 1u);
  EXPECT_EQ(c.options.model.d_model, 8);
  EXPECT_EQ(c.options.model.vocab_size, 6);
  EXPECT_EQ(raw.metadata.at("format"), "pt");
  EXPECT_TRUE(raw.contains("optimizer.exp_avg_sq.blocks.0.out_proj.weight"));
  EXPECT_TRUE(raw.contains("blocks.0.mask"));
  // A fresh trainer restored from it continues exactly as the original.
  Trainer u(c.options);
  u.restore(c);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.step().loss, u.step().loss) << "step " << 4 + i;
}

// A tiny copy task: each step takes milliseconds.
TrainOptions tiny_options() {
  TrainOptions o = testing_support::tiny_copy_task();
  o.model.attention.dropout = 0.1;  // so the model's generator must be carried across a stop too
  o.steps = 12;
  o.warmup = 2;
  o.eval_every = 4;
  return o;
}

// Everything Trainer::run reports, in order.
class RecordingObserver : public RunObserver {
 public:
  void on_step(const StepStats& s, int64_t tokens) override {
    events.push_back("step " + std::to_string(s.step));
    losses.push_back(s.loss);
    last_tokens = tokens;
    if (stop_at_step == s.step) *flag = SIGTERM;
  }
  void on_eval(const EvalStats& e) override { events.push_back("eval " + std::to_string(e.step)); }
  void on_checkpoint(const std::string&, int64_t step) override { events.push_back("save " + std::to_string(step)); }
  void on_steps_end(const RunResult& r) override { events.push_back("end " + std::to_string(r.steps_run)); }

  std::vector<std::string> events;
  std::vector<float> losses;
  int64_t last_tokens = 0;
  int64_t stop_at_step = -1;  // set *flag there
  volatile std::sig_atomic_t* flag = nullptr;
};

std::string temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("qkv_run_" + std::to_string(::getpid()) + "_" + name);
}

TEST(TrainerRun, StoppedByThePolicyAndResumedGivesTheUninterruptedLosses) {
  Trainer full(tiny_options());
  RecordingObserver all;
  RunResult r = full.run(RunPolicy{}, all);
  EXPECT_EQ(r.reason, StopReason::kFinished);
  EXPECT_EQ(r.steps_run, 12);
  ASSERT_EQ(full.losses().size(), 12u);
  EXPECT_EQ(all.losses, full.losses());

  const std::string path = temp_path("stop.st");
  RunPolicy stop;
  stop.checkpoint_path = path;
  stop.stop_after = 5;
  Trainer first(tiny_options());
  RecordingObserver part;
  r = first.run(stop, part);
  EXPECT_EQ(r.reason, StopReason::kStopAfter);
  EXPECT_EQ(r.steps_run, 5);
  EXPECT_EQ(r.tokens, 5 * 4 * 6);  // batch 4, inputs of 3 + 1 + 3 - 1 tokens
  EXPECT_EQ(first.steps_done(), 5);
  // Stopped, not finished: no final evaluation; the checkpoint is written for the resume.
  EXPECT_EQ(part.events, (std::vector<std::string>{"step 1", "step 2", "step 3", "step 4", "eval 4", "step 5", "end 5",
                                                   "save 5"}));

  Checkpoint c = load_checkpoint(path);
  std::filesystem::remove(path);
  Trainer second(c.options);
  second.restore(c);
  RecordingObserver rest;
  r = second.run(RunPolicy{}, rest);
  EXPECT_EQ(r.reason, StopReason::kFinished);
  EXPECT_EQ(r.steps_run, 7);
  ASSERT_EQ(second.losses().size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(second.losses()[i], full.losses()[i]) << "step " << i + 1;
  ASSERT_EQ(second.evals().size(), full.evals().size());
  for (size_t i = 0; i < full.evals().size(); ++i) {
    EXPECT_EQ(second.evals()[i].step, full.evals()[i].step);
    EXPECT_EQ(second.evals()[i].loss, full.evals()[i].loss);
  }
}

TEST(TrainerRun, EvaluatesAndSavesAtThePolicysCadenceAndOnceAtTheEnd) {
  TrainOptions o = tiny_options();
  o.steps = 10;
  o.eval_every = 3;
  Trainer t(o);
  RunPolicy p;
  p.checkpoint_path = temp_path("cadence.st");
  p.checkpoint_every = 4;
  RecordingObserver seen;
  t.run(p, seen);
  std::filesystem::remove(p.checkpoint_path);
  // eval at 3, 6, 9 and (the last step not evaluated) 10; saves at 4, 8 and at the end, never
  // twice for the last step.
  EXPECT_EQ(seen.events,
            (std::vector<std::string>{"step 1", "step 2", "step 3", "eval 3", "step 4", "save 4", "step 5", "step 6",
                                      "eval 6", "step 7", "step 8", "save 8", "step 9", "eval 9", "step 10", "end 10",
                                      "eval 10", "save 10"}));
  ASSERT_EQ(t.evals().size(), 4u);
  EXPECT_EQ(t.evals().back().step, 10);
  EXPECT_EQ(seen.last_tokens, 10 * 4 * 6);
  // A run whose last step is an evaluation step is not evaluated twice; eval_every 0 evaluates
  // only at the end; without a path nothing is saved.
  o.eval_every = 5;
  Trainer u(o);
  RecordingObserver once;
  u.run(RunPolicy{}, once);
  EXPECT_EQ(std::count(once.events.begin(), once.events.end(), "eval 10"), 1);
  EXPECT_EQ(std::count_if(once.events.begin(), once.events.end(), [](const std::string& e) { return e.starts_with("save"); }), 0);
  o.eval_every = 0;
  Trainer v(o);
  RecordingObserver end_only;
  v.run(RunPolicy{}, end_only);
  EXPECT_EQ(std::count_if(end_only.events.begin(), end_only.events.end(),
                          [](const std::string& e) { return e.starts_with("eval"); }),
            1);
  EXPECT_EQ(end_only.events.back(), "eval 10");
}

TEST(TrainerRun, AStopFlagEndsTheRunAfterTheCurrentStep) {
  volatile std::sig_atomic_t flag = 0;
  RunPolicy p;
  p.stop_flag = &flag;
  Trainer t(tiny_options());
  RecordingObserver seen;
  seen.flag = &flag;
  seen.stop_at_step = 6;  // as a signal arriving during step 6
  RunResult r = t.run(p, seen);
  EXPECT_EQ(r.reason, StopReason::kStopFlag);
  EXPECT_EQ(r.stop_flag, SIGTERM);
  EXPECT_EQ(r.steps_run, 6);
  EXPECT_EQ(t.steps_done(), 6);
  EXPECT_EQ(seen.events.back(), "end 6") << "stopped: no final evaluation";
  // A flag already set takes no step at all.
  Trainer u(tiny_options());
  RecordingObserver none;
  r = u.run(p, none);
  EXPECT_EQ(r.steps_run, 0);
  EXPECT_EQ(r.reason, StopReason::kStopFlag);
  // Negative cadences are refused by name.
  RunPolicy bad;
  bad.checkpoint_every = -1;
  EXPECT_THAT(error_of([&] { u.run(bad, none); }), HasSubstr("checkpoint_every (-1)"));
}

// The JSON of the options is what checkpoints hold: keys and value formats as written since the
// first checkpoint (this one is from the first version's `qkv train --text-file t.txt`).
const char* kOldOptions =
    R"({"batch_size":32,"beta1":0.9,"beta2":0.999,"clip":1.0,"dampening":0.0,"data_file":"","eps":1e-08,)"
    R"("eval_every":50,"eval_sequences":512,"lr":0.003,"min_lr":0.0003,"model":{"attention":"auto",)"
    R"("context_length":200,"d_model":64,"dropout":0.0,"num_heads":4,"num_layers":2,"qkv_bias":false,)"
    R"("vocab_size":8},"momentum":0.0,"nesterov":false,"optimizer":"adamw","seed":123,"steps":3,"task":"text",)"
    R"("task_length":16,"task_symbols":16,"text_file":"t.txt","warmup":50,"weight_decay":0.01})";

TEST(TrainOptionsJson, ReadsAndWritesTheCheckpointsFormatExactly) {
  const TrainOptions o = train_options_from_json(nlohmann::json::parse(kOldOptions));
  EXPECT_EQ(o.task, TrainTask::kText);
  EXPECT_EQ(o.optimizer, OptimizerKind::kAdamW);
  EXPECT_EQ(o.text_file, "t.txt");
  EXPECT_EQ(o.model.context_length, 200);
  EXPECT_EQ(o.model.vocab_size, 8);
  EXPECT_EQ(o.steps, 3);
  // Written back: the same keys and values, and the attention variants (absent from the first
  // checkpoints) at their defaults.
  nlohmann::json written = nlohmann::json::parse(kOldOptions);
  written["model"].update({{"num_kv_heads", 0}, {"rope", "none"}, {"rope_base", 10000.0}, {"window", 0},
                           {"alibi", false}, {"softcap", 0.0}, {"dtype", "f32"}});
  EXPECT_EQ(to_json(o).dump(), written.dump());
  // Every field round-trips, enums by name.
  TrainOptions p;
  p.task = TrainTask::kReverse;
  p.optimizer = OptimizerKind::kSgd;
  p.nesterov = true;
  p.momentum = 0.5;
  p.seed = 18446744073709551615ull;
  p.model.path = AttentionPath::kTextbook;
  p.model.qkv_bias = true;
  const nlohmann::json j = to_json(p);
  EXPECT_EQ(j["task"], "reverse");
  EXPECT_EQ(j["optimizer"], "sgd");
  EXPECT_EQ(j["model"]["attention"], "textbook");
  EXPECT_EQ(to_json(train_options_from_json(j)), j);
  // The first checkpoints had no "attention"; absent top-level keys keep their defaults.
  nlohmann::json old = nlohmann::json::parse(kOldOptions);
  old["model"].erase("attention");
  old.erase("eval_sequences");
  const TrainOptions q = train_options_from_json(old);
  EXPECT_EQ(q.model.path, AttentionPath::kAuto);
  EXPECT_EQ(q.eval_sequences, 512);
}

TEST(TrainOptionsJson, RejectsUnknownKeysAndIllTypedValuesNamingTheKey) {
  auto error_for = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(kOldOptions);
    edit(j);
    return error_of([&] { train_options_from_json(j); });
  };
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["step"] = 3; }), HasSubstr("unknown key 'step'"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["model"]["heads"] = 3; }), HasSubstr("unknown key 'model.heads'"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["steps"] = "3"; }), HasSubstr("'steps' must be an integer, not \"3\""));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["steps"] = 2.5; }), HasSubstr("'steps' must be an integer, not 2.5"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["seed"] = -1; }), HasSubstr("'seed' must be a non-negative integer"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["lr"] = "fast"; }), HasSubstr("'lr' must be a number"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["nesterov"] = 1; }), HasSubstr("'nesterov' must be true or false"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["task"] = "sort"; }),
              HasSubstr("'task': unknown task 'sort'; expected copy, reverse, text or data"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["optimizer"] = "adam"; }), HasSubstr("'optimizer': unknown optimizer 'adam'"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["model"]["attention"] = "flash"; }),
              HasSubstr("'model.attention': unknown attention path 'flash'"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["model"].erase("d_model"); }),
              HasSubstr("the training options: 'model.d_model' is missing"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j.erase("model"); }), HasSubstr("the training options: 'model.vocab_size' is missing"));
  EXPECT_THAT(error_for([](nlohmann::json& j) { j["model"] = 3; }), HasSubstr("'model' must be a JSON object"));
  EXPECT_THAT(error_of([] { train_options_from_json(nlohmann::json::array()); }), HasSubstr("must be a JSON object"));
  EXPECT_THAT(error_of([] { lm_config_from_json(nlohmann::json::parse(R"({"vocab_size": 3})")); }),
              HasSubstr("the model configuration: 'd_model' is missing"));
}

// The attention variants: optional keys (the checkpoints before them load with every variant off),
// written by name, refused by name when ill-typed or out of range.
TEST(TrainOptionsJson, AttentionVariantsAreOptionalRoundTripAndAreChecked) {
  const TrainOptions old = train_options_from_json(nlohmann::json::parse(kOldOptions));
  EXPECT_EQ(old.model.attention.kv_heads, 0);
  EXPECT_EQ(old.model.attention.rope, kernels::RopeLayout::kNone);
  EXPECT_EQ(old.model.attention.rope_base, 10000.0);
  EXPECT_EQ(old.model.attention.window, 0);
  EXPECT_FALSE(old.model.attention.alibi);
  EXPECT_EQ(old.model.attention.softcap, 0.0);
  TrainOptions v = old;
  v.model.attention.kv_heads = 2;
  v.model.attention.rope = kernels::RopeLayout::kHalf;
  v.model.attention.rope_base = 500.0;
  v.model.attention.window = 5;
  v.model.attention.alibi = true;
  v.model.attention.softcap = 30.0;
  const nlohmann::json j = to_json(v);
  EXPECT_EQ(j["model"]["rope"], "half");
  EXPECT_EQ(j["model"]["num_kv_heads"], 2);
  const TrainOptions back = train_options_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.model.attention.rope, kernels::RopeLayout::kHalf);
  EXPECT_EQ(back.model.attention.window, 5);
  EXPECT_TRUE(back.model.attention.alibi);
  auto error_for = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json k = j;
    k["model"][key] = value;
    return error_of([&] { train_options_from_json(k); });
  };
  EXPECT_THAT(error_for("rope", "sideways"), HasSubstr("'model.rope': unknown RoPE layout 'sideways'"));
  EXPECT_THAT(error_for("rope", 1), HasSubstr("'model.rope' must be one of \"none\", \"half\", \"interleaved\""));
  EXPECT_THAT(error_for("window", 2.5), HasSubstr("'model.window' must be an integer"));
  EXPECT_THAT(error_for("alibi", "yes"), HasSubstr("'model.alibi' must be true or false"));
  // Ranges: validate_lm_config names the field, its value and what it must be.
  auto range_error = [&](const std::function<void(LMConfig&)>& edit) {
    LMConfig m = back.model;
    edit(m);
    return error_of([&] { validate_lm_config(m); });
  };
  EXPECT_EQ(range_error([](LMConfig&) {}), "(no error)");
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.kv_heads = 3; }), HasSubstr("num_kv_heads (3) must divide num_heads (4)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.kv_heads = 8; }), HasSubstr("num_kv_heads (8) must divide num_heads (4)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.kv_heads = -1; }), HasSubstr("num_kv_heads (-1)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.window = -1; }), HasSubstr("window (-1) must be positive (or 0 for none)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.window = 201; }), HasSubstr("window (201) must be in [0, context_length = 200]"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.softcap = -1.0; }), HasSubstr("softcap (-1) must be positive and at most 1e+30 (or 0 for none)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.softcap = INFINITY; }), HasSubstr("softcap (inf)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.softcap = 1e300; }), HasSubstr("softcap (1e+300)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.rope_base = 0.0; }), HasSubstr("rope_base (0) must be a positive finite number"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.rope_base = NAN; }), HasSubstr("rope_base (nan)"));
  EXPECT_THAT(range_error([](LMConfig& m) { m.attention.softcap = 2e30; }), HasSubstr("softcap (2e+30)"));
  EXPECT_THAT(range_error([](LMConfig& m) {
                m.attention.rope = kernels::RopeLayout::kNone;
                m.attention.head_dim = 3;
              }),
              HasSubstr("num_heads (4) x head_dim (3) must be d_model (64)"));
  EXPECT_THAT(range_error([](LMConfig& m) {
                m.d_model = 12;
                set_head_dim(m);  // head dim 3
              }),
              HasSubstr("rope (half) needs an even head_dim, got 3"));
}

// A checkpoint of a grouped-query model with RoPE: W_key and W_value have G * head_dim rows, and
// options out of range are refused when it loads.
TEST(Checkpoint, HoldsTheVariantsAndChecksThemOnLoad) {
  TrainOptions o = testing_support::tiny_copy_task();
  o.model.attention.heads = 4;
  o.model.attention.kv_heads = 2;
  o.model.attention.rope = kernels::RopeLayout::kInterleaved;
  o.model.attention.window = 4;
  o.model.attention.alibi = true;
  o.model.attention.softcap = 20.0;
  o.model.path = AttentionPath::kTextbook;
  o.steps = 2;
  o.eval_sequences = 0;
  Trainer t(o);
  t.step();
  const std::string path = std::filesystem::temp_directory_path() / ("qkv_ckpt_v_" + std::to_string(::getpid()) + ".st");
  save_checkpoint(path, t.checkpoint());
  Checkpoint c = load_checkpoint(path);
  EXPECT_EQ(c.model.at("blocks.0.W_query.weight").shape(), (Shape{8, 8}));
  EXPECT_EQ(c.model.at("blocks.0.W_key.weight").shape(), (Shape{4, 8})) << "2 kv heads of head dim 2";
  EXPECT_EQ(c.model.at("blocks.0.W_value.weight").shape(), (Shape{4, 8}));
  EXPECT_EQ(c.optimizer.at("exp_avg.blocks.0.W_key.weight").shape(), (Shape{4, 8}));
  EXPECT_EQ(to_json(c.options), to_json(t.options()));
  Trainer u(c.options);
  u.restore(c);
  EXPECT_EQ(u.step().loss, t.step().loss) << "the resumed model computes what the original does";
  Checkpoint bad = c;
  bad.options.model.attention.window = 1000;  // beyond context_length 6
  save_checkpoint(path, bad);
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }), HasSubstr("window (1000) must be in [0, context_length = 6]"));
  bad = c;
  bad.options.model.attention.kv_heads = 4;  // W_key would be (8, 8)
  save_checkpoint(path, bad);
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }),
              HasSubstr("tensor 'blocks.0.W_key.weight' has shape (4, 8) but its options"));
  bad.options.model.attention.kv_heads = 3;
  save_checkpoint(path, bad);
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }), HasSubstr("num_kv_heads (3) must divide num_heads (4)"));
  std::filesystem::remove(path);
}

// The one listing of the fields covers every member: two objects that differ in every field
// become equal when each field is copied, as `qkv train --resume` copies the flags given.
TEST(TrainOptionsFields, CopyingEveryListedFieldCopiesTheWholeStruct) {
  TrainOptions a, b = train_options_from_json(nlohmann::json::parse(kOldOptions));
  b.task_length = 7;
  b.task_symbols = 9;
  b.data_file = "d.st";
  b.model.d_model = 16;
  b.model.attention.heads = 2;
  b.model.num_layers = 1;
  b.model.path = AttentionPath::kFused;
  b.model.qkv_bias = true;
  b.model.attention.dropout = 0.25;
  b.model.attention.kv_heads = 1;
  b.model.attention.rope = kernels::RopeLayout::kInterleaved;
  b.model.attention.rope_base = 500.0;
  b.model.attention.window = 3;
  b.model.attention.alibi = true;
  b.model.attention.softcap = 30.0;
  b.model.attention.dtype = Dtype::kBF16;
  b.optimizer = OptimizerKind::kSgd;
  b.batch_size = 5;
  b.warmup = 1;
  b.lr = 0.5;
  b.min_lr = 0.1;
  b.weight_decay = 0.2;
  b.beta1 = 0.8;
  b.beta2 = 0.7;
  b.eps = 1e-3;
  b.momentum = 0.4;
  b.dampening = 0.3;
  b.nesterov = true;
  b.clip = 2.0;
  b.seed = 5;
  b.eval_every = 6;
  b.eval_sequences = 7;
  int fields = 0;
  std::set<std::string> flags;
  visit_fields([&](const OptionField& f, auto& to, const auto& from) {
    EXPECT_NE(to, from) << f.key << ": give b a value that differs";
    to = from;
    ++fields;
    flags.insert(f.flag);
  }, a, b);
  EXPECT_EQ(fields, 37);
  EXPECT_EQ(flags.size(), 37u) << "each flag once";
  EXPECT_EQ(to_json(a), to_json(b));
}

TEST(Generate, GreedyIsDeterministicAndSamplingFollowsTheSeed) {
  Generator gen(5);
  LMConfig cfg;
  cfg.vocab_size = 9;
  cfg.context_length = 4;
  cfg.d_model = 8;
  cfg.attention.heads = 2;
  cfg.num_layers = 1;
  set_head_dim(cfg);
  DecoderModel lm(lm_spec(cfg), gen);
  auto sampling = [](int64_t n, double temperature, int64_t top_k, uint64_t seed) {
    SamplingOptions o;
    o.max_new_tokens = n;
    o.temperature = temperature;
    o.top_k = top_k;
    o.seed = seed;
    return o;
  };
  const SamplingOptions greedy = sampling(6, 0.0, 0, 1);
  std::vector<int64_t> a = generate(lm, {1, 2}, greedy), b = generate(lm, {1, 2}, greedy);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 6u) << "longer than the context: the window slides";
  const SamplingOptions s1 = sampling(20, 1.0, 3, 7), s2 = sampling(20, 1.0, 3, 8);
  std::vector<int64_t> x = generate(lm, {1}, s1);
  EXPECT_EQ(x, generate(lm, {1}, s1));
  EXPECT_NE(x, generate(lm, {1}, s2));
  // top_k = 1 is greedy.
  EXPECT_EQ(generate(lm, {1, 2}, sampling(6, 1.0, 1, 99)), a);
  EXPECT_THAT(error_of([&] { generate(lm, {}, greedy); }), HasSubstr("prompt is empty"));
  EXPECT_THAT(error_of([&] { generate(lm, {9}, greedy); }), HasSubstr("outside the model's vocabulary of 9"));
}

TEST(LossCurve, DrawsTheLossesOnALogScaleWithEvaluations) {
  std::vector<float> losses;
  for (int i = 0; i < 200; ++i) losses.push_back(3.0f * std::exp(-0.03f * static_cast<float>(i)) + 0.001f);
  std::string svg = loss_curve_svg(losses, {{100, 0.1f, 0.9}, {200, 0.01f, 0.995}}, {"demo", 600, 300});
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr(">demo</text>"));
  EXPECT_THAT(svg, HasSubstr("log scale"));
  EXPECT_THAT(svg, HasSubstr("accuracy 99.50%"));
  EXPECT_EQ(loss_curve_svg({}, {}).find("nan"), std::string::npos);
}

// The tiny model trained on fixed batches from `file` (vocabulary 5, batches of 2 rows).
TrainOptions tiny_data_run(const std::string& file) {
  TrainOptions o = testing_support::tiny_copy_task();
  o.task = TrainTask::kData;
  o.data_file = file;
  o.model.vocab_size = 5;
  o.batch_size = 2;
  o.eval_sequences = 0;
  return o;
}

// Token ids stored as integers (I64, as torch.save_file writes a LongTensor; I32) train exactly as
// their float32 copies do: the same batches, the same losses.
TEST(TrainerRun, IntegerIdsTrainAsTheirFloatCopies) {
  const std::string base =
      (std::filesystem::temp_directory_path() / ("qkv_ids_" + std::to_string(::getpid()))).string();
  const std::vector<int64_t> in = {1, 2, 3, 4, 4, 3, 2, 1, 0, 1, 0, 1}, tg = {2, 3, 4, -100, 3, 2, 1, 0, 1, 0, 1, 0};
  save_safetensors(base + ".f32", {{"inputs", Tensor::from({3, 4}, std::vector<float>(in.begin(), in.end()))},
                                   {"targets", Tensor::from({3, 4}, std::vector<float>(tg.begin(), tg.end()))}});
  auto integers = [&](const std::string& dtype, int bytes) {  // the safetensors layout, written by hand
    std::string data;
    for (const auto* ids : {&in, &tg})
      for (int64_t v : *ids)
        for (int b = 0; b < bytes; ++b)
          data.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * b)) & 0xff));
    const size_t half = data.size() / 2;
    const std::string header = R"({"inputs":{"dtype":")" + dtype + R"(","shape":[3,4],"data_offsets":[0,)" +
                               std::to_string(half) + R"(]},"targets":{"dtype":")" + dtype +
                               R"(","shape":[3,4],"data_offsets":[)" + std::to_string(half) + "," +
                               std::to_string(data.size()) + "]}}";
    const std::string path = base + "." + dtype;
    std::ofstream(path, std::ios::binary) << testing_support::le64(header.size()) << header << data;
    return path;
  };
  auto losses = [](const std::string& file) {
    Trainer t(tiny_data_run(file));
    std::vector<double> out;
    for (int i = 0; i < 3; ++i) out.push_back(t.step().loss);
    return out;
  };
  const std::vector<double> want = losses(base + ".f32");
  EXPECT_EQ(losses(integers("I64", 8)), want);
  EXPECT_EQ(losses(integers("I32", 4)), want);
  for (const char* ext : {".f32", ".I64", ".I32"}) std::filesystem::remove(base + ext);
  EXPECT_TRUE(std::isfinite(want[0]) && want[0] > 0) << want[0];
}

// A batch whose targets are all ignored (-100) has a mean loss of 0 / 0, as in PyTorch: said as
// that, naming the step, where it read "the overflow happened inside the loss".
TEST(TrainerRun, ABatchWithEveryTargetIgnoredSaysSo) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("qkv_ignored_" + std::to_string(::getpid()) + ".safetensors")).string();
  save_safetensors(file, {{"inputs", Tensor::from({2, 4}, std::vector<float>{1, 2, 3, 4, 4, 3, 2, 1})},
                          {"targets", Tensor::from({2, 4}, std::vector<float>(8, -100.0f))}});
  Trainer t(tiny_data_run(file));
  const std::string e = error_of([&] { t.step(); });
  std::filesystem::remove(file);
  EXPECT_THAT(e, HasSubstr("step 1: every target of the batch is -100 (ignored), so its mean loss is 0 / 0"));
  EXPECT_EQ(t.steps_done(), 0);
}

}  // namespace
}  // namespace qkv
