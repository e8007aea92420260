// qkv bench --module gpt --preset NAME --batch B --seq-len T [--backward | --new-tokens N]
//   [--dtype f32|bf16] [--dropout P] [--threads N] [--iters N] [--json]
//
// The whole GPT model: a forward of (B, T) tokens, a training step (--backward: forward, loss,
// backward, AdamW), or decoding (--new-tokens N: B sequences of a T-token prompt, N steps over the
// KV cache). See qkv/perf/gpt_bench.h for what is counted.
#include "bench_gpt.h"

#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
#include "qkv/models/gpt.h"
#include "qkv/perf/gpt_bench.h"

namespace qkv::cli {

int run_gpt_bench(const GptBenchFlags& f) {
  perf::GptBenchShape s = perf::bench_shape_of_preset(f.preset);  // names the presets when unknown
  s.batch = f.batch;
  s.seq_len = f.seq_len;
  s.new_tokens = f.new_tokens;
  s.dtype = f.dtype;
  s.dropout = f.dropout;
  s.mode = f.new_tokens > 0 ? perf::GptBenchMode::kDecode
                            : f.backward ? perf::GptBenchMode::kStep : perf::GptBenchMode::kForward;
  QKV_CHECK(!(f.backward && f.new_tokens > 0), "--backward and --new-tokens: a training step or decoding, not both");
  QKV_CHECK(f.dropout == 0.0 || f.backward, "--dropout ", f.dropout, ": dropout acts in a training step (--backward)");
  QKV_CHECK(f.batch >= 1, "--batch ", f.batch, ": must be at least 1");
  QKV_CHECK(f.seq_len >= 1, "--seq-len ", f.seq_len, ": must be at least 1 (decode: the prompt's tokens)");
  try {
    const perf::GptBenchReport r = perf::run_gpt_bench(s, f.iters, f.warmup, default_pool());
    const char* what = s.mode == perf::GptBenchMode::kDecode ? "decode"
                       : s.mode == perf::GptBenchMode::kStep ? "training step (forward, loss, backward, AdamW)"
                                                             : "forward";
    std::cout << "qkv bench: " << f.preset << " " << what << ", B=" << s.batch << " T=" << s.seq_len
              << (s.mode == perf::GptBenchMode::kDecode ? " new=" + std::to_string(s.new_tokens) : "") << " "
              << dtype_name(s.dtype) << ", " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ", " << r.simd
              << "\n  products: " << r.gemm << "\n";
    std::cout << std::fixed << std::setprecision(2) << "  median " << r.median_ms << " ms  (min " << r.min_ms
              << ", max " << r.max_ms << ", " << r.iters << (s.mode == perf::GptBenchMode::kDecode ? " steps)\n" : " runs)\n");
    if (s.mode == perf::GptBenchMode::kDecode) {
      std::cout << std::setprecision(1) << "  " << r.tokens_per_s << " tokens/s; " << r.weight_bytes / 1e6
                << " MB of weights read per step -> " << r.weight_gb_s << " GB/s = "
                << 100.0 * r.weight_gb_s / r.bandwidth_gb_s << "% of the measured read bandwidth " << r.bandwidth_gb_s
                << " GB/s (the memory-bound limit: " << static_cast<double>(s.batch) * r.bandwidth_gb_s * 1e9 / r.weight_bytes
                << " tokens/s)\n";
    } else {
      std::cout << std::setprecision(1) << "  " << r.flops / 1e9 << " GFLOP -> " << r.gflops << " GFLOP/s = "
                << 100.0 * r.gflops / r.peak_gflops << "% of the measured FMA peak " << r.peak_gflops << " GFLOP/s";
      if (r.bf16_peak_gflops > 0)
        std::cout << ", " << 100.0 * r.gflops / r.bf16_peak_gflops << "% of the bf16 dot-product peak "
                  << r.bf16_peak_gflops << " GFLOP/s";
      std::cout << "\n";
    }
    std::cout << std::setprecision(0) << "  peak memory (max RSS) " << r.max_rss_mib << " MiB\n";
    if (f.json) {
      nlohmann::json j = {{"module", "gpt"},           {"preset", f.preset},
                          {"mode", s.mode == perf::GptBenchMode::kDecode ? "decode"
                                   : s.mode == perf::GptBenchMode::kStep ? "step" : "forward"},
                          {"batch", s.batch},          {"seq_len", s.seq_len},
                          {"new_tokens", s.new_tokens}, {"dtype", dtype_name(s.dtype)},
                          {"dropout", s.dropout},      {"threads", r.threads},
                          {"iters", r.iters},          {"median_ms", r.median_ms},
                          {"min_ms", r.min_ms},        {"times_ms", r.times_ms},
                          {"parameters", r.parameters}, {"product_parameters", r.product_parameters},
                          {"simd", r.simd},            {"gemm", r.gemm},
                          {"max_rss_mib", r.max_rss_mib}};
      if (s.mode == perf::GptBenchMode::kDecode) {
        j["tokens_per_s"] = r.tokens_per_s;
        j["weight_bytes"] = r.weight_bytes;
        j["weight_gb_s"] = r.weight_gb_s;
        j["bandwidth_gb_s"] = r.bandwidth_gb_s;
        j["bandwidth_passes_gb_s"] = r.bandwidth_passes;
        j["percent_of_bandwidth"] = 100.0 * r.weight_gb_s / r.bandwidth_gb_s;
      } else {
        j["gflop"] = r.flops / 1e9;
        j["gflops"] = r.gflops;
        j["peak_gflops"] = r.peak_gflops;
        j["percent_of_peak"] = 100.0 * r.gflops / r.peak_gflops;
        if (r.bf16_peak_gflops > 0) {
          j["bf16_peak_gflops"] = r.bf16_peak_gflops;
          j["percent_of_bf16_peak"] = 100.0 * r.gflops / r.bf16_peak_gflops;
        }
      }
      std::cout << j.dump() << "\n";
    }
  } catch (const Error& e) {  // the harness names its fields; the user typed flags
    std::string m = e.what();
    for (const auto& [field, flag] : {std::pair{"seq_len ", "--seq-len "}, {"new_tokens ", "--new-tokens "},
                                      {"iters ", "--iters "}, {"warmup ", "--warmup "}, {"batch ", "--batch "}})
      if (m.rfind(field, 0) == 0) m = flag + m.substr(std::string(field).size());
    fail(m);
  }
  return 0;
}

}  // namespace qkv::cli
