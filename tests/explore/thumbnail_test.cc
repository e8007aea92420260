// The model view's thumbnails (qkv/explore/explore.h, explore_thumbnail): each pixel the largest
// value of its block of cells.
#include <gtest/gtest.h>

#include <string>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/explore/explore.h"

namespace qkv {
namespace {

TEST(ExploreThumbnail, SmallMatricesAreKeptCellForCell) {
  Tensor m = Tensor::zeros({2, 3, 3});
  for (int64_t n = 0; n < m.numel(); ++n) m.data()[n] = static_cast<float>(n) * 0.5f - 2.0f;
  const Tensor t = explore_thumbnail(m);
  ASSERT_EQ(t.shape().to_vector(), (std::vector<int64_t>{2, 3, 3}));
  for (int64_t n = 0; n < m.numel(); ++n) EXPECT_EQ(t.data()[n], m.data()[n]) << n;
}

TEST(ExploreThumbnail, LargeMatricesArePooledByTheirBlocksLargestValue) {
  const int64_t T = 2 * kExploreThumbnail;  // blocks of 2 x 2 cells
  Tensor m = Tensor::zeros({1, T, T});
  m.at({0, 0, 1}) = 0.25f;        // block (0, 0)
  m.at({0, 1, 0}) = 0.75f;        // block (0, 0): the larger wins
  m.at({0, T - 1, T - 1}) = 1.0f; // the last block
  m.at({0, 5, 2}) = -3.0f;        // block (2, 1): below the zeros around it
  const Tensor t = explore_thumbnail(m);
  ASSERT_EQ(t.shape().to_vector(), (std::vector<int64_t>{1, kExploreThumbnail, kExploreThumbnail}));
  EXPECT_EQ(t.at({0, 0, 0}), 0.75f);
  EXPECT_EQ(t.at({0, kExploreThumbnail - 1, kExploreThumbnail - 1}), 1.0f);
  EXPECT_EQ(t.at({0, 2, 1}), 0.0f);
  EXPECT_EQ(t.at({0, 0, 1}), 0.0f);
}

TEST(ExploreThumbnail, ANonSquareInputIsRefused) {
  try {
    explore_thumbnail(Tensor::zeros({1, 3, 4}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected (rows, T, T), got"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
