// Small products in cache, nothing packed. See include/qkv/kernels/small_gemm.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/small_gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "qkv/core/machine.h"
#include "qkv/kernels/small_gemm.h"

#ifndef QKV_KERNELS_SMALL_GEMM_ONCE
#define QKV_KERNELS_SMALL_GEMM_ONCE
namespace qkv::kernels {
namespace {

// C's columns [n0, n1) one at a time, in the kernel's order (terms added in k's order, in float).
void ScalarColumns(bool trans_a, int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; ++n) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += (trans_a ? A[k * lda + m] : A[m * lda + k]) * B[k * ldb + n];
      float* c = C + m * ldc + n;
      *c = beta == 0.0f ? alpha * sum : alpha * sum + beta * *c;
    }
}

}  // namespace
}  // namespace qkv::kernels
#endif  // QKV_KERNELS_SMALL_GEMM_ONCE

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Lines the caller reads next (`ahead`, small_gemm.h), asked for while the product runs: an equal
// share a tile, spread over the tile's k steps, into L2. Latent attention's decoding step asks for
// its next 24 KiB block of latents this way; all at once, before the product (as the other decoding
// kernels ask), the prefetches waited on the core's few fill buffers and the product waited on them
// (an Intel Xeon, family 6 model 207: 87% of the step's own samples outside the products on the
// instruction after a prefetcht0). `qkv bench --module decode --latent-dim 96 --num-heads 12
// --head-dim 64 --kv-len 32768 --threads 2`, six alternating rounds: 1.00-1.07 ms a call at once,
// 0.85-1.19 spread into L1, 0.81-0.88 spread into L2; two blocks ahead into L2 0.82-0.84.
struct Ahead {
  const char* p;
  int64_t left, per_tile;
  int64_t take() {  // this tile's lines
    const int64_t n = std::min(left, per_tile);
    left -= n;
    return n;
  }
};

// One tile: kR rows (from m0) by kV vectors of columns (from n0), summed over all of K.
template <int kR, int kV, bool kAhead>
HWY_INLINE void Tile(bool trans_a, int64_t m0, int64_t n0, int64_t K, float alpha, const float* HWY_RESTRICT A,
                     int64_t lda, const float* HWY_RESTRICT B, int64_t ldb, float beta, float* HWY_RESTRICT C,
                     int64_t ldc, Ahead& ahead) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF acc[kR][kV];
  for (int r = 0; r < kR; ++r)
    for (int v = 0; v < kV; ++v) acc[r][v] = hn::Zero(d);
  // op(A)(m0 + r, k): A[(m0 + r) lda + k], or A[k lda + m0 + r] transposed
  const int64_t row_step = trans_a ? 1 : lda, k_step = trans_a ? lda : 1;
  const float* a = A + m0 * row_step;
  const float* b = B + n0;
  // this tile's lines, `per` at a time every `every` k steps (more than one a step only where the
  // share exceeds K)
  const int64_t lines = kAhead ? ahead.take() : 0, per = K > 0 ? std::max<int64_t>(1, (lines + K - 1) / K) : 1;
  const int64_t every = lines > 0 ? std::max<int64_t>(1, K / ((lines + per - 1) / per)) : K + 1;
  const char* pf = ahead.p;
  const char* const pf_end = pf + lines * 64;
  ahead.p = pf_end;
  int64_t next = 0;
  for (int64_t k = 0; k < K; ++k) {
    if (kAhead && k == next && pf < pf_end) {
      for (int64_t l = 0; l < per && pf < pf_end; ++l, pf += 64) prefetch_line(pf, /*to_l2=*/true);
      next += every;
    }
    VF bv[kV];
    for (int v = 0; v < kV; ++v) bv[v] = hn::LoadU(d, b + v * L);
    for (int r = 0; r < kR; ++r) {
      const VF ar = hn::Set(d, a[r * row_step]);
      for (int v = 0; v < kV; ++v) acc[r][v] = hn::MulAdd(ar, bv[v], acc[r][v]);
    }
    a += k_step;
    b += ldb;
  }
  const VF va = hn::Set(d, alpha), vb = hn::Set(d, beta);
  for (int r = 0; r < kR; ++r)
    for (int v = 0; v < kV; ++v) {
      float* c = C + (m0 + r) * ldc + n0 + v * L;
      const VF out = hn::Mul(va, acc[r][v]);
      hn::StoreU(beta == 0.0f ? out : hn::MulAdd(vb, hn::LoadU(d, c), out), d, c);
    }
}

// Every row tile of one column panel of kV vectors: 4 rows at a time, then the last 1-3. A panel of
// one vector takes 8 rows first: 8 independent sums, enough to keep both FMA pipes busy through the
// FMA's latency (the latent decode step's scores, 64 keys x 16 heads x 96 on a Zen 5: 1.7 -> 1.3 us).
// On AVX-512 (32 registers) every panel takes 8 rows first: 8 x 3 sums and 3 vectors of B fill the
// registers as 4 x 3 fills AVX2's 16, where 4 rows left AVX-512 no faster than AVX2 on an Intel
// Xeon (Gated DeltaNet's chunked form at T 4,096: 75.0 against 79.8 ms).
constexpr bool kEightRows = HWY_ARCH_X86 && HWY_MAX_BYTES == 64;
template <int kV, bool kAhead>
HWY_INLINE void Panel(bool trans_a, int64_t M, int64_t n0, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Ahead& ahead) {
  int64_t m = 0;
  if constexpr (kV == 1 || kEightRows)
    for (; m + 8 <= M; m += 8) Tile<8, kV, kAhead>(trans_a, m, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead);
  for (; m + 4 <= M; m += 4) Tile<4, kV, kAhead>(trans_a, m, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead);
  switch (M - m) {
    case 3: Tile<3, kV, kAhead>(trans_a, m, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead); break;
    case 2: Tile<2, kV, kAhead>(trans_a, m, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead); break;
    case 1: Tile<1, kV, kAhead>(trans_a, m, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead); break;
    default: break;
  }
}

// How many tiles Panel<kV> runs over M rows.
constexpr int64_t RowTiles(int64_t M, int64_t kV) {
  return (kV == 1 || kEightRows ? M / 8 + M % 8 / 4 : M / 4) + (M % 4 != 0);
}

// Vectors of columns the next panel takes, `left` being left: 3; 4 left are two of 2 (a panel of
// one vector has the fewest sums per row).
constexpr int64_t PanelVectors(int64_t left) { return left >= 3 && left != 4 ? 3 : left >= 2 ? 2 : 1; }

void SmallGemm(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc, const void* ahead_p, int64_t ahead_bytes) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t vectors = N / L, n0 = 0;
  // the tiles this product runs, for the lines' shares
  int64_t tiles = 0;
  for (int64_t v = vectors; v > 0; v -= PanelVectors(v)) tiles += RowTiles(M, PanelVectors(v));
  const int64_t lines = (ahead_bytes + 63) / 64;
  Ahead ahead{static_cast<const char*>(ahead_p), lines, tiles > 0 ? (lines + tiles - 1) / tiles : 0};
  // panels of PanelVectors each, with the hints compiled in only where there are any
  while (vectors > 0) {
    const int64_t take = PanelVectors(vectors);
    auto panel = [&]<bool kAhead>() {
      if (take == 3) Panel<3, kAhead>(trans_a, M, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead);
      else if (take == 2) Panel<2, kAhead>(trans_a, M, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead);
      else Panel<1, kAhead>(trans_a, M, n0, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead);
    };
    if (lines > 0) panel.template operator()<true>();
    else panel.template operator()<false>();
    vectors -= take;
    n0 += take * L;
  }
  ScalarColumns(trans_a, M, n0, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// 4 x 4 blocks through 128-bit vectors (every target has them): rows a, b, c, d interleaved in
// pairs, then the pairs' halves joined, so each output row is one column of the block.
void Transpose(int64_t rows, int64_t cols, const float* HWY_RESTRICT src, int64_t lds, float* HWY_RESTRICT dst,
               int64_t ldd) {
#if HWY_TARGET == HWY_SCALAR
  const int64_t R = 0, Cw = 0;
#else
  const hn::FixedTag<float, 4> d;
  const int64_t R = rows / 4 * 4, Cw = cols / 4 * 4;
  for (int64_t r = 0; r < R; r += 4)
    for (int64_t c = 0; c < Cw; c += 4) {
      const float* s = src + r * lds + c;
      const auto a = hn::LoadU(d, s), b = hn::LoadU(d, s + lds), cc = hn::LoadU(d, s + 2 * lds),
                 e = hn::LoadU(d, s + 3 * lds);
      const auto ab_lo = hn::InterleaveLower(d, a, b), ce_lo = hn::InterleaveLower(d, cc, e);  // a0 b0 a1 b1
      const auto ab_hi = hn::InterleaveUpper(d, a, b), ce_hi = hn::InterleaveUpper(d, cc, e);  // a2 b2 a3 b3
      float* o = dst + c * ldd + r;
      hn::StoreU(hn::ConcatLowerLower(d, ce_lo, ab_lo), d, o);  // a0 b0 c0 e0
      hn::StoreU(hn::ConcatUpperUpper(d, ce_lo, ab_lo), d, o + ldd);
      hn::StoreU(hn::ConcatLowerLower(d, ce_hi, ab_hi), d, o + 2 * ldd);
      hn::StoreU(hn::ConcatUpperUpper(d, ce_hi, ab_hi), d, o + 3 * ldd);
    }
#endif
  // the rows past the last whole block, then the columns past it
  for (int64_t r = R; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = Cw; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(SmallGemm);

void small_gemm(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const void* ahead,
                int64_t ahead_bytes) {
  if (M <= 0 || N <= 0) return;
  HWY_DYNAMIC_DISPATCH(SmallGemm)(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ahead, ahead_bytes);
}

HWY_EXPORT(Transpose);

void transpose(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd) {
  if (rows <= 0 || cols <= 0) return;
  HWY_DYNAMIC_DISPATCH(Transpose)(rows, cols, src, lds, dst, ldd);
}

void transpose_reference(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

void small_gemm_reference(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k)
        sum += static_cast<double>(trans_a ? A[k * lda + m] : A[m * lda + k]) * static_cast<double>(B[k * ldb + n]);
      float* c = C + m * ldc + n;
      const double out = static_cast<double>(alpha) * sum;
      *c = static_cast<float>(beta == 0.0f ? out : out + static_cast<double>(beta) * static_cast<double>(*c));
    }
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
