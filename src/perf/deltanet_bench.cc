// The gated delta rule benchmark harness. See include/qkv/perf/deltanet_bench.h.
#include "qkv/perf/deltanet_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/machine.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/simd.h"
#include "qkv/modules/delta_rule.h"
#include "qkv/modules/delta_rule_chunked.h"
#include "perf/counter_hash.h"
#include "perf/timing.h"

namespace qkv::perf {
namespace {

// Uniform values in [lo, hi).
void fill_uniform(std::vector<float>& x, uint64_t seed, float lo, float hi) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = lo + (hi - lo) * 0.5f * (counter_uniform(seed, i) + 1.0f);
}

double milliseconds_of(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DeltaNetBenchReport run_deltanet_bench(const DeltaNetBenchShape& s, int iters, int warmup, ThreadPool& pool) {
  QKV_CHECK(s.batch >= 1 && s.tokens >= 1 && s.heads >= 1 && s.head_dim >= 1, "gated-deltanet bench: batch (", s.batch,
            "), tokens (", s.tokens, "), heads (", s.heads, ") and head_dim (", s.head_dim, ") must be at least 1");
  QKV_CHECK(iters >= 1 && warmup >= 0, "gated-deltanet bench: iters (", iters, ") must be at least 1 and warmup (",
            warmup, ") at least 0");
  const int64_t D = s.head_dim;
  const DeltaRuleShape shape{s.batch, s.tokens, s.heads, D, D, false};
  const int64_t rows = shape.rows(), n = checked_product({rows, D}, "gated-deltanet bench inputs");
  DeltaNetBenchReport r;
  r.shape = s;
  r.threads = pool.num_threads();
  r.iters = iters;
  r.simd = kernels::simd_target();
  r.gemm = gemm_description();
  r.peak_gflops = kernels::measure_fma_peak_gflops(pool);
  std::vector<float> q(static_cast<size_t>(n)), k(q.size()), v(q.size()), beta(static_cast<size_t>(rows)),
      alpha(beta.size()), log_alpha(beta.size()), y(q.size()), y_ref(q.size()), dy(q.size());
  fill_uniform(q, 1, -1, 1);
  fill_uniform(k, 2, -1, 1);
  fill_uniform(v, 3, -1, 1);
  fill_uniform(dy, 4, -1, 1);
  fill_uniform(beta, 5, 0.05f, 0.95f);
  fill_uniform(alpha, 6, 0.9f, 1.0f);
  std::vector<float> norms(beta.size());  // q and k as the layer makes them: l2norm(q) / sqrt(D), l2norm(k)
  l2norm_rows(q.data(), rows, D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(D)), q.data(), norms.data());
  l2norm_rows(k.data(), rows, D, 1e-6f, 1.0f, k.data(), norms.data());
  for (size_t i = 0; i < alpha.size(); ++i) log_alpha[i] = std::log(alpha[i]);
  const DeltaRuleLogInputs in{q.data(), k.data(), v.data(), beta.data(), log_alpha.data()};
  std::vector<float> dq(q.size()), dk(q.size()), dv(q.size()), dbeta(beta.size()), dlog(beta.size());
  std::vector<float> chunk_states;
  auto step = [&] {
    delta_rule_chunked_forward(shape, in, y.data(), nullptr, s.backward ? &chunk_states : nullptr, &pool);
    if (s.backward)
      delta_rule_chunked_backward(shape, in, chunk_states, dy.data(),
                                  {dq.data(), dk.data(), dv.data(), dbeta.data(), dlog.data()}, &pool);
  };
  for (int i = 0; i < warmup; ++i) step();
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    r.times_ms.push_back(milliseconds_of(t0));
  }
  const TimeSummary t = summarize_times(r.times_ms);
  r.median_ms = t.median_ms;
  r.min_ms = t.min_ms;
  r.max_ms = t.max_ms;
  r.flops = delta_rule_chunked_flops(shape, false) + (s.backward ? delta_rule_chunked_flops(shape, true) : 0.0);
  r.gflops = r.flops / (r.median_ms * 1e-3) / 1e9;
  // the recurrence on the same inputs and threads (its states kept as a training forward keeps them)
  std::vector<double> states;
  const DeltaRuleInputs ref{q.data(), k.data(), v.data(), beta.data(), alpha.data()};
  for (int i = 0; i < std::min(iters, 3); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    delta_rule_forward(shape, ref, states, y_ref.data());
    if (s.backward)
      delta_rule_backward(shape, ref, states, dy.data(), {dq.data(), dk.data(), dv.data(), dbeta.data(), dlog.data()});
    r.recurrence_ms.push_back(milliseconds_of(t0));
  }
  r.recurrence_median_ms = summarize_times(r.recurrence_ms).median_ms;
  delta_rule_chunked_forward(shape, in, y.data(), nullptr, nullptr, &pool);
  for (size_t i = 0; i < y.size(); ++i)
    r.max_abs_difference = std::max(r.max_abs_difference, static_cast<double>(std::fabs(y[i] - y_ref[i])));
  r.max_rss_mib = max_rss_mib();
  return r;
}

std::string report_text(const DeltaNetBenchReport& r) {
  const DeltaNetBenchShape& s = r.shape;
  std::ostringstream out;
  out << "qkv bench: gated-deltanet (the gated delta rule in chunks of " << kDeltaRuleChunk << "), B=" << s.batch
      << " T=" << s.tokens << " H=" << s.heads << " Dk=Dv=" << s.head_dim << (s.backward ? ", forward + backward" : ", forward")
      << ", " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ", " << r.simd << "\n"
      << "  products: " << r.gemm << "\n"
      << std::fixed << std::setprecision(3) << "  median " << r.median_ms << " ms  (min " << r.min_ms << ", max "
      << r.max_ms << ", " << r.iters << " runs)\n"
      << std::setprecision(1) << "  " << r.flops / 1e9 << " GFLOP per step (products, triangles counted half) -> "
      << r.gflops << " GFLOP/s = " << 100.0 * r.gflops / r.peak_gflops << "% of the measured FMA peak "
      << r.peak_gflops << " GFLOP/s\n"
      << "  the token-by-token recurrence (double states, every token's kept): median " << r.recurrence_median_ms
      << " ms (" << r.recurrence_ms.size() << " runs) -> the chunked form is " << r.recurrence_median_ms / r.median_ms
      << "x faster\n"
      << std::scientific << std::setprecision(2) << "  forward outputs: max |chunked - recurrence| "
      << r.max_abs_difference << std::fixed << std::setprecision(0) << "; peak memory " << r.max_rss_mib << " MiB\n";
  return out.str();
}

nlohmann::json report_json(const DeltaNetBenchReport& r) {
  const DeltaNetBenchShape& s = r.shape;
  return {{"module", "gated-deltanet"},
          {"batch", s.batch},
          {"seq_len", s.tokens},
          {"num_heads", s.heads},
          {"head_dim", s.head_dim},
          {"backward", s.backward},
          {"threads", r.threads},
          {"iters", r.iters},
          {"simd", r.simd},
          {"products", r.gemm},
          {"median_ms", r.median_ms},
          {"times_ms", r.times_ms},
          {"flops", r.flops},
          {"gflops", r.gflops},
          {"peak_gflops", r.peak_gflops},
          {"percent_of_peak", 100.0 * r.gflops / r.peak_gflops},
          {"recurrence_median_ms", r.recurrence_median_ms},
          {"recurrence_times_ms", r.recurrence_ms},
          {"speedup", r.recurrence_median_ms / r.median_ms},
          {"max_abs_difference", r.max_abs_difference},
          {"max_rss_mib", r.max_rss_mib}};
}

}  // namespace qkv::perf
