// qkv/perf/decode_bench.h - timing decode_attention over a KV cache against the machine's memory
// read bandwidth (`qkv bench --module decode`).
//
// Legend: B batch, H query heads, G key/value heads, S = kv_len cached positions, D head dim
// (Dv = D).
//
// A case is a one-layer KvCache of S positions (B, G, S, D) keys and values, filled with uniform
// values in [-1, 1), and one query row per head (Tq = 1, causal, query_offset = S - 1): the step
// of decoding token S. Decoding is memory-bound: each call reads the cache's keys and values once,
//   bytes = B * G * S * (D + Dv) * bytes per element (4 for f32, 2 for bf16),
// so the yardstick is the streaming read bandwidth (kernels/memory_bandwidth.h), measured first
// on the same threads: read_gb_s = bytes / median time, and its share of the bandwidth.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention_spec.h"
#include "qkv/kernels/kv_cache.h"

namespace qkv::perf {

struct DecodeBenchShape {
  int64_t batch = 1, kv_len = 0;  // B, S
  // H, G, D (kernels/attention_spec.h; causal, one query at position S - 1): GPT-2's 12 heads of 64
  kernels::AttentionSpec attention = {.heads = 12, .head_dim = 64};
  kernels::CacheDtype dtype = kernels::CacheDtype::kF32;  // the cache's
  // > 0: latent attention's absorbed decoding instead (MultiHeadLatentAttention::forward_cached):
  // H query heads of latent_dim L (queries already folded through W_UK) over a (B, S, L) f32 cache
  // of latents, the keys and the values both (kernels::decode_attention_rows). It reads B S L
  // floats a call and does 4 B H S L FLOPs (scores and the weighted sum): at H / 2 FMAs per byte
  // read, past a handful of heads the FMA peak bounds it before the bandwidth does, so the report
  // gives its share of both.
  int64_t latent_dim = 0;
};

struct DecodeBenchReport {
  DecodeBenchShape shape;
  int threads = 0, iters = 0;
  std::string simd;
  std::vector<double> times_ms;  // each timed call
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double read_bytes = 0;        // the cache's keys and values, read once per call
  double read_gb_s = 0;         // read_bytes / median
  double bandwidth_gb_s = 0;    // measured streaming read bandwidth, same threads
  int64_t bandwidth_buffer_bytes = 0;
  int64_t cache_bytes = 0;      // allocated
  double flops = 0, gflops = 0, peak_gflops = 0;  // latent_dim > 0 only: per call, per second, FMA peak
};

// Checks the shape (qkv::Error naming the bad value: sizes below 1, the spec's rules), measures
// the bandwidth, fills the cache, then `warmup` untimed calls and `iters` timed ones.
DecodeBenchReport run_decode_bench(const DecodeBenchShape& shape, int iters, int warmup, ThreadPool& pool);

// The report for people and for machines (qkv bench --json's object), with the machine's caches.
std::string report_text(const DecodeBenchReport& r);
nlohmann::json report_json(const DecodeBenchReport& r);

}  // namespace qkv::perf
