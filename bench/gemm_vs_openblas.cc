// qkv's matrix product against OpenBLAS's sgemm on GPT-2 small's own product shapes, the two
// alternating call by call in one process (adjacent calls see the same host load, which on a
// shared VM moves both by 10-30% from one minute to the next): per shape, each product's median
// GFLOP/s over the rounds and the median of the per-round ratios qkv / OpenBLAS (above 1: qkv is
// faster). The calls are `sgemm` as the model makes them (the weight gradients' K split included),
// the backend switched per call; the kernels' target is QKV_SIMD's (both sides name theirs).
//
//   build/bench/qkv_gemm_vs_openblas [--set prefill|step] [--rounds 7] [--threads N]
//
// prefill: a forward of T = 1,024 tokens, y = x W^T (M 1,024): qkv, out_proj, fc, proj, the head.
// step: a training step of B = 2, T = 256 (M 512): the same forward products, then the input's
// gradients dx = dy W and the weights' dW = dy^T x of each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/gemm.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/simd.h"
#include "projection_products.h"

namespace {

struct Case {
  const char* name;
  int op;  // 0 y = x W^T, 1 dx = dy W, 2 dW = dy^T x (projection_products.h)
  int64_t M, N, K;
};

std::vector<Case> cases(const std::string& set) {
  // GPT-2 small: C 768, the fused qkv 2,304, the MLP 3,072, the vocabulary 50,257
  const int64_t C = 768, V = 50257;
  const struct {
    const char* name;
    int64_t out, in;
  } layers[] = {{"qkv", 3 * C, C}, {"out_proj", C, C}, {"fc", 4 * C, C}, {"proj", C, 4 * C}, {"head", V, C}};
  std::vector<Case> out;
  const int64_t M = set == "prefill" ? 1024 : 512;
  for (const auto& l : layers) out.push_back({l.name, 0, M, l.out, l.in});
  if (set == "step") {
    for (const auto& l : layers) out.push_back({l.name, 1, M, l.in, l.out});
    for (const auto& l : layers) out.push_back({l.name, 2, l.out, l.in, M});
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string set = "prefill";
  int rounds = 7, threads = qkv::default_thread_count();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) set = argv[++i];
    else if (a == "--rounds" && i + 1 < argc) rounds = std::stoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
    else {
      std::printf("usage: %s [--set prefill|step] [--rounds 7] [--threads N]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  if ((set != "prefill" && set != "step") || rounds < 1 || threads < 1) {
    std::fprintf(stderr, "--set must be prefill or step, --rounds and --threads at least 1\n");
    return 2;
  }
  const std::string simd = qkv::kernels::apply_simd_environment();
  qkv::ThreadPool pool(threads);
  const double peak = qkv::kernels::measure_fma_peak_gflops(pool);
  qkv::set_gemm_backend(qkv::GemmBackend::kQkv);
  const std::string ours = qkv::gemm_description();
  qkv::set_gemm_backend(qkv::GemmBackend::kOpenBlas);
  const std::string theirs = qkv::gemm_description();
  std::printf("GPT-2 small's %s products, %d thread%s, %d rounds; kernels: %s%s; FMA peak %.1f GFLOP/s\n",
              set.c_str(), threads, threads == 1 ? "" : "s", rounds, qkv::kernels::simd_target().c_str(),
              simd.empty() ? "" : " (QKV_SIMD)", peak);
  std::printf("qkv: %s\nOpenBLAS: %s\n", ours.c_str(), theirs.c_str());
  std::printf("%-9s %-3s %6s %6s %6s %11s %11s %9s\n", "product", "op", "M", "N", "K", "qkv GF/s", "OpenBLAS", "qkv/OB");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case& c : cases(set)) {
    const size_t a_size = static_cast<size_t>(c.M * c.K), b_size = static_cast<size_t>(c.N * c.K);
    std::vector<float> a(a_size), b(b_size), y(static_cast<size_t>(c.M * c.N));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    const qkv::GemmArgs g = qkv::bench::projection_product(c.op, c.M, c.N, c.K, a.data(), b.data(), y.data());
    auto seconds = [&](qkv::GemmBackend backend) {
      qkv::set_gemm_backend(backend);
      const auto t0 = std::chrono::steady_clock::now();
      qkv::sgemm(g, &pool);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    seconds(qkv::GemmBackend::kQkv);  // first calls: packing buffers and the output's pages
    seconds(qkv::GemmBackend::kOpenBlas);
    std::vector<double> tq, to, ratio;
    for (int r = 0; r < rounds; ++r) {
      tq.push_back(seconds(qkv::GemmBackend::kQkv));
      to.push_back(seconds(qkv::GemmBackend::kOpenBlas));
      ratio.push_back(to.back() / tq.back());
    }
    const double flop = 2.0 * static_cast<double>(c.M) * static_cast<double>(c.N) * static_cast<double>(c.K);
    std::printf("%-9s %-3d %6lld %6lld %6lld %11.1f %11.1f %8.3fx\n", c.name, c.op, static_cast<long long>(c.M),
                static_cast<long long>(c.N), static_cast<long long>(c.K), flop / median(tq) / 1e9,
                flop / median(to) / 1e9, median(ratio));
  }
  return 0;
}
