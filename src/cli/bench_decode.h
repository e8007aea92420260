// qkv bench --module decode: its flags and runner (bench_command.cc parses, this prints).
#pragma once

#include <cstdint>
#include <string>

#include "qkv/kernels/attention_spec.h"

namespace qkv::cli {

struct DecodeBenchFlags {
  int64_t batch = 1, kv_len = 0, d_model = 768;
  kernels::AttentionSpec attention;  // heads, kv_heads, head_dim (0: d_model / heads)
  std::string cache_dtype = "f32";
  int iters = 10, warmup = 1;
  bool json = false;
};

// Checks the flags (errors name them), runs perf::run_decode_bench on the default pool, prints.
int run_decode_bench(const DecodeBenchFlags& f);

}  // namespace qkv::cli
