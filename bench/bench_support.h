// What qkv's Google Benchmark programs share (bench/attention_microbench.cc,
// bench/onednn_matmul_bench.cc): seeded random inputs, the FMA peak measured at start-up, and
// GFLOP/s and % of that peak as counters.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/simd.h"

namespace qkv::bench {

inline double g_peak_gflops = 0;  // fp32 FMA peak on the default pool, measured by measure_peak
inline double g_bf16_peak_gflops = 0;  // bf16 dot-product peak (0: no AVX512_BF16), measured by measure_peak

// n values uniform in [-scale, scale], seeded by n (the same inputs in every run).
inline std::vector<float> random_vector(size_t n, float scale = 1.0f) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Measures the peak, prints it under the program's name and records it in the JSON context.
inline void measure_peak(const char* program) {
  g_peak_gflops = kernels::measure_fma_peak_gflops(default_pool());
  g_bf16_peak_gflops = kernels::measure_bf16_dot_peak_gflops(default_pool());
  std::printf("%s: %d threads, SIMD %s, measured fp32 FMA peak %.1f GFLOP/s, bf16 dot-product peak %.1f GFLOP/s%s\n",
              program, default_pool().num_threads(), kernels::simd_target().c_str(), g_peak_gflops, g_bf16_peak_gflops,
              g_bf16_peak_gflops > 0 ? "" : " (no AVX512_BF16)");
  benchmark::AddCustomContext("fma_peak_gflops", std::to_string(g_peak_gflops));
  benchmark::AddCustomContext("bf16_dot_peak_gflops", std::to_string(g_bf16_peak_gflops));
}

// A bf16 product's share of the bf16 dot-product peak (counter "pct_bf16_peak"), where there is one.
inline void report_bf16(benchmark::State& state, double flops) {
  if (g_bf16_peak_gflops > 0)
    state.counters["pct_bf16_peak"] = benchmark::Counter(flops / 1e9 / g_bf16_peak_gflops * 100.0,
                                                         benchmark::Counter::kIsIterationInvariantRate);
}

// GFLOP/s and pct_peak = GFLOP/s / peak * 100, as rates so Google Benchmark divides by the time
// per iteration.
inline void report(benchmark::State& state, double flops) {
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_peak"] =
      benchmark::Counter(flops / 1e9 / g_peak_gflops * 100.0, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace qkv::bench
