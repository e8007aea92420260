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
  s.kv_len = f.kv_len;
  s.dtype = f.cache_dtype == "bf16" ? kernels::CacheDtype::kBF16 : kernels::CacheDtype::kF32;
  const perf::DecodeBenchReport r = perf::run_decode_bench(s, f.iters, f.warmup, default_pool());
  std::cout << perf::report_text(r);
  if (f.json) std::cout << perf::report_json(r).dump() << "\n";
  return 0;
}

}  // namespace qkv::cli
