// The projections' three matrix products as sgemm arguments, row-major, shared by the benchmarks
// that time them (bench/attention_microbench.cc's BM_Sgemm, bench/onednn_matmul_bench.cc,
// bench/gemm_vs_openblas.cc):
//   op 0  y = x W^T      x (M, K), W (N, K)        forward (nn.Linear)
//   op 1  dx = dy W      dy (M, K), W (K, N)       backward, the input's gradient
//   op 2  dW = dy^T x    dy (K, M), x (K, N)       backward, the weight's gradient (K = B*T)
// a holds the first operand (x or dy), b the second (W or x), c the (M, N) result.
#pragma once

#include <cstdint>

#include "qkv/core/gemm.h"

namespace qkv::bench {

inline GemmArgs projection_product(int64_t op, int64_t M, int64_t N, int64_t K, const float* a, const float* b,
                                   float* c) {
  return op == 0   ? gemm_args(false, true, M, N, K, a, K, b, K, c, N)
         : op == 1 ? gemm_args(false, false, M, N, K, a, K, b, N, c, N)
                   : gemm_args(true, false, M, N, K, a, M, b, N, c, N);
}

}  // namespace qkv::bench
