// qkv/kernels/delta_chunk.h - the elementwise and triangular steps of one chunk of the gated delta
// rule in chunks (modules/delta_rule_chunked.h), at the CPU's vector width; its matrix products are
// kernels/small_gemm.h's. Each beside the reference it is tested against.
//
// Legend: C the chunk's tokens (at most the rows' stride ld), matrices (C, C) row-major at ld.
//
//   decay_matrix      E_tr = lead_t back_r for r < t, 1 for r = t, 0 above the diagonal
//   chunk_triangles   from K K^T and Q K^T (right on and below the diagonal; anything above, NaN
//                     included, is not read), E and beta:
//                       kk = lower(K K^T), a = strict_lower(diag(beta) (K K^T o E)),
//                       qk = lower(Q K^T o E)
//                     each element one product in the reference's order: the same bits.
//   unit_lower_inverse T = (I + A)^-1 for A strictly lower: T_t = e_t - sum_{c < t} A_tc T_c, row
//                     by row, each row's vectors held as sums over c (two chains, even and odd c,
//                     added at the end; fused multiply-adds): within float32's rounding of the
//                     double-precision reference. One element at a time it was 12% of a chunk's
//                     forward task on a Zen 5; this takes 2.5%.
//
// Columns [C, ld) of the outputs are left as they were.
#pragma once

#include <cstdint>

namespace qkv::kernels {

// E (C, C) at ld from lead (C) and back (C).
void decay_matrix(int64_t C, const float* lead, const float* back, float* E, int64_t ld);
void decay_matrix_reference(int64_t C, const float* lead, const float* back, float* E, int64_t ld);

// kk and qk (C, C) at ld in place, a (C, C) at ld written; E (C, C) at ld; beta_t at beta[t * beta_stride].
void chunk_triangles(int64_t C, const float* beta, int64_t beta_stride, const float* E, float* kk, float* a, float* qk,
                     int64_t ld);
void chunk_triangles_reference(int64_t C, const float* beta, int64_t beta_stride, const float* E, float* kk, float* a,
                               float* qk, int64_t ld);

// T (C, C) at ld = (I + A)^-1, A (C, C) at ld (its diagonal and what is above it are not read).
void unit_lower_inverse(int64_t C, const float* A, float* T, int64_t ld);
// The same, each row's sums in double, rounded once.
void unit_lower_inverse_reference(int64_t C, const float* A, float* T, int64_t ld);

}  // namespace qkv::kernels
