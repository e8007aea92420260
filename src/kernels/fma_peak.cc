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

// 16 independent chains acc = acc * a + b for `iters` rounds. Returns the FLOPs done; `sink`
// receives a value that depends on every chain, so the compiler keeps them all.
double FmaChains(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  const auto a = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-7f);
  auto c0 = hn::Set(d, 0.0f), c1 = hn::Set(d, 0.1f), c2 = hn::Set(d, 0.2f), c3 = hn::Set(d, 0.3f);
  auto c4 = hn::Set(d, 0.4f), c5 = hn::Set(d, 0.5f), c6 = hn::Set(d, 0.6f), c7 = hn::Set(d, 0.7f);
  auto c8 = hn::Set(d, 0.8f), c9 = hn::Set(d, 0.9f), c10 = hn::Set(d, 1.0f), c11 = hn::Set(d, 1.1f);
  auto c12 = hn::Set(d, 1.2f), c13 = hn::Set(d, 1.3f), c14 = hn::Set(d, 1.4f), c15 = hn::Set(d, 1.5f);
  for (int64_t i = 0; i < iters; ++i) {
    c0 = hn::MulAdd(c0, a, b); c1 = hn::MulAdd(c1, a, b); c2 = hn::MulAdd(c2, a, b); c3 = hn::MulAdd(c3, a, b);
    c4 = hn::MulAdd(c4, a, b); c5 = hn::MulAdd(c5, a, b); c6 = hn::MulAdd(c6, a, b); c7 = hn::MulAdd(c7, a, b);
    c8 = hn::MulAdd(c8, a, b); c9 = hn::MulAdd(c9, a, b); c10 = hn::MulAdd(c10, a, b); c11 = hn::MulAdd(c11, a, b);
    c12 = hn::MulAdd(c12, a, b); c13 = hn::MulAdd(c13, a, b); c14 = hn::MulAdd(c14, a, b); c15 = hn::MulAdd(c15, a, b);
  }
  auto s = hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7)));
  s = hn::Add(s, hn::Add(hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)), hn::Add(hn::Add(c12, c13), hn::Add(c14, c15))));
  *sink = hn::GetLane(hn::SumOfLanes(d, s));
  return 2.0 * 16.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iters);
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(FmaChains);

double measure_fma_peak_gflops(ThreadPool& pool, double seconds, int repeats) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> sinks(static_cast<size_t>(pool.num_threads()) * 16);
  // Calibrate on one thread: iterations for about `seconds`.
  int64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    HWY_DYNAMIC_DISPATCH(FmaChains)(iters, &sinks[0]);
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
      flops[t] = HWY_DYNAMIC_DISPATCH(FmaChains)(iters, &sinks[t * 16]);
    });
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / dt / 1e9);
  }
  return best;
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
