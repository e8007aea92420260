// qkv bench's flags (bench_command.cc parses them; bench_ring.cc runs --module ring-attention).
#pragma once

#include <cstdint>
#include <string>

#include "qkv/kernels/attention_spec.h"

namespace qkv::cli {

struct BenchFlags {
  std::string module;
  int64_t batch = 1, seq_len = 0, d_model = 768;
  bool backward = false, json = false;
  int threads = 0, iters = 10, warmup = 1;
  // --num-heads, --num-kv-heads, --head-dim (0: d_model / heads), --no-mask, --dropout, --window,
  // --alibi, --softcap, --rope (mha), --dtype (mha, causal-attention, attention-core)
  kernels::AttentionSpec attention = {.heads = 12};
  // --module decode
  int64_t kv_len = 0;
  // --module cache-memory
  int64_t layers = 0, latent_dim = 0;
  std::string cache_dtype = "f32";
  std::string gemm;           // mha, causal-attention: the projections' product (empty: QKV_GEMM or qkv)
  std::string split = "contiguous";  // ring-attention
  std::string preset = "gpt2-small";  // gpt
  int64_t new_tokens = 0;             // gpt: decode
  std::string weights, quantize, text;  // accuracy
  std::string simd;                     // the kernels' target cap (kernels/simd.h), over $QKV_SIMD
};

// --module ring-attention under mpirun (bench_ring.cc, built with the MPI layer only): every rank
// runs it; rank 0 prints. Returns the exit status.
int run_ring_bench(const BenchFlags& flags);

}  // namespace qkv::cli
