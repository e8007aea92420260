// qkv/perf/gpt_bench.h - timing a whole language model (`qkv bench --module gpt --preset NAME`):
// the book's GPT model (gpt2-*) or the Llama 3 / Qwen3 families (llama-3.2-*, qwen3-*): a forward
// (the prefill), a training step, or decoding, each against the machine's measured ceiling.
//
// Legend: B batch, T tokens, E emb_dim, L layers, H heads, G key/value heads, D head dim, F the
// feed-forward's width, V vocabulary, P = the weights the products read: GPT L (E 3E + E E + 2 E 4E)
// + V E; Llama/Qwen3 L (E (H + 2G) D + H D E + 3 E F) + V E (the head; its FLOPs count even when
// tied).
//
//   forward   ids (B, T) -> logits (B, T, V), eval mode, nothing kept for backward;
//             FLOPs 2 P B T + the attention's two products over the causal pairs, 4 L B H D T(T+1)/2;
//             in bf16 mode also against the measured bf16 dot-product peak
//   step      forward, cross-entropy, backward, AdamW (chapter 5's step; train mode, dropout as
//             given): FLOPs three times the forward's (the backward's two products per forward one)
//   decode    B sequences of a T-token prompt, then one token per sequence per step over the KV
//             cache: tokens_per_s = B / the median step; each step reads every weight of P once
//             (4 bytes, 2 in bf16 with the weights kept in bf16) and the cache's keys and values
//             (the cache generate keeps: bf16 when the products are bf16, else f32; cache_bytes, a
//             timed step's mean), read_gb_s = their sum / the median step; the yardstick is the streaming read
//             bandwidth measured on the same threads through the run (a pass before the steps and one
//             after every 20; their median: a shared host's bandwidth moves during a run):
//             read_gb_s / bandwidth_gb_s
// Weights are the preset's drawn from a fixed seed (untrained GPT-2 is as fast as trained), or a
// model's files (`--weights`: a GGUF file, a Hugging Face folder, GPT-2's weights) loaded as `qkv
// generate` loads them (bf16 products unless F32; a quantized file's blocks, or --quantize's): then
// forward and decode, the decode's bytes those the products hold (LanguageModel::step_weight_bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/bf16.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/models/decoder_spec.h"

namespace qkv::perf {

enum class GptBenchMode { kForward, kStep, kDecode };

struct GptBenchShape {
  std::string name = "gpt2-small";     // what the report calls the model
  DecoderSpec spec;                    // its description (dropout and dtype: below); bench_shape_of_preset's
  GptBenchMode mode = GptBenchMode::kForward;
  int64_t batch = 1, seq_len = 0;      // B; T (decode: the prompt's length)
  int64_t new_tokens = 0;              // decode: the steps timed
  Dtype dtype = Dtype::kF32;           // kBF16: bf16 mode (decode: with the weights kept in bf16)
  double dropout = 0.0;                // step: the model's drop_rate (0: the fused attention)
  std::string weights;                 // a model's files instead of spec (forward and decode only)
  std::string quantize;                // with weights: quantized at load (models/loaded_model.h)
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
  double bf16_peak_gflops = 0;                               // forward and step in bf16 mode
  double tokens_per_s = 0, weight_bytes = 0, weight_gb_s = 0, bandwidth_gb_s = 0;  // decode
  kernels::CacheDtype cache_dtype = kernels::CacheDtype::kF32;  // decode: the model's default_cache_dtype()
  double cache_bytes = 0;  // decode: the KV cache's bytes a timed step reads, their mean
  double state_bytes = 0;  // decode: the linear-attention layers' states (floats), read and rewritten a step
  double read_gb_s = 0;    // decode: (weight_bytes + cache_bytes + state_bytes) / the median step
  std::string model;                    // what ran: the loaded model's description, or the preset's
  std::vector<double> bandwidth_passes;  // decode: every pass measured, in the order they ran
  double max_rss_mib = 0;
  double model_rss_mib = 0;  // decode: the peak before the bandwidth probe's buffer (the model's own)
};

// The preset's shape: its family's preset (models/family.h; an unknown name lists every family's).
GptBenchShape bench_shape_of_preset(const std::string& preset);

// Checks the shape (qkv::Error naming the value: the config's fields, T beyond the context, sizes
// below 1), measures the ceiling (FMA peak or read bandwidth), builds the model, then `warmup`
// untimed runs and `iters` timed ones (decode: one prefill, `warmup` untimed steps, then
// new_tokens timed steps; iters is new_tokens). pool must be default_pool(): the model's products
// run there, and the ceiling is measured on the same threads.
GptBenchReport run_gpt_bench(const GptBenchShape& shape, int iters, int warmup, ThreadPool& pool);

// The report for people (what ran, the median and the share of the ceiling, peak memory) and for
// machines (qkv bench --json's object: every figure, named).
std::string report_text(const GptBenchReport& r);
nlohmann::json report_json(const GptBenchReport& r);

}  // namespace qkv::perf
