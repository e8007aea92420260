// The quantized product for many rows of x: Q8_0 / Q4_0 weights packed into panels of 16 rows and
// multiplied against every row of x while in cache. See src/core/quant_gemm.h. Compiled per SIMD
// target by Highway (AVX3_DL, VNNI's vpdpbusd, requested as in quant_matvec.cc); targets without
// AVX2 have no packed kernel. Legend: M rows of x, N rows of W, nb blocks of 32 per row.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/quant_gemm.cc"
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/quant_gemm.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "qkv/core/bf16.h"
#include "qkv/core/machine.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/quant_panels.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::HWY_NAMESPACE {
namespace qd = quant_detail;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#undef QKV_QG_ATTR
#if HWY_TARGET == HWY_AVX3_DL
// As quant_matvec.cc: the EVEX avx512vnni, never the VEX avxvnni Highway 1.0.3's string names.
#define QKV_QG_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni,avx512vl,no-avxvnni")))
#else
#define QKV_QG_ATTR
#endif

constexpr int64_t kStepBytes = 4 * qd::kPanelRows;        // one step: 4 values of each of 16 rows
constexpr int64_t kQuantBytes = 8 * kStepBytes;           // a block's 32 values of 16 rows
constexpr int64_t kBlockBytes = kQuantBytes + 4 * qd::kPanelRows;  // + the 16 scales

// Whether Q8_0's quants are stored as q + 128 (unsigned, the offset taken back from the sum: VNNI)
// or as q (signed: vpsignb). Without VNNI, vpmaddubsw's int16 pairs would saturate on (q + 128) x.
constexpr bool kQ8Unsigned = HWY_TARGET == HWY_AVX3_DL;

// The offset the stored quants carry: isum = sum_i stored_i qx_i - offset sum_i qx_i.
constexpr int32_t Offset(uint32_t id) { return id == qd::kQ4_0 ? 8 : (kQ8Unsigned ? 128 : 0); }

// Rows [n, n + rows) of W (rows <= 16; missing rows zero) into one panel (nb blocks).
void PackPanel(uint32_t id, const uint8_t* W, int64_t row_bytes, int64_t nb, int64_t n, int64_t rows, uint8_t* panel) {
  const bool q4 = id == qd::kQ4_0;
  const int64_t bs = q4 ? 18 : 34;
  std::memset(panel, 0, static_cast<size_t>(nb * kBlockBytes));
  for (int64_t j = 0; j < rows; ++j) {
    const uint8_t* row = W + (n + j) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * bs;
      uint8_t* out = panel + b * kBlockBytes;
      uint8_t v[32];
      if (q4) {
        for (int i = 0; i < 16; ++i) v[i] = blk[2 + i] & 0xF, v[i + 16] = blk[2 + i] >> 4;
      } else {
        for (int i = 0; i < 32; ++i) v[i] = kQ8Unsigned ? static_cast<uint8_t>(blk[2 + i] ^ 0x80) : blk[2 + i];
      }
      for (int s = 0; s < 8; ++s) std::memcpy(out + s * kStepBytes + 4 * j, v + 4 * s, 4);
      const float d = f16_to_float(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
      std::memcpy(out + kQuantBytes + 4 * j, &d, 4);
    }
  }
}

#if HWY_TARGET == HWY_AVX3_DL
constexpr int kGroup = 8;  // rows of x per kernel call: 8 accumulators of 16 lanes, 8 of sums
#else
constexpr int kGroup = 4;  // AVX2's 16 registers: 4 accumulators and 4 sums per half panel
#endif
// x packed per group of g rows (g = kGroup; the stored panels' kernels: fewer when M is), per
// block: int32 q4[8 steps][g] (row r's values 4 s .. 4 s + 3), int32 start[g] (-offset x the
// block's sum of quants), float d[g]: 40 g bytes.
constexpr int64_t XBlockBytes(int64_t g) { return 4 * g * 10; }
constexpr int64_t kXBlockBytes = XBlockBytes(kGroup);

// Rows missing from the last group are zero (scale 0: their outputs are computed, not stored).
void PackActivations(const qd::Activations32& x, int32_t offset, int64_t M, int64_t g, uint8_t* out) {
  const int64_t nb = x.nb, groups = (M + g - 1) / g;
  std::memset(out, 0, static_cast<size_t>(groups * nb * XBlockBytes(g)));
  for (int64_t m = 0; m < M; ++m) {
    uint8_t* group = out + (m / g) * nb * XBlockBytes(g);
    const int64_t r = m % g;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8& blk = x.q[m * nb + b];
      auto* words = reinterpret_cast<int32_t*>(group + b * XBlockBytes(g));
      for (int s = 0; s < 8; ++s) std::memcpy(&words[s * g + r], blk.q + 4 * s, 4);
      words[8 * g + r] = -offset * x.sums[m * nb + b];
      std::memcpy(&words[9 * g + r], &blk.d, 4);
    }
  }
}

// v, from here on held in a register. Two uses: a line of nibbles loaded once (the compiler would
// otherwise read it twice, into the AND of the low ones and into the shift of the high ones, and a
// block's loads, not its vpdpbusd, would set the kernel's pace: Q4_0 in L1 on Zen 5, 13.7 cycles a
// block of 16 rows against 9.7 with one load); and an integer accumulator kept a chain of adds
// (GCC reassociates a block's integer adds into a tree over all its products and spills it).
template <typename V>
QKV_QG_ATTR HWY_INLINE V InRegister(V v) {
  asm volatile("" : "+v"(v));
  return v;
}

#if HWY_TARGET == HWY_AVX3_DL
// One group of x's rows (packed) against one panel: kGroup x 16 outputs, VNNI on 512 bits; `rows`
// of the group and `cols` of the panel stored.
QKV_QG_ATTR void PanelGroup(const uint8_t* panel, const uint8_t* xg, int64_t nb, int64_t rows, int64_t cols,
                            float* y, int64_t N) {
  __m512 acc[kGroup];
  for (int r = 0; r < kGroup; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * kBlockBytes;
    const auto* xw = reinterpret_cast<const int32_t*>(xg + b * kXBlockBytes);
    const auto* xd = reinterpret_cast<const float*>(xw + 9 * kGroup);
    __m512i isum[kGroup];
    for (int r = 0; r < kGroup; ++r) isum[r] = _mm512_set1_epi32(xw[8 * kGroup + r]);
    for (int s = 0; s < 8; ++s) {
      const __m512i w = _mm512_loadu_si512(p + s * kStepBytes);
      for (int r = 0; r < kGroup; ++r) isum[r] = _mm512_dpbusd_epi32(isum[r], w, _mm512_set1_epi32(xw[s * kGroup + r]));
    }
    const __m512 dw = _mm512_loadu_ps(p + kQuantBytes);
    for (int r = 0; r < kGroup; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[r])), acc[r]);
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << cols) - 1);
  for (int r = 0; r < rows; ++r) _mm512_mask_storeu_ps(y + r * N, keep, acc[r]);
}
#else
// A half panel's outputs: `rows` rows of x, its first `cols` (at most 8) of W's rows.
QKV_QG_ATTR inline void StoreHalf(const __m256* acc, int64_t rows, int64_t cols, int half, float* y, int64_t N) {
  for (int r = 0; r < rows; ++r) {
    if (cols >= 8) {
      _mm256_storeu_ps(y + r * N + 8 * half, acc[r]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[r]);
      std::memcpy(y + r * N + 8 * half, tmp, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

// One group against one half (8 rows, `half` 0 or 1) of a panel: AVX2's vpmaddubsw + vpmaddwd
// (Q8_0's quants signed: vpsignb moves w's sign onto x).
template <bool kQ4>
QKV_QG_ATTR void HalfPanelGroup(const uint8_t* panel, int half, const uint8_t* xg, int64_t nb, int64_t rows,
                                int64_t cols, float* y, int64_t N) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kGroup];
  for (int r = 0; r < kGroup; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = panel + b * kBlockBytes;
    const auto* xw = reinterpret_cast<const int32_t*>(xg + b * kXBlockBytes);
    const auto* xd = reinterpret_cast<const float*>(xw + 9 * kGroup);
    __m256i isum[kGroup];
    if constexpr (kQ4) {
      // the eight steps' vpmaddubsw summed in int16, then one vpmaddwd (as StoredHalfRows: at most
      // 8 x 3,810 = 30,480 in size; the same integer sums)
      __m256i pairs[kGroup];
      for (int r = 0; r < kGroup; ++r) pairs[r] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + s * kStepBytes + 32 * half));
        // (each sum held as it is: GCC would otherwise reassociate the adds into a tree over all
        // 32 products and spill them)
        for (int r = 0; r < kGroup; ++r)
          pairs[r] = InRegister(
              _mm256_add_epi16(pairs[r], _mm256_maddubs_epi16(w, _mm256_set1_epi32(xw[s * kGroup + r]))));
      }
      for (int r = 0; r < kGroup; ++r)
        isum[r] = _mm256_add_epi32(_mm256_set1_epi32(xw[8 * kGroup + r]), _mm256_madd_epi16(pairs[r], ones));
    } else {
      for (int r = 0; r < kGroup; ++r) isum[r] = _mm256_set1_epi32(xw[8 * kGroup + r]);
      for (int s = 0; s < 8; ++s) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + s * kStepBytes + 32 * half));
        const __m256i u = _mm256_sign_epi8(w, w);
        for (int r = 0; r < kGroup; ++r) {
          const __m256i xv = _mm256_sign_epi8(_mm256_set1_epi32(xw[s * kGroup + r]), w);
          isum[r] = InRegister(_mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones)));
        }
      }
    }
    const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(blk + kQuantBytes) + 8 * half);
    for (int r = 0; r < kGroup; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[r])), acc[r]);
  }
  StoreHalf(acc, rows, cols, half, y, N);
}
template <bool kQ4>
QKV_QG_ATTR void PanelGroupOf(const uint8_t* panel, const uint8_t* xg, int64_t nb, int64_t rows, int64_t cols,
                              float* y, int64_t N) {
  HalfPanelGroup<kQ4>(panel, 0, xg, nb, rows, std::min<int64_t>(cols, 8), y, N);
  if (cols > 8) HalfPanelGroup<kQ4>(panel, 1, xg, nb, rows, cols - 8, y, N);
}
#endif

// --- W stored in panels (qkv/core/quant_panels.h) -----------------------------------------------
//
// The same products on W kept in panels, read as they are (no packing per call): a stored block of
// 16 rows is f16 d[16], then S steps of 64 bytes (16 rows x 4 quant bytes). A Q4_0 step's bytes are
// two of the kernel's steps: the low nibbles values 4s .. 4s + 3, the high ones 16 + 4s .. 19 + 4s;
// Q8_0's are signed quants (made q + 128 for VNNI by flipping the top bit). Each block's integer
// sum is exact and enters y in the same float order as above, so the bits are the packed kernel's.
// R rows of x at a time (R <= kGroup): decoding's one row multiplies only what it needs.
template <bool kQ4>
constexpr int64_t StoredBlockBytes() { return qd::kPanelRows * (kQ4 ? 18 : 34); }
constexpr int64_t kStoredScaleBytes = 2 * qd::kPanelRows;
// How far ahead of its loads the kernel asks for W (the hardware prefetcher alone falls short of
// the bandwidth on one stream, as in gemv.cc): into L1, 4 KiB ahead (Zen 5, 2026-12-05, Qwen3
// decoding steps against 2 KiB, `bench/ab.sh` 6 rounds: Q4_0 0.951, Q8_0 0.982; AVX2's 0.931,
// 0.941; 8 KiB against 4: 1.042); AVX-512's into L2 where prefetch_bursts_to_l2() (core/machine.h)
// says so, four blocks ahead (1,152 bytes for Q4_0, 2,176 for Q8_0). Whole Qwen3 decoding steps
// (`bench/ab.sh` on `qkv bench --module gpt`, 100 new tokens, median ratios) into L2 against into
// L1: Zen 4 (family 25 model 17) Q4_0 0.91, Q8_0 0.89, Q4_K 0.94 (4 KiB ahead instead: 1.03 and
// 1.19 of four blocks); Zen 5 (family 26) Q4_0 1.19, Q8_0 1.17, Q4_K 0.99. AVX2's Q4_0 and Q8_0
// into L2 on Zen 4: 1.05, 1.10; they keep L1 on every CPU. Into L1 with the non-temporal hint
// (prefetch_streamed_line) against prefetcht0 (Zen 5, 2026-12-06, `bench/ab.sh` on Qwen3-0.6B decoding
// steps, median ratios): Q4_0 0.925 (16 rounds, 4-token prompt), 0.947 (10 rounds, 150-token prompt),
// Q8_0 0.970 (8 rounds). AVX2's kernels (StoredHalves) keep prefetcht0: the hint gave its Q4_0 0.998.
constexpr int64_t kStoredPrefetch = 4096;
template <bool kQ4>
constexpr int64_t StoredL2Ahead() { return 4 * StoredBlockBytes<kQ4>(); }

// Whether a stored kernel asks for what follows its panel as it reads it, into which cache, and
// (kL1Streamed) with the non-temporal hint where the kernel streams a model's weights; kL1AndL2:
// into L1, and a second stream far_prefetch_bytes() on into L2 (core/machine.h).
enum class Ahead : uint8_t { kNone, kL1, kL1Streamed, kL2, kL1AndL2 };
// How a product's first row asks, as this CPU prefers (read once a product, not once a panel); the
// other rows find the panel in cache and do not ask.
Ahead AheadOfFirstRow() {
  switch (burst_prefetch()) {
    case BurstPrefetch::kL2: return Ahead::kL2;
    case BurstPrefetch::kL1Streamed: return Ahead::kL1Streamed;
    case BurstPrefetch::kL1AndL2: return Ahead::kL1AndL2;
    case BurstPrefetch::kL1: break;
  }
  return Ahead::kL1;
}
// The request without the non-temporal hint (the K-quants' kernels, which read their lines out of
// order); without the hint or L2 (AVX2's Q8_0 / Q4_0 kernels: into L1 on every CPU, see
// kStoredPrefetch). Both keep kL1AndL2's second stream.
constexpr Ahead WithoutHint(Ahead a) { return a == Ahead::kL1Streamed ? Ahead::kL1 : a; }
constexpr Ahead IntoL1(Ahead a) { return a == Ahead::kL1Streamed || a == Ahead::kL2 ? Ahead::kL1 : a; }

// As a kernel starts a block of `bytes` at p, asks for the block `at` bytes on as `ahead` says and,
// under kL1AndL2, for the one kFarPrefetchBytes on into L2. (Always inlined, as prefetch_line is.)
QKV_QG_ATTR HWY_INLINE void AskAhead(const uint8_t* p, int64_t bytes, int64_t at, Ahead ahead) {
  switch (ahead) {
    case Ahead::kNone: return;
    case Ahead::kL1Streamed:
      for (int64_t line = 0; line < bytes; line += 64) prefetch_streamed_line(p + at + line);
      return;
    case Ahead::kL2:
      for (int64_t line = 0; line < bytes; line += 64) prefetch_line(p + at + line, true);
      return;
    case Ahead::kL1:
    case Ahead::kL1AndL2: prefetch_ahead(p, bytes, at, ahead == Ahead::kL1AndL2 ? kFarPrefetchBytes : 0);
  }
}


#if HWY_TARGET == HWY_AVX3_DL
template <int R, int G, bool kQ4>
QKV_QG_ATTR void StoredPanelRows(const uint8_t* panel, const uint8_t* xg, int64_t nb, Ahead ahead, float* y, int64_t N) {
  const int64_t ahead_at = ahead == Ahead::kL2 ? StoredL2Ahead<kQ4>() : kStoredPrefetch;
  constexpr bool kTwo = R <= 4;  // two dependency chains per row when registers allow
  const __m512i low4 = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * StoredBlockBytes<kQ4>();
    const uint8_t* q = p + kStoredScaleBytes;
    AskAhead(p, StoredBlockBytes<kQ4>(), ahead_at, ahead);
    const auto* xw = reinterpret_cast<const int32_t*>(xg + b * XBlockBytes(G));
    const auto* xd = reinterpret_cast<const float*>(xw + 9 * G);
    __m512i even[R], odd[R];
    for (int r = 0; r < R; ++r) {
      even[r] = _mm512_set1_epi32(xw[8 * G + r]);
      odd[r] = _mm512_setzero_si512();
    }
    // (w0, w1): the quants of steps s0 and s1, into the two chains
    __m512i w0[4], w1[4];
    int s0[4], s1[4];
    if constexpr (kQ4) {
      for (int s = 0; s < 4; ++s) {
        const __m512i raw = InRegister(_mm512_loadu_si512(q + 64 * s));
        w0[s] = _mm512_and_si512(raw, low4);
        w1[s] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        s0[s] = s;
        s1[s] = s + 4;
      }
    } else {
      for (int s = 0; s < 4; ++s) {
        w0[s] = _mm512_xor_si512(_mm512_loadu_si512(q + 128 * s), top);
        w1[s] = _mm512_xor_si512(_mm512_loadu_si512(q + 128 * s + 64), top);
        s0[s] = 2 * s;
        s1[s] = 2 * s + 1;
      }
    }
    for (int s = 0; s < 4; ++s)
      for (int r = 0; r < R; ++r) {
        even[r] = _mm512_dpbusd_epi32(even[r], w0[s], _mm512_set1_epi32(xw[s0[s] * G + r]));
        __m512i& second = kTwo ? odd[r] : even[r];
        second = _mm512_dpbusd_epi32(second, w1[s], _mm512_set1_epi32(xw[s1[s] * G + r]));
      }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    for (int r = 0; r < R; ++r) {
      const __m512i isum = kTwo ? _mm512_add_epi32(even[r], odd[r]) : even[r];
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(xd[r])), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + r * N, acc[r]);
}
#else
// sum of u_i s_i in 8 int32 lanes (4 pairs each), u unsigned, s signed, no int16 pair saturating.
QKV_QG_ATTR HWY_INLINE __m256i DotPairs(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// R rows of x against H halves (8 rows of W each) of a stored panel from `half` on, in one pass:
// vpmaddubsw + vpmaddwd (Q8_0's quants signed: vpsignb moves w's sign onto x, as HalfPanelGroup).
// Both halves at once (H = 2) use each 64-byte line whole as it arrives, so the stream from memory
// never pauses; AVX2's 16 registers hold that for one row of x, more rows take a half per pass
// (the second from cache, while memory idles). A half's sums are in the same order either way.
template <int R, int G, bool kQ4, int H>
QKV_QG_ATTR void StoredHalfRows(const uint8_t* panel, int half, const uint8_t* xg, int64_t nb, Ahead ahead, float* y,
                                int64_t N) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[H][R];
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * StoredBlockBytes<kQ4>();
    const uint8_t* q = p + kStoredScaleBytes + 32 * half;
    AskAhead(p, StoredBlockBytes<kQ4>(), kStoredPrefetch, IntoL1(ahead));
    const auto* xw = reinterpret_cast<const int32_t*>(xg + b * XBlockBytes(G));
    const auto* xd = reinterpret_cast<const float*>(xw + 9 * G);
    __m256i isum[H][R];
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < R; ++r) isum[h][r] = _mm256_set1_epi32(xw[8 * G + r]);
    if constexpr (kQ4) {
      // The block's eight vpmaddubsw results summed in int16 before one vpmaddwd: a nibble (<= 15)
      // times x (|x| <= 127), in pairs, is at most 3,810 in size, eight of them 30,480 < 2^15; the
      // integer sums are the same, with a third fewer vector instructions (on an Intel Xeon this
      // kernel read from L2 at about the memory's rate before: its instructions set the pace).
      __m256i pairs[H][R];
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < R; ++r) pairs[h][r] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s)
        for (int h = 0; h < H; ++h) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * s + 32 * h));
          const __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
          for (int r = 0; r < R; ++r)
            pairs[h][r] = InRegister(_mm256_add_epi16(
                pairs[h][r], _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(xw[s * G + r])),
                                              _mm256_maddubs_epi16(hi, _mm256_set1_epi32(xw[(s + 4) * G + r])))));
        }
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < R; ++r)
          isum[h][r] = _mm256_add_epi32(isum[h][r], _mm256_madd_epi16(pairs[h][r], _mm256_set1_epi16(1)));
    } else {
      for (int s = 0; s < 8; ++s)
        for (int h = 0; h < H; ++h) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * s + 32 * h));
          const __m256i u = _mm256_sign_epi8(w, w);
          for (int r = 0; r < R; ++r)
            isum[h][r] =
                InRegister(_mm256_add_epi32(isum[h][r], DotPairs(u, _mm256_sign_epi8(_mm256_set1_epi32(xw[s * G + r]), w))));
        }
    }
    for (int h = 0; h < H; ++h) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * (half + h))));
      for (int r = 0; r < R; ++r)
        acc[h][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][r]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[r])), acc[h][r]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * N + 8 * (half + h), acc[h][r]);
}

template <int R, int G, bool kQ4>
QKV_QG_ATTR void StoredPanelRows(const uint8_t* panel, const uint8_t* xg, int64_t nb, Ahead ahead, float* y, int64_t N) {
  if constexpr (R == 1) {
    StoredHalfRows<1, G, kQ4, 2>(panel, 0, xg, nb, ahead, y, N);
  } else {
    StoredHalfRows<R, G, kQ4, 1>(panel, 0, xg, nb, ahead, y, N);
    StoredHalfRows<R, G, kQ4, 1>(panel, 1, xg, nb, Ahead::kNone, y, N);
  }
}
#endif

// `rows` (1 .. R) rows of x, packed in groups of g (kGroup, or M when M is fewer), against one
// stored panel.
// `ahead`: ask for the panel that follows as this one is read, and into which cache (the first group
// only: the others find this panel in cache).
template <int R, bool kQ4>
void StoredPanelGroup(int64_t rows, int64_t g, const uint8_t* panel, const uint8_t* xg, int64_t nb, Ahead ahead,
                      float* y, int64_t N) {
  if constexpr (R > 1) {
    if (rows < R) return StoredPanelGroup<R - 1, kQ4>(rows, g, panel, xg, nb, ahead, y, N);
  }
  if (g == R)
    StoredPanelRows<R, R, kQ4>(panel, xg, nb, ahead, y, N);
  else
    StoredPanelRows<R, kGroup, kQ4>(panel, xg, nb, ahead, y, N);
}

// x for the stored panels' kernels: groups of min(M, kGroup) rows (one row: 40 bytes per block).
int64_t StoredGroupRows(int64_t M) { return std::min<int64_t>(M, kGroup); }
int64_t PackedActivationBytesStored(int64_t M, int64_t nb) {
  const int64_t g = StoredGroupRows(M);
  return (M + g - 1) / g * nb * XBlockBytes(g);
}
void PackXStored(uint32_t id, const qd::Activations32& x, int64_t M, uint8_t* out) {
  PackActivations(x, Offset(id), M, StoredGroupRows(M), out);
}

// A stored panel (nb blocks) into PackPanel's layout: Q4_0's nibbles as bytes, Q8_0's quants as
// the kernel takes them, the scales as floats. For a prompt's many groups of rows, which then meet
// aligned bytes that need no unpacking (as the panels packed from rows).
void UnpackStoredPanel(uint32_t id, const uint8_t* panel, int64_t nb, uint8_t* out) {
  const bool q4 = id == qd::kQ4_0;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * (q4 ? StoredBlockBytes<true>() : StoredBlockBytes<false>());
    const uint8_t* q = p + kStoredScaleBytes;
    uint8_t* o = out + b * kBlockBytes;
    if (q4) {
      for (int64_t i = 0; i < 4 * kStepBytes; ++i) {
        o[i] = q[i] & 0xF;
        o[4 * kStepBytes + i] = q[i] >> 4;
      }
    } else {
      for (int64_t i = 0; i < kQuantBytes; ++i) o[i] = kQ8Unsigned ? static_cast<uint8_t>(q[i] ^ 0x80) : q[i];
    }
    for (int64_t j = 0; j < qd::kPanelRows; ++j) {
      const float d = f16_to_float(static_cast<uint16_t>(p[2 * j] | (p[2 * j + 1] << 8)));
      std::memcpy(o + kQuantBytes + 4 * j, &d, 4);
    }
  }
}

// Rows [n0, n1) of y (whole panels of W, stored) for every row of x (packed by PackXStored): a
// decoding step's few rows straight from the stored panels, a prompt's (kGemmMinRows and more)
// through each panel unpacked once, as Gemm32 does.
void GemmPanels(uint32_t id, const uint8_t* W, int64_t row_bytes, const uint8_t* xp, int64_t nb, int64_t M, int64_t N,
                int64_t n0, int64_t n1, float* y) {
  const int64_t g = StoredGroupRows(M);
  // PanelGroup reads x in groups of kGroup: a prompt's x is packed so (g = kGroup) from here on
  static_assert(qd::kGemmMinRows >= kGroup, "the packed kernels need whole groups of kGroup rows of x");
  if (M >= qd::kGemmMinRows) {
    thread_local std::vector<uint8_t> unpacked;  // one panel, reused: no allocation per call
    if (unpacked.size() < static_cast<size_t>(nb * kBlockBytes)) unpacked.resize(static_cast<size_t>(nb * kBlockBytes));
    for (int64_t n = n0; n < n1; n += qd::kPanelRows) {
      UnpackStoredPanel(id, W + n * row_bytes, nb, unpacked.data());
      for (int64_t m = 0; m < M; m += g) {
        const uint8_t* xg = xp + (m / g) * nb * XBlockBytes(g);
        const int64_t rows = std::min<int64_t>(g, M - m);
#if HWY_TARGET == HWY_AVX3_DL
        PanelGroup(unpacked.data(), xg, nb, rows, qd::kPanelRows, y + m * N + n, N);
#else
        if (id == qd::kQ4_0)
          PanelGroupOf<true>(unpacked.data(), xg, nb, rows, qd::kPanelRows, y + m * N + n, N);
        else
          PanelGroupOf<false>(unpacked.data(), xg, nb, rows, qd::kPanelRows, y + m * N + n, N);
#endif
      }
    }
    return;
  }
  const Ahead first = AheadOfFirstRow();
  for (int64_t n = n0; n < n1; n += qd::kPanelRows) {
    const uint8_t* panel = W + n * row_bytes;
    for (int64_t m = 0; m < M; m += g) {
      const uint8_t* xg = xp + (m / g) * nb * XBlockBytes(g);
      const int64_t rows = std::min<int64_t>(g, M - m);
      const Ahead ahead = m == 0 ? first : Ahead::kNone;
      if (id == qd::kQ4_0)
        StoredPanelGroup<kGroup, true>(rows, g, panel, xg, nb, ahead, y + m * N + n, N);
      else
        StoredPanelGroup<kGroup, false>(rows, g, panel, xg, nb, ahead, y + m * N + n, N);
    }
  }
}

// --- the K-quants (Q4_K, Q6_K) ------------------------------------------------------------------
//
// A super-block of 256 values of 16 rows of W, unpacked:
//   u8 q[64 steps][16 rows][4 values]         4096 bytes (Q4_K 0..15, Q6_K 0..63)
//   int32 scale[U units][16]                  Q4_K: U = 8 sub-blocks of 32 (s_j); Q6_K: 16 groups of 16 (sc_g)
//                                             (AVX2: the scale twice, as two int16, for vpmaddwd)
//   int32 pairs[8][16] of two int16           Q4_K (m_p, m_p); Q6_K (sc_2p, sc_2p+1): against x's bsums in pairs
//   float d[16] (Q4_K: and dmin[16])
// and x per group of kGroup rows and super-block: int32 q4[64 steps][kGroup], int32 bsum pairs
// [8][kGroup] (bsums[2p] | bsums[2p+1] << 16), float d[kGroup]. Per super-block, exact in int32:
//   scaled = sum_u scale_u (sum over the unit's steps of q . qx)      (vpdpbusd, then vpmulld;
//                                                                       AVX2 vpmaddubsw, then vpmaddwd by the scale)
//   pairs  = sum_p pair_p . bsum pair_p                                (vpdpwssd; AVX2 vpmaddwd)
// Q4_K: y = fma(float(scaled), d dx, y); y = fma(float(-pairs), dmin dx, y)     (mins = pairs)
// Q6_K: y = fma(float(scaled - 32 pairs), d dx, y)
// the float order of quant_matvec's row kernel (RowsK), so a row has the same bits whatever M.
constexpr int64_t kKQuantBytes = 64 * kStepBytes;
template <bool kQ6>
constexpr int64_t KUnits() { return kQ6 ? 16 : 8; }
template <bool kQ6>
constexpr int64_t KPairsAt() { return kKQuantBytes + KUnits<kQ6>() * 64; }
template <bool kQ6>
constexpr int64_t KScalesAt() { return KPairsAt<kQ6>() + 8 * 64; }
template <bool kQ6>
constexpr int64_t KBlockBytes() { return KScalesAt<kQ6>() + (kQ6 ? 64 : 128); }
constexpr int64_t kKXBlockBytes = 4 * kGroup * (64 + 8 + 1);

// A unit's scale as the kernel multiplies by it: an int32 (vpmulld), or on AVX2 two int16 (vpmaddwd).
inline int32_t ScaleWord(int s) {
  if constexpr (HWY_TARGET == HWY_AVX3_DL) return s;
  return static_cast<int32_t>(static_cast<uint16_t>(s) | (static_cast<uint32_t>(static_cast<uint16_t>(s)) << 16));
}

// Rows [n, n + rows) of W (rows <= 16; missing rows zero) into one panel (nb super-blocks).
template <bool kQ6>
void PackPanelK(const uint8_t* W, int64_t row_bytes, int64_t nb, int64_t n, int64_t rows, uint8_t* panel) {
  constexpr int64_t kBytes = kQ6 ? 210 : 144, kBlock = KBlockBytes<kQ6>();
  std::memset(panel, 0, static_cast<size_t>(nb * kBlock));
  for (int64_t j = 0; j < rows; ++j) {
    const uint8_t* row = W + (n + j) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * kBytes;
      uint8_t* out = panel + b * kBlock;
      uint8_t v[256];
      auto* scale = reinterpret_cast<int32_t*>(out + kKQuantBytes);
      auto* pairs = reinterpret_cast<int32_t*>(out + KPairsAt<kQ6>());
      auto* d = reinterpret_cast<float*>(out + KScalesAt<kQ6>());
      if constexpr (kQ6) {
        for (int i = 0; i < 256; ++i) {
          const int h = i / 128, k = (i % 128) / 32, l = i % 32;
          const uint8_t* ql = blk + 64 * h;
          const uint8_t* qh = blk + 128 + 32 * h;
          const int low = k == 0 ? ql[l] & 0xF : k == 1 ? ql[l + 32] & 0xF : k == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
          v[i] = static_cast<uint8_t>(low | (((qh[l] >> (2 * k)) & 3) << 4));
        }
        const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
        for (int g = 0; g < 16; ++g) scale[g * 16 + j] = ScaleWord(sc[g]);
        for (int p = 0; p < 8; ++p)
          pairs[p * 16 + j] = static_cast<int32_t>(static_cast<uint16_t>(sc[2 * p]) |
                                                   (static_cast<uint32_t>(static_cast<uint16_t>(sc[2 * p + 1])) << 16));
        d[j] = f16_to_float(static_cast<uint16_t>(blk[208] | (blk[209] << 8)));
      } else {
        for (int i = 0; i < 256; ++i) {
          const uint8_t byte = blk[16 + 32 * (i / 64) + i % 32];
          v[i] = (i / 32) % 2 == 0 ? byte & 0xF : byte >> 4;
        }
        for (int sub = 0; sub < 8; ++sub) {
          int sc = 0, m = 0;
          k_scale_min(sub, blk + 4, sc, m);
          scale[sub * 16 + j] = ScaleWord(sc);
          pairs[sub * 16 + j] = m | (m << 16);
        }
        d[j] = f16_to_float(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
        d[16 + j] = f16_to_float(static_cast<uint16_t>(blk[2] | (blk[3] << 8)));
      }
      for (int st = 0; st < 64; ++st) std::memcpy(out + st * kStepBytes + 4 * j, v + 4 * st, 4);
    }
  }
}

// Rows missing from the last group are zero (scale 0: their outputs are computed, not stored).
void PackActivationsK(const BlockQ8K* x, int64_t nb, int64_t M, uint8_t* out) {
  const int64_t groups = (M + kGroup - 1) / kGroup;
  std::memset(out, 0, static_cast<size_t>(groups * nb * kKXBlockBytes));
  for (int64_t m = 0; m < M; ++m) {
    uint8_t* group = out + (m / kGroup) * nb * kKXBlockBytes;
    const int r = static_cast<int>(m % kGroup);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8K& blk = x[m * nb + b];
      auto* words = reinterpret_cast<int32_t*>(group + b * kKXBlockBytes);
      for (int st = 0; st < 64; ++st) std::memcpy(&words[st * kGroup + r], blk.q + 4 * st, 4);
      for (int p = 0; p < 8; ++p)
        words[(64 + p) * kGroup + r] = static_cast<int32_t>(static_cast<uint16_t>(blk.bsums[2 * p]) |
                                                            (static_cast<uint32_t>(static_cast<uint16_t>(blk.bsums[2 * p + 1])) << 16));
      std::memcpy(&words[72 * kGroup + r], &blk.d, 4);
    }
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// One group of x's rows (packed) against one panel: kGroup x 16 outputs.
template <bool kQ6>
QKV_QG_ATTR void PanelGroupK(const uint8_t* panel, const uint8_t* xg, int64_t nb, int64_t rows, int64_t cols, float* y,
                             int64_t N) {
  constexpr int kUnits = static_cast<int>(KUnits<kQ6>()), kSteps = 64 / kUnits;
  __m512 acc[kGroup];
  for (int r = 0; r < kGroup; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * KBlockBytes<kQ6>();
    const auto* xw = reinterpret_cast<const int32_t*>(xg + b * kKXBlockBytes);
    __m512i scaled[kGroup];
    for (int r = 0; r < kGroup; ++r) scaled[r] = _mm512_setzero_si512();
    for (int u = 0; u < kUnits; ++u) {
      __m512i part[kGroup];
      for (int r = 0; r < kGroup; ++r) part[r] = _mm512_setzero_si512();
      for (int st = u * kSteps; st < (u + 1) * kSteps; ++st) {
        const __m512i w = _mm512_loadu_si512(p + st * kStepBytes);
        for (int r = 0; r < kGroup; ++r) part[r] = _mm512_dpbusd_epi32(part[r], w, _mm512_set1_epi32(xw[st * kGroup + r]));
      }
      const __m512i scale = _mm512_loadu_si512(p + kKQuantBytes + 64 * u);
      for (int r = 0; r < kGroup; ++r) scaled[r] = _mm512_add_epi32(scaled[r], _mm512_mullo_epi32(part[r], scale));
    }
    __m512i pairs[kGroup];
    for (int r = 0; r < kGroup; ++r) pairs[r] = _mm512_setzero_si512();
    for (int q = 0; q < 8; ++q) {
      const __m512i w = _mm512_loadu_si512(p + KPairsAt<kQ6>() + 64 * q);
      for (int r = 0; r < kGroup; ++r) pairs[r] = _mm512_dpwssd_epi32(pairs[r], w, _mm512_set1_epi32(xw[(64 + q) * kGroup + r]));
    }
    const auto* xd = reinterpret_cast<const float*>(xw + 72 * kGroup);
    const __m512 d = _mm512_loadu_ps(p + KScalesAt<kQ6>());
    if constexpr (kQ6) {
      for (int r = 0; r < kGroup; ++r)
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(scaled[r], _mm512_slli_epi32(pairs[r], 5))),
                                 _mm512_mul_ps(d, _mm512_set1_ps(xd[r])), acc[r]);
    } else {
      const __m512 dmin = _mm512_loadu_ps(p + KScalesAt<kQ6>() + 64);
      for (int r = 0; r < kGroup; ++r) {
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled[r]), _mm512_mul_ps(d, _mm512_set1_ps(xd[r])), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), pairs[r])),
                                 _mm512_mul_ps(dmin, _mm512_set1_ps(xd[r])), acc[r]);
      }
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << cols) - 1);
  for (int r = 0; r < rows; ++r) _mm512_mask_storeu_ps(y + r * N, keep, acc[r]);
}
#else
// One group against one half (8 rows, `half` 0 or 1) of a panel: AVX2's vpmaddubsw (the quants are
// unsigned, at most 63 x 127 x 2 per int16 pair: no saturation), then vpmaddwd by the unit's scale.
template <bool kQ6>
QKV_QG_ATTR void HalfPanelGroupK(const uint8_t* panel, int half, const uint8_t* xg, int64_t nb, int64_t rows,
                                 int64_t cols, float* y, int64_t N) {
  constexpr int kUnits = static_cast<int>(KUnits<kQ6>()), kSteps = 64 / kUnits;
  __m256 acc[kGroup];
  for (int r = 0; r < kGroup; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * KBlockBytes<kQ6>() + 32 * half;
    const auto* xw = reinterpret_cast<const int32_t*>(xg + b * kKXBlockBytes);
    __m256i scaled[kGroup];
    for (int r = 0; r < kGroup; ++r) scaled[r] = _mm256_setzero_si256();
    // A run of steps' vpmaddubsw summed in int16, then one vpmaddwd by the unit's scale: Q4_K's
    // whole unit (8 steps of pairs at most 2 x 15 x 127: 30,480 < 2^15), Q6_K's steps two at a time
    // (2 x 2 x 63 x 127 = 32,004). The same integer sums as a vpmaddwd a step. (Each sum held as
    // it is: GCC would otherwise reassociate a block's adds into a tree and spill it.)
    constexpr int kRun = kQ6 ? 2 : kSteps;
    static_assert(kSteps % kRun == 0, "a unit's steps in whole runs");
    for (int u = 0; u < kUnits; ++u) {
      const __m256i scale = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kKQuantBytes + 64 * u));
      for (int st0 = u * kSteps; st0 < (u + 1) * kSteps; st0 += kRun) {
        __m256i run[kGroup];
        for (int r = 0; r < kGroup; ++r) run[r] = _mm256_setzero_si256();
        for (int st = st0; st < st0 + kRun; ++st) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + st * kStepBytes));
          for (int r = 0; r < kGroup; ++r)
            run[r] = InRegister(_mm256_add_epi16(run[r], _mm256_maddubs_epi16(w, _mm256_set1_epi32(xw[st * kGroup + r]))));
        }
        for (int r = 0; r < kGroup; ++r)
          scaled[r] = InRegister(_mm256_add_epi32(scaled[r], _mm256_madd_epi16(run[r], scale)));
      }
    }
    __m256i pairs[kGroup];
    for (int r = 0; r < kGroup; ++r) pairs[r] = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + KPairsAt<kQ6>() + 64 * q));
      for (int r = 0; r < kGroup; ++r)
        pairs[r] =
            InRegister(_mm256_add_epi32(pairs[r], _mm256_madd_epi16(w, _mm256_set1_epi32(xw[(64 + q) * kGroup + r]))));
    }
    const auto* xd = reinterpret_cast<const float*>(xw + 72 * kGroup);
    const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(p - 32 * half + KScalesAt<kQ6>()) + 8 * half);
    if constexpr (kQ6) {
      for (int r = 0; r < kGroup; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(scaled[r], _mm256_slli_epi32(pairs[r], 5))),
                                 _mm256_mul_ps(d, _mm256_set1_ps(xd[r])), acc[r]);
    } else {
      const __m256 dmin = _mm256_loadu_ps(reinterpret_cast<const float*>(p - 32 * half + KScalesAt<kQ6>()) + 16 + 8 * half);
      for (int r = 0; r < kGroup; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(scaled[r]), _mm256_mul_ps(d, _mm256_set1_ps(xd[r])), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), pairs[r])),
                                 _mm256_mul_ps(dmin, _mm256_set1_ps(xd[r])), acc[r]);
      }
    }
  }
  StoreHalf(acc, rows, cols, half, y, N);
}
template <bool kQ6>
QKV_QG_ATTR void PanelGroupK(const uint8_t* panel, const uint8_t* xg, int64_t nb, int64_t rows, int64_t cols, float* y,
                             int64_t N) {
  HalfPanelGroupK<kQ6>(panel, 0, xg, nb, rows, std::min<int64_t>(cols, 8), y, N);
  if (cols > 8) HalfPanelGroupK<kQ6>(panel, 1, xg, nb, rows, cols - 8, y, N);
}
#endif

bool HasGemmK() { return true; }
int64_t PackedActivationBytesK(int64_t M, int64_t nb) { return (M + kGroup - 1) / kGroup * nb * kKXBlockBytes; }
void PackXK(const BlockQ8K* x, int64_t nb, int64_t M, uint8_t* out) { PackActivationsK(x, nb, M, out); }

// A packed panel (columns [n, n + cols) of y) against every row of x (packed by PackXK).
template <bool kQ6>
void MultiplyPanelK(const uint8_t* panel, const uint8_t* xp, int64_t nb, int64_t M, int64_t N, int64_t n, int64_t cols,
                    float* y) {
  for (int64_t m = 0; m < M; m += kGroup) {
    const uint8_t* xg = xp + (m / kGroup) * nb * kKXBlockBytes;
    PanelGroupK<kQ6>(panel, xg, nb, std::min<int64_t>(kGroup, M - m), cols, y + m * N + n, N);
  }
}

// Rows [n0, n1) of y for every row of x (packed by PackXK), one panel of W at a time.
void GemmK(uint32_t id, const uint8_t* W, int64_t row_bytes, const uint8_t* xp, int64_t nb, int64_t M, int64_t N,
           int64_t n0, int64_t n1, float* y) {
  const bool q6 = id == qd::kQ6_K;
  const int64_t block = q6 ? KBlockBytes<true>() : KBlockBytes<false>();
  thread_local std::vector<uint8_t> panel;  // one panel, reused: no allocation per call
  if (panel.size() < static_cast<size_t>(nb * block)) panel.resize(static_cast<size_t>(nb * block));
  for (int64_t n = n0; n < n1; n += qd::kPanelRows) {
    const int64_t cols = std::min(qd::kPanelRows, n1 - n);
    if (q6) {
      PackPanelK<true>(W, row_bytes, nb, n, cols, panel.data());
      MultiplyPanelK<true>(panel.data(), xp, nb, M, N, n, cols, y);
    } else {
      PackPanelK<false>(W, row_bytes, nb, n, cols, panel.data());
      MultiplyPanelK<false>(panel.data(), xp, nb, M, N, n, cols, y);
    }
  }
}

bool HasGemm() { return true; }

int64_t PackedActivationBytes(int64_t M, int64_t nb) { return (M + kGroup - 1) / kGroup * nb * kXBlockBytes; }

void PackX(uint32_t id, const qd::Activations32& x, int64_t M, uint8_t* out) {
  PackActivations(x, Offset(id), M, kGroup, out);
}

// Rows [n0, n1) of y for every row of x (packed by PackX), one panel of W at a time.
void Gemm32(uint32_t id, const uint8_t* W, int64_t row_bytes, const uint8_t* xp, int64_t nb, int64_t M, int64_t N,
            int64_t n0, int64_t n1, float* y) {
  thread_local std::vector<uint8_t> panel;  // one panel, reused: no allocation per call
  if (panel.size() < static_cast<size_t>(nb * kBlockBytes)) panel.resize(static_cast<size_t>(nb * kBlockBytes));
  for (int64_t n = n0; n < n1; n += qd::kPanelRows) {
    const int64_t cols = std::min(qd::kPanelRows, n1 - n);
    PackPanel(id, W, row_bytes, nb, n, cols, panel.data());
    for (int64_t m = 0; m < M; m += kGroup) {
      const uint8_t* xg = xp + (m / kGroup) * nb * kXBlockBytes;
      const int64_t rows = std::min<int64_t>(kGroup, M - m);
#if HWY_TARGET == HWY_AVX3_DL
      PanelGroup(panel.data(), xg, nb, rows, cols, y + m * N + n, N);
#else
      if (id == qd::kQ4_0)
        PanelGroupOf<true>(panel.data(), xg, nb, rows, cols, y + m * N + n, N);
      else
        PanelGroupOf<false>(panel.data(), xg, nb, rows, cols, y + m * N + n, N);
#endif
    }
  }
}

// --- Q4_K and Q6_K stored in panels (qkv/core/quant_panels.h) ------------------------------------
//
// A stored super-block of 16 rows (16 x 144 = 2304 bytes): f16 d[16], f16 dmin[16], then the rows'
// 12 bytes of packed scales and mins as three words each, w0[16] w1[16] w2[16], then 32 steps of
// 64 bytes: step s = 8 p + t holds row j's quant bytes 32 p + 4 t .. 32 p + 4 t + 3 at 256 + 64 s +
// 4 j, whose low nibbles are values 4 t .. 4 t + 3 of sub-block 2 p and whose high nibbles are the
// same values of sub-block 2 p + 1. The 16 rows' scales and mins are unpacked in registers (the
// operations of k_scale_min on every row at once), and a super-block's sums are those of the row
// kernel (RowsK), exact in int32:
//   scaled = sum_j s_j (sum_i q_i qx_i)     (per sub-block j: a vpdpbusd chain, then vpmulld;
//                                             AVX2: vpmaddubsw summed in int16, then vpmaddwd by s_j)
//   mins   = sum_j m_j xs_j                  (xs_j: x's sum over sub-block j; vpdpwssd / vpmaddwd)
// and enter y in RowsK's float order: y = fma(float(scaled), d dx, y); y = fma(float(-mins), dmin dx, y).
// x is read as quantized (BlockQ8K) with, per super-block, its sub-blocks' sums as the four words
// (xs0 | xs2 << 16, xs1 | xs3 << 16, xs4 | xs6 << 16, xs5 | xs7 << 16) that the mins' pairs meet
// (quant_gemm_panels_k's xwords, 8 a super-block: Q6_K's take all 8).
constexpr int64_t kQ4KStoredBlock = 16 * 144;
constexpr int64_t kQ4KStoredSteps = 256;  // where the steps start (after the header's columns)
constexpr int64_t kQ6KStoredBlock = 16 * 210;
constexpr int64_t kQ6KStoredSteps = 288;
// A K-quant kernel asks for lines ahead as it starts a super-block; its lines are read out of order
// (ql's two steps and qh's in turn), which the hardware prefetcher does not follow. Into L1 (Q4_K 2
// KiB ahead, kStoredPrefetch; Q6_K the whole next block, which 2 KiB does not cover): AVX2's Q6_K on
// Zen 5 from 20-26 to 28-33 GB/s (one thread, the kernel alone from memory). On Zen 4 (family 25
// model 17, read bandwidth 28 GB/s on one thread, 33 on two) into L1 held the AVX-512 Q6_K kernel
// to 11-13 GB/s on one thread (lines asked for 2 KiB or a block ahead, spread one per line read,
// or not at all: 7-13); the super-block after next into L2 (prefetch_bursts_to_l2(), Zen 4's
// choice): 20-21 (2 threads 13-17 -> 21-28), AVX2's Q6_K 2 threads 9-10 -> 20-25, AVX2's Q4_K
// 18-20 -> 24-26; AVX-512's Q4_K made a decoding step 0.94x as long. On Zen 5 into L2 made Q6_K
// decoding steps 1.14x (AVX-512) and 1.11x (AVX2) as long, Q4_K's 0.99x and 1.02x.
// Where a K-quant kernel asks, `l1_at` bytes on when into L1.
int64_t KAheadAt(Ahead ahead, int64_t block, int64_t l1_at) { return ahead == Ahead::kL2 ? 2 * block : l1_at; }

QKV_QG_ATTR HWY_INLINE int32_t Word(const int8_t* q) {
  int32_t w;
  std::memcpy(&w, q, 4);
  return w;
}

#if HWY_TARGET == HWY_AVX3_DL
// One row of x against one stored Q4_K panel (nb super-blocks): y[0 .. 16).
QKV_QG_ATTR void StoredQ4KRow(const uint8_t* panel, const BlockQ8K* x, const int32_t* xmins, int64_t nb, Ahead ahead,
                              float* y) {
  const int64_t ahead_at = KAheadAt(ahead, kQ4KStoredBlock, kStoredPrefetch);
  const __m512i low4 = _mm512_set1_epi8(0x0F), byte = _mm512_set1_epi32(0xFF);
  const __m512i k6 = _mm512_set1_epi32(0x3f3f3f3f), k4 = _mm512_set1_epi32(0x0f0f0f0f),
                k2 = _mm512_set1_epi32(0x03030303), even16 = _mm512_set1_epi32(0x00FF00FF);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * kQ4KStoredBlock;
    AskAhead(p, kQ4KStoredBlock, ahead_at, WithoutHint(ahead));
    const int8_t* xq = x[b].q;
    const int32_t* xm = xmins + 8 * b;
    // k_scale_min on 16 rows: sc_lo / mn_lo the bytes of sub-blocks 0..3, sc_hi / mn_hi of 4..7
    const __m512i w0 = _mm512_loadu_si512(p + 64), w1 = _mm512_loadu_si512(p + 128), w2 = _mm512_loadu_si512(p + 192);
    const __m512i sc_lo = _mm512_and_si512(w0, k6), mn_lo = _mm512_and_si512(w1, k6);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(w2, k4),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), k2), 4));
    const __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), k4),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), k2), 4));
    __m512i mins = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_and_si512(mn_lo, even16), _mm512_set1_epi32(xm[0]));
    mins = _mm512_dpwssd_epi32(mins, _mm512_and_si512(_mm512_srli_epi32(mn_lo, 8), even16), _mm512_set1_epi32(xm[1]));
    mins = _mm512_dpwssd_epi32(mins, _mm512_and_si512(mn_hi, even16), _mm512_set1_epi32(xm[2]));
    mins = _mm512_dpwssd_epi32(mins, _mm512_and_si512(_mm512_srli_epi32(mn_hi, 8), even16), _mm512_set1_epi32(xm[3]));
    __m512i scaled = _mm512_setzero_si512();
    for (int pair = 0; pair < 4; ++pair) {
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
      for (int t = 0; t < 8; ++t) {
        const __m512i raw = InRegister(_mm512_loadu_si512(p + kQ4KStoredSteps + 64 * (8 * pair + t)));
        lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(raw, low4), _mm512_set1_epi32(Word(xq + 64 * pair + 4 * t)));
        hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4),
                                 _mm512_set1_epi32(Word(xq + 64 * pair + 32 + 4 * t)));
      }
      const __m512i sc = pair < 2 ? sc_lo : sc_hi;
      const int shift = 16 * (pair % 2);  // sub-block 2 pair's byte; 2 pair + 1's is the next
      const __m512i s_even = _mm512_and_si512(_mm512_srli_epi32(sc, static_cast<unsigned>(shift)), byte);
      const __m512i s_odd = _mm512_and_si512(_mm512_srli_epi32(sc, static_cast<unsigned>(shift + 8)), byte);
      scaled = _mm512_add_epi32(scaled, _mm512_add_epi32(_mm512_mullo_epi32(lo, s_even), _mm512_mullo_epi32(hi, s_odd)));
    }
    const __m512 dx = _mm512_set1_ps(x[b].d);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled), _mm512_mul_ps(d, dx), acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), mins)), _mm512_mul_ps(dmin, dx), acc);
  }
  _mm512_storeu_ps(y, acc);
}

// One row of x against one stored Q6_K panel: d[16], the four words of int8 scales c0..c3[16]
// (groups 4 c .. 4 c + 3), then 48 steps (ql's 32, qh's 16) from byte 288. Values 128 h + 32 k +
// 4 t + i of row j: low bits from ql step 16 h + t (k 0, 2: its low / high nibble) or 16 h + 8 + t
// (k 1, 3), high bits (2 k, 2 k + 1) of qh step 32 + 8 h + t; group g = 8 h + 2 k + t / 4.
//   isum = sum_g sc_g (sum_i q_i qx_i) - 32 sum_g sc_g bsum_g     (RowsK's, exact in int32)
QKV_QG_ATTR void StoredQ6KRow(const uint8_t* panel, const BlockQ8K* x, const int32_t* xwords, int64_t nb, Ahead ahead,
                              float* y) {
  const int64_t ahead_at = KAheadAt(ahead, kQ6KStoredBlock, kQ6KStoredBlock);
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * kQ6KStoredBlock;
    AskAhead(p, kQ6KStoredBlock, ahead_at, WithoutHint(ahead));
    const int8_t* xq = x[b].q;
    const int32_t* xw = xwords + 8 * b;
    __m512i c[4], offset = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      c[k] = _mm512_loadu_si512(p + 32 + 64 * k);
      offset = _mm512_dpwssd_epi32(offset, _mm512_srai_epi16(_mm512_slli_epi16(c[k], 8), 8), _mm512_set1_epi32(xw[2 * k]));
      offset = _mm512_dpwssd_epi32(offset, _mm512_srai_epi16(c[k], 8), _mm512_set1_epi32(xw[2 * k + 1]));
    }
    __m512i scaled = _mm512_setzero_si512();
    // unrolled whole, so that each group's scale is picked with constant shifts from c in registers
    // (rolled, GCC kept c on the stack and shifted by counts in registers: W in L2, one thread, Zen 4,
    // `qkv_quant_matvec_bench --in-cache --shapes 512x1024` 27-40 -> 50 GB/s)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        __m512i part[4];
        for (int k = 0; k < 4; ++k) part[k] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int t = 4 * half; t < 4 * half + 4; ++t) {
          const uint8_t* st = p + kQ6KStoredSteps;
          const __m512i qa = InRegister(_mm512_loadu_si512(st + 64 * (16 * h + t)));
          const __m512i qb = InRegister(_mm512_loadu_si512(st + 64 * (16 * h + 8 + t)));
          const __m512i qh = InRegister(_mm512_loadu_si512(st + 64 * (32 + 8 * h + t)));
          __m512i q[4];
          q[0] = _mm512_or_si512(_mm512_and_si512(qa, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), bits45));
          q[1] = _mm512_or_si512(_mm512_and_si512(qb, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), bits45));
          q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qa, 4), low4), _mm512_and_si512(qh, bits45));
          q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qb, 4), low4),
                                 _mm512_and_si512(_mm512_srli_epi16(qh, 2), bits45));
          for (int k = 0; k < 4; ++k)
            part[k] = _mm512_dpbusd_epi32(part[k], q[k], _mm512_set1_epi32(Word(xq + 128 * h + 32 * k + 4 * t)));
        }
        for (int k = 0; k < 4; ++k) {
          const int g = 8 * h + 2 * k + half;  // its scale: byte g % 4 of word g / 4, sign-extended
          const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(c[g / 4], static_cast<unsigned>(24 - 8 * (g % 4))), 24);
          scaled = _mm512_add_epi32(scaled, _mm512_mullo_epi32(part[k], sc));
        }
      }
    const __m512i isum = _mm512_sub_epi32(scaled, _mm512_slli_epi32(offset, 5));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_set1_ps(x[b].d)), acc);
  }
  _mm512_storeu_ps(y, acc);
}
#else
// vpshufb controls for AVX2: byte k of each dword of a line copied into both its int16 words, as
// the low byte (the byte above zeroed: an unsigned 6-bit scale) or as the high byte (the one below
// zeroed: >> 8 then sign-extends an int8 scale).
inline void DwordBytePicks(bool high, __m256i pick[4]) {
  for (int k = 0; k < 4; ++k) {
    alignas(32) int8_t c[32];
    for (int i = 0; i < 32; ++i)
      c[i] = (i % 2 == 1) == high ? static_cast<int8_t>((i / 4) * 4 + k) : static_cast<int8_t>(-128);
    pick[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(c));
  }
}

// The AVX2 stored kernels' frame: a panel's super-blocks (`block` bytes each; with `ahead`, lines
// asked for as each starts: into L1 `l1_at` bytes on, into L2 the super-block after next), each as
// two halves of 8 rows, the second half's lines from L1: half(p, b, rows, acc[rows]) adds
// super-block b's part to rows' 8 sums.
template <class Half>
inline void StoredHalves(const uint8_t* panel, int64_t nb, int64_t block, int64_t l1_at, Ahead ahead, float* y,
                         const Half& half) {
  const int64_t ahead_at = KAheadAt(ahead, block, l1_at);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * block;
    AskAhead(p, block, ahead_at, WithoutHint(ahead));
    for (int rows = 0; rows < 2; ++rows) half(p, b, rows, acc[rows]);
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

// The same on AVX2.
QKV_QG_ATTR void StoredQ4KRow(const uint8_t* panel, const BlockQ8K* x, const int32_t* xmins, int64_t nb, Ahead ahead,
                              float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i k6 = _mm256_set1_epi32(0x3f3f3f3f), k4 = _mm256_set1_epi32(0x0f0f0f0f),
                k2 = _mm256_set1_epi32(0x03030303), even16 = _mm256_set1_epi32(0x00FF00FF);
  __m256i pick[4];  // the scale of sub-block k or 4 + k
  DwordBytePicks(false, pick);
  StoredHalves(panel, nb, kQ4KStoredBlock, kStoredPrefetch, ahead, y, [&](const uint8_t* p, int64_t b, int h, __m256& acc) {
    const int8_t* xq = x[b].q;
    const int32_t* xm = xmins + 8 * b;
    const __m256 dx = _mm256_set1_ps(x[b].d);
    auto load = [&](int64_t at) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at + 32 * h)); };
    const __m256i w0 = load(64), w1 = load(128), w2 = load(192);
    const __m256i sc_lo = _mm256_and_si256(w0, k6), mn_lo = _mm256_and_si256(w1, k6);
    const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(w2, k4),
                                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), k2), 4));
    const __m256i mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), k4),
                                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), k2), 4));
    const __m256i mins = _mm256_add_epi32(
        _mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(mn_lo, even16), _mm256_set1_epi32(xm[0])),
                         _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(mn_lo, 8), even16), _mm256_set1_epi32(xm[1]))),
        _mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(mn_hi, even16), _mm256_set1_epi32(xm[2])),
                         _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(mn_hi, 8), even16), _mm256_set1_epi32(xm[3]))));
    __m256i scaled = _mm256_setzero_si256();
    for (int pair = 0; pair < 4; ++pair) {
      // int16 sums of a sub-block's 8 steps: at most 8 x 2 x 15 x 127 = 30480, no overflow
      __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) {
        const __m256i raw = InRegister(load(kQ4KStoredSteps + 64 * (8 * pair + t)));
        lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(_mm256_and_si256(raw, low4),
                                                       _mm256_set1_epi32(Word(xq + 64 * pair + 4 * t))));
        hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low4),
                                                       _mm256_set1_epi32(Word(xq + 64 * pair + 32 + 4 * t))));
      }
      const __m256i sc = pair < 2 ? sc_lo : sc_hi;
      const int k = 2 * (pair % 2);
      scaled = _mm256_add_epi32(scaled, _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_shuffle_epi8(sc, pick[k])),
                                                         _mm256_madd_epi16(hi, _mm256_shuffle_epi8(sc, pick[k + 1]))));
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(scaled), _mm256_mul_ps(d, dx), acc);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), mins)), _mm256_mul_ps(dmin, dx),
                          acc);
  });
}

// The same on AVX2 (each half of 8 rows in turn): two steps' vpmaddubsw summed in int16 (at most
// 2 x 2 x 63 x 127 = 32004), then vpmaddwd by the group's scale.
QKV_QG_ATTR void StoredQ6KRow(const uint8_t* panel, const BlockQ8K* x, const int32_t* xwords, int64_t nb, Ahead ahead,
                              float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  __m256i pick[4];  // the signed scales as int16
  DwordBytePicks(true, pick);
  StoredHalves(panel, nb, kQ6KStoredBlock, kQ6KStoredBlock, ahead, y, [&](const uint8_t* p, int64_t b, int rows, __m256& acc) {
    const int8_t* xq = x[b].q;
    const int32_t* xw = xwords + 8 * b;
    const __m256 dx = _mm256_set1_ps(x[b].d);
    auto load = [&](int64_t at) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at + 32 * rows)); };
    __m256i c[4], offset = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      c[k] = load(32 + 64 * k);
      offset = _mm256_add_epi32(offset, _mm256_madd_epi16(_mm256_srai_epi16(_mm256_slli_epi16(c[k], 8), 8),
                                                          _mm256_set1_epi32(xw[2 * k])));
      offset = _mm256_add_epi32(offset, _mm256_madd_epi16(_mm256_srai_epi16(c[k], 8), _mm256_set1_epi32(xw[2 * k + 1])));
    }
    __m256i scaled = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half) {
        __m256i sc[4];
        for (int k = 0; k < 4; ++k) {
          const int g = 8 * h + 2 * k + half;
          sc[k] = _mm256_srai_epi16(_mm256_shuffle_epi8(c[g / 4], pick[g % 4]), 8);
        }
        for (int t = 4 * half; t < 4 * half + 4; t += 2) {
          __m256i s16[4];
          for (int k = 0; k < 4; ++k) s16[k] = _mm256_setzero_si256();
          for (int u = t; u < t + 2; ++u) {
            const __m256i qa = InRegister(load(kQ6KStoredSteps + 64 * (16 * h + u)));
            const __m256i qb = InRegister(load(kQ6KStoredSteps + 64 * (16 * h + 8 + u)));
            const __m256i qh = InRegister(load(kQ6KStoredSteps + 64 * (32 + 8 * h + u)));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(qa, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
            q[1] = _mm256_or_si256(_mm256_and_si256(qb, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), low4), _mm256_and_si256(qh, bits45));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), low4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
            for (int k = 0; k < 4; ++k)
              s16[k] = InRegister(_mm256_add_epi16(
                  s16[k], _mm256_maddubs_epi16(q[k], _mm256_set1_epi32(Word(xq + 128 * h + 32 * k + 4 * u)))));
          }
          for (int k = 0; k < 4; ++k) scaled = _mm256_add_epi32(scaled, _mm256_madd_epi16(s16[k], sc[k]));
        }
      }
    const __m256i isum = _mm256_sub_epi32(scaled, _mm256_slli_epi32(offset, 5));
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * rows)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, dx), acc);
  });
}
#endif

// Rows [n0, n1) of y (whole panels of a stored Q4_K or Q6_K W) for every row of x (xwords: 8 per
// super-block): below kGemmMinRows rows each panel as stored against each row (the first asks for
// what follows); from there on each panel back in the rows' layout, then packed as GemmK packs it
// (xp: x packed by PackXK).
void GemmPanelsK(uint32_t id, const uint8_t* W, int64_t row_bytes, const BlockQ8K* x, const int32_t* xwords,
                 const uint8_t* xp, int64_t nb, int64_t M, int64_t N, int64_t n0, int64_t n1, float* y) {
  const bool q6 = id == qd::kQ6_K;
  if (M < qd::kGemmMinRows) {
    const Ahead first = AheadOfFirstRow();
    for (int64_t n = n0; n < n1; n += qd::kPanelRows)
      for (int64_t m = 0; m < M; ++m) {
        const uint8_t* panel = W + n * row_bytes;
        const Ahead ahead = m == 0 ? first : Ahead::kNone;
        if (q6)
          StoredQ6KRow(panel, x + m * nb, xwords + m * nb * 8, nb, ahead, y + m * N + n);
        else
          StoredQ4KRow(panel, x + m * nb, xwords + m * nb * 8, nb, ahead, y + m * N + n);
      }
    return;
  }
  thread_local std::vector<uint8_t> rows, panel;  // one panel's rows and its packing, reused
  if (rows.size() < static_cast<size_t>(qd::kPanelRows * row_bytes))
    rows.resize(static_cast<size_t>(qd::kPanelRows * row_bytes));
  const int64_t block = q6 ? KBlockBytes<true>() : KBlockBytes<false>();
  if (panel.size() < static_cast<size_t>(nb * block)) panel.resize(static_cast<size_t>(nb * block));
  const QuantType& t = quant_type(id);
  for (int64_t n = n0; n < n1; n += qd::kPanelRows) {
    const QuantView stored{&t, W + n * row_bytes, true};
    for (int64_t j = 0; j < qd::kPanelRows; ++j)
      quant_row(stored, qd::kPanelRows, 256 * nb, j, rows.data() + j * row_bytes);
    if (q6) {
      PackPanelK<true>(rows.data(), row_bytes, nb, 0, qd::kPanelRows, panel.data());
      MultiplyPanelK<true>(panel.data(), xp, nb, M, N, n, qd::kPanelRows, y);
    } else {
      PackPanelK<false>(rows.data(), row_bytes, nb, 0, qd::kPanelRows, panel.data());
      MultiplyPanelK<false>(panel.data(), xp, nb, M, N, n, qd::kPanelRows, y);
    }
  }
}
#else
bool HasGemm() { return false; }
bool HasGemmK() { return false; }
int64_t PackedActivationBytesK(int64_t, int64_t) { return 0; }
void PackXK(const BlockQ8K*, int64_t, int64_t, uint8_t*) {}
void GemmK(uint32_t, const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t, float*) {}
void GemmPanels(uint32_t, const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t, float*) {}
void GemmPanelsK(uint32_t, const uint8_t*, int64_t, const BlockQ8K*, const int32_t*, const uint8_t*, int64_t, int64_t,
                 int64_t, int64_t, int64_t, float*) {}
int64_t PackedActivationBytesStored(int64_t, int64_t) { return 0; }
void PackXStored(uint32_t, const qd::Activations32&, int64_t, uint8_t*) {}
int64_t PackedActivationBytes(int64_t, int64_t) { return 0; }
void PackX(uint32_t, const qd::Activations32&, int64_t, uint8_t*) {}
void Gemm32(uint32_t, const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t, float*) {}
#endif

}  // namespace qkv::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::quant_detail {

HWY_EXPORT(HasGemm);
HWY_EXPORT(PackedActivationBytes);
HWY_EXPORT(PackX);
HWY_EXPORT(Gemm32);
HWY_EXPORT(GemmPanels);
HWY_EXPORT(PackedActivationBytesStored);
HWY_EXPORT(PackXStored);
HWY_EXPORT(HasGemmK);
HWY_EXPORT(PackedActivationBytesK);
HWY_EXPORT(PackXK);
HWY_EXPORT(GemmK);
HWY_EXPORT(GemmPanelsK);

namespace {
// W's N rows in runs of whole panels over the pool: `per_thread` tasks per thread (more balance a
// slow start); fn(n0, n1) for each non-empty run.
template <typename Fn>
void over_panels(int64_t N, ThreadPool& pool, int64_t per_thread, const Fn& fn) {
  const int64_t panels = (N + kPanelRows - 1) / kPanelRows;
  const int64_t tasks = std::min<int64_t>(panels, per_thread * pool.num_threads());
  const int64_t per = (panels + tasks - 1) / tasks * kPanelRows;
  pool.parallel_for(tasks, [&](int64_t task, int) {
    const int64_t n0 = task * per, n1 = std::min(N, n0 + per);
    if (n0 < n1) fn(n0, n1);
  });
}

// fn(n0, n1) over W's whole stored panels for M rows of x. A decoding step's few rows: one run of
// W per thread, walked forward (a run's start waits for memory while the prefetchers find the
// stream; every extra run pays it again), its tail shared with whichever thread is done first
// (Qwen3-0.6B Q4_0 decoding steps on an Intel Xeon model 207, 6 paired rounds: 0.96x the time of
// fixed halves; Q8_0 1.00x). A prompt's: four tasks a thread, for balance.
template <typename Fn>
void over_stored_panels(int64_t N, int64_t M, ThreadPool& pool, const Fn& fn) {
  const int64_t whole = N / kPanelRows * kPanelRows;
  if (M < kGemmMinRows)
    pool.parallel_runs(whole, kPanelRows, [&](int64_t n0, int64_t n1, int) { fn(n0, n1); });
  else
    over_panels(whole, pool, 4, fn);
}
}  // namespace

bool quant_gemm_available() { return HWY_DYNAMIC_DISPATCH(HasGemm)(); }
bool quant_gemm_k_available() { return HWY_DYNAMIC_DISPATCH(HasGemmK)(); }

void quant_gemm_k(uint32_t id, const uint8_t* W, int64_t row_bytes, const BlockQ8K* x, int64_t nb, int64_t M, int64_t N,
                  float* y, ThreadPool& pool) {
  thread_local std::vector<uint8_t> packed;  // x for the kernel, kept between calls
  const size_t bytes = static_cast<size_t>(HWY_DYNAMIC_DISPATCH(PackedActivationBytesK)(M, nb));
  if (packed.size() < bytes) packed.resize(bytes);
  HWY_DYNAMIC_DISPATCH(PackXK)(x, nb, M, packed.data());
  const uint8_t* xp = packed.data();
  over_panels(N, pool, 4, [&](int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(GemmK)(id, W, row_bytes, xp, nb, M, N, n0, n1, y);
  });
}

void quant_gemm_32(uint32_t id, const uint8_t* W, int64_t row_bytes, const Activations32& x, int64_t M, int64_t N,
                   float* y, ThreadPool& pool) {
  thread_local std::vector<uint8_t> packed;  // x for the kernel, kept between calls
  const size_t bytes = static_cast<size_t>(HWY_DYNAMIC_DISPATCH(PackedActivationBytes)(M, x.nb));
  if (packed.size() < bytes) packed.resize(bytes);
  HWY_DYNAMIC_DISPATCH(PackX)(id, x, M, packed.data());
  const uint8_t* xp = packed.data();
  over_panels(N, pool, 4, [&](int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(Gemm32)(id, W, row_bytes, xp, x.nb, M, N, n0, n1, y);
  });
}

void quant_gemm_panels(uint32_t id, const uint8_t* W, int64_t row_bytes, const Activations32& x, int64_t M,
                       int64_t N, float* y, ThreadPool& pool) {
  thread_local std::vector<uint8_t> packed;  // x for the kernel, kept between calls
  const size_t bytes = static_cast<size_t>(HWY_DYNAMIC_DISPATCH(PackedActivationBytesStored)(M, x.nb));
  if (packed.size() < bytes) packed.resize(bytes);
  HWY_DYNAMIC_DISPATCH(PackXStored)(id, x, M, packed.data());
  const uint8_t* xp = packed.data();
  over_stored_panels(N, M, pool, [&](int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(GemmPanels)(id, W, row_bytes, xp, x.nb, M, N, n0, n1, y);
  });
}

void quant_gemm_panels_k(uint32_t id, const uint8_t* W, int64_t row_bytes, const BlockQ8K* x, int64_t nb, int64_t M,
                         int64_t N, float* y, ThreadPool& pool) {
  // x's sums as the words the kernels' pairs meet, 8 per super-block: Q4_K the sub-blocks' sums
  // xs_j (xs0 | xs2 << 16, xs1 | xs3 << 16, xs4 | xs6 << 16, xs5 | xs7 << 16, then zeros) against
  // the mins; Q6_K the bsums (b0 | b2 << 16, b1 | b3 << 16, b4 | b6 << 16, ...) against the scales
  thread_local std::vector<int32_t> xwords;
  if (xwords.size() < static_cast<size_t>(M * nb * 8)) xwords.resize(static_cast<size_t>(M * nb * 8));
  auto pair = [](int a, int b) {
    return static_cast<int32_t>(static_cast<uint16_t>(a) | (static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16));
  };
  for (int64_t i = 0; i < M * nb; ++i) {
    int s[16];
    const bool q6 = id == kQ6_K;
    for (int j = 0; j < (q6 ? 16 : 8); ++j)
      s[j] = q6 ? x[i].bsums[j] : x[i].bsums[2 * j] + x[i].bsums[2 * j + 1];
    if (!q6)
      for (int j = 8; j < 16; ++j) s[j] = 0;
    int32_t* w = xwords.data() + 8 * i;
    for (int c = 0; c < 4; ++c) {
      w[2 * c] = pair(s[4 * c], s[4 * c + 2]);
      w[2 * c + 1] = pair(s[4 * c + 1], s[4 * c + 3]);
    }
  }
  thread_local std::vector<uint8_t> packed;
  if (M >= kGemmMinRows) {
    const size_t bytes = static_cast<size_t>(HWY_DYNAMIC_DISPATCH(PackedActivationBytesK)(M, nb));
    if (packed.size() < bytes) packed.resize(bytes);
    HWY_DYNAMIC_DISPATCH(PackXK)(x, nb, M, packed.data());
  }
  // (pointers taken here: in the lambda, on a worker, the thread_local names would be the worker's)
  const int32_t* xw = xwords.data();
  const uint8_t* xp = packed.data();
  over_stored_panels(N, M, pool, [&](int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(GemmPanelsK)(id, W, row_bytes, x, xw, xp, nb, M, N, n0, n1, y);
  });
}

}  // namespace qkv::quant_detail
#endif  // HWY_ONCE
