// kernels/rope.h: the rotation against its formula in double, both layouts, strided heads and a
// position offset; the inverse is the transpose; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/rope.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {

using testing_support::error_of;

// y = R x for one row at position pos, in double, straight from rope.h's formula.
std::vector<double> rotate_row(const float* x, int64_t D, int64_t pos, RopeLayout layout, double base) {
  std::vector<double> y(static_cast<size_t>(D));
  for (int64_t i = 0; i < D / 2; ++i) {
    const int64_t a = layout == RopeLayout::kHalf ? i : 2 * i, b = layout == RopeLayout::kHalf ? i + D / 2 : 2 * i + 1;
    const double theta = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    y[static_cast<size_t>(a)] = x[a] * std::cos(theta) - x[b] * std::sin(theta);
    y[static_cast<size_t>(b)] = x[b] * std::cos(theta) + x[a] * std::sin(theta);
  }
  return y;
}

TEST(Rope, MatchesTheFormulaOnInterleavedHeadsWithAnOffset) {
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved})
    for (int64_t D : {2, 6, 64}) {
      const int64_t B = 2, H = 3, N = 17, offset = 5, W = H * D + 3;  // heads interleaved in rows of W
      Generator gen(7);
      Tensor x = randn({B * N * W}, gen);
      const std::vector<float> before(x.data(), x.data() + x.numel());
      const MutableHeads heads = MutableHeads::interleaved(x.data(), B, H, N, D, W);
      rope_rotate(heads, RopeOptions{layout, 500.0, offset});
      double worst = 0.0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t n = 0; n < N; ++n) {
            const int64_t at = b * N * W + n * W + h * D;
            const std::vector<double> want = rotate_row(before.data() + at, D, offset + n, layout, 500.0);
            for (int64_t d = 0; d < D; ++d)
              worst = std::max(worst, std::abs(x.data()[at + d] - want[static_cast<size_t>(d)]));
          }
      EXPECT_LT(worst, 1e-5) << rope_layout_name(layout) << " D=" << D;
      for (int64_t b = 0; b < B; ++b)  // the columns between the heads are untouched
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = H * D; c < W; ++c) EXPECT_EQ(x.data()[b * N * W + n * W + c], before[b * N * W + n * W + c]);
    }
}

TEST(Rope, LayoutsPairDifferentElements) {
  // One row, D = 4, position 1: half rotates (0, 2) and (1, 3); interleaved (0, 1) and (2, 3).
  float half[4] = {1, 0, 0, 0}, inter[4] = {1, 0, 0, 0};
  rope_rotate(MutableHeads::contiguous(half, 1, 1, 1, 4), RopeOptions{RopeLayout::kHalf, 10000.0, 1});
  rope_rotate(MutableHeads::contiguous(inter, 1, 1, 1, 4), RopeOptions{RopeLayout::kInterleaved, 10000.0, 1});
  EXPECT_NEAR(half[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(half[2], std::sin(1.0), 1e-6);
  EXPECT_EQ(half[1], 0.0f);
  EXPECT_NEAR(inter[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(inter[1], std::sin(1.0), 1e-6);
  EXPECT_EQ(inter[2], 0.0f);
}

TEST(Rope, InverseIsTheTranspose) {
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    const int64_t B = 1, H = 2, N = 9, D = 8;
    Generator gen(3);
    Tensor x = randn({B, H, N, D}, gen), y = randn({B, H, N, D}, gen);
    Tensor rx = x.clone(), rty = y.clone();
    const RopeOptions o{layout, 10000.0, 2};
    rope_rotate(MutableHeads::contiguous(rx.data(), B, H, N, D), o);
    rope_rotate(MutableHeads::contiguous(rty.data(), B, H, N, D), o, /*inverse=*/true);
    double lhs = 0.0, rhs = 0.0;  // <R x, y> = <x, R^T y>
    for (int64_t i = 0; i < x.numel(); ++i) {
      lhs += static_cast<double>(rx.data()[i]) * y.data()[i];
      rhs += static_cast<double>(x.data()[i]) * rty.data()[i];
    }
    EXPECT_NEAR(lhs, rhs, 1e-4) << rope_layout_name(layout);
    rope_rotate(MutableHeads::contiguous(rx.data(), B, H, N, D), o, /*inverse=*/true);  // R^T R x = x
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(rx.data()[i], x.data()[i], 1e-5);
  }
}

TEST(Rope, ErrorsNameTheValue) {
  float x[6] = {};
  EXPECT_NE(error_of([&] { rope_rotate(MutableHeads::contiguous(x, 1, 1, 2, 3), RopeOptions{RopeLayout::kHalf}); })
                .find("the rotated dims R (3) must be even"),
            std::string::npos);
  EXPECT_NE(error_of([] { RopeTable(4, 8, -1.0); }).find("base must be positive, got -1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_rope_layout("neox"); }).find("expected one of: none, half, interleaved"),
            std::string::npos);
  rope_rotate(MutableHeads::contiguous(x, 1, 1, 2, 3), RopeOptions{});  // kNone: no rotation, no check
}

}  // namespace
}  // namespace qkv::kernels
