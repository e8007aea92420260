// The training layer's pieces: the learning-rate schedule, gradient clipping, the built-in tasks and
// other data, checkpoints, generation. (Optimisers and the model against PyTorch:
// tests/pytorch/test_train_vs_pytorch.py; gradients: backward_*_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numbers>

#include "qkv/core/ops.h"
#include "qkv/io/safetensors.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss_curve.h"
#include "qkv/train/sampling.h"
#include "qkv/train/trainer.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

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
  EXPECT_THAT(error_of([] { TokenWindows({1, 2, 3}, 5, 8, 1, "'x.txt'"); }),
              HasSubstr("'x.txt' is 3 tokens long; one training window needs context_length + 1 = 9 tokens"));
  CompactTokens c = compact_vocabulary({50256, 7, 7, 300, 50256});
  EXPECT_EQ(c.vocab, (std::vector<int64_t>{7, 300, 50256}));
  EXPECT_EQ(c.ids, (std::vector<int64_t>{2, 0, 0, 1, 2}));
}

TEST(Checkpoint, RoundTripsEverythingAResumeNeeds) {
  TrainOptions o;
  o.task_length = 3;
  o.task_symbols = 5;
  o.model.d_model = 8;
  o.model.num_heads = 2;
  o.model.num_layers = 1;
  o.batch_size = 4;
  o.steps = 6;
  o.eval_sequences = 16;
  Trainer t(o);
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

TEST(Generate, GreedyIsDeterministicAndSamplingFollowsTheSeed) {
  Generator gen(5);
  LMConfig cfg;
  cfg.vocab_size = 9;
  cfg.context_length = 4;
  cfg.d_model = 8;
  cfg.num_heads = 2;
  cfg.num_layers = 1;
  AttentionLM lm(cfg, gen);
  SamplingOptions greedy{6, 0.0, 0, 1};
  std::vector<int64_t> a = generate(lm, {1, 2}, greedy), b = generate(lm, {1, 2}, greedy);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 6u) << "longer than the context: the window slides";
  SamplingOptions s1{20, 1.0, 3, 7}, s2{20, 1.0, 3, 8};
  std::vector<int64_t> x = generate(lm, {1}, s1);
  EXPECT_EQ(x, generate(lm, {1}, s1));
  EXPECT_NE(x, generate(lm, {1}, s2));
  // top_k = 1 is greedy.
  EXPECT_EQ(generate(lm, {1, 2}, SamplingOptions{6, 1.0, 1, 99}), a);
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

}  // namespace
}  // namespace qkv
