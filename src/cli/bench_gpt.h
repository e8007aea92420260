// qkv bench --module gpt: its flags and runner (bench_command.cc parses, this prints).
#pragma once

#include <cstdint>
#include <string>

#include "qkv/core/bf16.h"

namespace qkv::cli {

struct GptBenchFlags {
  std::string preset = "gpt2-small";
  int64_t batch = 1, seq_len = 0, new_tokens = 0;
  bool backward = false, json = false;
  Dtype dtype = Dtype::kF32;
  double dropout = 0.0;
  int iters = 10, warmup = 1;
};

// Runs perf::run_gpt_bench on the default pool and prints; errors name the flags.
int run_gpt_bench(const GptBenchFlags& f);

}  // namespace qkv::cli
