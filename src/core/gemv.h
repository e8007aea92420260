// core/gemv.h (private) - nn.Linear for a few rows: the decoding step's product.
//
//   y (M, N) = x (M, K) W^T + bias          W (N, K) as nn.Linear stores it; M <= kGemvMaxRows
//
// A decoding step multiplies one row per sequence by every weight matrix, so its time is the time
// to read W once from memory: the weight is streamed row by row (each row of W meets the M rows
// of x, which stay in L1), split over the pool by blocks of W's rows, with no packing and no
// allocation. The bias is added as each sum is finished. Each output is one dot product computed
// in a fixed order, so the result does not depend on the thread count.
//
// W16 (W in bf16, (N, K)) instead of W: bf16 weights, half the bytes. The product then follows
// gemm.h's bf16 mode: x is rounded to bf16 too, every product and sum is float32 (bf16 widened
// to float32 is exact).
#pragma once

#include <cstdint>

#include "qkv/core/thread_pool.h"

namespace qkv {

inline constexpr int64_t kGemvMaxRows = 16;

// Exactly one of W and W16 is non-null; bias may be null; y is overwritten. M in [1, kGemvMaxRows].
// Scratch for the rounded x lives in a per-thread buffer kept between calls.
void gemv_rows(const float* x, int64_t M, int64_t K, const float* W, const uint16_t* W16, const float* bias,
               int64_t N, float* y, ThreadPool* pool = nullptr);

}  // namespace qkv
