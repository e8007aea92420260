// Benchmarks of the fast path (not tests). FLOPs count only the work causal attention needs:
// the projections, and the attention's products over the (i, j) pairs a causal mask leaves
// visible. Each benchmark reports GFLOP/s (counter "GFLOPs") and "pct_peak", its share of the
// fp32 FMA peak that main() measures first on the same threads.
//
//   QKV_NUM_THREADS=2 build/bench/qkv_bench --benchmark_filter=Attention
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/core/gemm.h"
#include "qkv/kernels/mha.h"
#include "qkv/kernels/simd.h"

namespace qkv::kernels {
namespace {

double g_peak_gflops = 0;

std::vector<float> random_vector(size_t n, float scale = 1.0f) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void report(benchmark::State& state, double flops) {
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  // pct_peak = GFLOP/s / peak * 100, as a rate so Google Benchmark divides by the time per iteration.
  state.counters["pct_peak"] =
      benchmark::Counter(flops / 1e9 / g_peak_gflops * 100.0, benchmark::Counter::kIsIterationInvariantRate);
}

// Independent FMA chains: the yardstick itself (GFLOP/s of one pool-wide run per iteration).
void BM_FmaPeak(benchmark::State& state) {
  ThreadPool& pool = default_pool();
  double gflops = 0;
  for (auto _ : state) gflops = measure_fma_peak_gflops(pool, 0.05, 1);
  state.counters["GFLOPs"] = gflops;
  state.counters["threads"] = pool.num_threads();
}
BENCHMARK(BM_FmaPeak)->Iterations(5)->Unit(benchmark::kMillisecond)->UseRealTime();

// attention-core: (B, H, T, D) = (1, 12, T, D), causal unless range(2) == 0.
void BM_AttentionForward(benchmark::State& state) {
  const int64_t B = 1, H = 12, T = state.range(0), D = state.range(1);
  const bool causal = state.range(2) != 0;
  const size_t n = static_cast<size_t>(B * H * T * D);
  std::vector<float> q = random_vector(n), k = random_vector(n + 1), v = random_vector(n + 2), o(n);
  std::vector<float> lse(static_cast<size_t>(B * H * T));
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = causal ? AttentionMask::causal() : AttentionMask::none();
  for (auto _ : state)
    attention_forward(ConstHeads::contiguous(q.data(), B, H, T, D), ConstHeads::contiguous(k.data(), B, H, T, D),
                      ConstHeads::contiguous(v.data(), B, H, T, D), MutableHeads::contiguous(o.data(), B, H, T, D),
                      lse.data(), opt);
  report(state, attention_forward_flops(B, H, T, T, D, D, causal));
}
BENCHMARK(BM_AttentionForward)
    ->ArgNames({"T", "D", "causal"})
    ->Args({1024, 64, 1})
    ->Args({2048, 64, 1})
    ->Args({4096, 64, 1})
    ->Args({1024, 64, 0})
    ->Args({1024, 128, 1})
    ->Args({1024, 80, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_AttentionBackward(benchmark::State& state) {
  const int64_t B = 1, H = 12, T = state.range(0), D = state.range(1);
  const size_t n = static_cast<size_t>(B * H * T * D);
  std::vector<float> q = random_vector(n), k = random_vector(n + 1), v = random_vector(n + 2), o(n),
                     d_o = random_vector(n + 3), dq(n), dk(n), dv(n);
  std::vector<float> lse(static_cast<size_t>(B * H * T));
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = AttentionMask::causal();
  auto c = [&](std::vector<float>& x) { return ConstHeads::contiguous(x.data(), B, H, T, D); };
  auto m = [&](std::vector<float>& x) { return MutableHeads::contiguous(x.data(), B, H, T, D); };
  attention_forward(c(q), c(k), c(v), m(o), lse.data(), opt);
  for (auto _ : state) attention_backward(c(q), c(k), c(v), c(o), c(d_o), lse.data(), m(dq), m(dk), m(dv), opt);
  report(state, attention_backward_flops(B, H, T, T, D, D, true));
}
BENCHMARK(BM_AttentionBackward)->ArgNames({"T", "D"})->Args({1024, 64})->Args({2048, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

// GPT-2 small multi-head attention (C = 768, 12 heads), causal, forward and forward + backward.
void BM_MhaForward(benchmark::State& state) {
  const MhaShape s{state.range(0), state.range(1), 768, 768, 12};
  const bool backward = state.range(2) != 0;
  const int64_t rows = s.batch * s.tokens, C = s.d_out;
  const float scale = 1.0f / std::sqrt(static_cast<float>(C));
  std::vector<float> w_qkv = random_vector(static_cast<size_t>(3 * C * C), scale),
                     w_out = random_vector(static_cast<size_t>(C * C) + 1, scale),
                     b_out = random_vector(static_cast<size_t>(C) + 2, scale),
                     x = random_vector(static_cast<size_t>(rows * C) + 3), y(static_cast<size_t>(rows * C)),
                     dy = random_vector(static_cast<size_t>(rows * C) + 4), dx(static_cast<size_t>(rows * C)),
                     dw_qkv(w_qkv.size()), dw_out(w_out.size()), db_out(b_out.size());
  const MhaWeights w{w_qkv.data(), nullptr, w_out.data(), b_out.data()};
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim()));
  opt.mask = AttentionMask::causal();
  MhaWorkspace ws;
  for (auto _ : state) {
    mha_forward(s, w, x.data(), y.data(), ws, opt);
    if (backward) mha_backward(s, w, x.data(), dy.data(), dx.data(), {dw_qkv.data(), nullptr, dw_out.data(), db_out.data()}, ws, opt);
  }
  report(state, mha_forward_flops(s, true, true) + (backward ? mha_backward_flops(s, true, true) : 0.0));
}
BENCHMARK(BM_MhaForward)
    ->ArgNames({"B", "T", "backward"})
    ->Args({8, 1024, 0})
    ->Args({8, 1024, 1})
    ->Args({1, 4096, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The projections' shapes: x (B*T, C) W^T with W (N, C).
void BM_Sgemm(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  std::vector<float> a = random_vector(static_cast<size_t>(M * K)), b = random_vector(static_cast<size_t>(N * K) + 1),
                     c(static_cast<size_t>(M * N));
  const GemmArgs g = gemm_args(false, true, M, N, K, a.data(), K, b.data(), K, c.data(), N);
  for (auto _ : state) sgemm(g);
  report(state, gemm_flops(M, N, K));
}
BENCHMARK(BM_Sgemm)->ArgNames({"M", "N", "K"})->Args({8192, 2304, 768})->Args({8192, 768, 768})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace qkv::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  qkv::kernels::g_peak_gflops = qkv::kernels::measure_fma_peak_gflops(qkv::default_pool());
  std::printf("qkv_bench: %d threads, SIMD %s, measured fp32 FMA peak %.1f GFLOP/s\n",
              qkv::default_pool().num_threads(), qkv::kernels::simd_target().c_str(), qkv::kernels::g_peak_gflops);
  benchmark::AddCustomContext("fma_peak_gflops", std::to_string(qkv::kernels::g_peak_gflops));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
