// The FMA peak measuring kernel. See include/qkv/kernels/fma_peak.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fma_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <chrono>
#include <vector>

#include "hwy/highway.h"
#include "qkv/kernels/fma_peak.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent chains acc = acc * a + b for `iters` rounds: 16 of them where there are 32 vector
// registers, 12 where there are 16 (AVX2: with 16 chains, a and b, GCC keeps three chains on the
// stack and the measured peak drops by 40%). Either is more than latency x throughput (4 x 2)
// needs. Returns the FLOPs done; `sink` receives a value that depends on every chain, so the
// compiler keeps them all.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kChains = 12;
#else
constexpr int kChains = 16;
#endif
double FmaChains(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const V a = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-7f);
  V c[kChains];
  HWY_UNROLL(16) for (int i = 0; i < kChains; ++i) c[i] = hn::Set(d, 0.1f * static_cast<float>(i));
  for (int64_t n = 0; n < iters; ++n) {
    HWY_UNROLL(16) for (int i = 0; i < kChains; ++i) c[i] = hn::MulAdd(c[i], a, b);
  }
  V s = c[0];
  HWY_UNROLL(16) for (int i = 1; i < kChains; ++i) s = hn::Add(s, c[i]);
  *sink = hn::GetLane(hn::SumOfLanes(d, s));
  return 2.0 * kChains * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iters);
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "qkv/core/bf16.h"

namespace qkv::kernels {

HWY_EXPORT(FmaChains);

namespace {

#if defined(__x86_64__)
// 16 independent chains of vdpbf16ps (AVX512_BF16): each adds 2 bf16 products to each of 16 float32
// lanes, 64 FLOPs an instruction, as the bf16 matrix product's inner loop (core/gemm_bf16_dot-inl.h).
// Only called where bf16_dot_allowed() says the CPU has the instruction.
__attribute__((target("avx512f,avx512bf16"))) double Bf16DotChains(int64_t iters, float* sink) {
  constexpr int kChains = 16;
  const __m512i a = _mm512_set1_epi32(0x3F7F3F7F), b = _mm512_set1_epi32(0x33D633D6);  // ~0.996, ~1e-7
  __m512 c[kChains];
  for (int i = 0; i < kChains; ++i) c[i] = _mm512_set1_ps(0.1f * static_cast<float>(i));
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < kChains; ++i) c[i] = _mm512_dpbf16_ps(c[i], reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
  __m512 s = c[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, c[i]);
  *sink = _mm512_reduce_add_ps(s);
  return 64.0 * kChains * static_cast<double>(iters);
}
#endif

// Calibrates `chains` on one thread to about `seconds`, then runs it on every pool thread at once,
// best of `repeats`: GFLOP/s.
double measure_peak(ThreadPool& pool, double seconds, int repeats, double (*chains)(int64_t, float*)) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> sinks(static_cast<size_t>(pool.num_threads()) * 16);
  // Calibrate on one thread: iterations for about `seconds`.
  int64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    chains(iters, &sinks[0]);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > seconds / 4 || iters > (int64_t{1} << 40)) {
      iters = static_cast<int64_t>(static_cast<double>(iters) * seconds / std::max(dt, 1e-9));
      break;
    }
    iters *= 4;
  }
  // More threads than cores time-share them: each does its share of the cores' work, so the
  // measurement still takes about `seconds` (64 threads on 2 cores took 15 s before).
  const int threads = pool.num_threads(), cores = hardware_cores();
  if (threads > cores) iters = std::max<int64_t>(1, iters * cores / threads);
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> flops(static_cast<size_t>(pool.num_threads()), 0.0);
    const auto t0 = Clock::now();
    pool.parallel_for(pool.num_threads(), [&](int64_t task, int) {
      const auto t = static_cast<size_t>(task);
      flops[t] = chains(iters, &sinks[t * 16]);
    });
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / dt / 1e9);
  }
  return best;
}

double FmaChainsDispatched(int64_t iters, float* sink) { return HWY_DYNAMIC_DISPATCH(FmaChains)(iters, sink); }

}  // namespace

double measure_fma_peak_gflops(ThreadPool& pool, double seconds, int repeats) {
  return measure_peak(pool, seconds, repeats, FmaChainsDispatched);
}

double measure_bf16_dot_peak_gflops([[maybe_unused]] ThreadPool& pool, [[maybe_unused]] double seconds,
                                    [[maybe_unused]] int repeats) {
#if defined(__x86_64__)
  if (bf16_dot_allowed()) return measure_peak(pool, seconds, repeats, Bf16DotChains);
#endif
  return 0.0;
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
