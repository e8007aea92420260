// src/core/quant_gemm.h - the quantized product for a prompt's many rows of x (core internal; the
// public entry is quant_matvec, include/qkv/core/quant_matvec.h, which calls it from M rows on).
//
// Q8_0 and Q4_0 weights (and Q4_K and Q6_K: below), repacked per call into panels of 16 rows (as a GEMM packs B) so that one
// integer instruction multiplies 16 rows of W at once:
//   panel block b:  u8 q[8 steps][16 rows][4 values]   (512 bytes: values 4 s .. 4 s + 3 of row j)
//                   float d[16]                          (the rows' scales)
// and each step is a dot product of 4 values per lane against 4 values of x broadcast to every
// lane. The quants are stored unsigned (Q4_0: the nibbles 0..15; Q8_0 on VNNI: q + 128) and the
// offset taken back from the block's integer sum as offset x sum_i qx_i, or signed (Q8_0 without
// VNNI: vpsignb moves w's sign onto x, as the row kernel does), so every block's sum is exact.
//
// One order of float operations, shared with quant_matvec's row kernel so that a row of y has the
// same bits whatever M is (a cached decoding step equals the full forward's last row):
//   y = 0;  for b in order:  y = fma(float(isum_b), dw_b * dx_b, y)
#pragma once

#include <cstdint>

#include "qkv/core/quant_matvec.h"
#include "qkv/core/thread_pool.h"

namespace qkv::quant_detail {

constexpr uint32_t kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14;  // ggml's type numbers
constexpr int64_t kPanelRows = 16;
// From this many rows of x on, quant_matvec packs W into panels (below it, packing W once costs
// more than the few rows gain).
constexpr int64_t kGemmMinRows = 8;

// x quantized for the 32-value block types: M rows of nb blocks, row m at q + m nb, and each
// block's sum of quants (sums[m nb + b] = sum_i q[m nb + b].q[i]).
struct Activations32 {
  const BlockQ8* q;
  const int32_t* sums;
  int64_t nb;
};

// True if the SIMD target in use (the CPU's best, or the forced one) has the packed kernel; if not,
// quant_matvec's row kernel does every M.
bool quant_gemm_available();

// y (M, N) = x W^T, W (N, K = 32 nb) of Q8_0 (id 8) or Q4_0 (id 2), row n at W + n row_bytes: x's
// blocks repacked once for the kernel (groups of rows, each step's 4 values of every row of the
// group side by side), then panels of W's rows split over the pool.
void quant_gemm_32(uint32_t id, const uint8_t* W, int64_t row_bytes, const Activations32& x, int64_t M, int64_t N,
                   float* y, ThreadPool& pool);

// The same on W stored in panels (qkv/core/quant_panels.h), its whole panels only: y's columns
// [0, 16 floor(N / 16)) (the rows after them, in the rows' layout, are the caller's), for any M
// from 1: below kGemmMinRows rows of x W is read as it is stored, one stream per thread, no
// packing (a decoding step's product); from there on each panel is unpacked once per call to the
// packed layout above. The float order above (the bits of quant_gemm_32 and of the row kernel on
// the same rows). Where quant_gemm_available().
void quant_gemm_panels(uint32_t id, const uint8_t* W, int64_t row_bytes, const Activations32& x, int64_t M,
                       int64_t N, float* y, ThreadPool& pool);

// The same for Q4_K (id 12) and Q6_K (id 14) weights against x's BlockQ8K rows (nb super-blocks
// each), where quant_gemm_k_available() (as quant_gemm_available: AVX2 and up). Panels of 16 rows of W
// unpacked per call (each super-block's quants as bytes, its scales as int32 lanes), each unit of
// a super-block (Q4_K's sub-block of 32, Q6_K's group of 16) one vpdpbusd chain then its scale.
bool quant_gemm_k_available();
void quant_gemm_k(uint32_t id, const uint8_t* W, int64_t row_bytes, const BlockQ8K* x, int64_t nb, int64_t M, int64_t N,
                  float* y, ThreadPool& pool);

// The same for Q4_K (id 12) and Q6_K (id 14) stored in panels (qkv/core/quant_panels.h), their
// whole panels only, for any M: below kGemmMinRows a stored-panel kernel per row of x (one stream
// of W per thread); from there on each panel back in the rows' layout, packed and multiplied as
// quant_gemm_k does. The bits of quant_gemm_k and of the row kernel on the same rows. Where
// quant_gemm_k_available().
void quant_gemm_panels_k(uint32_t id, const uint8_t* W, int64_t row_bytes, const BlockQ8K* x, int64_t nb, int64_t M,
                         int64_t N, float* y, ThreadPool& pool);

}  // namespace qkv::quant_detail
