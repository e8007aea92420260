// The attention benchmark harness. See include/qkv/perf/attention_bench.h.
//
// Legend: B batch, T tokens, C channels (d_in = d_out), H heads, D head dim.
#include "qkv/perf/attention_bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/machine.h"
#include "qkv/kernels/attention_bf16.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/simd.h"
#include "perf/counter_hash.h"
#include "perf/timing.h"

namespace qkv::perf {
namespace {

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
    for (int64_t i = t * chunk; i < std::min(n, (t + 1) * chunk); ++i)
      b.get()[i] = scale * counter_uniform(seed, static_cast<uint64_t>(i));
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

void check_fits_in_memory(const AttentionBenchShape& s) {
  // The inputs, outputs and gradients must fit, or the run would be killed mid-way.
  const double bytes = attention_bench_bytes(s), ram = physical_memory_bytes();
  QKV_CHECK(ram <= 0 || bytes < 0.8 * ram, "B=", s.batch, " T=", s.seq_len, " H=", s.attention.heads, " D=",
            s.attention.head_dim,
            " needs about ", static_cast<int64_t>(bytes / (1 << 20)), " MiB of inputs and outputs; this machine has ",
            static_cast<int64_t>(ram / (1 << 20)), " MiB");
}

}  // namespace

BenchTarget parse_bench_target(const std::string& name) {
  if (name == "mha") return BenchTarget::kMha;
  if (name == "causal-attention") return BenchTarget::kCausalAttention;
  if (name == "attention-core") return BenchTarget::kAttentionCore;
  fail("unknown benchmark target '", name, "'; expected mha, causal-attention or attention-core");
}

const char* bench_target_name(BenchTarget target) {
  switch (target) {
    case BenchTarget::kMha: return "mha";
    case BenchTarget::kCausalAttention: return "causal-attention";
    case BenchTarget::kAttentionCore: return "attention-core";
  }
  return "?";
}

AttentionBenchShape normalized(AttentionBenchShape s, kernels::SpecNamer namer, const std::string& who) {
  kernels::AttentionSpec& a = s.attention;
  QKV_CHECK(s.batch >= 1, "attention bench: batch (", s.batch, ") must be at least 1");
  QKV_CHECK(s.seq_len >= 1, "attention bench: seq_len (", s.seq_len, ") must be at least 1");
  QKV_CHECK(a.heads >= 1, "attention bench: heads (", a.heads, ") must be at least 1");
  QKV_CHECK(s.target != BenchTarget::kCausalAttention || a.heads == 1,
            "attention bench: causal-attention has one head, not heads = ", a.heads);
  QKV_CHECK(s.target != BenchTarget::kCausalAttention || !a.has_variants(),
            "attention bench: grouped-query heads, RoPE, windows, ALiBi and softcapping are for mha and attention-core");
  QKV_CHECK(s.target != BenchTarget::kAttentionCore || a.rope == kernels::RopeLayout::kNone,
            "attention bench: RoPE rotates q and k in the mha pipeline, outside the attention kernel: use --module mha");
  if (s.target == BenchTarget::kAttentionCore) {
    if (a.head_dim == 0) a.head_dim = s.d_model / a.heads;
    kernels::validate_attention_spec(a, who, namer);
    s.d_model = a.head_dim * a.heads;
  } else {
    QKV_CHECK(s.d_model >= 1, "attention bench: d_model (", s.d_model, ") must be at least 1");
    QKV_CHECK(s.d_model % a.heads == 0, "attention bench: d_model (", s.d_model, ") must be divisible by heads (",
              a.heads, ")");
    QKV_CHECK(a.head_dim == 0 || a.head_dim == s.d_model / a.heads, "attention bench: head_dim (", a.head_dim,
              ") must be d_model / heads = ", s.d_model / a.heads, " for ", bench_target_name(s.target));
    a.head_dim = s.d_model / a.heads;
  }
  kernels::validate_attention_spec(a, who, namer);
  return s;
}

double attention_bench_bytes(const AttentionBenchShape& s) {
  const double n = static_cast<double>(s.batch) * static_cast<double>(s.seq_len) *
                   static_cast<double>(s.attention.width());
  const double C = static_cast<double>(s.d_model);
  // core: q, k, v, o (and d_o, dq, dk, dv); mha: x, y, the QKV output, its heads, the context (and
  // their gradients), roughly
  const double floats = s.target == BenchTarget::kAttentionCore ? n * (s.backward ? 8 : 4)
                                                                : n * (s.backward ? 20 : 9) + 4.0 * C * C;
  return 4.0 * floats;
}

// The buffers of one case: the inputs filled, the outputs and gradients only allocated.
struct AttentionBenchCase::Buffers {
  std::vector<std::unique_ptr<Buffer>> keep;
  // attention-core: q, o, d_o, dq (B, H, T, D); k, v, dk, dv (B, G, T, D)
  kernels::MutableHeads q, k, v, o, d_o, dq, dk, dv;
  kernels::MutableHeadsBF16 q16, k16, v16;  // bf16: q, k, v rounded
  float* lse = nullptr;
  std::vector<float> slopes;  // (H) ALiBi's
  // mha, causal-attention
  kernels::MhaShape mha;
  kernels::MhaWeights w;
  kernels::MhaGradients g;
  const float* x = nullptr;
  const float* dy = nullptr;
  float *y = nullptr, *dx = nullptr;
  kernels::MhaCall call;
  kernels::MhaSaved saved;
  uint64_t forward_id = 0;
  kernels::MhaWorkspace ws;
  std::vector<std::vector<uint16_t>> keep16;  // bf16 copies

  // src (n floats) rounded to bf16, kept.
  uint16_t* bf16_copy(const float* src, size_t n) {
    keep16.emplace_back(n);
    floats_to_bf16(src, keep16.back().data(), n);
    return keep16.back().data();
  }

  float* buffer(size_t n, float scale, uint64_t seed, ThreadPool& pool) {
    keep.push_back(std::make_unique<Buffer>(n));
    if (scale != 0) fill_random(*keep.back(), seed, scale, pool);
    return keep.back()->get();
  }
};

AttentionBenchCase::AttentionBenchCase(const AttentionBenchShape& shape, ThreadPool& pool)
    : shape_(normalized(shape)), b_(std::make_unique<Buffers>()) {
  check_fits_in_memory(shape_);
  const AttentionBenchShape& s = shape_;
  const int64_t B = s.batch, T = s.seq_len, H = s.attention.heads, D = s.attention.head_dim, C = s.d_model;
  Buffers& b = *b_;
  b.slopes = kernels::spec_alibi_slopes(s.attention);
  options_ = kernels::kernel_options(s.attention, b.slopes);
  options_.dropout_seed = 1234;
  options_.pool = &pool;
  auto buffer = [&](size_t n, float scale, uint64_t seed) { return b.buffer(n, scale, seed, pool); };
  if (s.target == BenchTarget::kAttentionCore) {
    const int64_t G = s.attention.groups();
    const auto n = static_cast<size_t>(B * H * T * D), nkv = static_cast<size_t>(B * G * T * D);
    auto heads = [&](float* p) { return kernels::MutableHeads::contiguous(p, B, H, T, D); };
    auto kv_heads = [&](float* p) { return kernels::MutableHeads::contiguous(p, B, G, T, D); };
    b.q = heads(buffer(n, 1, 1));
    b.k = kv_heads(buffer(nkv, 1, 2));
    b.v = kv_heads(buffer(nkv, 1, 3));
    b.o = heads(buffer(n, 0, 0));
    b.lse = buffer(static_cast<size_t>(B * H * T), 0, 0);
    if (s.backward) {
      b.d_o = heads(buffer(n, 1, 4));
      b.dq = heads(buffer(n, 0, 0));
      b.dk = kv_heads(buffer(nkv, 0, 0));
      b.dv = kv_heads(buffer(nkv, 0, 0));
    }
    if (s.attention.dtype == Dtype::kBF16) {
      auto to16 = [&](const kernels::MutableHeads& x, size_t count) {
        return kernels::MutableHeadsBF16::contiguous(b.bf16_copy(x.data, count), x.batch, x.heads, x.tokens, x.dim);
      };
      b.q16 = to16(b.q, n);
      b.k16 = to16(b.k, nkv);
      b.v16 = to16(b.v, nkv);
    }
    return;
  }
  const bool out_proj = s.target == BenchTarget::kMha;
  b.mha.batch = B;
  b.mha.tokens = T;
  b.mha.d_in = C;
  b.mha.attention = s.attention;
  b.call.pool = &pool;
  b.call.dropout = s.attention.dropout > 0.0;
  b.call.dropout_seed = 1234;
  b.call.alibi_slopes = b.slopes.empty() ? nullptr : b.slopes.data();
  const int64_t Q = b.mha.qkv_width();                             // (H + 2G) D rows of W_qkv
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(C));  // nn.Linear's init range
  b.w.w_qkv = buffer(static_cast<size_t>(Q * C), w_scale, 5);
  if (out_proj) {
    b.w.w_out = buffer(static_cast<size_t>(C * C), w_scale, 6);
    b.w.b_out = buffer(static_cast<size_t>(C), w_scale, 7);
  }
  if (s.attention.dtype == Dtype::kBF16) {
    b.w.w_qkv16 = b.bf16_copy(b.w.w_qkv, static_cast<size_t>(Q * C));
    if (out_proj) b.w.w_out16 = b.bf16_copy(b.w.w_out, static_cast<size_t>(C * C));
  }
  b.x = buffer(static_cast<size_t>(B * T * C), 1, 8);
  b.y = buffer(static_cast<size_t>(B * T * C), 0, 0);
  if (s.backward) {
    b.dy = buffer(static_cast<size_t>(B * T * C), 1, 9);
    b.dx = buffer(static_cast<size_t>(B * T * C), 0, 0);
    b.g.dw_qkv = buffer(static_cast<size_t>(Q * C), 0, 0);
    if (out_proj) {
      b.g.dw_out = buffer(static_cast<size_t>(C * C), 0, 0);
      b.g.db_out = buffer(static_cast<size_t>(C), 0, 0);
    }
  }
}

AttentionBenchCase::~AttentionBenchCase() = default;

void AttentionBenchCase::forward() {
  Buffers& b = *b_;
  const bool bf16 = shape_.attention.dtype == Dtype::kBF16;
  if (shape_.target != BenchTarget::kAttentionCore) {
    kernels::mha_forward(b.mha, b.w, b.x, b.y, b.saved, b.ws, b.call);
    b.forward_id = b.saved.id();
  }
  else if (bf16) kernels::attention_forward_bf16(b.q16, b.k16, b.v16, b.o, b.lse, options_);
  else kernels::attention_forward(b.q, b.k, b.v, b.o, b.lse, options_);
}

void AttentionBenchCase::backward() {
  QKV_CHECK(shape_.backward, "attention bench: this case has no gradient buffers (shape.backward is false)");
  Buffers& b = *b_;
  const bool bf16 = shape_.attention.dtype == Dtype::kBF16;
  if (shape_.target != BenchTarget::kAttentionCore)
    kernels::mha_backward(b.mha, b.w, b.x, b.dy, b.dx, b.g, b.saved, b.forward_id, b.ws, b.call);
  else if (bf16) kernels::attention_backward_bf16(b.q16, b.k16, b.v16, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, options_);
  else kernels::attention_backward(b.q, b.k, b.v, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, options_);
}

double AttentionBenchCase::pass_flops(bool backward) const {
  const AttentionBenchShape& s = shape_;
  const kernels::AttentionSpec& a = s.attention;
  if (s.target == BenchTarget::kAttentionCore) {
    const auto flops = backward ? kernels::attention_backward_flops : kernels::attention_forward_flops;
    return flops(s.batch, a.heads, s.seq_len, s.seq_len, a.head_dim, a.head_dim, a.causal, 0, a.window);
  }
  const bool out_proj = s.target == BenchTarget::kMha;
  return backward ? kernels::mha_backward_flops(b_->mha, out_proj) : kernels::mha_forward_flops(b_->mha, out_proj);
}

AttentionBenchReport run_attention_bench(const AttentionBenchShape& shape, int iters, int warmup, ThreadPool& pool) {
  using Clock = std::chrono::steady_clock;
  QKV_CHECK(iters >= 1, "attention bench: iters (", iters, ") must be at least 1");
  QKV_CHECK(warmup >= 0, "attention bench: warmup (", warmup, ") must not be negative");
  AttentionBenchReport r;
  r.shape = normalized(shape);
  check_fits_in_memory(r.shape);  // before the peak is measured
  const bool core = r.shape.target == BenchTarget::kAttentionCore;
  r.threads = pool.num_threads();
  r.iters = iters;
  r.simd = kernels::simd_target();
  r.simd_bits = kernels::simd_vector_bits();
  r.peak_gflops = kernels::measure_fma_peak_gflops(pool);
  // When the projections compute with narrower vectors than this CPU has (OpenBLAS under
  // OPENBLAS_CORETYPE=Haswell on an AVX-512 machine, say), the peak at their width bounds them:
  // measured too.
  r.gemm = gemm_backend_name(gemm_backend());
  const bool bf16 = r.shape.attention.dtype == Dtype::kBF16;
  r.projections = core ? "" : bf16 ? gemm_bf16_description() : gemm_description();
  r.projections_bits = core ? 0 : bf16 ? kernels::simd_vector_bits() : gemm_vector_bits();
  if (r.projections_bits > 0 && r.projections_bits < r.simd_bits) {
    for (int64_t target : kernels::available_simd_targets()) {
      if (kernels::simd_target_vector_bits(target) != r.projections_bits) continue;
      kernels::force_simd_target(target);
      r.peak_gflops_at_projection_width = kernels::measure_fma_peak_gflops(pool);
      kernels::force_simd_target(0);
      break;
    }
  }

  AttentionBenchCase c(r.shape, pool);
  r.flops = c.step_flops();
  for (int i = 0; i < warmup; ++i) c.step();
  const double cpu0 = cpu_seconds();
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    c.step();
    r.times_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  double wall = 0;
  for (double t : r.times_ms) wall += t * 1e-3;
  // The share of the timed wall-clock x threads this process actually ran: below 1 means other
  // processes (or idle waits) took the cores, and the times are inflated by that much.
  r.cpu_share = (cpu_seconds() - cpu0) / (wall * r.threads);
  const TimeSummary t = summarize_times(r.times_ms);
  r.median_ms = t.median_ms;
  r.min_ms = t.min_ms;
  r.max_ms = t.max_ms;
  r.gflops = r.flops / (r.median_ms * 1e-3) / 1e9;
  r.max_rss_mib = max_rss_mib();
  return r;
}


std::string report_text(const AttentionBenchReport& r, const std::string& module) {
  std::ostringstream out;
  const kernels::AttentionSpec& ra = r.shape.attention;
  const bool causal = ra.causal;
  const int64_t B = r.shape.batch, T = r.shape.seq_len, H = ra.heads, D = ra.head_dim, C = r.shape.d_model;
  const double median = r.median_ms, gflops = r.gflops, peak = r.peak_gflops, flops = r.flops;
  const double peak_at_width = r.peak_gflops_at_projection_width, rss = r.max_rss_mib, cpu_share = r.cpu_share;
  const int projection_bits = r.projections_bits;
  const std::string what = module + (r.shape.backward ? " forward+backward" : " forward");
  out << "qkv bench: " << what << ", B=" << B << " T=" << T << " C=" << C << " H=" << H << " D=" << D
      << (causal ? " causal" : " no mask") << (ra.dropout > 0 ? " dropout " + std::to_string(ra.dropout) : "")
      << (ra.groups() != H ? " G=" + std::to_string(ra.groups()) : "")
      << (ra.window > 0 ? " window " + std::to_string(ra.window) : "") << (ra.alibi ? " ALiBi" : "")
      << (ra.softcap > 0 ? " softcap " + std::to_string(ra.softcap) : "")
      << (ra.rope != kernels::RopeLayout::kNone ? std::string(" RoPE ") + kernels::rope_layout_name(ra.rope) : "")
      << (ra.dtype == Dtype::kBF16 ? " bf16" : "") << ", " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ", " << r.simd << "\n";
  const CacheSizes& caches = cache_sizes();
  out << "  caches: L1d " << caches.l1d / 1024 << " KiB, L2 " << caches.l2 / 1024 << " KiB, L3 "
      << caches.l3 / 1024 << " KiB (" << caches.source << ")\n";
  if (r.shape.target != BenchTarget::kAttentionCore) {
    const char* forced = std::getenv("OPENBLAS_CORETYPE");
    const bool pinned = r.gemm == "openblas" && forced != nullptr && *forced != '\0';
    out << "  projections: " << r.projections
      << (pinned ? std::string(" (chosen by OPENBLAS_CORETYPE=") + forced + ")" : "") << "\n";
    if (peak_at_width > 0) {
      out << std::fixed << std::setprecision(1) << "  note: these kernels compute with " << projection_bits
          << "-bit vectors, the kernels here with " << r.simd_bits
          << "-bit ones; the FMA peak at " << projection_bits << " bits is " << peak_at_width << " GFLOP/s ("
          << 100.0 * peak_at_width / peak << "% of the peak below), which bounds the projections"
          << (pinned ? "; --gemm qkv runs them at this CPU's width (or unset OPENBLAS_CORETYPE to let OpenBLAS "
                             "choose kernels for this CPU)"
                           : "")
          << "\n";
    }
  }
  if (ra.dtype == Dtype::kBF16)
    out << "  bf16: " << (bf16_dot_allowed() && r.simd == "AVX3" ? "AVX512_BF16 dot products (2 bf16 products per fp32 lane: the bf16 peak is twice the fp32 FMA peak)"
                                                                     : "widened to fp32 (no AVX512_BF16 dot product here): the fp32 FMA peak bounds it")
      << "\n";
  out << std::fixed << std::setprecision(2) << "  median " << median << " ms  (min " << r.min_ms
      << ", max " << r.max_ms << ", " << r.iters << " runs)\n"
      << "  " << std::setprecision(1) << flops / 1e9 << " GFLOP (causal work only) -> " << gflops
      << " GFLOP/s = " << 100.0 * gflops / peak << "% of the measured FMA peak " << peak << " GFLOP/s\n"
      << "  peak memory (max RSS) " << rss << " MiB; CPU share while timed " << std::setprecision(2)
      << cpu_share << " (1.00 = every thread ran all the time)\n";
  return out.str();
}

nlohmann::json report_json(const AttentionBenchReport& r, const std::string& module) {
  const kernels::AttentionSpec& a = r.shape.attention;
  const CacheSizes& caches = cache_sizes();
  const double at_width = r.peak_gflops_at_projection_width;
  return {{"module", module},
          {"backward", r.shape.backward},
          {"batch", r.shape.batch},
          {"seq_len", r.shape.seq_len},
          {"d_model", r.shape.d_model},
          {"num_heads", a.heads},
          {"head_dim", a.head_dim},
          {"causal", a.causal},
          {"dropout", a.dropout},
          {"threads", r.threads},
          {"iters", r.iters},
          {"median_ms", r.median_ms},
          {"min_ms", r.min_ms},
          {"times_ms", r.times_ms},
          {"gflop", r.flops / 1e9},
          {"gflops", r.gflops},
          {"peak_gflops", r.peak_gflops},
          {"percent_of_peak", 100.0 * r.gflops / r.peak_gflops},
          {"max_rss_mib", r.max_rss_mib},
          {"cpu_share", r.cpu_share},
          {"simd", r.simd},
          {"gemm", r.gemm},
          {"projections", r.projections},
          {"projections_vector_bits", r.projections_bits},
          {"num_kv_heads", a.groups()},
          {"window", a.window},
          {"alibi", a.alibi},
          {"softcap", a.softcap},
          {"rope", kernels::rope_layout_name(a.rope)},
          {"dtype", dtype_name(a.dtype)},
          {"l1d_bytes", caches.l1d},
          {"l2_bytes", caches.l2},
          {"l3_bytes", caches.l3},
          {"peak_gflops_at_projection_width", at_width > 0 ? nlohmann::json(at_width) : nlohmann::json()}};
}

}  // namespace qkv::perf
