// qkv's own single-precision matrix product (Highway, run-time dispatch): the projections at the
// CPU's vector width whatever the BLAS would choose. See qkv/core/gemm.h and gemm_packed.h.
//
//   C (M, N) = alpha op(A) op(B) + beta C, row-major.
//
// The classic packed scheme (Goto and van de Geijn's, as BLIS and OpenBLAS lay it out):
//   - op(B) is packed once per call into panels of NR columns, each (K, NR) contiguous: the
//     micro-kernel's B row at step k is NR consecutive floats (NV vectors);
//   - each task packs its rows of op(A), a block of KC columns at a time, into micro-panels of MR
//     rows, each (KC, MR) contiguous: the MR values the micro-kernel broadcasts at step k are
//     adjacent;
//   - the micro-kernel keeps an MR x NR tile of C in registers over KC steps: MR broadcasts, NV
//     vector loads and MR NV fused multiply-adds per step. A (KC, NR) panel of B is reused by
//     every MR-row panel of the task's block of A (MC rows, from half of L2) as they stream past
//     it; at KC = 768 it is 72 KB (AVX2) or 144 KB (AVX-512), so it comes from L2 more than L1 (KC
//     256 or 128, which would fit L1, measured no faster on Zen 3).
// Tiles per target: AVX-512 8 x 48 (24 accumulators of the 32 registers), AVX2 4 x 24 (12 of 16:
// 4 broadcasts and 3 loads a step, where 6 x 16 takes 6 and 2; the K loop alone on one Zen 3 thread,
// B in L1 and A from L2, ran at 79% of the FMA peak with 6 x 16 and 90% with 4 x 24, and the
// products of GPT-2's shapes 2-7% faster, paired runs in one process: broadcasts cost Zen 3 more than
// loads. qkv_bench's BM_GemmTile measures it).
//
// bf16 precision (Dtype::kBF16): on a CPU with AVX512_BF16 (AVX-512 target), the panels
// hold pairs of bf16 along K in one 32-bit word and the micro-kernel runs vdpbf16ps: each step
// takes two values of K, twice the float32 kernel's work per instruction (gemm_bf16_dot-inl.h).
// Elsewhere, or with the dot product forced off (qkv/core/bf16.h), the float32 path packs the
// operands rounded to bf16 (or widened from bf16 sources) and runs the float32 micro-kernel.
//
// Determinism: every element of C is the sum over the KC blocks in order, each block summed over
// k in order in one accumulator lane; the task grid only decides who computes a tile, so the result
// does not depend on the thread count.
#include "core/gemm_packed.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "qkv/core/avx512bf16_region.h"
#include "qkv/core/bf16.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_pool.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/gemm_packed.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#ifndef QKV_CORE_GEMM_PACKED_ONCE_
#define QKV_CORE_GEMM_PACKED_ONCE_
namespace qkv::packed_detail {

// A growing, 64-byte aligned float buffer; one per thread and role (thread_local below), reused
// between calls so a product's packing costs no allocation (or page faults) after the first.
struct AlignedFloats {
  std::unique_ptr<float[]> owner;
  float* data = nullptr;
  size_t capacity = 0;
  float* get(size_t floats) {
    if (floats > capacity) {
      owner.reset(new float[floats + 16]);
      data = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(owner.get()) + 63) & ~uintptr_t{63});
      capacity = floats;
    }
    return data;
  }
};
// The packed op(B) belongs to the thread that called sgemm; the packed rows of op(A), to the thread
// running a task. Two buffers, because the calling thread also runs tasks.
inline thread_local AlignedFloats packed_b;
inline thread_local AlignedFloats packed_a;

// Blocking from the caches: KC so a micro-panel of A (KC, MR) takes half of L1, and the (KC, NR)
// panels of B that stream past it come from L2; MC so a task's block of A (MC, KC) takes half of
// L2. KC a multiple of 16 in [64, max_kc]; MC a multiple of MR.
inline size_t block_k(size_t mr, size_t max_kc) {
  const int64_t l1 = cache_sizes().l1d > 0 ? cache_sizes().l1d : 32 * 1024;
  const size_t kc = static_cast<size_t>(l1) / 2 / (mr * sizeof(float));
  return std::clamp<size_t>(kc / 16 * 16, 64, max_kc);
}

// The K block for a product of depth k, at most kc_max: the fewest blocks, of equal length (a
// multiple of 16, the last one shorter), so no block is a short remainder that costs a pass over C
// for little work (K 768 at KC 512 was 512 + 256; now one block, or 384 + 384).
inline size_t even_block(size_t k, size_t kc_max) {
  if (k <= kc_max) return kc_max;
  const size_t blocks = (k + kc_max - 1) / kc_max;
  return std::min(kc_max, ((k + blocks - 1) / blocks + 15) / 16 * 16);
}
inline size_t block_m(size_t mr, size_t kc) {
  const int64_t l2 = cache_sizes().l2 > 0 ? cache_sizes().l2 : 1024 * 1024;
  const size_t mc = static_cast<size_t>(l2) / 2 / (kc * sizeof(float));
  return std::clamp<size_t>(mc / mr * mr, mr, 96 * mr);
}

}  // namespace qkv::packed_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace qkv::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr size_t kLanes = HWY_LANES(float);
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3  // 16 vector registers (AVX2) or emulated ones
constexpr size_t kMR = 4, kNV = 3;         // 12 accumulators + 3 B vectors + 1 broadcast = 16 registers
#else
constexpr size_t kMR = 8, kNV = 3;  // AVX-512: 24 accumulators + 3 B vectors + 1 broadcast = 28 registers
#endif
constexpr size_t kNR = kNV * kLanes;  // tile columns

// How a tile's sums reach C: the first K block applies beta (never reading C when beta = 0), the
// later ones add on.
struct TileWrite {
  float alpha = 1.0f, beta = 0.0f;
  bool first = true;
  const float* bias = nullptr;  // the tile's columns of the bias (added on the first K block), or null
};

HWY_INLINE float combine(float sum, float c, const TileWrite& w, size_t n) {
  const float s = w.alpha * sum;
  if (!w.first) return c + s;
  const float b = w.bias ? w.bias[n] : 0.0f;
  return (w.beta == 0.0f ? s : s + w.beta * c) + b;
}

// C (rows <= MR, cols <= NR) op= alpha acc (+ beta C on the first K block): a tile's sums out.
HWY_INLINE void StoreTile(const VF (&acc)[kMR][kNV], float* HWY_RESTRICT c, size_t ldc, size_t rows, size_t cols,
                          const TileWrite& w) {
  const DF d;
  if (rows == kMR && cols == kNR) {
    const VF alpha = hn::Set(d, w.alpha), beta = hn::Set(d, w.beta);
    HWY_UNROLL(16) for (size_t m = 0; m < kMR; ++m)
      HWY_UNROLL(4) for (size_t v = 0; v < kNV; ++v) {
        float* cv = c + m * ldc + v * kLanes;
        const VF s = hn::Mul(alpha, acc[m][v]);
        VF r;
        if (!w.first) r = hn::Add(hn::LoadU(d, cv), s);
        else if (w.beta == 0.0f) r = s;
        else r = hn::MulAdd(beta, hn::LoadU(d, cv), s);
        if (w.first && w.bias) r = hn::Add(r, hn::LoadU(d, w.bias + v * kLanes));
        hn::StoreU(r, d, cv);
      }
    return;
  }
  HWY_ALIGN float tile[kMR * kNR];  // an edge tile: only its (rows, cols) corner is C's
  HWY_UNROLL(16) for (size_t m = 0; m < kMR; ++m)
    HWY_UNROLL(4) for (size_t v = 0; v < kNV; ++v) hn::Store(acc[m][v], d, tile + m * kNR + v * kLanes);
  for (size_t m = 0; m < rows; ++m)
    for (size_t n = 0; n < cols; ++n) c[m * ldc + n] = combine(tile[m * kNR + n], c[m * ldc + n], w, n);
}

// The tile of C is read (or written) only after the K steps; its lines are fetched before them,
// behind the arithmetic (C is far larger than the caches: without this, each tile's rows miss at
// the end).
HWY_INLINE void PrefetchTile(const float* c, size_t ldc, size_t rows) {
  for (size_t m = 0; m < rows; ++m)
    for (size_t v = 0; v < kNR; v += 16) hwy::Prefetch(c + m * ldc + v);
}

// acc (MR, NV vectors) = A~ (KC, MR) B~ (KC, NV vectors): a tile's KC steps, MR broadcasts, NV
// vector loads and MR NV fused multiply-adds each (MicroKernel's, and the tile benchmark's).
template <size_t MR, size_t NV>
HWY_INLINE void TileSteps(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, size_t kc, VF (&acc)[MR][NV]) {
  const DF d;
  HWY_UNROLL(16) for (size_t m = 0; m < MR; ++m)
    HWY_UNROLL(4) for (size_t v = 0; v < NV; ++v) acc[m][v] = hn::Zero(d);
  for (size_t k = 0; k < kc; ++k) {
    VF bv[NV];
    HWY_UNROLL(4) for (size_t v = 0; v < NV; ++v) bv[v] = hn::Load(d, b + k * NV * kLanes + v * kLanes);
    HWY_UNROLL(16) for (size_t m = 0; m < MR; ++m) {
      const VF am = hn::Set(d, a[k * MR + m]);
      HWY_UNROLL(4) for (size_t v = 0; v < NV; ++v) acc[m][v] = hn::MulAdd(am, bv[v], acc[m][v]);
    }
  }
}

// C (rows <= MR, cols <= NR) op= A~ (KC, MR) B~ (KC, NR), both packed (see the top of the file).
HWY_NOINLINE void MicroKernel(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, size_t kc,
                              float* HWY_RESTRICT c, size_t ldc, size_t rows, size_t cols, const TileWrite& w) {
  PrefetchTile(c, ldc, rows);
  VF acc[kMR][kNV];
  TileSteps<kMR, kNV>(a, b, kc, acc);
  StoreTile(acc, c, ldc, rows, cols, w);
}

// The tile benchmark's kernel: `panels` micro-panels of A~ (KC, MR) against one panel of B~
// (KC, NV vectors), as the packed product's inner loop meets them (B~ in L1, A~ from L2), the sums
// stored to c (MR NV vectors).
template <size_t MR, size_t NV>
HWY_NOINLINE void TilePass(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, size_t kc, size_t panels,
                           float* HWY_RESTRICT c) {
  const DF d;
  for (size_t p = 0; p < panels; ++p) {
    VF acc[MR][NV];
    TileSteps<MR, NV>(a + p * kc * MR, b, kc, acc);
    HWY_UNROLL(16) for (size_t m = 0; m < MR; ++m)
      HWY_UNROLL(4) for (size_t v = 0; v < NV; ++v) hn::Store(acc[m][v], d, c + (m * NV + v) * kLanes);
  }
}

// An operand's element as a float: itself, or a bf16 widened (exactly).
HWY_INLINE float Widen(float x) { return x; }
HWY_INLINE float Widen(uint16_t x) { return bf16_to_float(x); }

// x rounded to bf16 (nearest even) and widened back, lane by lane; a NaN stays as it is.
HWY_INLINE VF RoundToBF16(VF x) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, x);
  const auto odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto r = hn::And(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), odd)), hn::Set(du, 0xffff0000u));
  return hn::IfThenElse(hn::IsNaN(x), x, hn::BitCast(d, r));
}

// The n floats at p, rounded to bf16 in place (a packed block, for the float32 path in bf16
// precision; n a multiple of the vector length: blocks are whole panels).
void RoundPacked(float* HWY_RESTRICT p, size_t n) {
  const DF d;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) hn::Store(RoundToBF16(hn::Load(d, p + i)), d, p + i);
  for (; i < n; ++i) p[i] = bf16_to_float(float_to_bf16(p[i]));
}

// dst[0, n) = src[0, n) and dst[n, N) = 0, for N = MR or NR; a full run (n = N, the usual case)
// copies whole vectors (memcpy of a run-time size is a library call per run: a fifth of a
// weight gradient's time went to those calls).
// A bf16 source is widened as it is copied.
HWY_INLINE VF LoadRun(const float* HWY_RESTRICT src) { return hn::LoadU(DF(), src); }
HWY_INLINE VF LoadRun(const uint16_t* HWY_RESTRICT src) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src))));
}
template <size_t kN, typename T>
HWY_INLINE void CopyRun(const T* HWY_RESTRICT src, size_t n, float* HWY_RESTRICT dst) {
  if (n == kN) {
    if constexpr (kN % kLanes == 0) {
      const DF d;
      HWY_UNROLL(4) for (size_t v = 0; v < kN / kLanes; ++v) hn::StoreU(LoadRun(src + v * kLanes), d, dst + v * kLanes);
    } else {
      HWY_UNROLL(16) for (size_t i = 0; i < kN; ++i) dst[i] = Widen(src[i]);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = Widen(src[i]);
  for (size_t i = n; i < kN; ++i) dst[i] = 0.0f;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// dst[k ldd + r] = src[r lds + k] for r, k in [0, 8): eight rows of eight floats transposed in
// 256-bit registers (pairs interleaved, then 64-bit pairs, then 128-bit halves exchanged).
HWY_INLINE void Transpose8x8(const float* HWY_RESTRICT src, size_t lds, float* HWY_RESTRICT dst, size_t ldd) {
  const hn::FixedTag<float, 8> d;
  const hn::Repartition<double, decltype(d)> dd;
  using V = hn::Vec<decltype(d)>;
  V r[8], t[8], u[8];
  for (size_t i = 0; i < 8; ++i) r[i] = hn::LoadU(d, src + i * lds);
  for (size_t i = 0; i < 8; i += 2) {  // t[i] = r_i[0] r_i+1[0] r_i[1] r_i+1[1] | [4] [5];  t[i+1]: [2] [3] | [6] [7]
    t[i] = hn::InterleaveLower(d, r[i], r[i + 1]);
    t[i + 1] = hn::InterleaveUpper(d, r[i], r[i + 1]);
  }
  for (size_t h = 0; h < 8; h += 4)  // u[h + c]: rows h..h+3 at column c | at column c + 4
    for (size_t c = 0; c < 2; ++c) {
      const auto a = hn::BitCast(dd, t[h + c]), b = hn::BitCast(dd, t[h + 2 + c]);
      u[h + 2 * c] = hn::BitCast(d, hn::InterleaveLower(dd, a, b));
      u[h + 2 * c + 1] = hn::BitCast(d, hn::InterleaveUpper(dd, a, b));
    }
  for (size_t c = 0; c < 4; ++c) {  // column c: rows 0..3 from u[c], rows 4..7 from u[4 + c]
    hn::StoreU(hn::ConcatLowerLower(d, u[4 + c], u[c]), d, dst + c * ldd);
    hn::StoreU(hn::ConcatUpperUpper(d, u[4 + c], u[c]), d, dst + (c + 4) * ldd);
  }
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// dst[k MR + r] = src[r lds + k] for r in [0, MR), k in [0, kc): a whole micro-panel of op(A),
// MR values of k at a time transposed in registers (MR = 4: 128-bit vectors, interleaved, then
// their 64-bit halves joined; MR = 8: Transpose8x8), the last kc mod MR one by one.
HWY_INLINE void PanelTransposed(const float* HWY_RESTRICT src, size_t lds, size_t kc, float* HWY_RESTRICT dst) {
  size_t k = 0;
  if constexpr (kMR == 4) {
    const hn::FixedTag<float, 4> d;
    for (; k + 4 <= kc; k += 4) {
      const auto r0 = hn::LoadU(d, src + k), r1 = hn::LoadU(d, src + lds + k);
      const auto r2 = hn::LoadU(d, src + 2 * lds + k), r3 = hn::LoadU(d, src + 3 * lds + k);
      const auto t0 = hn::InterleaveLower(d, r0, r1), t1 = hn::InterleaveUpper(d, r0, r1);  // r0[0] r1[0] r0[1] r1[1]; [2], [3]
      const auto t2 = hn::InterleaveLower(d, r2, r3), t3 = hn::InterleaveUpper(d, r2, r3);
      float* out = dst + k * kMR;
      hn::StoreU(hn::ConcatLowerLower(d, t2, t0), d, out);       // column k: r0 r1 r2 r3
      hn::StoreU(hn::ConcatUpperUpper(d, t2, t0), d, out + 4);   // k + 1
      hn::StoreU(hn::ConcatLowerLower(d, t3, t1), d, out + 8);   // k + 2
      hn::StoreU(hn::ConcatUpperUpper(d, t3, t1), d, out + 12);  // k + 3
    }
  } else if constexpr (kMR == 8) {
    for (; k + 8 <= kc; k += 8) Transpose8x8(src + k, lds, dst + k * kMR, kMR);
  }
  for (; k < kc; ++k)
    for (size_t r = 0; r < kMR; ++r) dst[k * kMR + r] = src[r * lds + k];
}
#endif

// Panels [j0, j1) of B~ for rows [k0, k0 + kc) of op(B): panel j holds columns [j NR, j NR + NR)
// as a (kc, NR) block at dst + j kc NR; zero past N.
// B: g.B, or g.B16 (bf16, widened).
template <typename T>
void PackPanelsB(const GemmArgs& g, const T* B, size_t k0, size_t kc, size_t j0, size_t j1, float* HWY_RESTRICT dst) {
  const size_t N = static_cast<size_t>(g.N), ldb = static_cast<size_t>(g.ldb);
  if (!g.trans_b) {  // op(B)(k, n) = B[k ldb + n]: row k of B read once, left to right, for all the panels
    for (size_t k = 0; k < kc; ++k) {
      const T* src = B + (k0 + k) * ldb;
      for (size_t j = j0; j < j1; ++j) {
        const size_t n0 = j * kNR, cols = std::min(kNR, N - n0);
        CopyRun<kNR>(src + n0, cols, dst + j * kc * kNR + k * kNR);
      }
    }
    return;
  }
  // op(B)(k, n) = B[n ldb + k] (nn.Linear's weight): a transpose, in chunks of 64 k so the
  // destination chunk (64 x NR) stays in L1 while the NR source rows are read along k. Float
  // weights on x86 go eight rows by eight k at a time through registers (Transpose8x8); the
  // edges (rows past N, k past a multiple of 8) and bf16 sources one element at a time.
  constexpr size_t kChunk = 64;
  for (size_t j = j0; j < j1; ++j) {
    const size_t n0 = j * kNR, cols = std::min(kNR, N - n0);
    float* panel = dst + j * kc * kNR;
    for (size_t c0 = 0; c0 < kc; c0 += kChunk) {
      const size_t c1 = std::min(kc, c0 + kChunk);
      size_t n = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
      if constexpr (std::is_same_v<T, float> && kNR % 8 == 0) {
        const size_t k8 = c0 + (c1 - c0) / 8 * 8;
        for (; n + 8 <= cols; n += 8) {
          const float* src = B + (n0 + n) * ldb + k0;
          for (size_t k = c0; k < k8; k += 8) Transpose8x8(src + k, ldb, panel + k * kNR + n, kNR);
          for (size_t r = 0; r < 8; ++r)
            for (size_t k = k8; k < c1; ++k) panel[k * kNR + n + r] = src[r * ldb + k];
        }
      }
#endif
      for (; n < kNR; ++n) {
        if (n < cols) {
          const T* src = B + (n0 + n) * ldb + k0;
          for (size_t k = c0; k < c1; ++k) panel[k * kNR + n] = Widen(src[k]);
        } else {
          for (size_t k = c0; k < c1; ++k) panel[k * kNR + n] = 0.0f;
        }
      }
    }
  }
}

// Rows [i0, i0 + rows) and columns [k0, k0 + kc) of op(A) as micro-panels of MR rows, each
// (kc, MR): dst[p kc MR + k MR + r] = op(A)(i0 + p MR + r, k0 + k), zero past the rows. Both
// layouts read A along its rows, which the hardware prefetches; A is usually far from the cache.
// A: g.A, or g.A16 (bf16, widened).
template <typename T>
void PackBlockA(const GemmArgs& g, const T* A, size_t i0, size_t rows, size_t k0, size_t kc, float* HWY_RESTRICT dst) {
  const size_t lda = static_cast<size_t>(g.lda);
  const size_t panels = (rows + kMR - 1) / kMR;
  if (g.trans_a) {  // op(A)(m, k) = A[k lda + m]: row k0 + k of A holds step k of every micro-panel
    // A group of micro-panels whose MR-runs fill a 64-byte line at a time, over all of the block's
    // k: each row's line read once, and the writes go to a few panels. (One k across all the panels
    // wrote MR floats every kc MR floats, 8 KiB apart at a K block of 512, a multiple of 4 KiB: one
    // L1 set for all the panels, each line evicted before the next k came back to it.)
    constexpr size_t kGroup = kMR * sizeof(T) >= 64 ? 1 : 64 / (kMR * sizeof(T));
    for (size_t p0 = 0; p0 < panels; p0 += kGroup) {
      const size_t p1 = std::min(panels, p0 + kGroup);
      for (size_t k = 0; k < kc; ++k) {
        const T* src = A + (k0 + k) * lda + i0;
        if (k + 8 < kc) hwy::Prefetch(src + 8 * lda + p0 * kMR);
        for (size_t p = p0; p < p1; ++p)
          CopyRun<kMR>(src + p * kMR, std::min(kMR, rows - p * kMR), dst + p * kc * kMR + k * kMR);
      }
    }
    return;
  }
  // op(A)(m, k) = A[m lda + k]: each row's kc values written with stride MR; the rows two ahead
  // are prefetched (each row is a short run of kc floats, too short for the hardware to follow).
  // Whole float micro-panels on x86 go through registers, MR rows by MR (4 or 8) values of k at a
  // time (PanelTransposed); the edges one element at a time.
  for (size_t p = 0; p < panels; ++p) {
    float* panel = dst + p * kc * kMR;
    const size_t r_end = std::min(kMR, rows - p * kMR);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    if constexpr (std::is_same_v<T, float> && (kMR == 4 || kMR == 8)) {
      if (r_end == kMR) {
        const size_t row = i0 + p * kMR;
        if (row + 2 * kMR <= i0 + rows)  // the next micro-panel's rows
          for (size_t r = kMR; r < 2 * kMR; ++r)
            for (size_t k = 0; k < kc; k += 16) hwy::Prefetch(A + (row + r) * lda + k0 + k);
        PanelTransposed(A + row * lda + k0, lda, kc, panel);
        continue;
      }
    }
#endif
    for (size_t r = 0; r < kMR; ++r) {
      if (r < r_end) {
        const size_t row = i0 + p * kMR + r;
        if (row + 2 < i0 + rows)
          for (size_t k = 0; k < kc; k += 16) hwy::Prefetch(A + (row + 2) * lda + k0 + k);
        const T* src = A + row * lda + k0;
        for (size_t k = 0; k < kc; ++k) panel[k * kMR + r] = Widen(src[k]);
      } else {
        for (size_t k = 0; k < kc; ++k) panel[k * kMR + r] = 0.0f;
      }
    }
  }
}

// The float32 path: floats in the panels (in bf16 precision, rounded to bf16 or widened from it).
struct F32Path {
  using Word = float;
  static constexpr size_t kSteps = 1;  // steps of K per word
  // The longest K block (block_k's cap), in panel rows: 768 puts a model width of 768 in one block
  // (each further block reads and writes all of C again). Against 512 (then 512 + 256 for K 768),
  // in alternated calls on a Zen 5: AVX2 products of GPT-2's shapes 3-6% faster at K 768, 1% at
  // K 3,072; AVX-512 within the noise.
  static constexpr size_t kMaxBlockRows = 768;
  static size_t rows_of(size_t kc) { return kc; }  // panel rows for a K block of kc
  static void PackB(const GemmArgs& g, size_t k0, size_t kc, size_t j0, size_t j1, float* dst) {
    if (g.B16 != nullptr) return PackPanelsB(g, g.B16, k0, kc, j0, j1, dst);
    PackPanelsB(g, g.B, k0, kc, j0, j1, dst);
    if (g.precision == Dtype::kBF16) RoundPacked(dst + j0 * kc * kNR, (j1 - j0) * kc * kNR);
  }
  static void PackA(const GemmArgs& g, size_t i0, size_t rows, size_t k0, size_t kc, float* dst) {
    if (g.A16 != nullptr) return PackBlockA(g, g.A16, i0, rows, k0, kc, dst);
    PackBlockA(g, g.A, i0, rows, k0, kc, dst);
    if (g.precision == Dtype::kBF16) RoundPacked(dst, (rows + kMR - 1) / kMR * kMR * kc);
  }
  static void Tile(const float* a, const float* b, size_t kc, float* c, size_t ldc, size_t rows, size_t cols,
                   const TileWrite& w) {
    MicroKernel(a, b, kc, c, ldc, rows, cols, w);
  }
};

#if HWY_TARGET == HWY_AVX3
#include "core/gemm_bf16_dot-inl.h"

// The bf16 dot-product path: pairs of bf16 along K in 32-bit words.
struct DotPath {
  using Word = uint32_t;
  static constexpr size_t kSteps = 2;  // steps of K per word
  // 512 words (1,024 steps of K): at 768 (MC 168 rows instead of 256) the products of K 768 ran
  // 1-4% slower on a Zen 5.
  static constexpr size_t kMaxBlockRows = 512;
  static size_t rows_of(size_t kc) { return (kc + 1) / 2; }
  static void PackB(const GemmArgs& g, size_t k0, size_t kc, size_t j0, size_t j1, uint32_t* dst) {
    if (g.B16 != nullptr) return PackPanelsBDot(g, g.B16, k0, kc, j0, j1, dst);
    PackPanelsBDot(g, g.B, k0, kc, j0, j1, dst);
  }
  static void PackA(const GemmArgs& g, size_t i0, size_t rows, size_t k0, size_t kc, uint32_t* dst) {
    if (g.A16 != nullptr) return PackBlockADot(g, g.A16, i0, rows, k0, kc, dst);
    PackBlockADot(g, g.A, i0, rows, k0, kc, dst);
  }
  static void Tile(const uint32_t* a, const uint32_t* b, size_t kc, float* c, size_t ldc, size_t rows, size_t cols,
                   const TileWrite& w) {
    MicroKernelDot(a, b, rows_of(kc), c, ldc, rows, cols, w);
  }
};
constexpr bool kHasDotPath = true;
#else
constexpr bool kHasDotPath = false;
#endif

// A path's cache blocks (block_k and block_m count a panel's rows of 4-byte words, the caches hold
// bytes; a word holds kSteps steps of K, so the dot path's K block is twice as long): the K block
// in steps of K, and the row block.
struct CacheBlocks {
  size_t kc, mc;
};
template <class Path>
CacheBlocks BlocksOf() {
  const size_t rows = packed_detail::block_k(kMR, Path::kMaxBlockRows);
  return {Path::kSteps * rows, packed_detail::block_m(kMR, rows)};
}

template <class Path>
void PackedGemm(const GemmArgs& g, ThreadPool* pool) {
  using Word = typename Path::Word;  // 4 bytes: a float, or two bf16
  static_assert(sizeof(Word) == sizeof(float), "the packing buffers hold 4-byte words");
  const size_t M = static_cast<size_t>(g.M), N = static_cast<size_t>(g.N), K = static_cast<size_t>(g.K);
  // The dot path's K block is twice as long (GPT-2's K = 768 in one block: 77-88% of the bf16 peak
  // on its prefill's products, against 70-77% with 512, Zen 5).
  const CacheBlocks blocks = BlocksOf<Path>();
  const size_t kc_max = packed_detail::even_block(K, blocks.kc), mc_max = blocks.mc;
  const size_t panels = (N + kNR - 1) / kNR;
  const size_t k_blocks = (K + kc_max - 1) / kc_max;
  if (k_blocks == 0) return;  // K = 0: sgemm scales C instead (scale_only)
  const size_t threads = pool ? static_cast<size_t>(pool->num_threads()) : 1;
  // B~ for one K block: (panels, rows_of(KC), NR); two of them when the pool runs several blocks,
  // so the next block's B~ is packed while the current one's tasks run
  const size_t b_words = panels * Path::rows_of(kc_max) * kNR, buffers = threads > 1 && k_blocks > 1 ? 2 : 1;
  Word* bt_all = reinterpret_cast<Word*>(packed_detail::packed_b.get(b_words * buffers));

  // The task grid: equal blocks of rows (at most MC, a multiple of MR; their count a multiple of
  // the threads when there are rows enough), times chunks of panels until there are two tasks per
  // thread (each task packs its own rows of A, so chunks keep at least 4 panels).
  size_t m_blocks = (M + mc_max - 1) / mc_max;
  if (M >= threads * kMR) m_blocks = (m_blocks + threads - 1) / threads * threads;
  const size_t mc = ((M + m_blocks - 1) / m_blocks + kMR - 1) / kMR * kMR;
  m_blocks = (M + mc - 1) / mc;
  size_t n_chunks = 1;
  while (m_blocks * n_chunks < 2 * threads && panels / (n_chunks * 2) >= 4) n_chunks *= 2;
  const size_t panels_per_chunk = (panels + n_chunks - 1) / n_chunks;
  const int64_t b_tasks = static_cast<int64_t>((panels + 7) / 8), tasks = static_cast<int64_t>(m_blocks * n_chunks);

  // B~ of K block `blk` (8 panels a task)
  auto pack_b = [&](size_t blk, int64_t t) {
    const size_t k0 = blk * kc_max, kc = std::min(kc_max, K - k0), j0 = static_cast<size_t>(t) * 8;
    Path::PackB(g, k0, kc, j0, std::min(panels, j0 + 8), bt_all + (blk % buffers) * b_words);
  };
  // task t of K block `blk`: its rows of A packed for the block, the micro-kernel over its panels
  auto run_task = [&](size_t blk, int64_t t) {
    const size_t k0 = blk * kc_max, kc = std::min(kc_max, K - k0), kr = Path::rows_of(kc);
    const Word* bt = bt_all + (blk % buffers) * b_words;
    const size_t mb = static_cast<size_t>(t) / n_chunks, nc = static_cast<size_t>(t) % n_chunks;
    const size_t i0 = mb * mc, rows = std::min(mc, M - i0);
    const size_t j0 = nc * panels_per_chunk, j1 = std::min(panels, j0 + panels_per_chunk);
    if (j0 >= j1) return;
    Word* at = reinterpret_cast<Word*>(packed_detail::packed_a.get(((rows + kMR - 1) / kMR) * kMR * kr));
    Path::PackA(g, i0, rows, k0, kc, at);
    const TileWrite w{g.alpha, g.beta, k0 == 0};
    for (size_t j = j0; j < j1; ++j) {
      const Word* b = bt + j * kr * kNR;
      const size_t cols = std::min(kNR, N - j * kNR);
      TileWrite wj = w;
      if (g.bias != nullptr) wj.bias = g.bias + j * kNR;
      for (size_t p0 = 0; p0 < rows; p0 += kMR)
        Path::Tile(at + (p0 / kMR) * kr * kMR, b, kc, g.C + (i0 + p0) * static_cast<size_t>(g.ldc) + j * kNR,
                   static_cast<size_t>(g.ldc), std::min(kMR, rows - p0), cols, wj);
    }
  };

  // One job per K block: its tasks first (the long ones), then the packing of the next block's B~
  // into the other buffer, which the threads take as they finish; one join per block, and the
  // packing fills the gap a thread would otherwise wait out at the join. The first block's B~ is
  // packed on its own.
  if (threads == 1) {
    for (size_t blk = 0; blk < k_blocks; ++blk) {
      for (int64_t t = 0; t < b_tasks; ++t) pack_b(blk, t);
      for (int64_t t = 0; t < tasks; ++t) run_task(blk, t);
    }
    return;
  }
  pool->parallel_for(b_tasks, [&](int64_t t, int) { pack_b(0, t); });
  for (size_t blk = 0; blk < k_blocks; ++blk) {
    const int64_t next = blk + 1 < k_blocks ? b_tasks : 0;
    pool->parallel_for(tasks + next, [&](int64_t t, int) {
      if (t < tasks) run_task(blk, t);
      else pack_b(blk + 1, t - tasks);
    });
  }
}

bool UsesDotPath(const GemmArgs& g) { return kHasDotPath && g.precision == Dtype::kBF16 && bf16_dot_allowed(); }

}  // namespace

void PackedGemmImpl(const GemmArgs& g, ThreadPool* pool) {
#if HWY_TARGET == HWY_AVX3
  if (UsesDotPath(g)) return PackedGemm<DotPath>(g, pool);
#endif
  PackedGemm<F32Path>(g, pool);
}

// Seconds per pass of TilePass<MR, NV> on this target (median of `passes`, each `reps` times over
// the panels), or -1 for a tile this target does not compile: the register file holds MR NV
// accumulators, NV vectors of B and a broadcast (16 registers on AVX2, 32 on AVX-512).
double PackedTileSecondsImpl(int mr, int nv, int64_t kc, int64_t panels, int64_t reps, int passes) {
  const size_t k = static_cast<size_t>(kc), np = static_cast<size_t>(panels);
  std::vector<float> buf(np * k * 16 + k * 4 * kLanes + 16 * 6 * kLanes + 64, 0.001f);
  float* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
  float* a = base;
  float* b = a + np * k * 16;
  float* c = b + k * 4 * kLanes;
  void (*pass)(const float*, const float*, size_t, size_t, float*) = nullptr;
  if (mr == static_cast<int>(kMR) && nv == static_cast<int>(kNV)) pass = TilePass<kMR, kNV>;
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
  if (mr == 4 && nv == 3) pass = TilePass<4, 3>;
#elif HWY_ARCH_X86
  if (mr == 6 && nv == 2) pass = TilePass<6, 2>;
  if (mr == 4 && nv == 3) pass = TilePass<4, 3>;
  if (mr == 12 && nv == 2) pass = TilePass<12, 2>;
  if (mr == 6 && nv == 4) pass = TilePass<6, 4>;
#endif
  if (pass == nullptr) return -1.0;
  std::vector<double> t;
  for (int i = -1; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < reps; ++r) pass(a, b, k, np, c);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 0) t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

PackedGemmShape PackedGemmShapeImpl() {
  PackedGemmShape s;
  s.mr = static_cast<int>(kMR);
  s.nr = static_cast<int>(kNR);
  const CacheBlocks blocks = BlocksOf<F32Path>();
  s.kc = static_cast<int>(blocks.kc);
  s.mc = static_cast<int>(blocks.mc);
  s.vector_bits = static_cast<int>(kLanes * 32);
  s.target = hwy::TargetName(HWY_TARGET);
  GemmArgs bf16;
  bf16.precision = Dtype::kBF16;
  s.bf16_dot = UsesDotPath(bf16);
#if HWY_TARGET == HWY_AVX3
  if (s.bf16_dot) {
    const CacheBlocks dot = BlocksOf<DotPath>();
    s.dot_kc = static_cast<int>(dot.kc);
    s.dot_mc = static_cast<int>(dot.mc);
  }
#endif
  return s;
}

}  // namespace qkv::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv {
HWY_EXPORT(PackedGemmImpl);
HWY_EXPORT(PackedGemmShapeImpl);
HWY_EXPORT(PackedTileSecondsImpl);

double packed_tile_seconds(int mr, int nv, int64_t kc, int64_t panels, int64_t reps, int passes) {
  return HWY_DYNAMIC_DISPATCH(PackedTileSecondsImpl)(mr, nv, kc, panels, reps, passes);
}

void packed_sgemm(const GemmArgs& g, ThreadPool* pool) { HWY_DYNAMIC_DISPATCH(PackedGemmImpl)(g, pool); }

PackedGemmShape packed_gemm_shape() { return HWY_DYNAMIC_DISPATCH(PackedGemmShapeImpl)(); }
}  // namespace qkv
#endif  // HWY_ONCE
