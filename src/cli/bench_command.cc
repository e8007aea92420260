// qkv bench --module {mha|causal-attention|attention-core} --batch B --seq-len T ...
//
// Times the fast path on random inputs: median milliseconds over --iters runs after --warmup
// runs, GFLOP/s counting only the work causal attention needs (projections + the visible half of
// the scores), and the share of the FMA peak this machine reaches on the same threads (measured
// here, first). With --json the last line is one JSON object for machines.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/mha.h"
#include "qkv/kernels/simd.h"

namespace qkv::cli {
namespace {

struct BenchFlags {
  std::string module;
  int64_t batch = 1, seq_len = 0, d_model = 768, num_heads = 12, head_dim = 0;
  bool backward = false, no_mask = false, json = false;
  int threads = 0, iters = 10, warmup = 1;
  double dropout = 0.0;
};

// Owned, uninitialised floats (first touched by fill_random, in parallel).
struct Buffer {
  std::unique_ptr<float[]> data;
  size_t size = 0;
  explicit Buffer(size_t n) : data(new float[std::max<size_t>(n, 1)]), size(n) {}
  float* get() { return data.get(); }
};

// Uniform values in [-scale, scale) from a counter hash: fast enough for gigabytes of inputs.
void fill_random(Buffer& b, uint64_t seed, float scale, ThreadPool& pool) {
  const int64_t chunk = 1 << 20, n = static_cast<int64_t>(b.size);
  pool.parallel_for((n + chunk - 1) / chunk, [&](int64_t t, int) {
    for (int64_t i = t * chunk; i < std::min(n, (t + 1) * chunk); ++i) {
      uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ULL;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      z ^= z >> 31;
      b.get()[i] = scale * (static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
  });
}

double cpu_seconds() {  // user + system time of the whole process so far
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

double physical_memory_bytes() {  // 0 when unknown
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

double max_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

int run_bench(BenchFlags& f, const CLI::App& sub) {
  using Clock = std::chrono::steady_clock;
  const bool core = f.module == "attention-core";
  QKV_CHECK(f.batch >= 1, "--batch ", f.batch, ": must be at least 1");
  QKV_CHECK(f.seq_len >= 1, "--seq-len ", f.seq_len, ": must be at least 1 (a benchmark of no work)");
  QKV_CHECK(f.iters >= 1, "--iters ", f.iters, ": must be at least 1");
  QKV_CHECK(f.warmup >= 0, "--warmup ", f.warmup, ": must be at least 0");
  QKV_CHECK(f.threads >= 0, "--threads ", f.threads, ": must be at least 1 (or 0: the default)");
  QKV_CHECK(f.dropout >= 0.0 && f.dropout < 1.0, "--dropout ", f.dropout, ": must be in [0, 1)");
  if (f.threads > 0) set_default_thread_count(f.threads);
  ThreadPool& pool = default_pool();
  if (f.module == "causal-attention") {
    QKV_CHECK(sub.count("--num-heads") == 0 || f.num_heads == 1, "--num-heads ", f.num_heads, ": --module causal-attention has one head");
    f.num_heads = 1;
  }
  QKV_CHECK(f.num_heads >= 1, "--num-heads ", f.num_heads, ": must be at least 1");
  if (core) {
    if (f.head_dim == 0) f.head_dim = f.d_model / f.num_heads;
    QKV_CHECK(f.head_dim >= 1, "--head-dim ", f.head_dim, ": must be at least 1");
    f.d_model = f.head_dim * f.num_heads;
  } else {
    QKV_CHECK(f.d_model >= 1, "--d-model ", f.d_model, ": must be at least 1");
    QKV_CHECK(f.d_model % f.num_heads == 0, "--d-model (", f.d_model, ") must be divisible by --num-heads (",
              f.num_heads, ")");
    QKV_CHECK(sub.count("--head-dim") == 0 || f.head_dim == f.d_model / f.num_heads,
              "--head-dim must be d_model / num_heads for --module ", f.module);
    f.head_dim = f.d_model / f.num_heads;
  }
  const bool causal = !f.no_mask;
  const int64_t B = f.batch, T = f.seq_len, H = f.num_heads, D = f.head_dim, C = f.d_model;

  {  // the inputs, outputs and gradients must fit in memory, or the run would be killed mid-way
    const double n = static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(H * D);
    // core: q, k, v, o (and d_o, dq, dk, dv); mha: x, y, the QKV output, its heads, the context (and
    // their gradients), roughly
    const double floats = core ? n * (f.backward ? 8 : 4) : n * (f.backward ? 20 : 9) + 4.0 * C * C;
    const double bytes = 4.0 * floats, ram = physical_memory_bytes();
    QKV_CHECK(ram <= 0 || bytes < 0.8 * ram, "B=", B, " T=", T, " H=", H, " D=", D, " needs about ",
              static_cast<int64_t>(bytes / (1 << 20)), " MiB of inputs and outputs; this machine has ",
              static_cast<int64_t>(ram / (1 << 20)), " MiB");
  }
  const double peak = kernels::measure_fma_peak_gflops(pool);
  // When the BLAS computes with narrower vectors than this CPU has (OPENBLAS_CORETYPE=Haswell on
  // an AVX-512 machine, say), the peak at the BLAS's width bounds the projections: measured too.
  const int blas_bits = core ? 0 : blas_vector_bits();
  double peak_at_blas_width = 0;
  if (blas_bits > 0 && blas_bits < kernels::simd_vector_bits()) {
    for (int64_t target : kernels::available_simd_targets()) {
      if (kernels::simd_target_vector_bits(target) != blas_bits) continue;
      kernels::force_simd_target(target);
      peak_at_blas_width = kernels::measure_fma_peak_gflops(pool);
      kernels::force_simd_target(0);
      break;
    }
  }

  kernels::AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = causal ? kernels::AttentionMask::causal() : kernels::AttentionMask::none();
  opt.dropout_p = static_cast<float>(f.dropout);
  opt.dropout_seed = 1234;
  opt.pool = &pool;

  std::function<void()> step;
  double flops = 0;
  std::vector<std::unique_ptr<Buffer>> keep;
  auto buffer = [&](size_t n, float scale, uint64_t seed) {
    keep.push_back(std::make_unique<Buffer>(n));
    if (scale != 0) fill_random(*keep.back(), seed, scale, pool);
    return keep.back()->get();
  };
  std::unique_ptr<kernels::MhaWorkspace> ws;
  if (core) {
    const auto n = static_cast<size_t>(B * H * T * D);
    auto heads = [&](float* p) { return kernels::MutableHeads::contiguous(p, B, H, T, D); };
    const kernels::MutableHeads q = heads(buffer(n, 1, 1)), k = heads(buffer(n, 1, 2)), v = heads(buffer(n, 1, 3));
    const kernels::MutableHeads o = heads(buffer(n, 0, 0));
    float* lse = buffer(static_cast<size_t>(B * H * T), 0, 0);
    flops = kernels::attention_forward_flops(B, H, T, T, D, D, causal);
    if (!f.backward) {
      step = [=] { kernels::attention_forward(q, k, v, o, lse, opt); };
    } else {
      const kernels::MutableHeads d_o = heads(buffer(n, 1, 4)), dq = heads(buffer(n, 0, 0)),
                                  dk = heads(buffer(n, 0, 0)), dv = heads(buffer(n, 0, 0));
      flops += kernels::attention_backward_flops(B, H, T, T, D, D, causal);
      step = [=] {
        kernels::attention_forward(q, k, v, o, lse, opt);
        kernels::attention_backward(q, k, v, o, d_o, lse, dq, dk, dv, opt);
      };
    }
  } else {
    const bool out_proj = f.module == "mha";
    const kernels::MhaShape s{B, T, C, C, H};
    const float w_scale = 1.0f / std::sqrt(static_cast<float>(C));  // nn.Linear's init range
    kernels::MhaWeights w;
    w.w_qkv = buffer(static_cast<size_t>(3 * C * C), w_scale, 5);
    if (out_proj) {
      w.w_out = buffer(static_cast<size_t>(C * C), w_scale, 6);
      w.b_out = buffer(static_cast<size_t>(C), w_scale, 7);
    }
    const float* x = buffer(static_cast<size_t>(B * T * C), 1, 8);
    float* y = buffer(static_cast<size_t>(B * T * C), 0, 0);
    ws = std::make_unique<kernels::MhaWorkspace>();
    kernels::MhaWorkspace* wsp = ws.get();
    flops = kernels::mha_forward_flops(s, out_proj, causal);
    if (!f.backward) {
      step = [=] { kernels::mha_forward(s, w, x, y, *wsp, opt); };
    } else {
      const float* dy = buffer(static_cast<size_t>(B * T * C), 1, 9);
      float* dx = buffer(static_cast<size_t>(B * T * C), 0, 0);
      kernels::MhaGradients g;
      g.dw_qkv = buffer(static_cast<size_t>(3 * C * C), 0, 0);
      if (out_proj) {
        g.dw_out = buffer(static_cast<size_t>(C * C), 0, 0);
        g.db_out = buffer(static_cast<size_t>(C), 0, 0);
      }
      flops += kernels::mha_backward_flops(s, out_proj, causal);
      step = [=] {
        kernels::mha_forward(s, w, x, y, *wsp, opt);
        kernels::mha_backward(s, w, x, dy, dx, g, *wsp, opt);
      };
    }
  }

  for (int i = 0; i < f.warmup; ++i) step();
  std::vector<double> ms;
  const double cpu0 = cpu_seconds();
  for (int i = 0; i < f.iters; ++i) {
    const auto t0 = Clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  double wall = 0;
  for (double t : ms) wall += t * 1e-3;
  // The share of the timed wall-clock x threads this process actually ran: below 1 means other
  // processes (or idle waits) took the cores, and the times are inflated by that much.
  const double cpu_share = (cpu_seconds() - cpu0) / (wall * pool.num_threads());
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  const double gflops = flops / (median * 1e-3) / 1e9;
  const double rss = max_rss_mib();

  const std::string what = f.module + (f.backward ? " forward+backward" : " forward");
  std::cout << "qkv bench: " << what << ", B=" << B << " T=" << T << " C=" << C << " H=" << H << " D=" << D
            << (causal ? " causal" : " no mask") << (f.dropout > 0 ? " dropout " + std::to_string(f.dropout) : "")
            << ", " << pool.num_threads() << " thread" << (pool.num_threads() == 1 ? "" : "s") << ", "
            << kernels::simd_target() << "\n";
  const CacheSizes& caches = cache_sizes();
  std::cout << "  caches: L1d " << caches.l1d / 1024 << " KiB, L2 " << caches.l2 / 1024 << " KiB, L3 "
            << caches.l3 / 1024 << " KiB (" << caches.source << ")\n";
  if (f.module != "attention-core") {
    const char* forced = std::getenv("OPENBLAS_CORETYPE");
    const bool pinned = forced != nullptr && *forced != '\0';
    std::cout << "  projections: " << blas_description()
              << (pinned ? std::string(" (chosen by OPENBLAS_CORETYPE=") + forced + ")" : "") << "\n";
    if (peak_at_blas_width > 0) {
      std::cout << std::fixed << std::setprecision(1) << "  note: these kernels compute with " << blas_bits
                << "-bit vectors, the kernels here with " << kernels::simd_vector_bits()
                << "-bit ones; the FMA peak at " << blas_bits << " bits is " << peak_at_blas_width << " GFLOP/s ("
                << 100.0 * peak_at_blas_width / peak << "% of the peak below), which bounds the projections"
                << (pinned ? "; unset OPENBLAS_CORETYPE to let OpenBLAS choose kernels for this CPU" : "") << "\n";
    }
  }
  std::cout << std::fixed << std::setprecision(2) << "  median " << median << " ms  (min " << sorted.front()
            << ", max " << sorted.back() << ", " << f.iters << " runs)\n"
            << "  " << std::setprecision(1) << flops / 1e9 << " GFLOP (causal work only) -> " << gflops
            << " GFLOP/s = " << 100.0 * gflops / peak << "% of the measured FMA peak " << peak << " GFLOP/s\n"
            << "  peak memory (max RSS) " << rss << " MiB; CPU share while timed " << std::setprecision(2)
            << cpu_share << " (1.00 = every thread ran all the time)\n";
  if (f.json) {
    nlohmann::json j = {{"module", f.module},      {"backward", f.backward},     {"batch", B},
                        {"seq_len", T},            {"d_model", C},               {"num_heads", H},
                        {"head_dim", D},           {"causal", causal},           {"dropout", f.dropout},
                        {"threads", pool.num_threads()}, {"iters", f.iters},     {"median_ms", median},
                        {"min_ms", sorted.front()}, {"times_ms", ms},            {"gflop", flops / 1e9},
                        {"gflops", gflops},        {"peak_gflops", peak},        {"percent_of_peak", 100.0 * gflops / peak},
                        {"max_rss_mib", rss},      {"cpu_share", cpu_share},     {"simd", kernels::simd_target()},
                        {"blas", blas_description()}, {"blas_vector_bits", blas_bits},
                        {"l1d_bytes", caches.l1d}, {"l2_bytes", caches.l2}, {"l3_bytes", caches.l3},
                        {"peak_gflops_at_blas_width", peak_at_blas_width > 0 ? nlohmann::json(peak_at_blas_width) : nlohmann::json()}};
    std::cout << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand("bench", "Time the fast attention path (fused kernels + BLAS) on random inputs");
  sub->add_option("--module", f->module,
                  "mha (fused QKV GEMM -> fused attention -> out_proj) | causal-attention (one head, no "
                  "out_proj) | attention-core (the fused kernel alone on (B, H, T, D))")
      ->required()
      ->check(CLI::IsMember({"mha", "causal-attention", "attention-core"}));
  sub->add_option("--batch", f->batch, "Batch size B")->capture_default_str();
  sub->add_option("--seq-len", f->seq_len, "Tokens T")->required();
  sub->add_option("--d-model", f->d_model, "Channels C = d_in = d_out")->capture_default_str();
  sub->add_option("--num-heads", f->num_heads, "Heads H")->capture_default_str();
  sub->add_option("--head-dim", f->head_dim, "Head dim D (attention-core; default d_model / num_heads)");
  sub->add_flag("--backward", f->backward, "Time forward + backward (one training step of the layer)");
  sub->add_flag("--no-mask", f->no_mask, "No causal mask (FLOPs then count every score)");
  sub->add_option("--dropout", f->dropout, "Dropout on the weights, in [0, 1) (the fused kernel's Philox mask)")
      ->capture_default_str();
  sub->add_option("--threads", f->threads, "Threads (default: QKV_NUM_THREADS, else the cores)");
  sub->add_option("--iters", f->iters, "Timed runs; the median is reported")->capture_default_str();
  sub->add_option("--warmup", f->warmup, "Untimed runs first")->capture_default_str();
  sub->add_flag("--json", f->json, "Also print one JSON object as the last line");
  sub->footer("GFLOP/s count matrix-product FLOPs: 2 B T C 3C (QKV) + 2 B T C C (out_proj) + the attention's\n"
              "two products over the (i, j) pairs the causal mask leaves visible; backward: twice the projections'\n"
              "and the attention's five products. The peak is measured first with the same threads.");
  return {sub, [f, sub]() { return run_bench(*f, *sub); }};
}

}  // namespace qkv::cli
