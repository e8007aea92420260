// qkv/perf/attention_bench.h - timing the fast attention path on random inputs: the one harness
// that `qkv bench` and the Google Benchmark suite (bench/attention_microbench.cc) share.
//
// A case is one of three targets on random inputs (uniform in [-1, 1), weights in nn.Linear's
// range 1/sqrt(C)), with its outputs and gradients allocated:
//   mha               kernels::mha_forward / mha_backward: QKV GEMM -> fused attention -> out_proj
//   causal-attention  the same with one head and no out_proj (the book's CausalAttention)
//   attention-core    kernels::attention_forward / attention_backward alone on (B, H, T, D) heads
// FLOPs count only the work causal attention needs: the projections' products and the attention's
// over the (i, j) pairs the mask leaves visible (kernels::mha_forward_flops and friends).
//
// run_attention_bench times a case: the machine's FMA peak first (on the same threads, and at the
// BLAS's vector width too when it computes narrower than this CPU), then `warmup` untimed steps,
// then `iters` timed ones, and reports the median with what the timing needs to be read.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/kernels/rope.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/attention_spec.h"
#include "qkv/kernels/mha.h"

namespace qkv::perf {

enum class BenchTarget { kMha, kCausalAttention, kAttentionCore };
BenchTarget parse_bench_target(const std::string& name);  // "mha" | "causal-attention" | "attention-core"
const char* bench_target_name(BenchTarget target);

struct AttentionBenchShape {
  BenchTarget target = BenchTarget::kMha;
  int64_t batch = 1, seq_len = 0;  // B, T
  int64_t d_model = 768;           // C = d_in = d_out (attention-core: H * D)
  bool backward = false;           // a step is forward + backward
  // The attention (kernels/attention_spec.h): heads H (causal-attention: 1), head_dim D (0:
  // d_model / H until normalized), causal (false: no mask; the FLOPs then count every score),
  // dropout (the fused kernel's Philox mask), dtype (kBF16: bf16 mode, qkv/kernels/mha.h;
  // attention-core: attention_forward_bf16 on bf16 q, k, v; the weights are held in bf16 too, as
  // a bf16 model holds them); the variants: kv_heads, window, alibi, softcap (mha and
  // attention-core; the FLOPs count only the window's pairs) and rope (mha only).
  kernels::AttentionSpec attention = {.heads = 12};
};

// `s` with head_dim and d_model made consistent (attention-core: d_model = H * D; else
// D = C / H) and checked (validate_attention_spec); throws qkv::Error naming the value that does
// not fit (the variants outside mha and attention-core, RoPE outside mha, C not divisible by H).
// `namer` names the spec's fields in its errors, which start with `who` (a command line passes its
// flags' names and no who).
AttentionBenchShape normalized(AttentionBenchShape s, kernels::SpecNamer namer = kernels::spec_field_name,
                               const std::string& who = "attention bench");

// Roughly the bytes of a case's inputs, outputs and gradients.
double attention_bench_bytes(const AttentionBenchShape& s);

class AttentionBenchCase {
 public:
  // Allocates and fills the buffers (in parallel on `pool`, which the steps run on too). Throws
  // qkv::Error when they would not fit in 80% of this machine's memory.
  AttentionBenchCase(const AttentionBenchShape& shape, ThreadPool& pool);
  ~AttentionBenchCase();
  AttentionBenchCase(const AttentionBenchCase&) = delete;
  AttentionBenchCase& operator=(const AttentionBenchCase&) = delete;

  void forward();
  void backward();  // after a forward (it reads the forward's outputs and log-sum-exps)
  void step() {     // forward, and backward when shape().backward
    forward();
    if (shape_.backward) backward();
  }

  double forward_flops() const { return pass_flops(false); }
  double backward_flops() const { return pass_flops(true); }
  double step_flops() const { return forward_flops() + (shape_.backward ? backward_flops() : 0.0); }
  const AttentionBenchShape& shape() const { return shape_; }  // normalized

 private:
  double pass_flops(bool backward) const;  // counted FLOPs of the forward (false) or the backward (true)
  struct Buffers;
  AttentionBenchShape shape_;
  kernels::AttentionOptions options_;
  std::unique_ptr<Buffers> b_;
};

struct AttentionBenchReport {
  AttentionBenchShape shape;  // normalized
  int threads = 0;
  int iters = 0;
  std::string simd;            // the kernels' SIMD target ("AVX3")
  int simd_bits = 0;           // its vector width
  std::string gemm;            // gemm_backend_name(): "qkv" or "openblas"
  std::string projections;     // gemm_description() (bf16: gemm_bf16_description()): what ran the projections
  int projections_bits = 0;    // their vector width; 0 for attention-core or unknown
  double peak_gflops = 0;      // the measured fp32 FMA peak on the same threads
  double peak_gflops_at_projection_width = 0;  // the peak at projections_bits when narrower than simd_bits; else 0
  std::vector<double> times_ms;          // each timed step
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double flops = 0;            // per step
  double gflops = 0;           // flops / median
  double max_rss_mib = 0;      // the process's peak memory so far
  double cpu_share = 0;        // CPU time / (wall time x threads) while timed: below 1, others took the cores
};

AttentionBenchReport run_attention_bench(const AttentionBenchShape& shape, int iters, int warmup, ThreadPool& pool);

// The report for people (the shape, the machine's caches, what ran the projections, the median and
// the share of the FMA peak) and for machines (qkv bench --json's object); `module` names what ran
// ("mha", "attention-core", ...).
std::string report_text(const AttentionBenchReport& r, const std::string& module);
nlohmann::json report_json(const AttentionBenchReport& r, const std::string& module);

}  // namespace qkv::perf
