// The decoding step's product, streamed at the memory bandwidth. See core/gemv.h. Compiled once per
// SIMD target by Highway and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/gemv.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hwy/highway.h"
#include "qkv/core/bf16.h"
#include "qkv/core/machine.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Lanes of W at p, as float (bf16 bits widened: shifted into the high half, exact).
HWY_INLINE VF LoadW(DF d, const float* HWY_RESTRICT p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadW(DF d, const uint16_t* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}
HWY_INLINE float ScalarW(const float* p) { return *p; }
HWY_INLINE float ScalarW(const uint16_t* p) { return bf16_to_float(*p); }

// How far ahead of the loads W is asked for: the hardware prefetcher alone left the stream at
// about two thirds of the read bandwidth. 4 KiB: a bf16 decoding step of Qwen3-0.6B took 0.84x and
// 0.88x the time it took at 1 KiB (medians of paired rounds, 10 rounds, Intel Xeon model 207, 2
// threads; 8 KiB no better than 4; GPT-2's f32 steps unchanged, 0.97x).
#ifndef QKV_GEMV_PREFETCH
#define QKV_GEMV_PREFETCH 4096
#endif
constexpr int64_t kPrefetchBytes = QKV_GEMV_PREFETCH;

// y[r * N + n] = x_r . W_n + bias[n] for rows r in [0, R) of x (ldx = K) and n in [n0, n1).
// Two accumulators per row of x (two independent FMA chains: one is latency-bound at R = 1). `far`:
// far_prefetch_bytes() (core/machine.h) for the first rows of x to meet these rows of W, else 0.
template <int R, typename T>
void RowsBlock(const float* HWY_RESTRICT x, int64_t K, const T* HWY_RESTRICT W, const float* bias, int64_t N,
               int64_t n0, int64_t n1, int64_t far, float* HWY_RESTRICT y) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t n = n0; n < n1; ++n) {
    const T* w = W + n * K;
    VF a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(d);
    int64_t k = 0;
    for (; k + 2 * L <= K; k += 2 * L) {
      // every 64-byte line of this step's 2 L weights (two with AVX-512 floats; with AVX2's bf16 half
      // a line, asked for by the step that starts it: once a line, where asking at both halves made
      // a Zen 3's BF16 decoding steps about 1.09x as long (Qwen3-0.6B, 2 threads, one binary
      // switched at run time, median of 20 paired rounds))
      if constexpr (kPrefetchBytes > 0) prefetch_ahead(w + k, 2 * L * static_cast<int64_t>(sizeof(T)), kPrefetchBytes, far);
      const VF w0 = LoadW(d, w + k), w1 = LoadW(d, w + k + L);
      for (int r = 0; r < R; ++r) {
        a0[r] = hn::MulAdd(w0, hn::LoadU(d, x + r * K + k), a0[r]);
        a1[r] = hn::MulAdd(w1, hn::LoadU(d, x + r * K + k + L), a1[r]);
      }
    }
    for (; k + L <= K; k += L) {
      const VF w0 = LoadW(d, w + k);
      for (int r = 0; r < R; ++r) a0[r] = hn::MulAdd(w0, hn::LoadU(d, x + r * K + k), a0[r]);
    }
    for (int r = 0; r < R; ++r) {
      float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0[r], a1[r])));
      for (int64_t t = k; t < K; ++t) s += ScalarW(w + t) * x[r * K + t];
      y[r * N + n] = bias ? s + bias[n] : s;
    }
  }
}

// All M rows of x against W's rows [n0, n1): tiles of kTileRows rows of W (at most 96 KiB, in
// L2), each tile meeting the rows of x four at a time, so W comes from memory once whatever M.
constexpr int64_t kTileRows = 8;
template <typename T>
void RowsRange(const float* x, int64_t M, int64_t K, const T* W, const float* bias, int64_t N, int64_t n0,
               int64_t n1, float* y) {
  const int64_t far_first = far_prefetch_bytes();
  for (int64_t t0 = n0; t0 < n1; t0 += kTileRows) {
    const int64_t t1 = std::min(n1, t0 + kTileRows);
    for (int64_t r = 0; r < M; r += 4) {
      const float* xr = x + r * K;
      float* yr = y + r * N;
      const int64_t far = r == 0 ? far_first : 0;
      switch (std::min<int64_t>(4, M - r)) {
        case 1: RowsBlock<1>(xr, K, W, bias, N, t0, t1, far, yr); break;
        case 2: RowsBlock<2>(xr, K, W, bias, N, t0, t1, far, yr); break;
        case 3: RowsBlock<3>(xr, K, W, bias, N, t0, t1, far, yr); break;
        default: RowsBlock<4>(xr, K, W, bias, N, t0, t1, far, yr); break;
      }
    }
  }
}

void GemvRangeF32(const float* x, int64_t M, int64_t K, const float* W, const float* bias, int64_t N, int64_t n0,
                  int64_t n1, float* y) {
  RowsRange(x, M, K, W, bias, N, n0, n1, y);
}
void GemvRangeBF16(const float* x, int64_t M, int64_t K, const uint16_t* W, const float* bias, int64_t N,
                   int64_t n0, int64_t n1, float* y) {
  RowsRange(x, M, K, W, bias, N, n0, n1, y);
}

}  // namespace qkv::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/gemv.h"
#include "qkv/core/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qkv {

HWY_EXPORT(GemvRangeF32);
HWY_EXPORT(GemvRangeBF16);

namespace {

#if defined(__x86_64__)
constexpr int64_t kGemvPrefetchBytes = QKV_GEMV_PREFETCH;

// The bf16 weights' rows against x's bf16 bits with AVX512_BF16's vdpbf16ps (two products into each
// float32 lane per instruction: a third of the widen-then-FMA path's instructions per byte of W, which
// left the stream short of the read bandwidth). Only called where bf16_dot_allowed() says the CPU
// has it. y[r N + n] = x_r . W_n (+ bias[n]) for rows r in [0, R), n in [n0, n1); xb (R, K) bits.
template <int R>
__attribute__((target("avx512f,avx512bf16"))) void DotRowsBlock(const uint16_t* xb, int64_t K, const uint16_t* W,
                                                                  const float* bias, int64_t N, int64_t n0,
                                                                  int64_t n1, int64_t far, float* y) {
  constexpr int A = R == 1 ? 4 : 2;  // independent chains per row of x (vdpbf16ps's latency)
  const int64_t step = 32 * A;       // bf16 elements per iteration
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* w = W + n * K;
    __m512 acc[R][A];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < A; ++a) acc[r][a] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + step <= K; k += step) {
      prefetch_ahead(w + k, step * 2, kGemvPrefetchBytes, far);
      for (int a = 0; a < A; ++a) {
        const __m512i wv = _mm512_loadu_si512(w + k + 32 * a);
        for (int r = 0; r < R; ++r)
          acc[r][a] = _mm512_dpbf16_ps(acc[r][a], reinterpret_cast<__m512bh>(wv),
                                       reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + r * K + k + 32 * a)));
      }
    }
    for (; k + 32 <= K; k += 32) {
      const __m512i wv = _mm512_loadu_si512(w + k);
      for (int r = 0; r < R; ++r)
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], reinterpret_cast<__m512bh>(wv),
                                     reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + r * K + k)));
    }
    for (int r = 0; r < R; ++r) {
      __m512 sum = acc[r][0];
      for (int a = 1; a < A; ++a) sum = _mm512_add_ps(sum, acc[r][a]);
      float s = _mm512_reduce_add_ps(sum);
      for (int64_t t = k; t < K; ++t) s += bf16_to_float(w[t]) * bf16_to_float(xb[r * K + t]);
      y[r * N + n] = bias ? s + bias[n] : s;
    }
  }
}

void GemvRangeBF16Dot(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* W, const float* bias, int64_t N,
                      int64_t n0, int64_t n1, float* y) {
  constexpr int64_t kTile = 8;  // W rows per tile, meeting every row of x while in cache
  const int64_t far_first = far_prefetch_bytes();
  for (int64_t t0 = n0; t0 < n1; t0 += kTile) {
    const int64_t t1 = std::min(n1, t0 + kTile);
    for (int64_t r = 0; r < M; r += 4) {
      const uint16_t* xr = xb + r * K;
      float* yr = y + r * N;
      const int64_t far = r == 0 ? far_first : 0;
      switch (std::min<int64_t>(4, M - r)) {
        case 1: DotRowsBlock<1>(xr, K, W, bias, N, t0, t1, far, yr); break;
        case 2: DotRowsBlock<2>(xr, K, W, bias, N, t0, t1, far, yr); break;
        case 3: DotRowsBlock<3>(xr, K, W, bias, N, t0, t1, far, yr); break;
        default: DotRowsBlock<4>(xr, K, W, bias, N, t0, t1, far, yr); break;
      }
    }
  }
}
#endif

}  // namespace

void gemv_rows(const float* x, int64_t M, int64_t K, const float* W, const uint16_t* W16, const float* bias,
               int64_t N, float* y, ThreadPool* pool) {
  QKV_CHECK(M >= 1 && M <= kGemvMaxRows && K >= 0 && N >= 0, "gemv_rows: (M, K, N) = (", M, ", ", K, ", ", N,
            "): M must be in [1, ", kGemvMaxRows, "]");
  QKV_CHECK((W == nullptr) != (W16 == nullptr), "gemv_rows: exactly one of W and W16 must be given");
  if (N == 0) return;
  const float* xs = x;
  [[maybe_unused]] const uint16_t* xb = nullptr;  // x's bf16 bits, for the dot-product path (x86)
  if (W16 != nullptr) {  // bf16 mode: x rounded to bf16 as the GEMM rounds it, then widened back
    thread_local std::vector<float> rounded;  // (M, K), kept between calls: no allocation per token
    thread_local std::vector<uint16_t> bits;
    const size_t n = static_cast<size_t>(M * K);
    if (rounded.size() < n) {
      rounded.resize(n);
      bits.resize(n);
    }
    floats_to_bf16(x, bits.data(), n);
    if (bf16_dot_allowed()) {
      xb = bits.data();
    } else {
      bf16_to_floats(bits.data(), rounded.data(), n);
      xs = rounded.data();
    }
  }
  ThreadPool& p = pool ? *pool : default_pool();
  // Blocks of W's rows: four per thread (the last ones balance a slow start), at least 16 rows.
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(4 * p.num_threads(), N / 16));
  const int64_t per = (N + tasks - 1) / tasks;
  p.parallel_for(tasks, [&](int64_t t, int) {
    const int64_t n0 = t * per, n1 = std::min(N, n0 + per);
    if (n0 >= n1) return;
#if defined(__x86_64__)
    if (xb != nullptr) {
      GemvRangeBF16Dot(xb, M, K, W16, bias, N, n0, n1, y);
      return;
    }
#endif
    if (W16 != nullptr)
      HWY_DYNAMIC_DISPATCH(GemvRangeBF16)(xs, M, K, W16, bias, N, n0, n1, y);
    else
      HWY_DYNAMIC_DISPATCH(GemvRangeF32)(xs, M, K, W, bias, N, n0, n1, y);
  });
}

}  // namespace qkv
#endif  // HWY_ONCE
