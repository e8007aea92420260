// Per-target SIMD building blocks of the fused attention kernels (Google Highway): a register-
// tiled block product, exp, and Philox on vectors. Included once per target by
// flash_attention.cc (foreach_target), hence the toggling include guard.
//
// Layout convention of the kernels: "query-major" tiles hold one query per SIMD lane, so the
// online softmax's per-query max, sum and rescaling are lane-wise (no horizontal reductions):
//   scores^T (Bc, Br): row j = key, lanes = queries i;   out^T (Dv, Br): row d, lanes = queries.
#if defined(QKV_KERNELS_ATTENTION_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_ATTENTION_TILES_INL_H_
#undef QKV_KERNELS_ATTENTION_TILES_INL_H_
#else
#define QKV_KERNELS_ATTENTION_TILES_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "qkv/kernels/philox.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;

constexpr size_t kLanes = HWY_LANES(float);
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kVectorRegisters = 16;  // SSE4 / AVX2
#else
constexpr int kVectorRegisters = 32;  // AVX-512, NEON
#endif

// How C is written by a block product. (Nothing else - a column scale or max - is folded into
// the tile: with 24 accumulators, 3 B vectors and a broadcast, AVX-512's 32 registers are full,
// and GCC then spills the B vectors to the stack, which costs a third of the speed.)
enum class Out {
  kStore,      // C = A B
  kAccumulate  // C += A B  (the accumulators start from C)
};

// One MR x (NV vectors) tile of C op= A B over K, kept in registers.
//   A(m, k) = a[m * lda + k]  (row-major)   or   a[k * lda + m]  (kAColMajor)
//   B(k, :) = b + k * ldb (NV * kLanes floats), C(m, :) = c + m * ldc.
// kK > 0 fixes K at compile time (the specialised head dims).
template <int MR, int NV, bool kAColMajor, Out kOut, int kK>
HWY_INLINE void MicroTile(const float* HWY_RESTRICT a, size_t lda, const float* HWY_RESTRICT b, size_t ldb,
                          size_t K, float* HWY_RESTRICT c, size_t ldc) {
  const DF d;
  VF acc[MR][NV];
  HWY_UNROLL(16) for (int m = 0; m < MR; ++m)
    HWY_UNROLL(16) for (int v = 0; v < NV; ++v) {
      acc[m][v] = kOut == Out::kAccumulate ? hn::LoadU(d, c + m * ldc + v * kLanes) : hn::Zero(d);
    }
  const size_t n = kK > 0 ? static_cast<size_t>(kK) : K;
  for (size_t k = 0; k < n; ++k) {
    VF bv[NV];
    HWY_UNROLL(16) for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, b + k * ldb + v * kLanes);
    HWY_UNROLL(16) for (int m = 0; m < MR; ++m) {
      const VF am = hn::Set(d, kAColMajor ? a[k * lda + m] : a[m * lda + k]);
      HWY_UNROLL(16) for (int v = 0; v < NV; ++v) acc[m][v] = hn::MulAdd(am, bv[v], acc[m][v]);
    }
  }
  HWY_UNROLL(16) for (int m = 0; m < MR; ++m)
    HWY_UNROLL(16) for (int v = 0; v < NV; ++v) hn::StoreU(acc[m][v], d, c + m * ldc + v * kLanes);
}

// Rows [0, M) of a block: tiles of MR rows, then of MR/2, then single rows. (Only these three
// tile heights are instantiated: every extra one is compile time for each SIMD target, and the
// remainders are the edges of a sequence, not the bulk of the work.)
template <int MR, int NV, bool kAColMajor, Out kOut, int kK>
HWY_INLINE void TileRows(size_t M, const float* HWY_RESTRICT a, size_t lda, const float* HWY_RESTRICT b,
                         size_t ldb, size_t K, float* HWY_RESTRICT c, size_t ldc) {
  auto at = [&](size_t m0) { return kAColMajor ? a + m0 : a + m0 * lda; };
  size_t m0 = 0;
  for (; m0 + MR <= M; m0 += MR) MicroTile<MR, NV, kAColMajor, kOut, kK>(at(m0), lda, b, ldb, K, c + m0 * ldc, ldc);
  if constexpr (MR >= 4) {
    for (; m0 + MR / 2 <= M; m0 += MR / 2)
      MicroTile<MR / 2, NV, kAColMajor, kOut, kK>(at(m0), lda, b, ldb, K, c + m0 * ldc, ldc);
  }
  if constexpr (MR > 1) {
    for (; m0 < M; ++m0) MicroTile<1, NV, kAColMajor, kOut, kK>(at(m0), lda, b, ldb, K, c + m0 * ldc, ldc);
  }
}

// C (M, nvec * kLanes) op= A (M, K) B (K, nvec * kLanes): column chunks of NV vectors, then
// single vectors.
template <int MR, int NV, bool kAColMajor, Out kOut, int kK = 0>
HWY_NOINLINE void BlockProduct(size_t M, size_t nvec, const float* HWY_RESTRICT a, size_t lda,
                               const float* HWY_RESTRICT b, size_t ldb, size_t K, float* HWY_RESTRICT c,
                               size_t ldc) {
  size_t v0 = 0;
  for (; v0 + NV <= nvec; v0 += NV)
    TileRows<MR, NV, kAColMajor, kOut, kK>(M, a, lda, b + v0 * kLanes, ldb, K, c + v0 * kLanes, ldc);
  if constexpr (NV > 1) {
    for (; v0 < nvec; ++v0)
      TileRows<MR, 1, kAColMajor, kOut, kK>(M, a, lda, b + v0 * kLanes, ldb, K, c + v0 * kLanes, ldc);
  }
}

// 2^x to about 1 ulp for x <= 127; 0 for x = -inf (so for a blocked score), NaN for NaN. The
// kernels work in base 2 (exponents (St - m) f: ScoreUnits), which makes the range reduction
// exact (r = x - round(x)); 2^r on [-1/2, 1/2] is the Taylor polynomial of e^(r ln 2) of degree 7
// (error < 6e-9). Results below 2^-126 must not come out as subnormals: producing one costs a
// microcode assist of ~100 cycles per instruction on Intel cores (with the -inf of every masked
// score, that made causal attention 25% slower). On AVX-512, vreduceps gives r in one
// instruction (and r = 0 for x = -inf) and vscalefps applies 2^round(x), exactly 0 for -inf;
// below -126 it would give a subnormal, which the kernels' FTZ mode flushes to 0 (they set it for
// every task: FlushSubnormals). Elsewhere x < -125 is clamped and the result set to 0.
HWY_INLINE VF Exp2(DF d, VF x) {
  const VF c7 = hn::Set(d, 1.525273380405984e-05f), c6 = hn::Set(d, 1.5403530393381608e-04f);
  const VF c5 = hn::Set(d, 1.3333558146428443e-03f), c4 = hn::Set(d, 9.618129107628477e-03f);
  const VF c3 = hn::Set(d, 5.550410866482158e-02f), c2 = hn::Set(d, 0.2402265069591007f);
  const VF c1 = hn::Set(d, 0.6931471805599453f), c0 = hn::Set(d, 1.0f);
  auto poly = [&](VF r) {
    VF p = hn::MulAdd(c7, r, c6);
    p = hn::MulAdd(p, r, c5);
    p = hn::MulAdd(p, r, c4);
    p = hn::MulAdd(p, r, c3);
    p = hn::MulAdd(p, r, c2);
    p = hn::MulAdd(p, r, c1);
    return hn::MulAdd(p, r, c0);
  };
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // AVX-512: AVX3 and every newer x86 target
  const VF r{_mm512_reduce_ps(x.raw, _MM_FROUND_TO_NEAREST_INT)};  // x - round(x); NaN stays NaN
  return VF{_mm512_scalef_ps(poly(r).raw, hn::Round(x).raw)};
#else
  const VF lowest = hn::Set(d, -125.0f);
  const auto underflow = hn::Lt(x, lowest);  // false for NaN, which flows through as NaN
  const DI di;
  const VF xc = hn::IfThenElse(underflow, lowest, x);
  const auto qi = hn::NearestInt(xc);
  const VF r = hn::Sub(xc, hn::ConvertTo(d, qi));
  const VF two_q = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(qi, hn::Set(di, 127))));
  return hn::IfThenZeroElse(underflow, hn::Mul(poly(r), two_q));
#endif
}

// a b - c rounded once: the backward's exponent St f - lse2 (ScoreUnits), whose product must not
// be rounded at the size of St f. Targets without a fused multiply-add (the portable ones, where
// hn::MulSub rounds the product) compute lane by lane in double: the product of two floats is
// exact there, and the difference is rounded to double and then to float (no libm fma, which is
// software on the CPUs that run these targets).
HWY_INLINE VF FusedMulSub(DF d, VF a, VF b, VF c) {
#if HWY_NATIVE_FMA
  (void)d;
  return hn::MulSub(a, b, c);
#else
  HWY_ALIGN float x[kLanes], y[kLanes], z[kLanes];
  hn::Store(a, d, x);
  hn::Store(b, d, y);
  hn::Store(c, d, z);
  for (size_t i = 0; i < kLanes; ++i)
    x[i] = static_cast<float>(static_cast<double>(x[i]) * static_cast<double>(y[i]) - static_cast<double>(z[i]));
  return hn::Load(d, x);
#endif
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // AVX-512: AVX3 and every newer x86 target
// r[k][c] -> r[c][k]: a 16 x 16 block of floats transposed in registers (4 rounds of 16 shuffles).
// Only AVX-512 has it; the other targets copy element by element (kHasTranspose16 false).
constexpr bool kHasTranspose16 = true;
HWY_INLINE void Transpose16(VF r[16]) {
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {  // rows 4g .. 4g+3: u[4g + j] = column j + 4 t of those rows, t = 0..3
    const __m512 tl = _mm512_unpacklo_ps(r[4 * g].raw, r[4 * g + 1].raw);
    const __m512 th = _mm512_unpackhi_ps(r[4 * g].raw, r[4 * g + 1].raw);
    const __m512 sl = _mm512_unpacklo_ps(r[4 * g + 2].raw, r[4 * g + 3].raw);
    const __m512 sh = _mm512_unpackhi_ps(r[4 * g + 2].raw, r[4 * g + 3].raw);
    u[4 * g + 0] = _mm512_shuffle_ps(tl, sl, 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(tl, sl, 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(th, sh, 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(th, sh, 0xEE);
  }
  for (int j = 0; j < 4; ++j) {  // gathers the four 128-bit pieces of columns j, j+4, j+8, j+12
    const __m512 x = _mm512_shuffle_f32x4(u[j], u[j + 4], 0x88), y = _mm512_shuffle_f32x4(u[j], u[j + 4], 0xDD);
    const __m512 z = _mm512_shuffle_f32x4(u[j + 8], u[j + 12], 0x88), w = _mm512_shuffle_f32x4(u[j + 8], u[j + 12], 0xDD);
    r[j] = VF{_mm512_shuffle_f32x4(x, z, 0x88)};
    r[j + 8] = VF{_mm512_shuffle_f32x4(x, z, 0xDD)};
    r[j + 4] = VF{_mm512_shuffle_f32x4(y, w, 0x88)};
    r[j + 12] = VF{_mm512_shuffle_f32x4(y, w, 0xDD)};
  }
}
#else
constexpr bool kHasTranspose16 = false;
HWY_INLINE void Transpose16(VF*) {}
#endif

#if HWY_TARGET != HWY_SCALAR
// (hi, lo) = the 64-bit products a * m, lane by lane.
HWY_INLINE void MulHiLo(VU a, uint32_t m, VU& hi, VU& lo) {
  const DU du;
  const hn::Repartition<uint64_t, DU> du64;
  const VU vm = hn::Set(du, m);
  lo = hn::Mul(a, vm);
  const auto even = hn::MulEven(a, vm);                                                 // a[2k] m
  const auto odd = hn::MulEven(hn::BitCast(du, hn::ShiftRight<32>(hn::BitCast(du64, a))), vm);  // a[2k+1] m
  hi = hn::OddEven(hn::BitCast(du, odd), hn::BitCast(du, hn::ShiftRight<32>(even)));
}
#endif

// Philox4x32-10 on kLanes counters at once: (c0, c1, c2, c3) -> four words per lane, the same
// words as philox4x32_10 in qkv/kernels/philox.h.
HWY_INLINE void Philox(VU& c0, VU& c1, VU& c2, VU& c3, uint32_t k0, uint32_t k1) {
#if HWY_TARGET == HWY_SCALAR
  const DU du;
  const auto w = philox4x32_10({hn::GetLane(c0), hn::GetLane(c1), hn::GetLane(c2), hn::GetLane(c3)}, {k0, k1});
  c0 = hn::Set(du, w[0]);
  c1 = hn::Set(du, w[1]);
  c2 = hn::Set(du, w[2]);
  c3 = hn::Set(du, w[3]);
#else
  const DU du;
  for (int round = 0; round < 10; ++round) {
    VU hi0, lo0, hi1, lo1;
    MulHiLo(c0, kPhiloxM0, hi0, lo0);
    MulHiLo(c2, kPhiloxM1, hi1, lo1);
    const VU n0 = hn::Xor(hn::Xor(hi1, c1), hn::Set(du, k0));
    const VU n2 = hn::Xor(hn::Xor(hi0, c3), hn::Set(du, k1));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
#endif
}

// Dropout masks of keys at positions j .. j+3 for the kLanes queries at positions i0 .. i0+kLanes-1
// of head (b, h): drop[r] is true where weight (i, j + r) is dropped. One Philox call serves the 4
// keys 4m .. 4m+3; a run that starts off a multiple of 4 (a block of keys at an offset, as ring
// attention's are) takes two calls and picks the 4 words it needs.
struct DropoutKey {
  uint32_t k0, k1, b, h, threshold;
};
HWY_INLINE void DropoutDrop4(const DropoutKey& key, int64_t i0, int64_t j, hn::Mask<DF> drop[4]) {
  const DU du;
  const DF d;
  const DI di;
  const auto words_of = [&](uint32_t quad, VU w[4]) {
    w[0] = hn::Set(du, quad);
    w[1] = hn::Iota(du, static_cast<uint32_t>(i0));
    w[2] = hn::Set(du, key.b);
    w[3] = hn::Set(du, key.h);
    Philox(w[0], w[1], w[2], w[3], key.k0, key.k1);
  };
  VU words[8];
  const auto quad = static_cast<uint32_t>(j >> 2);
  const auto skip = static_cast<size_t>(j & 3);
  words_of(quad, words);
  if (skip != 0) words_of(quad + 1, words + 4);
  const auto thr = hn::Set(di, static_cast<int32_t>(key.threshold));
  for (size_t r = 0; r < 4; ++r) {
    const auto top24 = hn::BitCast(di, hn::ShiftRight<8>(words[skip + r]));
    drop[r] = hn::RebindMask(d, hn::Lt(top24, thr));
  }
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_ATTENTION_TILES_INL_H_
