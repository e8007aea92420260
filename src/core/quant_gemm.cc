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
#include "hwy/highway.h"
#include "qkv/core/bf16.h"

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
// x packed per group of kGroup rows, per block: int32 q4[8 steps][kGroup] (row r's values 4 s ..
// 4 s + 3), int32 start[kGroup] (-offset x the block's sum of quants), float d[kGroup].
constexpr int64_t kXBlockBytes = 4 * kGroup * 10;

// Rows missing from the last group are zero (scale 0: their outputs are computed, not stored).
void PackActivations(const qd::Activations32& x, int32_t offset, int64_t M, uint8_t* out) {
  const int64_t nb = x.nb, groups = (M + kGroup - 1) / kGroup;
  std::memset(out, 0, static_cast<size_t>(groups * nb * kXBlockBytes));
  for (int64_t m = 0; m < M; ++m) {
    uint8_t* group = out + (m / kGroup) * nb * kXBlockBytes;
    const int r = static_cast<int>(m % kGroup);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8& blk = x.q[m * nb + b];
      auto* words = reinterpret_cast<int32_t*>(group + b * kXBlockBytes);
      for (int s = 0; s < 8; ++s) std::memcpy(&words[s * kGroup + r], blk.q + 4 * s, 4);
      words[8 * kGroup + r] = -offset * x.sums[m * nb + b];
      std::memcpy(&words[9 * kGroup + r], &blk.d, 4);
    }
  }
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
    for (int r = 0; r < kGroup; ++r) isum[r] = _mm256_set1_epi32(xw[8 * kGroup + r]);
    for (int s = 0; s < 8; ++s) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + s * kStepBytes + 32 * half));
      const __m256i u = kQ4 ? w : _mm256_sign_epi8(w, w);
      for (int r = 0; r < kGroup; ++r) {
        __m256i xv = _mm256_set1_epi32(xw[s * kGroup + r]);
        if (!kQ4) xv = _mm256_sign_epi8(xv, w);
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones));
      }
    }
    const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(blk + kQuantBytes) + 8 * half);
    for (int r = 0; r < kGroup; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[r])), acc[r]);
  }
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
template <bool kQ4>
QKV_QG_ATTR void PanelGroupOf(const uint8_t* panel, const uint8_t* xg, int64_t nb, int64_t rows, int64_t cols,
                              float* y, int64_t N) {
  HalfPanelGroup<kQ4>(panel, 0, xg, nb, rows, std::min<int64_t>(cols, 8), y, N);
  if (cols > 8) HalfPanelGroup<kQ4>(panel, 1, xg, nb, rows, cols - 8, y, N);
}
#endif

bool HasGemm() { return true; }

int64_t PackedActivationBytes(int64_t M, int64_t nb) { return (M + kGroup - 1) / kGroup * nb * kXBlockBytes; }

void PackX(uint32_t id, const qd::Activations32& x, int64_t M, uint8_t* out) { PackActivations(x, Offset(id), M, out); }

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
#else
bool HasGemm() { return false; }
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

bool quant_gemm_available() { return HWY_DYNAMIC_DISPATCH(HasGemm)(); }

void quant_gemm_32(uint32_t id, const uint8_t* W, int64_t row_bytes, const Activations32& x, int64_t M, int64_t N,
                   float* y, ThreadPool& pool) {
  thread_local std::vector<uint8_t> packed;  // x for the kernel, kept between calls
  const size_t bytes = static_cast<size_t>(HWY_DYNAMIC_DISPATCH(PackedActivationBytes)(M, x.nb));
  if (packed.size() < bytes) packed.resize(bytes);
  HWY_DYNAMIC_DISPATCH(PackX)(id, x, M, packed.data());
  // Panels of W's rows: four tasks per thread (the last ones balance a slow start).
  const int64_t panels = (N + kPanelRows - 1) / kPanelRows;
  const int64_t tasks = std::min<int64_t>(panels, 4 * pool.num_threads());
  const int64_t per = (panels + tasks - 1) / tasks * kPanelRows;
  const uint8_t* xp = packed.data();
  pool.parallel_for(tasks, [&](int64_t task, int) {
    const int64_t n0 = task * per, n1 = std::min(N, n0 + per);
    if (n0 < n1) HWY_DYNAMIC_DISPATCH(Gemm32)(id, W, row_bytes, xp, x.nb, M, N, n0, n1, y);
  });
}

}  // namespace qkv::quant_detail
#endif  // HWY_ONCE
