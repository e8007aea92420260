// The gated delta rule benchmark harness. See include/qkv/perf/deltanet_bench.h.
#include "qkv/perf/deltanet_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/machine.h"
#include "qkv/kernels/delta_rule_step.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/kernels/memory_bandwidth.h"
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

// `rows` rows of the rule's inputs as Qwen3.5's layer makes them (head width D): q and k of unit
// length (q then times 1 / sqrt(D)), v uniform in [-1, 1), beta in (0.05, 0.95), alpha in (0.9, 1).
struct RuleInputs {
  std::vector<float> q, k, v, beta, alpha;
  RuleInputs(int64_t rows, int64_t D)
      : q(static_cast<size_t>(checked_product({rows, D}, "gated-deltanet bench inputs"))), k(q.size()), v(q.size()),
        beta(static_cast<size_t>(rows)), alpha(beta.size()) {
    fill_uniform(q, 1, -1, 1);
    fill_uniform(k, 2, -1, 1);
    fill_uniform(v, 3, -1, 1);
    fill_uniform(beta, 5, 0.05f, 0.95f);
    fill_uniform(alpha, 6, 0.9f, 1.0f);
    std::vector<float> norms(beta.size());
    l2norm_rows(q.data(), rows, D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(D)), q.data(), norms.data());
    l2norm_rows(k.data(), rows, D, 1e-6f, 1.0f, k.data(), norms.data());
  }
};

}  // namespace

DeltaNetBenchReport run_deltanet_bench(const DeltaNetBenchShape& s, int iters, int warmup, ThreadPool& pool) {
  QKV_CHECK(s.batch >= 1 && s.tokens >= 1 && s.heads >= 1 && s.head_dim >= 1, "gated-deltanet bench: batch (", s.batch,
            "), tokens (", s.tokens, "), heads (", s.heads, ") and head_dim (", s.head_dim, ") must be at least 1");
  QKV_CHECK(iters >= 1 && warmup >= 0, "gated-deltanet bench: iters (", iters, ") must be at least 1 and warmup (",
            warmup, ") at least 0");
  const int64_t D = s.head_dim;
  const DeltaRuleShape shape{s.batch, s.tokens, s.heads, D, D, false};
  const int64_t rows = shape.rows();
  DeltaNetBenchReport r;
  r.shape = s;
  r.threads = pool.num_threads();
  r.iters = iters;
  r.simd = kernels::simd_target();
  r.gemm = "qkv's unpacked in-cache product (kernels/small_gemm.h), " + r.simd + ", " +
           std::to_string(kernels::simd_vector_bits()) + "-bit";
  r.peak_gflops = kernels::measure_fma_peak_gflops(pool);
  const RuleInputs inputs(rows, D);
  const std::vector<float> &q = inputs.q, &k = inputs.k, &v = inputs.v, &beta = inputs.beta, &alpha = inputs.alpha;
  std::vector<float> log_alpha(beta.size()), y(q.size()), y_ref(q.size()), dy(q.size());
  fill_uniform(dy, 4, -1, 1);
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

DeltaNetDecodeReport run_deltanet_decode_bench(const DeltaNetDecodeShape& s, ThreadPool& pool) {
  QKV_CHECK(s.batch >= 1 && s.heads >= 1 && s.head_dim >= 1 && s.layers >= 1 && s.steps >= 1,
            "gated-deltanet decoding bench: batch (", s.batch, "), heads (", s.heads, "), head_dim (", s.head_dim,
            "), layers (", s.layers, ") and steps (", s.steps, ") must be at least 1");
  const int64_t D = s.head_dim, heads = s.batch * s.heads, KV = checked_product({D, D}, "a head's state");
  const int64_t per_layer = checked_product({heads, KV}, "a layer's state");
  const int64_t total = checked_product({s.layers, per_layer, 4}, "the states' bytes");  // floats, as a cache's
  check_memory_request(2 * total, "gated-deltanet decoding bench: the states (twice: the definition's form too)");
  DeltaNetDecodeReport r;
  r.shape = s;
  r.threads = pool.num_threads();
  r.simd = kernels::simd_target();
  r.state_bytes = total;
  // Read between two steps, as a model's weights are between two visits to a layer: each step's
  // states come from memory, not from a last-level cache they would fit in.
  kernels::StreamBuffer cold(pool);
  r.bandwidth_gb_s = kernels::measure_read_bandwidth(cold, pool).gb_s;
  r.eviction_bytes = cold.bytes();
  const RuleInputs inputs(s.layers * heads, D);  // one token's inputs per layer and head
  const std::vector<float> &q = inputs.q, &k = inputs.k, &v = inputs.v, &beta = inputs.beta, &alpha = inputs.alpha;
  std::vector<float> y(q.size()), y_ref(q.size());
  // the states where a model keeps them: a cache of state layers (2 MiB pages where granted)
  kernels::KvCache cache(s.layers, s.batch, 1, 0, 1, 1, kernels::CacheDtype::kF32,
                         std::vector<int64_t>(static_cast<size_t>(s.layers), per_layer));
  std::vector<float> ref(static_cast<size_t>(s.layers * per_layer), 0.0f);
  const DeltaRuleShape one{s.batch, 1, s.heads, D, D, false};
  auto layer_inputs = [&](int64_t l) {
    const int64_t r0 = l * heads;
    return DeltaRuleInputs{&q[r0 * D], &k[r0 * D], &v[r0 * D], &beta[r0], &alpha[r0]};
  };
  auto kernel_step = [&] {
    for (int64_t l = 0; l < s.layers; ++l)
      delta_rule_run(one, layer_inputs(l), cache.state(l), &y[l * heads * D]);
  };
  auto reference_step = [&] {
    for (int64_t l = 0; l < s.layers; ++l) {
      const DeltaRuleInputs in = layer_inputs(l);
      pool.parallel_for(heads, [&](int64_t h, int) {
        kernels::delta_rule_step_reference(in.q + h * D, in.k + h * D, in.v + h * D, in.alpha[h], in.beta + h, 1, D, D,
                                           &ref[l * per_layer + h * KV], &y_ref[(l * heads + h) * D]);
      });
    }
  };
  for (int64_t i = 0; i < s.steps; ++i) {
    cold.read(pool);
    const auto t0 = std::chrono::steady_clock::now();
    kernel_step();
    r.times_ms.push_back(milliseconds_of(t0));
  }
  const TimeSummary t = summarize_times(r.times_ms);
  r.median_ms = t.median_ms;
  r.min_ms = t.min_ms;
  r.max_ms = t.max_ms;
  r.read_gb_s = static_cast<double>(total) / (r.median_ms * 1e-3) / 1e9;
  // The states' bytes over the median time of `pass` after the same flush (at most 20 times), each
  // thread passing over its share of each layer as the step's threads do.
  auto plain_gb_s = [&](auto&& pass) {  // pass(floats of one share, count, thread)
    std::vector<double> ms;
    for (int64_t i = 0; i < std::min<int64_t>(s.steps, 20); ++i) {
      cold.read(pool);
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t threads = pool.num_threads();
      pool.parallel_for(threads, [&](int64_t w, int) {
        const int64_t first = per_layer * w / threads, end = per_layer * (w + 1) / threads;
        for (int64_t l = 0; l < s.layers; ++l) pass(cache.state(l) + first, static_cast<size_t>(end - first), w);
      });
      ms.push_back(milliseconds_of(t0));
    }
    return static_cast<double>(total) / (summarize_times(ms).median_ms * 1e-3) / 1e9;
  };
  // A plain read of the same states: the step's ceiling here (the step must also do its arithmetic
  // and write the states).
  std::vector<float> sinks(static_cast<size_t>(pool.num_threads()) * 16, 0.0f);
  r.plain_read_gb_s = plain_gb_s([&](const float* p, size_t n, int64_t w) {
    sinks[static_cast<size_t>(w) * 16] += kernels::sum_floats(p, n);
  });
  // A plain update in place (each float read and written back, times 1: unchanged): the ceiling of
  // a step that reads and rewrites them.
  r.plain_update_gb_s = plain_gb_s([](float* p, size_t n, int64_t) { kernels::scale_floats(p, n, 1.0f); });
  // the definition's form: as many steps (at most 20 timed), so the states can be compared
  std::vector<double> ref_ms;
  for (int64_t i = 0; i < s.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    reference_step();
    if (i < 20) ref_ms.push_back(milliseconds_of(t0));
  }
  r.reference_median_ms = summarize_times(ref_ms).median_ms;
  double scale = 0;
  for (float x : ref) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (int64_t l = 0; l < s.layers; ++l)  // the cache's heads in column blocks, the reference's in rows
    for (int64_t h = 0; h < s.batch * s.heads; ++h)
      for (int64_t i = 0; i < D; ++i)
        for (int64_t j = 0; j < D; ++j) {
          const float got = cache.state(l)[h * KV + delta_state_index(D, D, i, j)];
          const float want = ref[l * per_layer + h * KV + i * D + j];
          r.max_state_difference =
              std::max(r.max_state_difference, static_cast<double>(std::fabs(got - want)) / std::max(scale, 1e-300));
        }
  for (size_t i = 0; i < y.size(); ++i)
    r.max_output_difference = std::max(r.max_output_difference, static_cast<double>(std::fabs(y[i] - y_ref[i])));
  return r;
}

std::string report_text(const DeltaNetDecodeReport& r) {
  const DeltaNetDecodeShape& s = r.shape;
  std::ostringstream out;
  out << "qkv bench: gated-deltanet decoding (one token through " << s.layers << " layers' gated delta rule), B="
      << s.batch << " H=" << s.heads << " Dk=Dv=" << s.head_dim << ", " << r.threads << " thread"
      << (r.threads == 1 ? "" : "s") << ", " << r.simd << ", lines prefetched in bursts into " << burst_prefetch_name()
      << "\n"
      << std::fixed << std::setprecision(3) << "  median " << r.median_ms << " ms a step  (min " << r.min_ms
      << ", max " << r.max_ms << ", " << r.times_ms.size() << " steps)\n"
      << std::setprecision(1) << "  states " << static_cast<double>(r.state_bytes) / (1 << 20)
      << " MiB (floats, a cache's 2 MiB pages), read from memory (the caches flushed by a "
      << static_cast<double>(r.eviction_bytes) / (1 << 20) << " MiB read between steps) and written once a step\n"
      << "    -> read at " << r.read_gb_s << " GB/s = "
      << 100.0 * r.read_gb_s / r.bandwidth_gb_s << "% of the measured read bandwidth " << r.bandwidth_gb_s
      << " GB/s\n"
      << "  a plain read of the same states after the same flush: " << r.plain_read_gb_s << " GB/s -> the step at "
      << 100.0 * r.read_gb_s / r.plain_read_gb_s << "% of it\n"
      << "  a plain update in place of the same states after the same flush (read and written back): "
      << r.plain_update_gb_s << " GB/s read (" << 100.0 * r.plain_update_gb_s / r.bandwidth_gb_s
      << "% of the read bandwidth) -> the step at " << 100.0 * r.read_gb_s / r.plain_update_gb_s << "% of it\n"
      << std::setprecision(3) << "  the definition's form (four passes over a state): median " << r.reference_median_ms
      << " ms -> the one-pass kernel is " << std::setprecision(2) << r.reference_median_ms / r.median_ms
      << "x faster\n"
      << std::scientific << std::setprecision(2) << "  states: max |kernel - definition| " << r.max_state_difference
      << " of their largest; outputs: " << r.max_output_difference << "\n";
  return out.str();
}

nlohmann::json report_json(const DeltaNetDecodeReport& r) {
  const DeltaNetDecodeShape& s = r.shape;
  return {{"module", "gated-deltanet"},
          {"decoding", true},
          {"batch", s.batch},
          {"num_heads", s.heads},
          {"head_dim", s.head_dim},
          {"num_layers", s.layers},
          {"new_tokens", s.steps},
          {"threads", r.threads},
          {"simd", r.simd},
          {"prefetch", burst_prefetch_name()},
          {"state_bytes", r.state_bytes},
          {"eviction_bytes", r.eviction_bytes},
          {"plain_read_gb_s", r.plain_read_gb_s},
          {"plain_update_gb_s", r.plain_update_gb_s},
          {"median_ms", r.median_ms},
          {"times_ms", r.times_ms},
          {"read_gb_s", r.read_gb_s},
          {"bandwidth_gb_s", r.bandwidth_gb_s},
          {"percent_of_bandwidth", 100.0 * r.read_gb_s / r.bandwidth_gb_s},
          {"reference_median_ms", r.reference_median_ms},
          {"speedup", r.reference_median_ms / r.median_ms},
          {"max_state_difference", r.max_state_difference},
          {"max_output_difference", r.max_output_difference}};
}

}  // namespace qkv::perf
