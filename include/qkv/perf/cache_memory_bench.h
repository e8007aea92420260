// qkv/perf/cache_memory_bench.h - what a generation's cache holds (`qkv bench --module
// cache-memory`): the book's MLA estimator (ch04/05_mla) reproduced with qkv's caches, or the cache
// a model of a preset keeps for a sequence of T tokens.
//
// Without a preset: keys and values of MHA (H heads of D = ceil(E / H), the estimator's width)
// and of GQA (G key/value heads) as qkv's KvCache allocates them, and MLA's latents (latent_dim
// numbers per token and layer, what MultiHeadLatentAttention's cache keeps), B x T x L x latent x
// element bytes; the ratios and savings against MHA. With a preset: the KvCache generation makes
// for the model (models/decoder.h's decoder_cache), split into the attention layers' keys and
// values (growing with T) and the linear-attention layers' fixed-size states.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "qkv/kernels/kv_cache.h"

namespace qkv::perf {

struct CacheMemoryShape {
  std::string preset;  // empty: MHA / GQA / MLA of the sizes below (the book's by default)
  int64_t batch = 1, tokens = 8192;
  int64_t d_model = 2048, heads = 24, kv_heads = 6, layers = 48, latent_dim = 1024;
  kernels::CacheDtype dtype = kernels::CacheDtype::kBF16;
};

struct CacheMemoryReport {
  CacheMemoryShape shape;
  int64_t head_dim = 0;                          // no preset: ceil(d_model / heads)
  int64_t mha_bytes = 0, gqa_bytes = 0, mla_bytes = 0;  // no preset
  int64_t mla_f32_bytes = 0;                     // MLA's latents as qkv's LatentCache holds them (f32)
  // preset: the cache's attention layers and their keys and values, its state layers and their states
  int64_t attention_layers = 0, linear_layers = 0, kv_bytes = 0, state_bytes = 0, total_bytes = 0;
};

// Checks the sizes (qkv::Error naming the value), then builds the caches (allocated, not filled).
CacheMemoryReport run_cache_memory_bench(const CacheMemoryShape& shape);

std::string report_text(const CacheMemoryReport& r);
nlohmann::json report_json(const CacheMemoryReport& r);

}  // namespace qkv::perf
