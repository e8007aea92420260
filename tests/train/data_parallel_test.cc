// The training library's side of data-parallel training, without MPI: the slices of a batch, the
// generator skipping what other ranks' sequences draw, dropout masks of a slice equal to the
// whole batch's rows (textbook path: PyTorch's bernoulli; fused path: Philox keyed by
// batch_offset + b), and the loss's gradient of a slice as its share of the whole batch's mean.
// (The MPI runs against one process: tests/mpi/train_dp_test.sh.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/multi_head_attention.h"
#include "qkv/train/data_parallel.h"
#include "qkv/train/loss.h"
#include "test_support.h"

namespace qkv {
namespace {

using ::testing::HasSubstr;
using testing_support::error_of;

TEST(TrainDataParallel, BatchSlicesCoverTheBatchInRankOrderAndATooSmallBatchIsRefused) {
  const BatchSlice expected[] = {{0, 2}, {2, 5}, {5, 7}, {7, 10}};  // 10 over 4: 2, 3, 2, 3
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(batch_slice(10, r, 4).begin, expected[r].begin) << r;
    EXPECT_EQ(batch_slice(10, r, 4).end, expected[r].end) << r;
  }
  EXPECT_EQ(batch_slice(7, 0, 1).end, 7);
  EXPECT_THAT(error_of([] { batch_slice(3, 0, 4); }),
              HasSubstr("the batch size (3) must be at least the number of ranks (4)"));
  EXPECT_THAT(error_of([] { batch_slice(8, 4, 4); }), HasSubstr("rank 4 is not one of 4 ranks"));
}

TEST(TrainDataParallel, GeneratorDiscardLeavesTheStateThatDrawingWould) {
  for (uint64_t n : {0u, 1u, 623u, 624u, 625u, 2000u, 5000u}) {
    Generator skipped(77), drawn(77);
    drawn.random();  // start mid-block too
    skipped.random();
    skipped.discard(n);
    for (uint64_t i = 0; i < n; ++i) drawn.random();
    EXPECT_EQ(skipped.get_state(), drawn.get_state()) << n;
    EXPECT_EQ(skipped.random64(), drawn.random64()) << n;
  }
}

TEST(TrainDataParallel, DropoutOfASliceIsTheWholeBatchsMaskForItsRows) {
  const Tensor x = Tensor::ones({5, 3, 7});  // (B, ., .)
  Generator whole_gen(9);
  Dropout whole(0.5, whole_gen);
  whole.train(true);
  const std::vector<float> want = whole.forward(x).to_vector();
  ASSERT_NE(std::count(want.begin(), want.end(), 0.0f), 0) << "no element was dropped: the test would prove nothing";
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}, {3, 5}}) {
    Generator gen(9);
    Dropout part(0.5, gen);
    part.train(true);
    part.set_batch_slice(begin, 5);
    const std::vector<float> got = part.forward(x.slice(0, begin, end).contiguous()).to_vector();
    const std::vector<float> rows(want.begin() + begin * 21, want.begin() + end * 21);
    EXPECT_EQ(got, rows) << begin;
    EXPECT_EQ(gen.get_state(), whole_gen.get_state()) << "the generator must end where the whole batch leaves it";
  }
  Generator gen(9);
  Dropout part(0.5, gen);
  part.train(true);
  part.set_batch_slice(4, 5);
  EXPECT_THAT(error_of([&] { part.forward(x.slice(0, 0, 2).contiguous()); }),
              HasSubstr("an input of 2 sequences from sequence 4 does not fit the batch of 5"));
  EXPECT_THAT(error_of([&] { part.set_batch_slice(5, 5); }), HasSubstr("from sequence 5 of a batch of 5"));
}

// MultiHeadAttention in training mode with dropout, on both paths: the slice's output is the
// whole batch's rows.
void expect_slice_matches_whole(AttentionPath path) {
  AttentionConfig c = attention_config("mha", 8, 8, 6, 0.3, 2);
  c.path = path;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor x = Tensor::empty({4, 6, 8});  // (B, T, C)
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = u(rng);
  Generator whole_gen(5);
  MultiHeadAttention whole(c, whole_gen);
  whole.train(true);
  const std::vector<float> want = whole.forward(x).to_vector();
  Generator gen(5);
  MultiHeadAttention part(c, gen);
  part.train(true);
  part.dropout.set_batch_slice(1, 4);
  const std::vector<float> got = part.forward(x.slice(0, 1, 3).contiguous()).to_vector();  // sequences 1, 2
  ASSERT_EQ(got.size(), 2u * 48u);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[48 + i], 1e-6 * std::max(1.0f, std::fabs(want[48 + i]))) << i;
  EXPECT_EQ(gen.get_state(), whole_gen.get_state());
  // The same sequences taken as the batch's first two get other masks: the offset matters.
  Generator other_gen(5);
  MultiHeadAttention other(c, other_gen);
  other.train(true);
  other.dropout.set_batch_slice(0, 4);
  const std::vector<float> moved = other.forward(x.slice(0, 1, 3).contiguous()).to_vector();
  double largest = 0;
  for (size_t i = 0; i < got.size(); ++i) largest = std::max(largest, static_cast<double>(std::fabs(moved[i] - got[i])));
  EXPECT_GT(largest, 1e-3) << "the masks did not depend on the slice's place in the batch";
}

TEST(TrainDataParallel, TextbookDropoutOfASliceIsTheWholeBatchsRows) { expect_slice_matches_whole(AttentionPath::kTextbook); }

TEST(TrainDataParallel, FusedDropoutOfASliceIsKeyedByTheGlobalSequence) { expect_slice_matches_whole(AttentionPath::kFused); }

TEST(TrainDataParallel, LossGradientOfASliceIsItsShareOfTheWholeBatchsMean) {
  const Tensor logits = Tensor::from({4, 3}, {0.1f, 2.0f, -1.0f, 0.5f, 0.5f, 0.0f, 3.0f, -2.0f, 1.0f, 0.0f, 0.2f, 0.4f});
  const std::vector<int64_t> targets = {1, -100, 0, 2};  // 3 counted
  CrossEntropyLoss whole;
  const float loss = whole.forward(logits, targets);
  const std::vector<float> want = whole.backward().to_vector();
  CrossEntropyLoss a, b;
  a.forward(logits.slice(0, 0, 2).contiguous(), {1, -100});
  b.forward(logits.slice(0, 2, 4).contiguous(), {0, 2});
  EXPECT_EQ(a.count() + b.count(), 3);
  EXPECT_FLOAT_EQ(static_cast<float>((a.total() + b.total()) / 3.0), loss);
  std::vector<float> got = a.backward_over(3).to_vector();
  const std::vector<float> rest = b.backward_over(3).to_vector();
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, want);  // the same scale, 1 / 3: the same bits
  EXPECT_THAT(error_of([&] { a.backward_over(0); }), HasSubstr("the mean over 0 targets cannot hold this batch's 1"));
}

}  // namespace
}  // namespace qkv
