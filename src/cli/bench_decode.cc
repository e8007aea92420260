// qkv bench --module decode --kv-len S [--batch B] [--num-heads H] [--num-kv-heads G]
//   [--head-dim D] [--cache-dtype f32|bf16] [--threads N] [--iters N] [--json]
//
// Times one decoding step's attention (decode_attention, one query per head over a KV cache of
// S positions) and reports the cache bytes it reads per call against the machine's streaming read
// bandwidth, measured in the same run on the same threads. See qkv/perf/decode_bench.h.
#include "bench_decode.h"

#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_pool.h"
#include "qkv/perf/decode_bench.h"
#include "flags.h"

namespace qkv::cli {

int run_decode_bench(const DecodeBenchFlags& f) {
  QKV_CHECK(f.kv_len >= 1, "--kv-len ", f.kv_len, ": must be at least 1 (the cached positions --module decode reads)");
  QKV_CHECK(f.attention.heads >= 1, "--num-heads ", f.attention.heads, ": must be at least 1");
  QKV_CHECK(f.cache_dtype == "f32" || f.cache_dtype == "bf16", "--cache-dtype '", f.cache_dtype,
            "': expected f32 or bf16");
  perf::DecodeBenchShape s;
  s.batch = f.batch;
  s.attention = f.attention;
  if (s.attention.head_dim == 0) s.attention.head_dim = f.d_model / f.attention.heads;
  check_attention_flags(s.attention, bench_flag_name);
  const int64_t G = s.attention.groups(), D = s.attention.head_dim;
  s.kv_len = f.kv_len;
  s.dtype = f.cache_dtype == "bf16" ? kernels::CacheDtype::kBF16 : kernels::CacheDtype::kF32;
  const perf::DecodeBenchReport r = perf::run_decode_bench(s, f.iters, f.warmup, default_pool());
  const double share = r.read_gb_s / r.bandwidth_gb_s;
  std::cout << "qkv bench: decode (one query per head over a KV cache), B=" << s.batch << " H=" << s.attention.heads
            << " G=" << G << " D=" << D << " kv_len=" << s.kv_len << " " << f.cache_dtype << ", " << r.threads
            << " thread" << (r.threads == 1 ? "" : "s") << ", " << r.simd << "\n";
  const CacheSizes& caches = cache_sizes();
  std::cout << "  caches: L1d " << caches.l1d / 1024 << " KiB, L2 " << caches.l2 / 1024 << " KiB, L3 "
            << caches.l3 / 1024 << " KiB (" << caches.source << ")\n";
  std::cout << std::fixed << std::setprecision(3) << "  median " << r.median_ms << " ms  (min " << r.min_ms
            << ", max " << r.max_ms << ", " << r.iters << " runs)\n"
            << std::setprecision(1) << "  " << r.read_bytes / (1 << 20) << " MiB of keys and values read per call -> "
            << r.read_gb_s << " GB/s = " << 100.0 * share << "% of the measured read bandwidth " << r.bandwidth_gb_s
            << " GB/s (" << r.bandwidth_buffer_bytes / (1 << 20) << " MiB streamed, median of passes)\n";
  if (f.json) {
    nlohmann::json j = {{"module", "decode"},
                        {"batch", s.batch},
                        {"num_heads", s.attention.heads},
                        {"num_kv_heads", G},
                        {"head_dim", D},
                        {"kv_len", s.kv_len},
                        {"cache_dtype", f.cache_dtype},
                        {"threads", r.threads},
                        {"iters", r.iters},
                        {"median_ms", r.median_ms},
                        {"min_ms", r.min_ms},
                        {"times_ms", r.times_ms},
                        {"read_bytes", r.read_bytes},
                        {"read_gb_s", r.read_gb_s},
                        {"bandwidth_gb_s", r.bandwidth_gb_s},
                        {"percent_of_bandwidth", 100.0 * share},
                        {"simd", r.simd},
                        {"l1d_bytes", caches.l1d},
                        {"l2_bytes", caches.l2},
                        {"l3_bytes", caches.l3}};
    std::cout << j.dump() << "\n";
  }
  return 0;
}

}  // namespace qkv::cli
