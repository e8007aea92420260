// nn.Linear's product and its backward on raw arrays. See include/qkv/core/linear.h.
#include "qkv/core/linear.h"

#include <vector>

#include "core/gemv.h"
#include "qkv/core/gemm.h"
#include "qkv/core/quant_matvec.h"

namespace qkv {

namespace {
// The product in bf16 when asked, with W read as bf16 when it is given.
GemmArgs in_dtype(GemmArgs g, Dtype dtype, const uint16_t* W16) {
  g.precision = dtype;
  if (dtype == Dtype::kBF16 && W16 != nullptr) {
    g.B = nullptr;
    g.B16 = W16;
  }
  return g;
}
}  // namespace

void linear(const float* x, int64_t M, int64_t K, const float* W, const float* bias, int64_t N, float* y,
            ThreadPool* pool, Dtype dtype, const uint16_t* W16, QuantView Wq) {
  if (Wq) {  // ggml blocks: the integer product (any number of rows), then the bias in every row
    quant_matvec(Wq, N, K, x, M, y, pool);
    if (bias != nullptr)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
    return;
  }
  // A few rows (decoding): W streamed once, the bias added in the same pass (core/gemv.h); bf16
  // mode when W is kept in bf16 (rounding W at every call would read it twice).
  const bool bf16_weights = dtype == Dtype::kBF16 && W16 != nullptr;
  if (M >= 1 && M <= kGemvMaxRows && K > 0 && gemm_backend() == GemmBackend::kQkv &&
      (dtype == Dtype::kF32 || bf16_weights))
    return gemv_rows(x, M, K, bf16_weights ? nullptr : W, bf16_weights ? W16 : nullptr, bias, N, y, pool);
  GemmArgs g = in_dtype(gemm_args(false, true, M, N, K, x, K, W, K, y, N), dtype, W16);
  g.bias = bias;  // added as the product writes y (qkv's own product), or into y first
  sgemm(g, pool);
}

void linear_backward(const float* x, const float* dy, int64_t M, int64_t K, const float* W, int64_t N,
                     float* dx, float* dW, float* db, ThreadPool* pool, bool accumulate_params, Dtype dtype,
                     const uint16_t* W16) {
  if (dW) {  // dW (+)= dy^T x
    GemmArgs g = in_dtype(gemm_args(true, false, N, K, M, dy, N, x, K, dW, K), dtype, nullptr);
    g.beta = accumulate_params ? 1.0f : 0.0f;
    sgemm(g, pool);
  }
  if (db && !accumulate_params) sum_rows(dy, M, N, N, db, pool);  // db = sum over rows of dy
  if (db && accumulate_params) {
    std::vector<float> sums(static_cast<size_t>(N));  // (N): a few KB
    sum_rows(dy, M, N, N, sums.data(), pool);
    for (int64_t n = 0; n < N; ++n) db[n] += sums[static_cast<size_t>(n)];
  }
  if (dx) sgemm(in_dtype(gemm_args(false, false, M, K, N, dy, N, W, K, dx, K), dtype, W16), pool);  // dx = dy W
}

}  // namespace qkv
