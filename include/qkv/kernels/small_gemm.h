// qkv/kernels/small_gemm.h - C = alpha op(A) B + beta C for small products whose operands sit in
// cache: the gated delta rule's chunks (modules/delta_rule_chunked.h: 64 x 128 by 128 x 128 and
// smaller, a few hundred per head), where core/gemm.h's packed product spends as long packing its
// operands and walking its blocks as multiplying (on a Zen 3, one thread: 64 x 128 x 128 at half the
// FMA peak), and latent attention's decoding step (kernels/decode.h: a block of 64 latents' scores
// and weighted sum).
//
// Nothing is packed: B (K, N) is read in place, row-major, and each element of op(A) - A (M, K) or,
// transposed, A^T with A (K, M) - is broadcast from where it lies. C is computed in tiles of up to
// 4 rows (8 for a panel of one vector, and for every panel on AVX-512) by 3 vectors of columns (the
// sums in registers over the whole of K, each one's terms added in k's order), the tiles of a
// column panel in turn so that its K x 3 vectors of B stay in L1;
// columns past the last whole vector one at a time, in the same order. With beta == 0, C is only
// written (what was there, NaN included, does not matter), as BLAS does. Highway picks the vector
// width at run time.
#pragma once

#include <cstdint>

namespace qkv::kernels {

// op(A) (M, K): A at lda (trans_a: A (K, M), op(A) = A^T); B (K, N) at ldb; C (M, N) at ldc.
// ahead (ahead_bytes): memory the caller reads next, asked for a few lines at a time while the
// product runs (a hint: never read).
void small_gemm(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const void* ahead = nullptr,
                int64_t ahead_bytes = 0);

// The same, written as the definition reads (a sum in double per element, rounded once): what the
// kernel is tested against.
void small_gemm_reference(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// dst (cols, rows) at ldd = src^T, src (rows, cols) at lds: how a product by B^T gets its B (K, N)
// row-major. In 4 x 4 blocks in registers (the rows and columns past the last whole block one at
// a time); the copy is exact, so the reference below is the definition.
void transpose(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd);
void transpose_reference(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd);

}  // namespace qkv::kernels
