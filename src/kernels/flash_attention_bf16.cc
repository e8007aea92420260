// The fused attention on bf16 queries, keys and values (qkv/kernels/attention_bf16.h), compiled
// once per SIMD target by Highway and dispatched at run time. The forward is the fp32 kernel's
// (attention_forward-inl.h: the same tiles, online softmax, masks, dropout, output) with other
// operands:
//   - BF16DotOperands, on the AVX-512 target when the CPU has AVX512_BF16 and bf16_dot_allowed():
//     both products are vdpbf16ps (each float32 lane += a[2i] b[2i] + a[2i+1] b[2i+1]) on the
//     query-major tiles (one query per lane):
//       St = k Qt:      Qt packed as pairs of head-dim rows interleaved per lane (word (p, i) =
//                       q_i[2p], q_i[2p+1]), k[j][2p..2p+1] broadcast as one 32-bit word;
//       Ot += v^T Pt:   Pt rounded to bf16 as pairs of key rows interleaved per lane (word (r, i)
//                       = P[2r][i], P[2r+1][i]), v packed transposed as pairs (word (d, r) =
//                       v[2r][d], v[2r+1][d]) and broadcast.
//     An odd D or key count is padded with zeros. ScoreUnits' factor (1 on the book's path,
//     else the scale and log2(e)) multiplies St as the tile is stored.
//   - WidenedOperands<uint16_t> everywhere else (AVX2, the portable targets, or forced off):
//     bf16 widened to float32 (exact) as it is packed, the fp32 tiles, P rounded to bf16 before
//     Ot += v^T Pt - the same math up to the order of float32 additions.
// The backward is the fp32 kernel's loop (attention_backward-inl.h) with BF16DotBackward's five
// pair-packed products (below) or, without AVX512_BF16, WidenedBackward<uint16_t>.
//
// Nothing compiled for AVX512_BF16 is reachable without the run-time check: its functions are in
// this file's AVX-512 target only, between QKV_AVX512BF16_BEGIN / END (qkv/core/avx512bf16_region.h), in an
// anonymous namespace (internal linkage, so the linker cannot pick them for other code), and
// only ForwardBF16Impl and BackwardBF16Impl call them, after bf16_dot_allowed().
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/flash_attention_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/attention_problem.h"
#include "qkv/core/avx512bf16_region.h"
#include "qkv/core/bf16.h"
#include "kernels/attention_tiles-inl.h"
#include "kernels/attention_blocks-inl.h"
#include "kernels/attention_forward-inl.h"
#include "kernels/attention_backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace {

#if HWY_TARGET == HWY_AVX3
// Two bf16 (lo: element 2i, hi: element 2i + 1) as the 32-bit word a lane's pair is.
inline uint32_t BF16Pair(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16; }

QKV_AVX512BF16_BEGIN

inline __m512 Dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

inline __m512i Broadcast32(const uint32_t* p) { return _mm512_set1_epi32(static_cast<int>(*p)); }

// MR rows of C (NV vectors a row, row stride ldc) op= sum over `pairs` pairs r: A's pair word
// (m, r) (broadcast: a[m * lda + r * ldr]) times B's row of pair words r (b + r * ldb, one word per
// lane). kStore: C = scale * sum; else C += sum.
template <int MR, int NV, bool kStore>
inline __attribute__((always_inline)) void DotTile(const uint32_t* HWY_RESTRICT a, size_t lda, size_t ldr,
                                                   const uint32_t* HWY_RESTRICT b, size_t ldb, size_t pairs,
                                                   float* HWY_RESTRICT c, size_t ldc, float scale) {
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = kStore ? _mm512_setzero_ps() : _mm512_loadu_ps(c + m * ldc + v * kLanes);
  for (size_t r = 0; r < pairs; ++r) {
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + r * ldb + v * kLanes);
    for (int m = 0; m < MR; ++m) {
      const __m512i am = Broadcast32(a + m * lda + r * ldr);
      for (int v = 0; v < NV; ++v) acc[m][v] = Dot(acc[m][v], am, bv[v]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v)
      _mm512_storeu_ps(c + m * ldc + v * kLanes, kStore ? _mm512_mul_ps(acc[m][v], s) : acc[m][v]);
}

// St (rows, Br) = scale * k Qt: k (rows rounded up to 8, `pairs` pair words a row, row stride
// ldk words; rows beyond `rows` are the cache's zero padding and land in St's spare rows),
// qt (pairs, Br) pair words.
__attribute__((noinline)) void ScoresDot(const uint32_t* kb, size_t ldk, const uint32_t* qt, size_t pairs, size_t rows,
                                         float scale, float* st) {
  for (size_t j = 0; j < rows; j += 8)
    DotTile<8, kQueryVectors, true>(kb + j * ldk, ldk, 1, qt, kBr, pairs, st + j * kBr, kBr, scale);
}

// Ot (Dv, Br) += v^T Pt: vw (pairs, Dv) pair words of v (word (r, d) = v[2r][d], v[2r + 1][d]),
// pt (pairs, Br) pair words of P.
__attribute__((noinline)) void ValuesDot(const uint32_t* vw, const uint32_t* pt, size_t pairs, size_t Dv, float* ot) {
  size_t d = 0;
  for (; d + 8 <= Dv; d += 8) DotTile<8, kQueryVectors, false>(vw + d, 1, Dv, pt, kBr, pairs, ot + d * kBr, kBr, 1.0f);
  for (; d < Dv; ++d) DotTile<1, kQueryVectors, false>(vw + d, 1, Dv, pt, kBr, pairs, ot + d * kBr, kBr, 1.0f);
}

// pt (pairs, Br) = scale * P (rows, Br, float32) rounded to bf16 (nearest even) as pairs of rows
// interleaved per lane: word (r, i) = (P[2r][i], P[2r + 1][i]), P[rows][i] = 0 when rows is odd.
__attribute__((noinline)) void PackRowPairs(const float* st, size_t rows, float scale, uint32_t* pt) {
  // [even 0..15, odd 0..15] -> [even 0, odd 0, even 1, odd 1, ...]
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  const __m512 f = _mm512_set1_ps(scale);
  for (size_t r = 0; 2 * r < rows; ++r)
    for (int v = 0; v < kQueryVectors; ++v) {
      const __m512 even = _mm512_mul_ps(_mm512_loadu_ps(st + 2 * r * kBr + v * kLanes), f);
      const __m512 odd = 2 * r + 1 < rows ? _mm512_mul_ps(_mm512_loadu_ps(st + (2 * r + 1) * kBr + v * kLanes), f)
                                          : _mm512_setzero_ps();
      const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
      _mm512_storeu_si512(pt + r * kBr + v * kLanes, _mm512_permutexvar_epi16(idx, both));
    }
}

// words (rows, Br / 2) = scale * x (rows, Br, float32) rounded to bf16, row by row: a row's pair
// words are two consecutive queries.
__attribute__((noinline)) void RowsToBF16(const float* x, size_t rows, float scale, uint32_t* words) {
  const __m512 f = _mm512_set1_ps(scale);
  for (size_t j = 0; j < rows; ++j)
    for (int v = 0; v < kQueryVectors; ++v) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(x + j * kBr + v * kLanes), f));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + j * (kBr / 2) + v * (kLanes / 2)),
                          reinterpret_cast<const __m256i&>(h));
    }
}

// C (M, nvec vectors, row stride ldc) += A B over `pairs` pairs: A's pair word (m, r) at
// a[m * lda + r * ldr], B's row r of pair words at b + r * ldb. Tiles of 6 rows x 4 vectors
// (24 accumulators; 7% faster on the whole T = 4096 backward than 4 x 4), then single rows and
// single vectors.
__attribute__((noinline)) void GradDot(size_t M, size_t nvec, const uint32_t* a, size_t lda, size_t ldr,
                                       const uint32_t* b, size_t ldb, size_t pairs, float* c, size_t ldc) {
  constexpr int kRows = 6, kVecs = 4;
  size_t v0 = 0;
  const auto rows_of = [&](auto nv, size_t v) {
    constexpr int NV = decltype(nv)::value;
    size_t m = 0;
    for (; m + kRows <= M; m += kRows)
      DotTile<kRows, NV, false>(a + m * lda, lda, ldr, b + v * kLanes, ldb, pairs, c + m * ldc + v * kLanes, ldc, 1.0f);
    for (; m < M; ++m)
      DotTile<1, NV, false>(a + m * lda, lda, ldr, b + v * kLanes, ldb, pairs, c + m * ldc + v * kLanes, ldc, 1.0f);
  };
  for (; v0 + kVecs <= nvec; v0 += kVecs) rows_of(std::integral_constant<int, kVecs>{}, v0);
  for (; v0 < nvec; ++v0) rows_of(std::integral_constant<int, 1>{}, v0);
}

QKV_AVX512BF16_END

// Pair words that n values take (an odd n padded with a zero).
inline size_t Pairs(size_t n) { return (n + 1) / 2; }

// qt (Pairs(dim), Br) pair words of rows [i0, i0 + rows) of head (b, h) of x, transposed: word
// (r, i) = (x_i[2r], x_i[2r + 1]) as bf16 (an odd dim padded with 0), lanes beyond rows 0.
void PackTransposedPairs(Heads<const uint16_t> x, int64_t b, int64_t h, int64_t i0, size_t rows, uint32_t* qt) {
  const size_t D = static_cast<size_t>(x.dim), P = Pairs(D);
  if (rows == kBr && x.stride_d == 1 && D % 32 == 0) {
    // A row's pair words are its bf16 values read as 32-bit words: 16 x 16 blocks of words
    // transposed in registers (as float bits; nothing is computed on them).
    const DF d;
    for (size_t i = 0; i < kBr; i += 16)
      for (size_t r = 0; r < P; r += 16) {
        VF w[16];
        for (size_t k = 0; k < 16; ++k)
          w[k] = hn::LoadU(d, reinterpret_cast<const float*>(x.row(b, h, i0 + static_cast<int64_t>(i + k))) + r);
        Transpose16(w);
        for (size_t k = 0; k < 16; ++k) hn::StoreU(w[k], d, reinterpret_cast<float*>(qt) + (r + k) * kBr + i);
      }
    return;
  }
  for (size_t i = 0; i < kBr; ++i) {
    if (i >= rows) {
      for (size_t r = 0; r < P; ++r) qt[r * kBr + i] = 0;
      continue;
    }
    const uint16_t* row = x.row(b, h, i0 + static_cast<int64_t>(i));
    const auto at = [&](size_t c) { return c < D ? row[static_cast<int64_t>(c) * x.stride_d] : uint16_t{0}; };
    for (size_t r = 0; r < P; ++r) qt[r * kBr + i] = BF16Pair(at(2 * r), at(2 * r + 1));
  }
}

// out (n, Pairs(dim)) pair words of rows [j0, j0 + rows) of head (b, h) of x, along the row: word
// (j, r) = (x_j[2r], x_j[2r + 1]) as bf16; rows [rows, n) zero.
void PackRowWords(Heads<const uint16_t> x, int64_t b, int64_t h, int64_t j0, size_t rows, size_t n, uint32_t* out) {
  const size_t D = static_cast<size_t>(x.dim), P = Pairs(D);
  for (size_t j = 0; j < n; ++j) {
    uint32_t* w = out + j * P;
    if (j >= rows) {
      std::fill(w, w + P, 0u);
      continue;
    }
    const uint16_t* row = x.row(b, h, j0 + static_cast<int64_t>(j));
    if (x.stride_d == 1 && D % 2 == 0) {  // the values read as 32-bit words
      std::memcpy(w, row, D * sizeof(uint16_t));
      continue;
    }
    const auto at = [&](size_t c) { return c < D ? row[static_cast<int64_t>(c) * x.stride_d] : uint16_t{0}; };
    for (size_t r = 0; r < P; ++r) w[r] = BF16Pair(at(2 * r), at(2 * r + 1));
  }
}

// out ((n + 1) / 2, ld) pair words of rows [j0, j0 + rows) of head (b, h) of x, across rows: word
// (r, d) = (x_{2r}[d], x_{2r + 1}[d]) as bf16; rows from `rows` on and columns [dim, ld) zero.
void PackColumnPairs(Heads<const uint16_t> x, int64_t b, int64_t h, int64_t j0, size_t rows, size_t n, size_t ld,
                     uint32_t* out) {
  const size_t D = static_cast<size_t>(x.dim);
  for (size_t r = 0; 2 * r < n; ++r) {
    uint32_t* w = out + r * ld;
    std::fill(w, w + ld, 0u);
    if (2 * r >= rows) continue;
    const uint16_t* lo = x.row(b, h, j0 + static_cast<int64_t>(2 * r));
    const uint16_t* hi = 2 * r + 1 < rows ? x.row(b, h, j0 + static_cast<int64_t>(2 * r + 1)) : nullptr;
    const int64_t st = x.stride_d;
    if (st == 1 && hi) {  // the common case, in a loop the compiler vectorises
      for (size_t d = 0; d < D; ++d) w[d] = BF16Pair(lo[d], hi[d]);
      continue;
    }
    for (size_t d = 0; d < D; ++d)
      w[d] = BF16Pair(lo[static_cast<int64_t>(d) * st], hi ? hi[static_cast<int64_t>(d) * st] : uint16_t{0});
  }
}

// The operands as bf16 pairs for vdpbf16ps (the file's header). The head cache holds keys
// (Sk, D2) bf16, Sk = S rounded up to Bc and D2 = D rounded up to 2, zero-padded, then values as
// pair words (Sk / 2, Dv) (word (r, d) = v[2r][d], v[2r + 1][d]), then one (Bc / 2, Br) block of
// P's pair words.
struct BF16DotOperands {
  Heads<const uint16_t> q, k, v;

  static size_t padded_keys(const AttentionProblem& p) { return round_up(static_cast<size_t>(p.S), kBc); }
  size_t query_floats(size_t D) const { return Pairs(D) * kBr; }
  size_t cache_floats(const AttentionProblem& p) const {
    const size_t Sk = padded_keys(p);
    return Sk * Pairs(static_cast<size_t>(p.D)) + Sk / 2 * static_cast<size_t>(p.Dv) + kBc / 2 * kBr;
  }
  const uint32_t* key_words(const float* c) const { return reinterpret_cast<const uint32_t*>(c); }
  const uint32_t* value_words(const AttentionProblem& p, const float* c) const {
    return key_words(c) + padded_keys(p) * Pairs(static_cast<size_t>(p.D));
  }
  uint32_t* probability_words(const AttentionProblem& p, const float* c) const {
    return const_cast<uint32_t*>(value_words(p, c) + padded_keys(p) / 2 * static_cast<size_t>(p.Dv));
  }

  void PackQueries(const AttentionProblem& p, int64_t b, int64_t h, const QueryBlock& qb) const {
    PackTransposedPairs(q, b, h, qb.i0, qb.rows, reinterpret_cast<uint32_t*>(qb.qt));
  }

  // Whole key blocks of key/value head (b, kvh) up to the one holding key j_end - 1, padded
  // with zeros beyond S.
  void CacheKeys(const AttentionProblem& p, int64_t b, int64_t kvh, int64_t j_end, HeadCache& cache, float* c) const {
    UseHeadCache(p, b, kvh, cache);
    const auto end = static_cast<int64_t>(std::min(round_up(static_cast<size_t>(j_end), kBc), padded_keys(p)));
    if (cache.rows >= end) return;
    const size_t D = static_cast<size_t>(p.D), Dv = static_cast<size_t>(p.Dv);
    // rows [cache.rows, end), the ones from S on zero (cache.rows is a multiple of Bc: even)
    const auto n = static_cast<size_t>(end - cache.rows);
    const auto rows = static_cast<size_t>(std::max<int64_t>(0, std::min(end, p.S) - cache.rows));
    PackRowWords(k, b, kvh, cache.rows, rows, n, reinterpret_cast<uint32_t*>(c) + static_cast<size_t>(cache.rows) * Pairs(D));
    PackColumnPairs(v, b, kvh, cache.rows, rows, n, Dv,
                    const_cast<uint32_t*>(value_words(p, c)) + static_cast<size_t>(cache.rows / 2) * Dv);
    cache.rows = end;
  }

  template <int kD>
  void Scores(const AttentionProblem& p, int64_t, int64_t, const QueryBlock& qb, const float* c, int64_t j0,
              size_t cols, float* st) const {
    const size_t P = Pairs(static_cast<size_t>(p.D));
    ScoresDot(key_words(c) + static_cast<size_t>(j0) * P, P, reinterpret_cast<const uint32_t*>(qb.qt), P, cols,
              ScoreUnitsOf(p).score, st);
  }

  template <int kD>
  void Values(const AttentionProblem& p, int64_t, int64_t, const QueryBlock& qb, const float* c, int64_t j0,
              size_t cols, float* st) const {
    uint32_t* pt = probability_words(p, c);
    PackRowPairs(st, cols, 1.0f, pt);
    const size_t Dv = static_cast<size_t>(p.Dv);
    ValuesDot(value_words(p, c) + static_cast<size_t>(j0) / 2 * Dv, pt, Pairs(cols), Dv, qb.ot);
  }
};

// The backward's operands as bf16 pairs for vdpbf16ps: the five products of
// attention_backward-inl.h with d_o, P z and dS * scale rounded to bf16 (q, k, v are bf16 already),
// accumulated in float32. Each product's contraction runs over pairs:
//   St = k_j Qt_i      over the head dim:  k rows' pair words (Bc, D/2), q pairs transposed (D/2, Br)
//   dPt = v_j dOt_i    over the head dim:  v rows' pair words (Bc, Dv/2), d_o pairs transposed (Dv/2, Br)
//   dv_j += Pz d_o_i   over queries:       Pz rows (Bc, Br/2), d_o pairs across rows (Br/2, Dvp)
//   dk_j += dS q_i     over queries:       dS rows (Bc, Br/2), q pairs across rows (Br/2, Dp)
//   dq_i += dS^T k_j   over keys:          dS pairs across rows (Bc/2, Br), k pairs across rows (Bc/2, Dp)
// Every layout takes at most the room of the fp32 one it replaces in BackwardScratch (kb holds k's
// two layouts); the three per-pair ones are `words`. The scale is folded into dS, so q is packed
// as it is and dq's accumulator is written unscaled.
struct BF16DotBackward {
  Heads<const uint16_t> q, k, v;

  // words: three (Bc, Br) blocks of pair words per pair, or a query block's d_o in bf16
  size_t pair_floats(const AttentionProblem& p) const {
    return std::max(3 * kBcB * kBr / 2, (kBr * static_cast<size_t>(p.Dv) + 1) / 2);
  }
  float dq_scale(const AttentionProblem&) const { return 1.0f; }

  // The block's d_o rows are rounded to bf16 once, into `words` (free until the pairs' products
  // use it), and packed from there like q.
  void PackQueries(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, int64_t b, int64_t h, size_t blk,
                   size_t rows, BackwardScratch& s) const {
    const size_t D = static_cast<size_t>(p.D), Dv = static_cast<size_t>(p.Dv);
    const size_t Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes);
    const int64_t i0 = static_cast<int64_t>(blk * kBr);
    auto* g16 = reinterpret_cast<uint16_t*>(s.words);  // (rows, Dv) d_o rounded
    for (size_t i = 0; i < rows; ++i) {
      const float* g = d_o.row(b, h, i0 + static_cast<int64_t>(i));
      if (d_o.stride_d == 1) {
        floats_to_bf16(g, g16 + i * Dv, Dv);
      } else {
        for (size_t c = 0; c < Dv; ++c) g16[i * Dv + c] = float_to_bf16(g[static_cast<int64_t>(c) * d_o.stride_d]);
      }
    }
    const auto g = Heads<const uint16_t>::contiguous(g16, 1, 1, static_cast<int64_t>(rows), static_cast<int64_t>(Dv));
    PackTransposedPairs(q, b, h, i0, rows, words(s.qt) + blk * Pairs(D) * kBr);
    PackTransposedPairs(g, 0, 0, 0, rows, words(s.dot) + blk * Pairs(Dv) * kBr);
    PackColumnPairs(q, b, h, i0, rows, kBr, Dp, words(s.qs) + blk * kBr / 2 * Dp);
    PackColumnPairs(g, 0, 0, 0, rows, kBr, Dvp, words(s.dob) + blk * kBr / 2 * Dvp);
    for (size_t i = 0; i < kBr; ++i) {  // D_i = sum_d d_o (rounded, as the products take it) * o, in double
      double dsum = 0.0;                 // as the float path's (attention_backward-inl.h says why)
      if (i < rows) {
        const float* out = o.row(b, h, i0 + static_cast<int64_t>(i));
        for (size_t c = 0; c < Dv; ++c)
          dsum += static_cast<double>(bf16_to_float(g16[i * Dv + c])) * out[static_cast<int64_t>(c) * o.stride_d];
      }
      s.di[static_cast<size_t>(i0) + i] = static_cast<float>(dsum);
    }
  }

  // kb: k's rows' pair words (Bc, D/2), then k's pairs across rows (Bc/2, Dp); vb: v's rows' pair
  // words (Bc, Dv/2). Rows beyond cols are zero (ScoresDot reads whole tiles of 8 rows).
  void PackKeys(const AttentionProblem& p, int64_t b, int64_t kvh, KeyBlock& kj) const {
    const size_t D = static_cast<size_t>(p.D);
    PackRowWords(k, b, kvh, kj.j0, kj.cols, kBcB, words(kj.kb));
    PackColumnPairs(k, b, kvh, kj.j0, kj.cols, kBcB, round_up(D, kLanes), words(kj.kb) + kBcB * Pairs(D));
    PackRowWords(v, b, kvh, kj.j0, kj.cols, kBcB, words(kj.vb));
  }

  template <int kD>
  void Scores(const AttentionProblem& p, const BackwardScratch& s, size_t blk, const KeyBlock& kj, float* st) const {
    const size_t P = Pairs(static_cast<size_t>(p.D));
    ScoresDot(words(kj.kb), P, words(s.qt) + blk * P * kBr, P, kj.cols, ScoreUnitsOf(p).score, st);
  }
  template <int kD>
  void ScoreGradient(const AttentionProblem& p, const BackwardScratch& s, size_t blk, const KeyBlock& kj,
                     float* dpt) const {
    const size_t P = Pairs(static_cast<size_t>(p.Dv));
    ScoresDot(words(kj.vb), P, words(s.dot) + blk * P * kBr, P, kj.cols, 1.0f, dpt);
  }
  void Gradients(const AttentionProblem& p, BackwardScratch& s, size_t blk, size_t rows, const KeyBlock& kj) const {
    const size_t D = static_cast<size_t>(p.D);
    const size_t Dp = round_up(D, kLanes), Dvp = round_up(static_cast<size_t>(p.Dv), kLanes);
    const size_t cols = kj.cols, half = kBr / 2;
    uint32_t* pw = words(s.words);          // (Bc, Br/2)  P z rows
    uint32_t* sw = pw + kBcB * half;        // (Bc, Br/2)  dS scale rows
    uint32_t* spw = sw + kBcB * half;       // (Bc/2, Br)  dS scale pairs across keys
    RowsToBF16(s.pt, cols, 1.0f, pw);
    RowsToBF16(s.dpt, cols, p.scale, sw);
    PackRowPairs(s.dpt, cols, p.scale, spw);
    GradDot(cols, Dvp / kLanes, pw, half, 1, words(s.dob) + blk * half * Dvp, Dvp, Pairs(rows), kj.dv, Dvp);
    GradDot(cols, Dp / kLanes, sw, half, 1, words(s.qs) + blk * half * Dp, Dp, Pairs(rows), kj.dk, Dp);
    GradDot(rows, Dp / kLanes, spw, 1, kBr, words(kj.kb) + kBcB * Pairs(D), Dp, Pairs(cols), s.dq + blk * kBr * Dp,
            Dp);
  }

 private:
  static uint32_t* words(float* x) { return reinterpret_cast<uint32_t*>(x); }
  static const uint32_t* words(const float* x) { return reinterpret_cast<const uint32_t*>(x); }
};
#endif  // HWY_TARGET == HWY_AVX3

}  // namespace

#if HWY_TARGET >= HWY_EMU128  // the portable targets: no specialised head dim (as flash_attention.cc)
constexpr bool kSpecialiseBF16 = false;
#else
constexpr bool kSpecialiseBF16 = true;
#endif

void ForwardBF16Impl(const AttentionProblem& p, Heads<const uint16_t> q, Heads<const uint16_t> k,
                     Heads<const uint16_t> v, MutableHeads o, float* lse) {
  const bool d64 = kSpecialiseBF16 && p.D == 64 && p.Dv == 64;
#if HWY_TARGET == HWY_AVX3
  if (bf16_dot_allowed()) {
    const BF16DotOperands ops{q, k, v};
    if (d64) return Forward<kSpecialiseBF16 ? 64 : 0>(p, ops, o, lse);
    return Forward<0>(p, ops, o, lse);
  }
#endif
  const WidenedOperands<uint16_t> ops(q, k, v);
  if (d64) return Forward<kSpecialiseBF16 ? 64 : 0>(p, ops, o, lse);
  Forward<0>(p, ops, o, lse);
}

void BackwardBF16Impl(const AttentionProblem& p, Heads<const uint16_t> q, Heads<const uint16_t> k,
                      Heads<const uint16_t> v, ConstHeads o, ConstHeads d_o, const float* lse, MutableHeads dq,
                      MutableHeads dk, MutableHeads dv) {
#if HWY_TARGET == HWY_AVX3
  if (bf16_dot_allowed()) return Backward<0>(p, BF16DotBackward{q, k, v}, o, d_o, lse, dq, dk, dv);
#endif
  const WidenedBackward<uint16_t> ops{q, k, v};
  if (kSpecialiseBF16 && p.D == 64 && p.Dv == 64) return Backward<kSpecialiseBF16 ? 64 : 0>(p, ops, o, d_o, lse, dq, dk, dv);
  Backward<0>(p, ops, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(ForwardBF16Impl);
HWY_EXPORT(BackwardBF16Impl);

void flash_attention_forward_bf16(const AttentionProblem& p, Heads<const uint16_t> q, Heads<const uint16_t> k,
                                  Heads<const uint16_t> v, MutableHeads o, float* lse) {
  HWY_DYNAMIC_DISPATCH(ForwardBF16Impl)(p, q, k, v, o, lse);
}

void flash_attention_backward_bf16(const AttentionProblem& p, Heads<const uint16_t> q, Heads<const uint16_t> k,
                                   Heads<const uint16_t> v, ConstHeads o, ConstHeads d_o, const float* lse,
                                   MutableHeads dq, MutableHeads dk, MutableHeads dv) {
  HWY_DYNAMIC_DISPATCH(BackwardBF16Impl)(p, q, k, v, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
