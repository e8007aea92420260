// qkv/core/gemm.h - single-precision matrix products for the projections, through the BLAS.
//
//   C (M, N) = alpha * op(A) op(B) + beta * C      row-major; op(X) = X or X^T
//   op(A) is (M, K): A is (M, K) with row stride lda, or (K, M) when trans_a.
//   op(B) is (K, N): B is (K, N) with row stride ldb, or (N, K) when trans_b
//                    (nn.Linear's weight (out, in) is used as trans_b: y = x W^T).
//
// Without OpenBLAS (cmake -DQKV_OPENBLAS=OFF, or not installed) the products run a plain loop.
//
// Threading, decided once for all of qkv: the BLAS (OpenBLAS, found by CMake's FindBLAS) is told
// to use ONE thread, at the first call, and sgemm splits C into up to 8 panels of rows (or
// columns, when C is wider than tall; 64 to 1024 each) that qkv's thread pool runs, each panel one
// single-threaded BLAS call. The panels depend on the shape, not on the thread count, so neither
// does the result. So qkv's threads and the BLAS's never oversubscribe the cores, the BLAS's own
// threads never spin between calls, and a product called inside a pool task (nested) simply runs
// single-threaded on that worker. A weight gradient's shape (K >= 2048 and at least twice M and
// N) is split instead into the two halves of K, each one BLAS call, summed in a fixed order.
// On the head-sized shapes of the development machine (2 cores), two 1-thread streams were also
// steadier than OpenBLAS's own 2-thread split.
#pragma once

#include <cstdint>
#include <string>

#include "qkv/core/thread_pool.h"

namespace qkv {

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;  // 0: C is overwritten (never read, may hold NaN)
  float* C = nullptr;
  int64_t ldc = 0;
};

// C (M, N) = op(A) op(B): the arguments of a plain product (alpha 1, beta 0; set them after).
inline GemmArgs gemm_args(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float* C, int64_t ldc) {
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  return g;
}

// Which BLAS runs the products, e.g. "OpenBLAS 0.3.21, Haswell kernels", or "none (reference
// loops)" in a build without OpenBLAS.
std::string blas_description();
// The kernel family OpenBLAS chose for this CPU (or the one OPENBLAS_CORETYPE forces), e.g.
// "Haswell" or "SkylakeX"; empty without OpenBLAS.
std::string blas_core();
// The width of the vectors that kernel family computes with: 512 (SkylakeX, Cooperlake,
// SapphireRapids), 256 (Haswell, Zen, Sandybridge, the Bulldozer family), 128 (older x86), or 0
// when unknown (another CPU family, or no OpenBLAS).
int blas_vector_bits();

// Throws qkv::Error on negative sizes or leading dimensions too small for the shapes.
void sgemm(const GemmArgs& g, ThreadPool* pool = nullptr);  // pool: nullptr = default_pool()
// The naive reference: three loops, double accumulation. For tests.
void sgemm_reference(const GemmArgs& g);

// C (M, N) = each row the vector bias (N): the start of y = x W^T + b with beta = 1.
void fill_rows(float* C, int64_t M, int64_t N, int64_t ldc, const float* bias, ThreadPool* pool = nullptr);
// out (N) = sum over the M rows of X (M, N) (ldx): a bias gradient. Accumulated in float per
// column, rows in order, so the result does not depend on the thread count.
void sum_rows(const float* X, int64_t M, int64_t N, int64_t ldx, float* out, ThreadPool* pool = nullptr);

// 2 M N K.
inline double gemm_flops(int64_t M, int64_t N, int64_t K) {
  return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
}

// C (M, N) = op(A) op(B), C overwritten: the form the tensor ops (core/ops.cc's matmul) call.
// Runs sgemm (on the default pool; single-threaded when called inside a pool task).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float* C, int64_t ldc);
// Its naive reference (sgemm_reference).
void gemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float* C, int64_t ldc);
}  // namespace qkv
