// Benchmarks of the fast path (not tests). FLOPs count only the work causal attention needs:
// the projections, and the attention's products over the (i, j) pairs a causal mask leaves
// visible. Each benchmark reports GFLOP/s (counter "GFLOPs") and "pct_peak", its share of the
// fp32 FMA peak that main() measures first on the same threads.
//
//   QKV_NUM_THREADS=2 build/bench/qkv_bench --benchmark_filter=Attention
//   QKV_SIMD=avx2 ... the kernels capped at a target, as qkv caps them (its peak then that target's)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <algorithm>

#include "core/gemm_packed.h"
#include "qkv/core/bf16.h"
#include "qkv/core/gemm.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/attention_bf16.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/simd.h"
#include "qkv/perf/attention_bench.h"
#include "bench_support.h"
#include "projection_products.h"

namespace qkv::kernels {
namespace {

using bench::projection_product;
using bench::random_vector;
using bench::report;
using bench::report_bf16;

// Independent FMA chains: the yardstick itself (GFLOP/s of one pool-wide run per iteration).
void BM_FmaPeak(benchmark::State& state) {
  ThreadPool& pool = default_pool();
  double gflops = 0;
  for (auto _ : state) gflops = measure_fma_peak_gflops(pool, 0.05, 1);
  state.counters["GFLOPs"] = gflops;
  state.counters["threads"] = pool.num_threads();
}
BENCHMARK(BM_FmaPeak)->Iterations(5)->Unit(benchmark::kMillisecond)->UseRealTime();

// The cases are qkv bench's (qkv/perf/attention_bench.h): the same buffers, options and FLOPs.
perf::AttentionBenchShape shape(perf::BenchTarget target, int64_t B, int64_t T, int64_t C, int64_t H, bool causal,
                                bool backward) {
  perf::AttentionBenchShape s;
  s.target = target;
  s.batch = B;
  s.seq_len = T;
  s.d_model = C;
  s.attention.heads = H;
  s.attention.causal = causal;
  s.backward = backward;
  return s;
}

// attention-core: (B, H, T, D) = (1, 12, T, D), causal unless range(2) == 0.
void BM_AttentionForward(benchmark::State& state) {
  const int64_t H = 12, T = state.range(0), D = state.range(1);
  perf::AttentionBenchCase c(shape(perf::BenchTarget::kAttentionCore, 1, T, H * D, H, state.range(2) != 0, false),
                             default_pool());
  for (auto _ : state) c.forward();
  report(state, c.forward_flops());
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

// The backward alone, after one forward.
void BM_AttentionBackward(benchmark::State& state) {
  const int64_t H = 12, T = state.range(0), D = state.range(1);
  perf::AttentionBenchCase c(shape(perf::BenchTarget::kAttentionCore, 1, T, H * D, H, true, true), default_pool());
  c.forward();
  for (auto _ : state) c.backward();
  report(state, c.backward_flops());
}
BENCHMARK(BM_AttentionBackward)->ArgNames({"T", "D"})->Args({1024, 64})->Args({2048, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

// The fused kernel alone in fp32 and in bf16 (attention_bf16.h), side by side on the same
// inputs: (B, H, T, D) = (1, 12, T, D) contiguous, causal, scale 1 / sqrt(D); the bf16 inputs are
// the fp32 ones rounded. dtype 0 fp32, 1 bf16; pass 0 forward, 1 forward + backward. The label
// says whether the bf16 products ran on vdpbf16ps (AVX512_BF16) or widened to fp32.
void BM_AttentionCoreDtype(benchmark::State& state) {
  const int64_t H = 12, T = state.range(0), D = state.range(1);
  const bool bf16 = state.range(2) != 0, backward = state.range(3) != 0;
  const size_t n = static_cast<size_t>(H * T * D);
  std::vector<float> q = random_vector(n), k = random_vector(n + 1), v = random_vector(n + 2), d_o = random_vector(n + 3);
  std::vector<uint16_t> qb(n), kb(n), vb(n);
  floats_to_bf16(q.data(), qb.data(), n);
  floats_to_bf16(k.data(), kb.data(), n);
  floats_to_bf16(v.data(), vb.data(), n);
  std::vector<float> o(n), lse(static_cast<size_t>(H * T)), dq(n), dk(n), dv(n);
  auto heads = [&](float* x) { return MutableHeads::contiguous(x, 1, H, T, D); };
  auto cheads = [&](const float* x) { return ConstHeads::contiguous(x, 1, H, T, D); };
  auto bheads = [&](const uint16_t* x) { return ConstHeadsBF16::contiguous(x, 1, H, T, D); };
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = AttentionMask::causal();
  const auto step = [&] {
    if (bf16) {
      attention_forward_bf16(bheads(qb.data()), bheads(kb.data()), bheads(vb.data()), heads(o.data()), lse.data(), opt);
      if (backward)
        attention_backward_bf16(bheads(qb.data()), bheads(kb.data()), bheads(vb.data()), cheads(o.data()),
                                cheads(d_o.data()), lse.data(), heads(dq.data()), heads(dk.data()), heads(dv.data()), opt);
    } else {
      attention_forward(cheads(q.data()), cheads(k.data()), cheads(v.data()), heads(o.data()), lse.data(), opt);
      if (backward)
        attention_backward(cheads(q.data()), cheads(k.data()), cheads(v.data()), cheads(o.data()), cheads(d_o.data()),
                           lse.data(), heads(dq.data()), heads(dk.data()), heads(dv.data()), opt);
    }
  };
  state.SetLabel(!bf16 ? "fp32" : bf16_dot_allowed() ? "bf16 vdpbf16ps" : "bf16 widened");
  for (auto _ : state) step();
  report(state, attention_forward_flops(1, H, T, T, D, D, true) +
                    (backward ? attention_backward_flops(1, H, T, T, D, D, true) : 0.0));
}
BENCHMARK(BM_AttentionCoreDtype)
    ->ArgNames({"T", "D", "bf16", "backward"})
    ->ArgsProduct({{4096}, {64}, {0, 1}, {0, 1}})
    ->ArgsProduct({{1024}, {64}, {0, 1}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// GPT-2 small multi-head attention (C = 768, 12 heads), causal, forward and forward + backward.
void BM_MhaForward(benchmark::State& state) {
  perf::AttentionBenchCase c(
      shape(perf::BenchTarget::kMha, state.range(0), state.range(1), 768, 12, true, state.range(2) != 0),
      default_pool());
  for (auto _ : state) c.step();
  report(state, c.step_flops());
}
BENCHMARK(BM_MhaForward)
    ->ArgNames({"B", "T", "backward"})
    ->Args({8, 1024, 0})
    ->Args({8, 1024, 1})
    ->Args({1, 4096, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The projections' products, by either matrix product (backend: 0 qkv's own, 1 OpenBLAS):
//   op 0  y = x W^T      x (M, K), W (N, K)        forward (nn.Linear)
//   op 1  dx = dy W      dy (M, K), W (K, N)       backward, the input's gradient
//   op 2  dW = dy^T x    dy (K, M), x (K, N)       backward, the weight's gradient (K = B*T)
// product: 0 qkv float32, 1 OpenBLAS float32, 2 qkv bf16 (B - the weights - held in bf16, A
// rounded as it is packed); op: 0 x W^T, 1 dY W, 2 dY^T x. FLOPs: 2 M N K; bf16 products also
// report pct_bf16_peak, their share of the measured vdpbf16ps peak.
void BM_Sgemm(benchmark::State& state) {
  const int64_t product = state.range(0);
  const auto backend = product == 1 ? GemmBackend::kOpenBlas : GemmBackend::kQkv;
  const int64_t op = state.range(1), M = state.range(2), N = state.range(3), K = state.range(4);
  std::vector<float> a = random_vector(static_cast<size_t>(M * K)), b = random_vector(static_cast<size_t>(N * K) + 1),
                     c(static_cast<size_t>(M * N));
  std::vector<uint16_t> b16(b.size());
  floats_to_bf16(b.data(), b16.data(), b.size());
  GemmArgs g = projection_product(op, M, N, K, a.data(), b.data(), c.data());
  if (product == 2) {
    g.precision = Dtype::kBF16;
    g.B = nullptr;
    g.B16 = b16.data();
  }
  const GemmBackend before = gemm_backend();
  set_gemm_backend(backend);
  state.SetLabel(product == 2 ? gemm_bf16_description() : gemm_description());
  for (auto _ : state) sgemm(g);
  set_gemm_backend(before);
  report(state, gemm_flops(M, N, K));
  if (product == 2) report_bf16(state, gemm_flops(M, N, K));
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"product", "op", "M", "N", "K"})
    ->ArgsProduct({{0, 1, 2}, {0}, {8192}, {2304}, {768}})
    ->ArgsProduct({{0, 1, 2}, {0}, {8192}, {768}, {64, 768, 4096}})
    ->ArgsProduct({{0, 1, 2}, {1}, {8192}, {768}, {768, 2304}})
    ->ArgsProduct({{0, 1, 2}, {2}, {768, 2304}, {768}, {8192}})
    // GPT-2 small's prefill of 1,024 tokens: the blocks' qkv, out_proj, fc and proj, and the head
    ->ArgsProduct({{0, 1, 2}, {0}, {1024}, {2304, 768, 3072, 50257}, {768}})
    ->ArgsProduct({{0, 1, 2}, {0}, {1024}, {768}, {3072}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The packed product's K loop alone, one thread, for a tile of mr rows x nv vectors: `panels`
// micro-panels of A (kc, mr) against one panel of B in L1, as the product's inner loop meets them.
// Each iteration times the tile and then the FMA peak of one thread (register-only chains), so a
// noisy host moves both: pct_peak is the median of the per-iteration ratios. What a tile shape can
// reach before memory enters (AVX2's 16 registers: 6x2 is 8 loads - 6 of them broadcasts - per 12
// FMAs, 4x3 is 7 - 4 broadcasts). Tiles the target does not build are skipped.
void BM_GemmTile(benchmark::State& state) {
  const int mr = static_cast<int>(state.range(0)), nv = static_cast<int>(state.range(1));
  const int64_t kc = state.range(2), panels = state.range(3);
  static ThreadPool one(1);
  const int64_t lanes = packed_gemm_shape().vector_bits / 32;
  const double flops_per_rep = 2.0 * mr * nv * static_cast<double>(lanes * kc * panels);
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(2e6 / flops_per_rep * 10));  // ~20 MFLOP a run
  if (packed_tile_seconds(mr, nv, kc, panels, 1, 1) < 0) {
    state.SkipWithError("this tile is not built for the dispatched target");
    return;
  }
  std::vector<double> ratio, gflops;
  for (auto _ : state) {
    const double s = packed_tile_seconds(mr, nv, kc, panels, reps, 1);
    const double peak = measure_fma_peak_gflops(one, 0.01, 1);
    gflops.push_back(flops_per_rep * static_cast<double>(reps) / s / 1e9);
    ratio.push_back(gflops.back() / peak);
  }
  std::sort(ratio.begin(), ratio.end());
  std::sort(gflops.begin(), gflops.end());
  state.counters["GFLOPs"] = gflops[gflops.size() / 2];
  state.counters["pct_peak"] = 100.0 * ratio[ratio.size() / 2];
  state.SetLabel(packed_gemm_shape().target + ", one thread, against its own FMA peak");
}
BENCHMARK(BM_GemmTile)
    ->ArgNames({"mr", "nv", "kc", "panels"})
    ->Args({6, 2, 256, 32})->Args({4, 3, 256, 32})->Args({6, 2, 512, 32})->Args({4, 3, 512, 32})
    ->Args({8, 3, 256, 32})->Args({12, 2, 256, 32})->Args({6, 4, 256, 32})  // AVX-512's (8x3: its product's)
    ->Iterations(30)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace qkv::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // QKV_SIMD caps the kernels' target as it does for qkv (each path measurable on one machine)
  const std::string simd = qkv::kernels::apply_simd_environment();
  if (!simd.empty()) std::printf("qkv_bench: the kernels capped at %s (QKV_SIMD)\n", simd.c_str());
  qkv::bench::measure_peak("qkv_bench");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
