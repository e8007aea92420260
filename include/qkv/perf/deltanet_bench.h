// qkv/perf/deltanet_bench.h - timing the gated delta rule's chunked form against the machine's
// FMA peak and against the token-by-token recurrence (`qkv bench --module gated-deltanet`).
//
// Legend: B batch, T tokens, H heads, Dk = Dv = D head width. A case is random inputs as Qwen3.5's
// linear layer makes them: q and k rows of unit length (q times 1 / sqrt(D)), v uniform in [-1, 1),
// beta in (0, 1), per-token decays alpha in (0.9, 1) (a trained layer's range: mild decays). The
// chunked form's FLOPs are its products' (modules/delta_rule_chunked.h: delta_rule_chunked_flops,
// the triangular ones counted half); the recurrence (modules/delta_rule.h, double states) runs on
// the same inputs, and its time against the chunked form's is the speedup.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/thread_pool.h"

namespace qkv::perf {

struct DeltaNetBenchShape {
  int64_t batch = 1, tokens = 0, heads = 16, head_dim = 128;
  bool backward = false;  // a step is the forward (keeping the chunk states) and the backward
};

struct DeltaNetBenchReport {
  DeltaNetBenchShape shape;
  int threads = 0, iters = 0;
  std::string simd, gemm;                 // the kernels' target, what runs the products
  double peak_gflops = 0;                 // measured fp32 FMA peak, same threads
  std::vector<double> times_ms;           // each timed step of the chunked form
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double flops = 0, gflops = 0;           // per step; flops / median
  std::vector<double> recurrence_ms;      // the recurrence's steps (fewer runs: it is slow)
  double recurrence_median_ms = 0;
  double max_abs_difference = 0;          // |y_chunked - y_recurrence|, the forward's outputs
  double max_rss_mib = 0;
};

// Checks the shape (qkv::Error naming a size below 1), measures the peak, then times `warmup`
// untimed and `iters` timed steps of the chunked form, and min(iters, 3) of the recurrence.
DeltaNetBenchReport run_deltanet_bench(const DeltaNetBenchShape& shape, int iters, int warmup, ThreadPool& pool);

std::string report_text(const DeltaNetBenchReport& r);
nlohmann::json report_json(const DeltaNetBenchReport& r);

// `qkv bench --module gated-deltanet --new-tokens N`: decoding, the linear layers' share of it. A
// step is one token of each of `layers` layers (Qwen3.5-0.8B has 18 linear ones of 16 heads of 128)
// through the gated delta rule on its own state (B, H, D, D floats, as a decoding cache holds it, modules/delta_rule.h's
// delta_rule_run: one pass over the state, kernels/delta_rule_step.h). What a step must move is
// the states, read once and written once; the time of the state's read is set against the
// machine's measured read bandwidth, against a plain read of the same states and against a plain
// update of them in place (read and written back: the step's own traffic). Before each step
// (untimed) the bandwidth buffer is read, so the states come from memory, as in a model whose
// weights stream between two visits to a layer. The definition's form (four passes over a state,
// delta_rule_step_reference, on the same threads) runs the same steps for the ratio, and its
// outputs and states are compared with the kernel's.
struct DeltaNetDecodeShape {
  int64_t batch = 1, heads = 16, head_dim = 128, layers = 18, steps = 0;
};

struct DeltaNetDecodeReport {
  DeltaNetDecodeShape shape;
  int threads = 0;
  std::string simd;
  double bandwidth_gb_s = 0;               // measured streaming read bandwidth, same threads
  int64_t state_bytes = 0;                 // every layer's state: read and written by each step
  int64_t eviction_bytes = 0;              // the buffer read between two steps (kernels::StreamBuffer)
  std::vector<double> times_ms;            // each step
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double read_gb_s = 0;                    // state_bytes / median
  double plain_read_gb_s = 0;              // state_bytes / a plain read's median (kernels::sum_floats)
  double plain_update_gb_s = 0;            // state_bytes / a plain update in place's (kernels::scale_floats)
  double reference_median_ms = 0;          // the definition's form, the same steps
  double max_state_difference = 0;         // |kernel - definition| over the states, relative to their largest
  double max_output_difference = 0;        // |kernel - definition| over the last step's outputs
};

// Checks the shape (qkv::Error naming a size below 1, or states past the memory limit), measures the
// bandwidth, then times `steps` steps of the kernel and min(steps, 20) of the definition's form.
DeltaNetDecodeReport run_deltanet_decode_bench(const DeltaNetDecodeShape& shape, ThreadPool& pool);

std::string report_text(const DeltaNetDecodeReport& r);
nlohmann::json report_json(const DeltaNetDecodeReport& r);

}  // namespace qkv::perf
