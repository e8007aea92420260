// The quantized decoding step's product: integer dot products over ggml's blocks. See
// include/qkv/core/quant_matvec.h. Compiled once per SIMD target by Highway and dispatched at run
// time; this file also asks for AVX3_DL (AVX-512 VNNI's vpdpbusd), which Highway 1.0.3 builds only
// on request. Legend: M rows of x, N rows of W (outputs), K values per row, nb blocks per row.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/quant_matvec.cc"
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/quant_gemm.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "qkv/core/bf16.h"
#include "qkv/core/quant_matvec.h"

// The scalar block sums, shared by the reference and by the targets without a fast path (compiled
// once: this part is outside Highway's per-target namespace).
#ifndef QKV_QUANT_MATVEC_SHARED
#define QKV_QUANT_MATVEC_SHARED
namespace qkv::quant_detail {

inline float half_at(const uint8_t* p) { return f16_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// One output: the float sum, and the sum of the |terms| it rounds (quant_matvec_reference's magnitude).
struct Dot {
  float y = 0.0f;
  double magnitude = 0.0;
};

// Q8_0 (34 bytes: f16 d, int8 q[32]) or Q4_0 (18 bytes: f16 d, qs[16]; q[j] = lo(qs[j]) - 8,
// q[j + 16] = hi(qs[j]) - 8) against BlockQ8: sum_b (dw dx) float(sum_i qw_i qx_i).
template <bool kQ4>
Dot row_dot_32(const uint8_t* w, const BlockQ8* x, int64_t nb) {
  Dot out;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * (kQ4 ? 18 : 34);
    int32_t s = 0, a = 0;
    for (int i = 0; i < 32; ++i) {
      const int qw = kQ4 ? (i < 16 ? (blk[2 + i] & 0xF) : (blk[2 + i - 16] >> 4)) - 8 : static_cast<int8_t>(blk[2 + i]);
      s += qw * x[b].q[i];
      a += std::abs(qw * x[b].q[i]);
    }
    const float dd = half_at(blk) * x[b].d;
    out.y = std::fma(static_cast<float>(s), dd, out.y);  // quant_gemm.h's order
    out.magnitude += std::fabs(static_cast<double>(dd)) * a;
  }
  return out;
}

// Q4_K (144 bytes) against BlockQ8K: per super-block, in int32,
//   scaled = sum_j s_j sum_i q_i qx_i,  mins = sum_j m_j sum_i qx_i     (j: 8 sub-blocks of 32)
// then y = fma(float(scaled), dx d, y), y = fma(float(-mins), dx dmin, y) (quant_gemm.h's order).
inline Dot row_dot_q4_k(const uint8_t* w, const BlockQ8K* x, int64_t nb) {
  Dot out;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * 144;
    const uint8_t* qs = blk + 16;
    int32_t scaled = 0, mins = 0;
    int64_t abs_scaled = 0, abs_mins = 0;
    for (int j = 0; j < 8; ++j) {
      int s = 0, m = 0;
      k_scale_min(j, blk + 4, s, m);
      int32_t sub = 0, abs_sub = 0, xs = 0, abs_xs = 0;
      for (int i = 0; i < 32; ++i) {
        const uint8_t byte = qs[32 * (j / 2) + i];
        const int q = j % 2 == 0 ? byte & 0xF : byte >> 4;
        const int qx = x[b].q[32 * j + i];
        sub += q * qx;
        abs_sub += std::abs(q * qx);
        xs += qx;
        abs_xs += std::abs(qx);
      }
      scaled += s * sub;
      mins += m * xs;
      abs_scaled += int64_t{s} * abs_sub;
      abs_mins += int64_t{m} * abs_xs;
    }
    const float dd = x[b].d * half_at(blk), dm = x[b].d * half_at(blk + 2);
    out.y = std::fma(static_cast<float>(scaled), dd, out.y);
    out.y = std::fma(static_cast<float>(-mins), dm, out.y);
    out.magnitude += std::fabs(static_cast<double>(dd)) * static_cast<double>(abs_scaled) +
                     std::fabs(static_cast<double>(dm)) * static_cast<double>(abs_mins);
  }
  return out;
}

// Q6_K (210 bytes: ql[128], qh[64], int8 sc[16], f16 d) against BlockQ8K: per super-block
// isum = sum_g sc_g sum_i (q_i - 32) qx_i (g: 16 groups of 16) in int32, y = fma(float(isum), dx d, y).
// The magnitude counts q_i and 32 apart (|sc| (q + 32) |qx|): the fast kernel sums q qx and 32 qx
// separately, so its partial sums are that large even where q - 32 cancels.
inline Dot row_dot_q6_k(const uint8_t* w, const BlockQ8K* x, int64_t nb) {
  Dot out;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * 210;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    int32_t isum = 0;
    int64_t abs_sum = 0;
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, k = (v % 128) / 32, l = v % 32;
      const uint8_t* ql = blk + 64 * h;
      const uint8_t* qh = blk + 128 + 32 * h;
      const int low = k == 0 ? ql[l] & 0xF : k == 1 ? ql[l + 32] & 0xF : k == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
      const int q = low | (((qh[l] >> (2 * k)) & 3) << 4);
      const int qx = x[b].q[v];
      isum += sc[v / 16] * (q - 32) * qx;
      abs_sum += std::abs(sc[v / 16]) * (q + 32) * std::abs(qx);
    }
    const float dd = x[b].d * half_at(blk + 208);
    out.y = std::fma(static_cast<float>(isum), dd, out.y);
    out.magnitude += std::fabs(static_cast<double>(dd)) * static_cast<double>(abs_sum);
  }
  return out;
}

// n activations to d and q (the definition; see quantize_activations_q8): d = max|x| / 127 and
// q = round(x / d) in [-127, 127], half away from zero, the division in double (no overflow of
// 127 / max|x| for tiny x); a scale that underflows to 0 leaves q = 0 (x below 2e-43).
inline void quantize_run(const float* x, int n, float& d, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  d = amax / 127.0f;
  const double id = d > 0.0f ? 127.0 / static_cast<double>(amax) : 0.0;
  for (int i = 0; i < n; ++i)
    q[i] = static_cast<int8_t>(std::clamp(std::round(static_cast<double>(x[i]) * id), -127.0, 127.0));
}

// One row of W (nb blocks of type `id`) against one row of quantized x (BlockQ8 or BlockQ8K).
inline Dot row_dot(uint32_t id, const uint8_t* w, const void* xq, int64_t nb) {
  switch (id) {
    case kQ8_0: return row_dot_32<false>(w, static_cast<const BlockQ8*>(xq), nb);
    case kQ4_0: return row_dot_32<true>(w, static_cast<const BlockQ8*>(xq), nb);
    case kQ4_K: return row_dot_q4_k(w, static_cast<const BlockQ8K*>(xq), nb);
    default: return row_dot_q6_k(w, static_cast<const BlockQ8K*>(xq), nb);
  }
}

}  // namespace qkv::quant_detail
#endif  // QKV_QUANT_MATVEC_SHARED

HWY_BEFORE_NAMESPACE();
namespace qkv::HWY_NAMESPACE {
namespace qd = quant_detail;

// How far ahead of the loads W is asked for (as gemv.cc: the hardware prefetcher alone falls short).
constexpr int64_t kPrefetchBytes = 1024;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// AVX2, AVX3 and AVX3_DL: 256-bit integer dot products, 32 int8 pairs into 8 int32 lanes.
#undef QKV_QMV_ATTR
#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0.3's AVX3_DL target string has the VEX "avxvnni" (which Zen 4 lacks), not the EVEX
// avx512vnni its CPU check asks for: ask for the latter, and take the former away so that the
// compiler cannot pick the VEX encoding. (This path calls intrinsics only, no Highway ops, so
// nothing compiled with the full target string is inlined here.)
#define QKV_QMV_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni,avx512vl,no-avxvnni")))
#else
#define QKV_QMV_ATTR
#endif

QKV_QMV_ATTR HWY_INLINE float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
QKV_QMV_ATTR HWY_INLINE __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
QKV_QMV_ATTR HWY_INLINE float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
QKV_QMV_ATTR HWY_INLINE float Sum4(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Four values times id (double), rounded half away from zero (truncate, then one more step where
// the dropped part is at least a half), clamped to [-127, 127], as int32. A function with this
// file's attributes, not a lambda: on AVX3_DL a lambda keeps the region's target, which differs
// from QKV_QMV_ATTR's, and was called per 4 values instead of inlined (1-3% of a decoding step).
QKV_QMV_ATTR HWY_INLINE __m128i RoundedTimes(__m128 v4, __m256d id) {
  const __m256d half = _mm256_set1_pd(0.5), lim = _mm256_set1_pd(127.0), sign = _mm256_set1_pd(-0.0);
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d v = _mm256_mul_pd(_mm256_cvtps_pd(v4), id);
  const __m256d t = _mm256_round_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256d away = _mm256_and_pd(_mm256_cmp_pd(_mm256_andnot_pd(sign, _mm256_sub_pd(v, t)), half, _CMP_GE_OQ),
                                     _mm256_or_pd(one, _mm256_and_pd(sign, v)));
  const __m256d r = _mm256_min_pd(lim, _mm256_max_pd(_mm256_sub_pd(_mm256_setzero_pd(), lim), _mm256_add_pd(t, away)));
  return _mm256_cvttpd_epi32(r);
}

#if HWY_TARGET <= HWY_AVX3
// Eight values times id (double), as RoundedTimes, in one 512-bit vector of doubles: half the
// instructions of two RoundedTimes (a decoding step quantizes every product's activations on the
// calling thread while the pool's thread waits).
QKV_QMV_ATTR HWY_INLINE __m256i RoundedTimes8(__m256 v8, __m512d id) {
  const __m512d v = _mm512_mul_pd(_mm512_cvtps_pd(v8), id);
  const __m512d t = _mm512_roundscale_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask8 away = _mm512_cmp_pd_mask(_mm512_abs_pd(_mm512_sub_pd(v, t)), _mm512_set1_pd(0.5), _CMP_GE_OQ);
  // +-1 with v's sign, added where the dropped part is at least a half
  const __m512i sign = _mm512_and_si512(_mm512_castpd_si512(v), _mm512_set1_epi64(INT64_MIN));
  const __m512d step = _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(_mm512_set1_pd(1.0)), sign));
  const __m512d lim = _mm512_set1_pd(127.0);
  const __m512d r = _mm512_min_pd(lim, _mm512_max_pd(_mm512_sub_pd(_mm512_setzero_pd(), lim),
                                                     _mm512_mask_add_pd(t, away, t, step)));
  return _mm512_cvttpd_epi32(r);
}
#endif

// quant_detail::quantize_run for n = 16 k values (the callers' blocks of 32 and 256), bit for bit:
// the same float max and scale, the product in double, rounded half away from zero, clamped, then
// narrowed to int8.
QKV_QMV_ATTR void QuantizeRun(const float* x, int n, float& d, int8_t* q) {
  const __m256 no_sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), no_sign));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
  d = amax / 127.0f;
  const double inv = d > 0.0f ? 127.0 / static_cast<double>(amax) : 0.0;
#if HWY_TARGET <= HWY_AVX3
  const __m512d id8 = _mm512_set1_pd(inv);
  for (int i = 0; i < n; i += 16) {  // sixteen int32 narrowed with saturation (the values are in [-127, 127])
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(RoundedTimes8(_mm256_loadu_ps(x + i), id8)),
                                         RoundedTimes8(_mm256_loadu_ps(x + i + 8), id8), 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtsepi32_epi8(w));
  }
#else
  const __m256d id = _mm256_set1_pd(inv);
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m128i w16 =
        _mm_packs_epi32(RoundedTimes(_mm256_castps256_ps128(v), id), RoundedTimes(_mm256_extractf128_ps(v, 1), id));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(w16, w16));
  }
#endif
}

// sum of u_i s_i in 8 int32 lanes, u unsigned in [0, 128], s signed in [-127, 127]: vpmaddubsw's
// int16 pairs cannot saturate (2 x 128 x 127 < 2^15). VNNI does it in one instruction.
QKV_QMV_ATTR HWY_INLINE __m256i DotU8S8(__m256i u, __m256i s) {
#if HWY_TARGET == HWY_AVX3_DL
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// sum of u_i s_i scale_(i / 16) as 8 int32 lanes: the scale multiplies the int16 pairs (vpmaddwd),
// scale16 holding one int16 per lane pair (the low 128 bits: values 0..15, the high: 16..31).
QKV_QMV_ATTR HWY_INLINE __m256i DotScaled(__m256i u, __m256i s, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16);
}

// The 8 sums of v[0..7]'s lanes, exact: lane j holds the sum of v[j].
QKV_QMV_ATTR HWY_INLINE __m256i SumsOf8(const __m256i* v) {
  // per 128-bit half: ab = [v0 v1 v2 v3 partial sums], then the halves added
  const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

#if HWY_TARGET == HWY_AVX3_DL
constexpr bool kVnni = true;
#else
constexpr bool kVnni = false;
#endif

// Q8_0 (kQ4 false) or Q4_0 rows [n0, n1) of W against R rows of x (BlockQ8, nb per row, row r at
// x + r nb; xsum: each block's sum of quants): y[r N + n]. Eight rows of W at a time: each block's
// eight exact integer sums as one vector (SumsOf8), then quant_gemm.h's float order, one FMA per
// block for the eight. Q4_0's nibbles, and Q8_0's q + 128 on VNNI, enter the products unsigned and
// their offset (8, 128) times the block's sum of x comes off; Q8_0 without VNNI moves w's sign onto
// x (vpmaddubsw's int16 pairs would saturate on q + 128).
template <int R, bool kQ4>
QKV_QMV_ATTR void Rows32(const uint8_t* W, int64_t row_bytes, int64_t nb, const BlockQ8* x, const int32_t* xsum,
                         int64_t N, int64_t n0, int64_t n1, float* y) {
  constexpr int64_t kBytes = kQ4 ? 18 : 34;
  constexpr bool kUnsigned = kQ4 || kVnni;
  constexpr int32_t kOffset = kQ4 ? 8 : 128;
  const __m256i low4 = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(static_cast<char>(0x80));
  int64_t n = n0;
  for (; n + 8 <= n1; n += 8) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    // The eight rows are one run of memory; the next eight are asked for as this run is read (as
    // much of them per block as of these), so the loads meet one stream a group ahead, not eight.
    const uint8_t* next = W + (n + 8) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i u[8], w[8];
      alignas(16) uint16_t h[8];
      for (int64_t line = 0; line < 8 * kBytes + 64; line += 64) hwy::Prefetch(next + b * 8 * kBytes + line);
      for (int j = 0; j < 8; ++j) {
        const uint8_t* blk = W + (n + j) * row_bytes + b * kBytes;
        std::memcpy(&h[j], blk, 2);
        if constexpr (kQ4) {  // lo nibbles are values 0..15, hi nibbles 16..31
          const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
          u[j] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4);
        } else if constexpr (kVnni) {
          u[j] = _mm256_xor_si256(Load256(blk + 2), top);
        } else {
          w[j] = Load256(blk + 2);
          u[j] = _mm256_sign_epi8(w[j], w[j]);
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
      for (int r = 0; r < R; ++r) {
        const BlockQ8& xb = x[r * nb + b];
        const __m256i xv = Load256(xb.q);
        __m256i dots[8];
        for (int j = 0; j < 8; ++j) dots[j] = DotU8S8(u[j], kUnsigned ? xv : _mm256_sign_epi8(xv, w[j]));
        __m256i isum = SumsOf8(dots);
        if constexpr (kUnsigned) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(kOffset * xsum[r * nb + b]));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * N + n, acc[r]);
  }
  for (; n < n1; ++n)  // the last rows one at a time, in the same order (the reference's block sums)
    for (int r = 0; r < R; ++r) y[r * N + n] = qd::row_dot_32<kQ4>(W + n * row_bytes, x + r * nb, nb).y;
}

// The 8 sums of v[0..7]'s four lanes, exact: lane j holds the sum of v[j].
QKV_QMV_ATTR HWY_INLINE __m256i SumsOf8x4(const __m128i* v) {
  __m256i w[8];
  for (int j = 0; j < 8; ++j) w[j] = _mm256_zextsi128_si256(v[j]);
  return SumsOf8(w);
}

// One Q4_K super-block of one row of W against R rows of x: isum[r] the scaled sums in 8 int32
// lanes (vpmaddwd by the sub-block's scale), mins[r] the mins against the bsums of each 32 in 4.
template <int R>
QKV_QMV_ATTR HWY_INLINE void BlockQ4K(const uint8_t* blk, const BlockQ8K* const* xb, __m256i* isum, __m128i* mins) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  // The 12 scale bytes to scales in bytes 0..7 and mins in bytes 8..15 (llama.cpp's unpacking).
  uint32_t u[4];
  std::memcpy(u, blk + 4, 12);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
  const uint32_t min_low = u[1] & k6;
  u[1] = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
  u[2] = min_low;
  u[0] &= k6;
  const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
  const __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
  const __m256i scales = _mm256_broadcastsi128_si256(sm);  // sub-block j's scale: int16 by vpshufb
  for (int r = 0; r < R; ++r) {
    const __m256i bsums = Load256(xb[r]->bsums);  // 16 sums of 16 -> 8 sums of 32 (at most 4064)
    const __m128i sums32 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
    mins[r] = _mm_madd_epi16(mins16, sums32);
    isum[r] = _mm256_setzero_si256();
  }
  for (int pair = 0; pair < 4; ++pair) {
    const __m256i q = Load256(blk + 16 + 32 * pair);
    const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    const __m256i s_lo = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(0x8000 | (2 * pair))));
    const __m256i s_hi = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(0x8000 | (2 * pair + 1))));
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = xb[r]->q + 64 * pair;
      isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(DotScaled(lo, Load256(xq), s_lo),
                                                           DotScaled(hi, Load256(xq + 32), s_hi)));
    }
  }
}

// One Q6_K super-block of one row of W against R rows of x: isum[r] = sum_g sc_g sum_i (q_i - 32)
// qx_i in 8 int32 lanes: q (0..63) against x by vpmaddubsw, each group's scale by vpmaddwd, and the
// offset 32 as 32 sum_g sc_g bsum_g (vpmaddwd of the scales and the bsums).
template <int R>
QKV_QMV_ATTR HWY_INLINE void BlockQ6K(const uint8_t* blk, const BlockQ8K* const* xb, __m256i* isum) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03), m3_2 = _mm256_set1_epi8(0x0C),
                m3_4 = _mm256_set1_epi8(0x30), m3_6 = _mm256_set1_epi8(static_cast<char>(0xC0));
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
  for (int r = 0; r < R; ++r)  // -32 sum_g sc_g bsum_g
    isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, Load256(xb[r]->bsums)), 5));
  for (int h = 0; h < 2; ++h) {
    const __m256i ql1 = Load256(blk + 64 * h), ql2 = Load256(blk + 64 * h + 32);
    const __m256i qh = Load256(blk + 128 + 32 * h);
    __m256i q[4];
    q[0] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql2, low4), _mm256_slli_epi16(_mm256_and_si256(qh, m3_2), 2));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), _mm256_and_si256(qh, m3_4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql2, 4), low4),
                           _mm256_srli_epi16(_mm256_and_si256(qh, m3_6), 2));
    for (int k = 0; k < 4; ++k) {
      const int g = 8 * h + 2 * k;  // values 0..15 of this quarter: group g, 16..31: g + 1
      const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
      for (int r = 0; r < R; ++r)
        isum[r] = _mm256_add_epi32(isum[r], DotScaled(q[k], Load256(xb[r]->q + 128 * h + 32 * k), scale));
    }
  }
}

// Q4_K (kQ6 false) or Q6_K rows [n0, n1) of W against R rows of x (BlockQ8K, nb per row): y[r N
// + n]. Eight rows of W at a time: each super-block's eight exact integer sums as one vector
// (SumsOf8), then quant_gemm.h's float order for the eight at once: y = fma(float(scaled), dx d,
// y), and for Q4_K y = fma(float(-mins), dx dmin, y). The last rows one at a time, the same order.
template <int R, bool kQ6>
QKV_QMV_ATTR void RowsK(const uint8_t* W, int64_t row_bytes, int64_t nb, const BlockQ8K* x, int64_t N, int64_t n0,
                        int64_t n1, float* y) {
  constexpr int64_t kBytes = kQ6 ? 210 : 144;
  int64_t n = n0;
  for (; n + 8 <= n1; n += 8) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    const uint8_t* next = W + (n + 8) * row_bytes;  // the next eight rows, asked for as these are read
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t line = 0; line < 8 * kBytes + 64; line += 64) hwy::Prefetch(next + b * 8 * kBytes + line);
      const BlockQ8K* xb[R];
      for (int r = 0; r < R; ++r) xb[r] = &x[r * nb + b];
      __m256i isum[R][8];
      __m128i mins[R][8];
      alignas(16) uint16_t d[8], dmin[8];
      for (int j = 0; j < 8; ++j) {
        const uint8_t* blk = W + (n + j) * row_bytes + b * kBytes;
        __m256i is[R];
        if constexpr (kQ6) {
          std::memcpy(&d[j], blk + 208, 2);
          BlockQ6K<R>(blk, xb, is);
        } else {
          std::memcpy(&d[j], blk, 2);
          std::memcpy(&dmin[j], blk + 2, 2);
          __m128i mn[R];
          BlockQ4K<R>(blk, xb, is, mn);
          for (int r = 0; r < R; ++r) mins[r][j] = mn[r];
        }
        for (int r = 0; r < R; ++r) isum[r][j] = is[r];
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
      for (int r = 0; r < R; ++r) {
        const __m256 dx = _mm256_set1_ps(xb[r]->d);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(SumsOf8(isum[r])), _mm256_mul_ps(dw, dx), acc[r]);
      }
      if constexpr (!kQ6) {
        const __m256 dm = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dmin)));
        for (int r = 0; r < R; ++r) {
          const __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), SumsOf8x4(mins[r]));
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(neg), _mm256_mul_ps(dm, _mm256_set1_ps(xb[r]->d)), acc[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * N + n, acc[r]);
  }
  for (; n < n1; ++n)  // the last rows one at a time, in the same order (the reference's block sums)
    for (int r = 0; r < R; ++r)
      y[r * N + n] = kQ6 ? qd::row_dot_q6_k(W + n * row_bytes, x + r * nb, nb).y
                         : qd::row_dot_q4_k(W + n * row_bytes, x + r * nb, nb).y;
}

template <int R>
void RowsOfType(uint32_t id, const uint8_t* W, int64_t row_bytes, int64_t nb, const void* xq, const int32_t* xsum,
                int64_t N, int64_t n0, int64_t n1, float* y) {
  switch (id) {
    case qd::kQ8_0: Rows32<R, false>(W, row_bytes, nb, static_cast<const BlockQ8*>(xq), xsum, N, n0, n1, y); break;
    case qd::kQ4_0: Rows32<R, true>(W, row_bytes, nb, static_cast<const BlockQ8*>(xq), xsum, N, n0, n1, y); break;
    case qd::kQ4_K: RowsK<R, false>(W, row_bytes, nb, static_cast<const BlockQ8K*>(xq), N, n0, n1, y); break;
    default: RowsK<R, true>(W, row_bytes, nb, static_cast<const BlockQ8K*>(xq), N, n0, n1, y); break;
  }
}
#else
// Other targets: the reference's scalar block sums (the compiler vectorizes what it can).
void QuantizeRun(const float* x, int n, float& d, int8_t* q) { qd::quantize_run(x, n, d, q); }
template <int R>
void RowsOfType(uint32_t id, const uint8_t* W, int64_t row_bytes, int64_t nb, const void* xq, const int32_t*, int64_t N,
                int64_t n0, int64_t n1, float* y) {
  const int64_t x_row = nb * (id == qd::kQ8_0 || id == qd::kQ4_0 ? int64_t{sizeof(BlockQ8)} : int64_t{sizeof(BlockQ8K)});
  for (int64_t n = n0; n < n1; ++n)
    for (int r = 0; r < R; ++r)
      y[r * N + n] = qd::row_dot(id, W + n * row_bytes, static_cast<const uint8_t*>(xq) + r * x_row, nb).y;
}
#endif

// Rows [n0, n1) of y = x W^T for all M rows of x: tiles of kTileRows rows of W (a few KiB, in L1
// or L2) meeting the rows of x four at a time, so W comes from memory once whatever M.
constexpr int64_t kTileRows = 8;
void QuantRowsRange(uint32_t id, const uint8_t* W, int64_t row_bytes, int64_t nb, const void* xq, int64_t x_row_bytes,
                    const int32_t* xsum, int64_t M, int64_t N, int64_t n0, int64_t n1, float* y) {
  for (int64_t t0 = n0; t0 < n1; t0 += kTileRows) {
    const int64_t t1 = std::min(n1, t0 + kTileRows);
    for (int64_t r = 0; r < M; r += 4) {
      const void* xr = static_cast<const uint8_t*>(xq) + r * x_row_bytes;
      const int32_t* sr = xsum ? xsum + r * nb : nullptr;
      float* yr = y + r * N;
      switch (std::min<int64_t>(4, M - r)) {
        case 1: RowsOfType<1>(id, W, row_bytes, nb, xr, sr, N, t0, t1, yr); break;
        case 2: RowsOfType<2>(id, W, row_bytes, nb, xr, sr, N, t0, t1, yr); break;
        case 3: RowsOfType<3>(id, W, row_bytes, nb, xr, sr, N, t0, t1, yr); break;
        default: RowsOfType<4>(id, W, row_bytes, nb, xr, sr, N, t0, t1, yr); break;
      }
    }
  }
}

// One row of x (K values) into BlockQ8 blocks, or BlockQ8K blocks with their bsums.
void QuantizeQ8(const float* x, int64_t K, BlockQ8* out) {
  for (int64_t b = 0; b < K / 32; ++b) QuantizeRun(x + 32 * b, 32, out[b].d, out[b].q);
}
void QuantizeQ8K(const float* x, int64_t K, BlockQ8K* out) {
  for (int64_t b = 0; b < K / 256; ++b) {
    QuantizeRun(x + 256 * b, 256, out[b].d, out[b].q);
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += out[b].q[16 * g + i];
      out[b].bsums[g] = static_cast<int16_t>(s);
    }
  }
}

}  // namespace qkv::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

#include "hwy/targets.h"
#include "qkv/core/error.h"
#include "qkv/core/quant_panels.h"

namespace qkv {

HWY_EXPORT(QuantRowsRange);
HWY_EXPORT(QuantizeQ8);
HWY_EXPORT(QuantizeQ8K);

namespace {

bool multiplies(uint32_t id) {
  return id == quant_detail::kQ8_0 || id == quant_detail::kQ4_0 || id == quant_detail::kQ4_K ||
         id == quant_detail::kQ6_K;
}
bool k_quant(uint32_t id) { return id == quant_detail::kQ4_K || id == quant_detail::kQ6_K; }

void check_arguments(const char* what, const QuantType& t, int64_t N, int64_t K, int64_t M) {
  QKV_CHECK(multiplies(t.id), what, ": weights of type ", t.name, " are not supported; it multiplies ",
            quant_matvec_types());
  QKV_CHECK(K > 0 && K % t.block == 0, what, ": K (", K, ") must be a positive multiple of ", t.name, "'s block of ",
            t.block);
  QKV_CHECK(M >= 1 && N >= 0, what, ": (M, N) = (", M, ", ", N, "): M must be at least 1 and N not negative");
}

// x (M, K) quantized for t: BlockQ8 or BlockQ8K rows into `scratch` (x_row bytes each) and, for
// the 32-value types, each block's sum of quants into `sums`. Rows split over the pool.
struct QuantizedRows {
  const uint8_t* q;
  int64_t x_row;
  const int32_t* sums;  // null for the K-quants
};
QuantizedRows quantize_rows(const QuantType& t, const float* x, int64_t M, int64_t K, std::vector<uint8_t>& scratch,
                            std::vector<int32_t>& sums, ThreadPool* pool) {
  const bool k = k_quant(t.id);
  const int64_t nb = K / t.block;
  const int64_t row = k ? nb * int64_t{sizeof(BlockQ8K)} : nb * int64_t{sizeof(BlockQ8)};
  if (scratch.size() < static_cast<size_t>(M * row)) scratch.resize(static_cast<size_t>(M * row));
  if (!k && sums.size() < static_cast<size_t>(M * nb)) sums.resize(static_cast<size_t>(M * nb));
  auto rows = [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      uint8_t* out = scratch.data() + m * row;
      if (k) {
        quantize_activations_q8_k(x + m * K, K, reinterpret_cast<BlockQ8K*>(out));
        continue;
      }
      const auto* blocks = reinterpret_cast<const BlockQ8*>(out);
      quantize_activations_q8(x + m * K, K, reinterpret_cast<BlockQ8*>(out));
      for (int64_t b = 0; b < nb; ++b) {
        int32_t s = 0;
        for (int8_t q : blocks[b].q) s += q;
        sums[static_cast<size_t>(m * nb + b)] = s;
      }
    }
  };
  if (pool && M >= 2 * pool->num_threads()) {
    const int64_t tasks = pool->num_threads(), per = (M + tasks - 1) / tasks;
    pool->parallel_for(tasks, [&](int64_t task, int) { rows(task * per, std::min(M, task * per + per)); });
  } else {
    rows(0, M);
  }
  return {scratch.data(), row, k ? nullptr : sums.data()};
}

}  // namespace

void quantize_activations_q8(const float* x, int64_t K, BlockQ8* out) {
  QKV_CHECK(K >= 0 && K % 32 == 0, "quantize_activations_q8: K (", K, ") must be a multiple of 32");
  HWY_DYNAMIC_DISPATCH(QuantizeQ8)(x, K, out);
}

void quantize_activations_q8_k(const float* x, int64_t K, BlockQ8K* out) {
  QKV_CHECK(K >= 0 && K % 256 == 0, "quantize_activations_q8_k: K (", K, ") must be a multiple of 256");
  HWY_DYNAMIC_DISPATCH(QuantizeQ8K)(x, K, out);
}

std::string quant_matvec_types() { return "Q8_0, Q4_0, Q4_K, Q6_K"; }

void quant_matvec(const QuantType& t, const uint8_t* W, int64_t N, int64_t K, const float* x, int64_t M, float* y,
                  ThreadPool* pool) {
  quant_matvec(QuantView{&t, W, false}, N, K, x, M, y, pool);
}

void quant_matvec(const QuantView& W, int64_t N, int64_t K, const float* x, int64_t M, float* y, ThreadPool* pool) {
  QKV_CHECK(W.type != nullptr, "quant_matvec: a matrix without a type");
  const QuantType& t = *W.type;
  check_arguments("quant_matvec", t, N, K, M);
  QKV_CHECK(!W.panels || panel_type(t), "quant_matvec: weights of type ", t.name, " are not stored in panels");
  if (N == 0) return;
  ThreadPool& p = pool ? *pool : default_pool();
  // x quantized, kept between calls: no allocation per token
  thread_local std::vector<uint8_t> scratch;
  thread_local std::vector<int32_t> sums;
  const QuantizedRows xq = quantize_rows(t, x, M, K, scratch, sums, &p);
  const int64_t row_bytes = quant_bytes(t, K, "quant_matvec");
  const int64_t nb = K / t.block;
  const bool packed = k_quant(t.id) ? quant_detail::quant_gemm_k_available() : quant_detail::quant_gemm_available();
  const int64_t whole = N / kQuantPanelRows * kQuantPanelRows;  // the rows of whole panels
  if (W.panels && packed) {  // every M; the rows after the last panel below, in the rows' layout
    if (whole > 0 && k_quant(t.id)) {
      quant_detail::quant_gemm_panels_k(t.id, W.blocks, row_bytes, reinterpret_cast<const BlockQ8K*>(xq.q), nb, M, N, y, p);
    } else if (whole > 0) {
      const quant_detail::Activations32 act{reinterpret_cast<const BlockQ8*>(xq.q), xq.sums, nb};
      quant_detail::quant_gemm_panels(t.id, W.blocks, row_bytes, act, M, N, y, p);
    }
    if (whole < N)
      HWY_DYNAMIC_DISPATCH(QuantRowsRange)(t.id, W.blocks, row_bytes, nb, xq.q, xq.x_row, xq.sums, M, N, whole, N, y);
    return;
  }
  if (!W.panels && packed && M >= quant_detail::kGemmMinRows) {
    if (k_quant(t.id)) {
      quant_detail::quant_gemm_k(t.id, W.blocks, row_bytes, reinterpret_cast<const BlockQ8K*>(xq.q), nb, M, N, y, p);
    } else {
      const quant_detail::Activations32 act{reinterpret_cast<const BlockQ8*>(xq.q), xq.sums, nb};
      quant_detail::quant_gemm_32(t.id, W.blocks, row_bytes, act, M, N, y, p);
    }
    return;
  }
  // Blocks of W's rows: four per thread (the last ones balance a slow start), at least 16 rows. In
  // panels on a target without the packed kernels: each row back in the rows' layout, the
  // reference's block sums (the row kernel's on that target).
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(4 * p.num_threads(), N / 16));
  const int64_t per = (N + tasks - 1) / tasks;
  p.parallel_for(tasks, [&](int64_t task, int) {
    const int64_t n0 = task * per, n1 = std::min(N, n0 + per);
    if (n0 >= n1) return;
    if (!W.panels) {
      HWY_DYNAMIC_DISPATCH(QuantRowsRange)(t.id, W.blocks, row_bytes, nb, xq.q, xq.x_row, xq.sums, M, N, n0, n1, y);
      return;
    }
    thread_local std::vector<uint8_t> row;  // kept between calls: no allocation per call
    if (row.size() < static_cast<size_t>(row_bytes)) row.resize(static_cast<size_t>(row_bytes));
    for (int64_t n = n0; n < n1; ++n) {
      quant_row(W, N, K, n, row.data());
      for (int64_t m = 0; m < M; ++m)
        y[m * N + n] = quant_detail::row_dot(t.id, row.data(), xq.q + m * xq.x_row, nb).y;
    }
  });
}

void quant_matvec_reference(const QuantType& t, const uint8_t* W, int64_t N, int64_t K, const float* x, int64_t M,
                            float* y, float* magnitude) {
  check_arguments("quant_matvec_reference", t, N, K, M);
  std::vector<uint8_t> scratch;
  std::vector<int32_t> sums;
  const int64_t x_row = quantize_rows(t, x, M, K, scratch, sums, nullptr).x_row;
  const int64_t row_bytes = quant_bytes(t, K, "quant_matvec_reference");
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const quant_detail::Dot dot = quant_detail::row_dot(t.id, W + n * row_bytes, scratch.data() + m * x_row, K / t.block);
      y[m * N + n] = dot.y;
      if (magnitude) magnitude[m * N + n] = static_cast<float>(dot.magnitude);
    }
}

std::vector<int64_t> quant_matvec_simd_targets() {
  // HWY_TARGETS: this file's targets (AVX3_DL among them), not the other kernels'.
  const int64_t runnable = HWY_TARGETS & hwy::SupportedTargets();
  std::vector<int64_t> out;
  for (int bit = 0; bit < 63; ++bit)
    if ((runnable >> bit) & 1) out.push_back(int64_t{1} << bit);
  return out;
}

}  // namespace qkv
#endif  // HWY_ONCE
