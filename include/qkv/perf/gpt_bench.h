// qkv/perf/gpt_bench.h - timing the whole GPT model (`qkv bench --module gpt`): a forward (the
// prefill), a training step, or decoding, each against the machine's measured ceiling.
//
// Legend: B batch, T tokens, E emb_dim, L layers, H heads, D head dim, V vocabulary,
// P = the weights the products read: L (E 3E + E E + 2 E 4E) + V E (the head; its FLOPs count
// even when tied).
//
//   forward   ids (B, T) -> logits (B, T, V), eval mode, nothing kept for backward;
//             FLOPs 2 P B T + the attention's two products over the causal pairs, 4 L B H D T(T+1)/2
//   step      forward, cross-entropy, backward, AdamW (chapter 5's step; train mode, dropout as
//             given): FLOPs three times the forward's (the backward's two products per forward one)
//   decode    B sequences of a T-token prompt, then one token per sequence per step over the KV
//             cache: tokens_per_s = B / the median step; each step reads every weight of P once
//             (4 bytes, 2 in bf16 with the weights kept in bf16), the yardstick is the streaming read
//             bandwidth measured on the same threads: weight_gb_s / bandwidth_gb_s
// Weights are the preset's drawn from a fixed seed (untrained GPT-2 is as fast as trained).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/thread_pool.h"
#include "qkv/models/gpt.h"

namespace qkv::perf {

enum class GptBenchMode { kForward, kStep, kDecode };

struct GptBenchShape {
  std::string name = "gpt2-small";     // what the report calls the model
  GPTConfig config = gpt_preset("gpt2-small");  // its sizes (dropout and dtype: below)
  GptBenchMode mode = GptBenchMode::kForward;
  int64_t batch = 1, seq_len = 0;      // B; T (decode: the prompt's length)
  int64_t new_tokens = 0;              // decode: the steps timed
  Dtype dtype = Dtype::kF32;           // kBF16: bf16 mode (decode: with the weights kept in bf16)
  double dropout = 0.0;                // step: the model's drop_rate (0: the fused attention)
};

struct GptBenchReport {
  GptBenchShape shape;
  int threads = 0, iters = 0;
  std::string simd, gemm;
  std::vector<double> times_ms;         // each timed run (decode: each step)
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double parameters = 0;                // every parameter of the model
  double product_parameters = 0;        // P
  double flops = 0, gflops = 0, peak_gflops = 0;            // forward and step
  double tokens_per_s = 0, weight_bytes = 0, weight_gb_s = 0, bandwidth_gb_s = 0;  // decode
  double max_rss_mib = 0;
};

// Checks the shape (qkv::Error naming the value: the config's fields, T beyond the context, sizes
// below 1), measures the ceiling (FMA peak or read bandwidth), builds the model, then `warmup`
// untimed runs and `iters` timed ones (decode: one prefill, `warmup` untimed steps, then
// new_tokens timed steps; iters is new_tokens). pool must be default_pool(): the model's products
// run there, and the ceiling is measured on the same threads.
GptBenchReport run_gpt_bench(const GptBenchShape& shape, int iters, int warmup, ThreadPool& pool);

}  // namespace qkv::perf
