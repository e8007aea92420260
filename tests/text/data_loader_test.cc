// The sliding-window dataset and DataLoader: windows as chapter 2 builds them, and shuffled epochs
// in PyTorch's order (tests/data/loader_fixtures.json, made by tests/pytorch/make_loader_fixtures.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "qkv/core/error.h"
#include "qkv/text/data_loader.h"
#include "test_json.h"

namespace qkv {
namespace {

std::vector<int64_t> iota_ids(int64_t n) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = 100 + i;
  return ids;
}

TEST(SlidingWindowDataset, WindowsAndTargetsShiftedByOne) {
  SlidingWindowDataset d(iota_ids(10), 4, 3);  // range(0, 6, 3) -> windows at 0, 3
  ASSERT_EQ(d.size(), 2);
  std::vector<int64_t> in(4), tg(4);
  d.get(1, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int64_t>{103, 104, 105, 106}));
  EXPECT_EQ(tg, (std::vector<int64_t>{104, 105, 106, 107}));
  EXPECT_EQ(SlidingWindowDataset(iota_ids(5), 4, 1).size(), 1);
  EXPECT_EQ(SlidingWindowDataset(iota_ids(9), 4, 4).size(), 2);  // range(0, 5, 4)
}

TEST(SlidingWindowDataset, TooShortTextSaysTheLengthNeeded) {
  try {
    SlidingWindowDataset d(iota_ids(4), 4, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("has 4 tokens"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("5 tokens are needed"));
  }
}

TEST(DataLoader, InOrderBatchesAndDropLast) {
  SlidingWindowDataset d(iota_ids(12), 2, 1);  // 10 windows
  DataLoader keep(d, 4, false, false), drop(d, 4, false, true);
  std::vector<WindowBatch> a = keep.epoch(), b = drop.epoch();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a.back().batch, 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0].inputs, (std::vector<int64_t>{100, 101, 101, 102, 102, 103, 103, 104}));
  EXPECT_EQ(a[0].targets, (std::vector<int64_t>{101, 102, 102, 103, 103, 104, 104, 105}));
  EXPECT_THROW(DataLoader(d, 11, false, true), Error);
}

TEST(DataLoader, ShuffledEpochsInPyTorchsOrder) {
  nlohmann::json doc = testing_support::load_python_json(std::string(QKV_TEST_DATA_DIR) + "/loader_fixtures.json");
  int checked = 0;
  for (const auto& c : doc["cases"]) {
    if (c.contains("randperm")) {
      Generator g(c["seed"].get<uint64_t>());
      EXPECT_EQ(randperm(c["randperm"].get<int64_t>(), g), c["perm"].get<std::vector<int64_t>>());
      ++checked;
      continue;
    }
    const int64_t n = c["n"];
    // Window i of this dataset starts with id i: ids 0..n, max_length 1, stride 1.
    std::vector<int64_t> ids(static_cast<size_t>(n + 1));
    for (int64_t i = 0; i <= n; ++i) ids[static_cast<size_t>(i)] = i;
    SlidingWindowDataset d(ids, 1, 1);
    Generator g(c["seed"].get<uint64_t>());
    DataLoader loader(d, c["batch_size"], true, c["drop_last"], &g);
    for (const auto& want_epoch : c["epochs"]) {
      std::vector<std::vector<int64_t>> got;
      for (const WindowBatch& b : loader.epoch()) got.push_back(b.inputs);
      EXPECT_EQ(got, want_epoch.get<std::vector<std::vector<int64_t>>>()) << "n=" << n << " seed=" << c["seed"];
    }
    float after[2];
    g.uniform(after, 2);
    EXPECT_EQ(after[0], c["rand_after"][0].get<float>());
    EXPECT_EQ(after[1], c["rand_after"][1].get<float>());
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

}  // namespace
}  // namespace qkv
