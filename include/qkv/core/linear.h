// qkv/core/linear.h - nn.Linear's product on raw row-major arrays, and its backward: the one
// implementation that the tensor op linear() (core/ops.h, the textbook modules' Linear) and the
// fused pipeline's projections (kernels/mha.h) both run.
//
//   y (M, N) = x (M, K) W^T + bias      W (N, K) as nn.Linear stores it (out, in); bias (N) or null
//
// As PyTorch's addmm: y = the product + the bias in every row (GemmArgs::bias: qkv's own product
// adds it as it writes y's tiles); without a bias y is overwritten. Threads and the BLAS as in gemm.h, except for one to
// sixteen rows (decoding), which stream W once with the bias in the same pass (src/core/gemv.h; not
// under QKV_GEMM=openblas).
#pragma once

#include <cstdint>

#include "qkv/core/bf16.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/thread_pool.h"

namespace qkv {

// dtype kBF16: the products multiply in bf16 (gemm.h), reading W16 (W in bf16, (N, K)) when it is
// given instead of rounding W; the bias and every sum stay float32. Wq (W in a ggml type, (N, K)),
// when given, is read instead of W and W16 whatever the dtype: x's rows quantized per block and
// integer dot products (core/quant_matvec.h), the bias added after.
void linear(const float* x, int64_t M, int64_t K, const float* W, const float* bias, int64_t N, float* y,
            ThreadPool* pool = nullptr, Dtype dtype = Dtype::kF32, const uint16_t* W16 = nullptr,
            QuantView Wq = {});

// Given x (M, K), W (N, K) and dy = dLoss/dy (M, N), writes (overwrites) whichever of
// dx = dy W (M, K), dW = dy^T x (N, K) and db = the column sums of dy (N) is not null; with
// `accumulate_params`, dW and db are added into instead (PyTorch's .grad; the GEMM runs with
// beta = 1), dx is still written.
void linear_backward(const float* x, const float* dy, int64_t M, int64_t K, const float* W, int64_t N,
                     float* dx, float* dW, float* db, ThreadPool* pool = nullptr, bool accumulate_params = false,
                     Dtype dtype = Dtype::kF32, const uint16_t* W16 = nullptr);

}  // namespace qkv
