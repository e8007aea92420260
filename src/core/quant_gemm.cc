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
constexpr bool kVnni = true;
#else
#define QKV_QG_ATTR
constexpr bool kVnni = false;
#endif

constexpr int64_t kStepBytes = 4 * qd::kPanelRows;        // one step: 4 values of each of 16 rows
constexpr int64_t kQuantBytes = 8 * kStepBytes;           // a block's 32 values of 16 rows
constexpr int64_t kBlockBytes = kQuantBytes + 4 * qd::kPanelRows;  // + the 16 scales

// Whether Q8_0's quants are stored as q + 128 (unsigned, the offset taken back from the sum) or as
// q (signed: vpsignb). Without VNNI, vpmaddubsw's int16 pairs would saturate on (q + 128) x.
constexpr bool kQ8Unsigned = kVnni;

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

QKV_QG_ATTR HWY_INLINE __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

#if HWY_TARGET == HWY_AVX3_DL
// MR rows of x (from m) against one panel: 16 outputs each, VNNI on 512 bits.
template <int MR>
QKV_QG_ATTR void PanelRows(const uint8_t* panel, const qd::Activations32& x, int32_t offset, int64_t m, int64_t N,
                           int64_t n, int64_t cols, float* y) {
  const int64_t nb = x.nb;
  __m512 acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = panel + b * kBlockBytes;
    __m512i isum[MR];
    for (int r = 0; r < MR; ++r) isum[r] = _mm512_set1_epi32(-offset * x.sums[(m + r) * nb + b]);
    for (int s = 0; s < 8; ++s) {
      const __m512i w = _mm512_loadu_si512(p + s * kStepBytes);
      for (int r = 0; r < MR; ++r) {
        int32_t v;
        std::memcpy(&v, x.q[(m + r) * nb + b].q + 4 * s, 4);
        isum[r] = _mm512_dpbusd_epi32(isum[r], w, _mm512_set1_epi32(v));
      }
    }
    const __m512 dw = _mm512_loadu_ps(p + kQuantBytes);
    for (int r = 0; r < MR; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(dw, _mm512_set1_ps(x.q[(m + r) * nb + b].d)),
                               acc[r]);
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << cols) - 1);
  for (int r = 0; r < MR; ++r) _mm512_mask_storeu_ps(y + (m + r) * N + n, keep, acc[r]);
}
constexpr int kMaxMR = 8;
#else
// MR rows of x against one half (8 rows, `half` 0 or 1) of a panel: AVX2's vpmaddubsw + vpmaddwd.
template <int MR>
QKV_QG_ATTR void HalfPanelRows(const uint8_t* panel, const qd::Activations32& x, bool q4, int32_t offset, int64_t m,
                               int64_t N, int64_t n, int half, int64_t cols, float* y) {
  const int64_t nb = x.nb;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = panel + b * kBlockBytes;
    const uint8_t* p = blk + 32 * half;  // this half's 32 bytes of each step
    __m256i isum[MR];
    for (int r = 0; r < MR; ++r) isum[r] = _mm256_set1_epi32(-offset * x.sums[(m + r) * nb + b]);
    for (int s = 0; s < 8; ++s) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + s * kStepBytes));
      const __m256i u = q4 ? w : _mm256_sign_epi8(w, w);  // Q8_0 signed: |w| against x with w's sign
      for (int r = 0; r < MR; ++r) {
        __m256i xv = Broadcast4(x.q[(m + r) * nb + b].q + 4 * s);
        if (!q4) xv = _mm256_sign_epi8(xv, w);
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones));
      }
    }
    const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(blk + kQuantBytes) + 8 * half);
    for (int r = 0; r < MR; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(dw, _mm256_set1_ps(x.q[(m + r) * nb + b].d)),
                               acc[r]);
  }
  for (int r = 0; r < MR; ++r) {
    if (cols >= 8) {
      _mm256_storeu_ps(y + (m + r) * N + n + 8 * half, acc[r]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[r]);
      std::memcpy(y + (m + r) * N + n + 8 * half, tmp, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}
// The panel's two halves, the second only where it has rows.
template <int MR>
QKV_QG_ATTR void PanelRows(const uint8_t* panel, const qd::Activations32& x, bool q4, int32_t offset, int64_t m,
                           int64_t N, int64_t n, int64_t cols, float* y) {
  HalfPanelRows<MR>(panel, x, q4, offset, m, N, n, 0, std::min<int64_t>(cols, 8), y);
  if (cols > 8) HalfPanelRows<MR>(panel, x, q4, offset, m, N, n, 1, cols - 8, y);
}
constexpr int kMaxMR = 4;
#endif

template <int MR>
QKV_QG_ATTR void PanelRowsOf(const uint8_t* panel, const qd::Activations32& x, bool q4, int32_t offset, int64_t m,
                             int64_t N, int64_t n, int64_t cols, float* y) {
#if HWY_TARGET == HWY_AVX3_DL
  (void)q4;
  PanelRows<MR>(panel, x, offset, m, N, n, cols, y);
#else
  PanelRows<MR>(panel, x, q4, offset, m, N, n, cols, y);
#endif
}

bool HasGemm() { return true; }

void Gemm32(uint32_t id, const uint8_t* W, int64_t row_bytes, const qd::Activations32& x, int64_t M, int64_t N,
            int64_t n0, int64_t n1, float* y) {
  thread_local std::vector<uint8_t> panel;  // one panel, reused: no allocation per call
  const int64_t nb = x.nb;
  if (panel.size() < static_cast<size_t>(nb * kBlockBytes)) panel.resize(static_cast<size_t>(nb * kBlockBytes));
  const bool q4 = id == qd::kQ4_0;
  const int32_t offset = Offset(id);
  for (int64_t n = n0; n < n1; n += qd::kPanelRows) {
    const int64_t cols = std::min(qd::kPanelRows, n1 - n);
    PackPanel(id, W, row_bytes, nb, n, cols, panel.data());
    int64_t m = 0;
    for (; m + kMaxMR <= M; m += kMaxMR) PanelRowsOf<kMaxMR>(panel.data(), x, q4, offset, m, N, n, cols, y);
    switch (M - m) {
      case 0: break;
      case 1: PanelRowsOf<1>(panel.data(), x, q4, offset, m, N, n, cols, y); break;
      case 2: PanelRowsOf<2>(panel.data(), x, q4, offset, m, N, n, cols, y); break;
      case 3: PanelRowsOf<3>(panel.data(), x, q4, offset, m, N, n, cols, y); break;
#if HWY_TARGET == HWY_AVX3_DL
      case 4: PanelRowsOf<4>(panel.data(), x, q4, offset, m, N, n, cols, y); break;
      case 5: PanelRowsOf<5>(panel.data(), x, q4, offset, m, N, n, cols, y); break;
      case 6: PanelRowsOf<6>(panel.data(), x, q4, offset, m, N, n, cols, y); break;
      default: PanelRowsOf<7>(panel.data(), x, q4, offset, m, N, n, cols, y); break;
#else
      default: break;
#endif
    }
  }
}
#else
bool HasGemm() { return false; }
void Gemm32(uint32_t, const uint8_t*, int64_t, const qd::Activations32&, int64_t, int64_t, int64_t, int64_t, float*) {}
#endif

}  // namespace qkv::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::quant_detail {

HWY_EXPORT(HasGemm);
HWY_EXPORT(Gemm32);

bool quant_gemm_available() { return HWY_DYNAMIC_DISPATCH(HasGemm)(); }

void quant_gemm_32(uint32_t id, const uint8_t* W, int64_t row_bytes, const Activations32& x, int64_t M, int64_t N,
                   int64_t n0, int64_t n1, float* y) {
  HWY_DYNAMIC_DISPATCH(Gemm32)(id, W, row_bytes, x, M, N, n0, n1, y);
}

}  // namespace qkv::quant_detail
#endif  // HWY_ONCE
