// kernels/memory_bandwidth.h's plain read and update: sum_floats and scale_floats, the ceilings
// benchmarks set beside a kernel reading (or reading and rewriting) the same bytes, must touch every
// float they are given (the SIMD loop's whole iterations and the tail past them) and no other, on
// every SIMD target.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "qkv/kernels/memory_bandwidth.h"
#include "qkv/kernels/simd.h"

namespace qkv::kernels {
namespace {

// Small whole numbers: every partial sum is exact in float, whatever the order, so the sum must
// equal the exact one. Lengths below, at and around the loop's 256-float iterations, from a
// 64-byte boundary and from 1 to 3 floats past one (the decoding bench reads a thread's share of
// a state from any float; under UBSan an aligned load there is reported).
TEST(SumFloats, ReadsEveryFloatOnEveryTargetFromAnyFloat) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    for (size_t n : {0u, 1u, 255u, 256u, 257u, 1000u, 4099u})
      for (size_t offset : {0u, 1u, 3u}) {
        std::vector<float> storage(n + 32);
        const size_t skip = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 / sizeof(float);
        float* x = storage.data() + skip + offset;
        int64_t exact = 0;
        for (size_t i = 0; i < n; ++i) {
          x[i] = static_cast<float>(static_cast<int64_t>(i % 7) - 2);
          exact += static_cast<int64_t>(i % 7) - 2;
        }
        EXPECT_EQ(sum_floats(x, n), static_cast<float>(exact)) << "n " << n << " offset " << offset;
      }
  }
  force_simd_target(0);
}

// The update in place: every float of [0, n) scaled, none past it, on every target, from any float.
TEST(ScaleFloats, ScalesEveryFloatAndNoOtherOnEveryTarget) {
  for (int64_t target : available_simd_targets()) {
    SCOPED_TRACE(simd_target_name(target));
    force_simd_target(target);
    for (size_t n : {0u, 1u, 255u, 256u, 257u, 1000u, 4099u})
      for (size_t offset : {0u, 1u, 3u}) {
        std::vector<float> storage(n + 32, 5.0f);
        const size_t skip = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 / sizeof(float);
        float* x = storage.data() + skip + offset;
        for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int64_t>(i % 7) - 2);
        scale_floats(x, n, -3.0f);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(x[i], -3.0f * static_cast<float>(static_cast<int64_t>(i % 7) - 2)) << "n " << n << " at " << i;
        for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(x[i], 5.0f) << "n " << n << " past the end at " << i;
      }
  }
  force_simd_target(0);
}

}  // namespace
}  // namespace qkv::kernels
