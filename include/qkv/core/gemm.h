// qkv/core/gemm.h - single-precision matrix products for the projections.
//
//   C (M, N) = alpha * op(A) op(B) + beta * C      row-major; op(X) = X or X^T
//   op(A) is (M, K): A is (M, K) with row stride lda, or (K, M) when trans_a.
//   op(B) is (K, N): B is (K, N) with row stride ldb, or (N, K) when trans_b
//                    (nn.Linear's weight (out, in) is used as trans_b: y = x W^T).
//
// Two products, one interface (GemmBackend):
//   - qkv's own (the default): packed panels and a register-tiled micro-kernel in Highway, at the
//     widest vectors the CPU has (AVX-512: 14 x 32 tiles), whatever a BLAS would choose; blocks
//     sized from the machine's L1 and L2 (src/core/gemm_packed.cc);
//   - OpenBLAS (found by CMake's FindBLAS; cmake -DQKV_OPENBLAS=OFF leaves it out), the reference
//     the fast product was measured against, selectable with QKV_GEMM=openblas or
//     set_gemm_backend. Its kernel family is OpenBLAS's choice for the CPU, or OPENBLAS_CORETYPE's
//     (an environment that pins 256-bit kernels halves its speed on an AVX-512 CPU).
// (nn.Linear on one to sixteen rows, a decoding step, does not come here: core/linear.h's linear
// streams the weight itself, src/core/gemv.h.) One-row sgemm calls run as OpenBLAS's sgemv when
// OpenBLAS is built in: a
// matrix-vector product reads B once, where packing it would cost more than the product.
//
// Threading, decided once for all of qkv: products split over qkv's thread pool; OpenBLAS is told
// to use ONE thread when qkv first calls it, so the two never oversubscribe the cores and the
// BLAS's threads never spin between calls (a process where qkv never calls OpenBLAS keeps its
// own setting, e.g. PyTorch's). qkv's product splits C into equal blocks of rows times chunks
// of columns; OpenBLAS's calls take up to 8 panels of rows (or columns, when C is wider than
// tall; 64 to 1024 each), each one single-threaded call. A weight gradient's shape (K >= 2048
// and at least twice M and N) is split instead into the two halves of K, each one single-threaded
// product, summed in a fixed order. Every split depends on the shape, not on the thread count, so
// neither does the result; a product called inside a pool task (nested) runs on that worker.
#pragma once

#include <cstdint>
#include <string>

#include "qkv/core/bf16.h"
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
  // (N) or null: added to every row, C = alpha op(A) op(B) + beta C + bias (nn.Linear's bias). qkv's
  // own product adds it as it writes C's tiles; the other paths add it to C first.
  const float* bias = nullptr;
  // The precision the product multiplies in. kBF16 (bf16 mode, qkv/core/bf16.h): op(A) and op(B)
  // are rounded to bf16 (nearest even) as they are packed, or read as bf16 from A16 / B16, and
  // every product is accumulated in float32: AVX512_BF16's dot product where the CPU has it, else
  // the float32 micro-kernel on the rounded values. Always qkv's own product, whatever the backend.
  Dtype precision = Dtype::kF32;
  // kBF16 only: the operand as bf16 bits, in place of A (or B) and with the same layout and
  // leading dimension (e.g. weights kept in bf16). Null: A (B) is read and rounded.
  const uint16_t* A16 = nullptr;
  const uint16_t* B16 = nullptr;
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

enum class GemmBackend { kQkv, kOpenBlas };
// The product sgemm runs: $QKV_GEMM ("qkv" or "openblas") when set, read at the first call (any
// other value is a qkv::Error naming it), else kQkv.
GemmBackend gemm_backend();
// From the next product on, process-wide. kOpenBlas in a build without OpenBLAS: qkv::Error.
void set_gemm_backend(GemmBackend backend);
// "qkv" or "openblas" -> the backend; anything else: qkv::Error naming the value and the choices.
GemmBackend parse_gemm_backend(const std::string& name);
const char* gemm_backend_name(GemmBackend backend);
// What runs the products now, e.g. "qkv packed GEMM, AVX3, 512-bit, 14x32 tiles, KC 192, MC 672"
// or "OpenBLAS 0.3.21, Haswell kernels".
std::string gemm_description();
// What runs the bf16-precision products now (always qkv's own), e.g. "qkv packed GEMM, AVX3,
// 512-bit, 8x48 tiles, bf16 pairs by the AVX512_BF16 dot product" or "..., bf16 widened to float32".
std::string gemm_bf16_description();
// Whether they run the AVX512_BF16 dot product (the CPU has it, the dispatched target is AVX-512,
// and it is not forced off).
bool gemm_bf16_dot();
// The vector width the products compute with now (512, 256, 128; 0 when unknown).
int gemm_vector_bits();

// Which BLAS is built in, e.g. "OpenBLAS 0.3.21, Haswell kernels", or "none (reference
// loops)" in a build without OpenBLAS.
std::string blas_description();
// The kernel family OpenBLAS chose for this CPU (or the one OPENBLAS_CORETYPE forces), e.g.
// "Haswell" or "SkylakeX"; empty without OpenBLAS.
std::string blas_core();
// The width of the vectors that kernel family computes with: 512 (SkylakeX, Cooperlake,
// SapphireRapids), 256 (Haswell, Zen, Sandybridge, the Bulldozer family), 128 (older x86), or 0
// when unknown (another CPU family, or no OpenBLAS).
int blas_vector_bits();

// Throws qkv::Error on negative sizes or leading dimensions too small for the shapes, and on a
// bf16 operand (A16, B16) given with precision kF32.
void sgemm(const GemmArgs& g, ThreadPool* pool = nullptr);  // pool: nullptr = default_pool()
// The naive reference: three loops, double accumulation (of the bf16-rounded operands with
// kBF16). For tests.
void sgemm_reference(const GemmArgs& g);

// out (N) = sum over the M rows of X (M, N) (ldx): a bias gradient. Accumulated in double per
// column, rows in order, then rounded once: the exact sum's float (to half an ulp) unless the column
// cancels by ~2^29, where a float accumulator over thousands of rows drifts by many ulps (and
// PyTorch's cascade of partial sums by a few; tests/pytorch/test_accuracy_targets.py). The same
// whatever the thread count.
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
