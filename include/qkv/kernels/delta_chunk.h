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

// The backward's per-row gradients of one chunk (modules/delta_rule_chunked.cc), between its
// products: plain loops compiled once per SIMD target (Highway's targets, run-time dispatch), so the
// compiler vectorizes them at the CPU's width where the module's baseline code had SSE2. No sum is
// reassociated and nothing is contracted: every target gives the same bits. Rows t < C:
//   dq_t *= gamma_t; dk_t = -beta_t gamma_t m0_t + tail_t dkt_t; dv_t = beta_t dr_t;
//   G_t = -beta_t gamma_t dr_t, G_{C+t} = gamma_t dy_t; dgamma_t = q_t.dq_t - beta_t k_t.m0_t;
//   dtail_t = k_t.dkt_t; dbeta_t = v_t.dr_t - gamma_t k_t.m0_t + dA_t.(kk_t o E_t);
//   sym_t = beta_t dA_t o E_t, dQK_t = dP_t o E_t, F_t = dA_t o a_t + dP_t o p_t (into dA, its
//   diagonal 0), dg_t = sum F_t; then dg_c -= sum_t F_tc, and sym made symmetric, its diagonal 0.
// dA holds -dA on entry (below the diagonal; what is on and above it is not read). The dots are
// lane_dot16's.
struct DeltaChunkRows {
  int64_t C, Dk, Dv, ld;                    // (C, C) matrices at ld
  const float* beta;                        // beta_t at beta[t * beta_stride]
  int64_t beta_stride;
  const float *gamma, *tail;                // (C)
  const float *k, *q, *m0, *dkt;            // (C, Dk) contiguous
  float *dq, *dk;                           // (C, Dk) contiguous
  const float *v, *dr, *dy;                 // v at ldv, dr and dy (C, Dv) contiguous
  int64_t ldv;
  float* dv;                                // at lddv
  int64_t lddv;
  float* G;                                 // (2C, Dv) at ldg
  int64_t ldg;
  float* dA;                                // (C, C) at ld: -dA in, F out
  const float *dP, *E, *kk, *a, *p;         // (C, C) at ld
  float *sym, *dQK;                         // (C, C) at ld
  double *dgamma, *dtail, *dg;              // (C)
  float* dbeta;                             // (C)
};
void delta_chunk_rows(const DeltaChunkRows& r);

// sum a_i b_i over n floats in 16 running float sums (lane l takes i = l mod 16, in i's order), the
// elements past the last 16 in double, then the 16 sums added in double in lane order: the same
// bits on every target.
double lane_dot16(const float* a, const float* b, int64_t n);

}  // namespace qkv::kernels
