// The decode benchmark harness. See include/qkv/perf/decode_bench.h.
#include "qkv/perf/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/core/limits.h"
#include "qkv/kernels/decode.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/memory_bandwidth.h"
#include "qkv/kernels/simd.h"
#include "perf/counter_hash.h"
#include "perf/timing.h"

namespace qkv::perf {
namespace {

// Uniform values in [-1, 1).
void fill_random(std::vector<float>& x, uint64_t seed) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = counter_uniform(seed, i);
}

// Times `iters` calls of `call` after `warmup`, into r's times and median.
template <typename F>
void time_calls(int iters, int warmup, F&& call, DecodeBenchReport& r) {
  for (int i = 0; i < warmup; ++i) call();
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    call();
    r.times_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const TimeSummary t = summarize_times(r.times_ms);
  r.median_ms = t.median_ms;
  r.min_ms = t.min_ms;
  r.max_ms = t.max_ms;
  r.read_gb_s = r.read_bytes / (r.median_ms * 1e-3) / 1e9;
}

// Latent attention's step: H absorbed queries of L over S cached latents (keys and values both).
DecodeBenchReport run_latent_decode(const DecodeBenchShape& s, int iters, int warmup, ThreadPool& pool,
                                    DecodeBenchReport& r) {
  QKV_CHECK(s.dtype == kernels::CacheDtype::kF32, "decode bench: latent attention's cache holds f32 latents (a bf16 ",
            "cache is MultiHeadAttention's)");
  QKV_CHECK(!s.attention.has_variants(), "decode bench: latent attention takes no variants (num_kv_heads, window, ",
            "alibi, softcap, rope)");
  const int64_t B = s.batch, H = s.attention.heads, L = s.latent_dim, S = s.kv_len;
  const int64_t n = checked_product({B, S, L}, "decode bench latents");
  check_memory_request(checked_product({n, 4}, "decode bench latents' bytes"), "decode bench: the latents");
  std::vector<float> latents(static_cast<size_t>(n)), q(static_cast<size_t>(B * H * L)), o(q.size()),
      lse(static_cast<size_t>(B * H));
  fill_random(latents, 7);
  fill_random(q, 12345);
  r.cache_bytes = n * 4;
  r.read_bytes = static_cast<double>(r.cache_bytes);
  r.flops = 4.0 * static_cast<double>(B * H) * static_cast<double>(S) * static_cast<double>(L);
  r.peak_gflops = kernels::measure_fma_peak_gflops(pool);
  const kernels::MemoryBandwidth bw = kernels::measure_read_bandwidth(pool);
  r.bandwidth_gb_s = bw.gb_s;
  r.bandwidth_buffer_bytes = bw.buffer_bytes;
  kernels::AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(s.attention.head_dim));
  opt.mask = kernels::AttentionMask::causal();
  opt.query_offset = S - 1;
  opt.pool = &pool;
  kernels::DecodeWorkspace ws;
  time_calls(iters, warmup, [&] {
    kernels::decode_attention_rows(kernels::ConstHeads::contiguous(q.data(), B, H, 1, L), latents.data(),
                                   latents.data(), 1, S, S, L, kernels::MutableHeads::contiguous(o.data(), B, H, 1, L),
                                   lse.data(), opt, &ws);
  }, r);
  r.gflops = r.flops / (r.median_ms * 1e-3) / 1e9;
  return r;
}

}  // namespace

DecodeBenchReport run_decode_bench(const DecodeBenchShape& s, int iters, int warmup, ThreadPool& pool) {
  QKV_CHECK(s.batch >= 1, "decode bench: batch (", s.batch, ") must be at least 1");
  QKV_CHECK(s.kv_len >= 1, "decode bench: kv_len (", s.kv_len, ") must be at least 1");
  kernels::validate_attention_spec(s.attention, "decode bench");
  QKV_CHECK(iters >= 1 && warmup >= 0, "decode bench: iters (", iters, ") must be at least 1 and warmup (", warmup,
            ") at least 0");
  QKV_CHECK(s.latent_dim >= 0, "decode bench: latent_dim (", s.latent_dim, ") must not be negative");
  DecodeBenchReport r;
  r.shape = s;
  r.threads = pool.num_threads();
  r.iters = iters;
  r.simd = kernels::simd_target();
  if (s.latent_dim > 0) return run_latent_decode(s, iters, warmup, pool, r);
  const int64_t B = s.batch, H = s.attention.heads, G = s.attention.groups(), D = s.attention.head_dim, S = s.kv_len;
  kernels::KvCache cache(1, B, G, S, D, D, s.dtype);  // checks the sizes and the memory limit
  r.cache_bytes = cache.bytes();
  r.read_bytes = static_cast<double>(cache.bytes());
  const kernels::MemoryBandwidth bw = kernels::measure_read_bandwidth(pool);
  r.bandwidth_gb_s = bw.gb_s;
  r.bandwidth_buffer_bytes = bw.buffer_bytes;
  // Fill in steps of up to 1024 positions (a prefill in pieces).
  const int64_t step = std::min<int64_t>(S, 1024);
  std::vector<float> k(static_cast<size_t>(checked_product({B, G, step, D}, "decode bench step"))), v(k.size());
  for (int64_t at = 0; at < S; at += step) {
    const int64_t n = std::min(step, S - at);
    fill_random(k, 2 * static_cast<uint64_t>(at) + 1);
    fill_random(v, 2 * static_cast<uint64_t>(at) + 2);
    cache.append(0, kernels::ConstHeads::contiguous(k.data(), B, G, n, D),
                 kernels::ConstHeads::contiguous(v.data(), B, G, n, D));
    cache.commit();
  }
  std::vector<float> q(static_cast<size_t>(B * H * D)), o(q.size()), lse(static_cast<size_t>(B * H));
  fill_random(q, 12345);
  const std::vector<float> slopes = kernels::spec_alibi_slopes(s.attention);
  kernels::AttentionOptions opt = kernels::kernel_options(s.attention, slopes);
  opt.query_offset = S - 1;
  opt.pool = &pool;
  kernels::DecodeWorkspace ws;
  auto call = [&] {
    kernels::decode_attention(kernels::ConstHeads::contiguous(q.data(), B, H, 1, D), cache, 0,
                              kernels::MutableHeads::contiguous(o.data(), B, H, 1, D), lse.data(), opt, &ws);
  };
  time_calls(iters, warmup, call, r);
  return r;
}

namespace {
const char* cache_name(kernels::CacheDtype d) { return d == kernels::CacheDtype::kBF16 ? "bf16" : "f32"; }
}  // namespace

std::string report_text(const DecodeBenchReport& r) {
  const DecodeBenchShape& s = r.shape;
  const CacheSizes& caches = cache_sizes();
  std::ostringstream out;
  if (s.latent_dim > 0) {
    out << "qkv bench: decode, latent attention absorbed (" << s.attention.heads << " queries of latent_dim "
        << s.latent_dim << " over the cached latents, keys and values both), B=" << s.batch << " kv_len=" << s.kv_len
        << ", " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ", " << r.simd << "\n"
        << std::fixed << std::setprecision(3) << "  median " << r.median_ms << " ms  (min " << r.min_ms << ", max "
        << r.max_ms << ", " << r.iters << " runs)\n"
        << std::setprecision(1) << "  " << r.read_bytes / (1 << 20) << " MiB of latents read per call -> "
        << r.read_gb_s << " GB/s = " << 100.0 * r.read_gb_s / r.bandwidth_gb_s << "% of the measured read bandwidth "
        << r.bandwidth_gb_s << " GB/s\n"
        << "  " << r.flops / 1e6 << " MFLOP per call (4 B H kv_len L) -> " << r.gflops << " GFLOP/s = "
        << 100.0 * r.gflops / r.peak_gflops << "% of the measured FMA peak " << r.peak_gflops << " GFLOP/s\n";
    return out.str();
  }
  out << "qkv bench: decode (one query per head over a KV cache), B=" << s.batch << " H=" << s.attention.heads
      << " G=" << s.attention.groups() << " D=" << s.attention.head_dim << " kv_len=" << s.kv_len << " "
      << cache_name(s.dtype) << ", " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ", " << r.simd
      << ", lines prefetched in bursts into " << burst_prefetch_name() << "\n";
  out << "  caches: L1d " << caches.l1d / 1024 << " KiB, L2 " << caches.l2 / 1024 << " KiB, L3 " << caches.l3 / 1024
      << " KiB (" << caches.source << ")\n";
  out << std::fixed << std::setprecision(3) << "  median " << r.median_ms << " ms  (min " << r.min_ms << ", max "
      << r.max_ms << ", " << r.iters << " runs)\n"
      << std::setprecision(1) << "  " << r.read_bytes / (1 << 20) << " MiB of keys and values read per call -> "
      << r.read_gb_s << " GB/s = " << 100.0 * r.read_gb_s / r.bandwidth_gb_s << "% of the measured read bandwidth "
      << r.bandwidth_gb_s << " GB/s (" << r.bandwidth_buffer_bytes / (1 << 20) << " MiB streamed, median of passes)\n";
  return out.str();
}

nlohmann::json report_json(const DecodeBenchReport& r) {
  const DecodeBenchShape& s = r.shape;
  const CacheSizes& caches = cache_sizes();
  if (s.latent_dim > 0)
    return {{"module", "decode"},     {"attention", "latent"},      {"batch", s.batch},
            {"num_heads", s.attention.heads}, {"latent_dim", s.latent_dim}, {"head_dim", s.attention.head_dim},
            {"kv_len", s.kv_len},     {"threads", r.threads},        {"iters", r.iters},
            {"median_ms", r.median_ms}, {"times_ms", r.times_ms},    {"read_bytes", r.read_bytes},
            {"read_gb_s", r.read_gb_s}, {"bandwidth_gb_s", r.bandwidth_gb_s},
            {"percent_of_bandwidth", 100.0 * r.read_gb_s / r.bandwidth_gb_s}, {"flops", r.flops},
            {"gflops", r.gflops},     {"peak_gflops", r.peak_gflops},
            {"percent_of_peak", 100.0 * r.gflops / r.peak_gflops}, {"simd", r.simd}};
  return {{"module", "decode"},        {"batch", s.batch},
          {"num_heads", s.attention.heads}, {"num_kv_heads", s.attention.groups()},
          {"head_dim", s.attention.head_dim}, {"kv_len", s.kv_len},
          {"cache_dtype", cache_name(s.dtype)}, {"threads", r.threads},
          {"iters", r.iters},          {"median_ms", r.median_ms},
          {"min_ms", r.min_ms},        {"times_ms", r.times_ms},
          {"read_bytes", r.read_bytes}, {"read_gb_s", r.read_gb_s},
          {"bandwidth_gb_s", r.bandwidth_gb_s}, {"percent_of_bandwidth", 100.0 * r.read_gb_s / r.bandwidth_gb_s},
          {"simd", r.simd},            {"prefetch", burst_prefetch_name()}, {"l1d_bytes", caches.l1d},
          {"l2_bytes", caches.l2},     {"l3_bytes", caches.l3}};
}

}  // namespace qkv::perf
