// Timing the GPT model. See include/qkv/perf/gpt_bench.h.
#include "qkv/perf/gpt_bench.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <memory>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/gemm.h"
#include "qkv/core/generator.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/memory_bandwidth.h"
#include "qkv/kernels/simd.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"
#include "qkv/train/loss.h"
#include "qkv/train/optimizer.h"
#include "perf/timing.h"

namespace qkv::perf {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Ids in [0, V) that differ from run to run of a sequence but not between runs.
std::vector<int64_t> some_ids(int64_t n, int64_t V, int64_t salt) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 7919 + salt * 104729 + 13) % V;
  return ids;
}

void summarize(GptBenchReport& r) {
  const TimeSummary t = summarize_times(r.times_ms);
  r.median_ms = t.median_ms;
  r.min_ms = t.min_ms;
  r.max_ms = t.max_ms;
  r.iters = static_cast<int>(r.times_ms.size());
}

}  // namespace

GptBenchShape bench_shape_of_preset(const std::string& preset) {
  GptBenchShape s;
  s.name = preset;
  s.spec = family_of_preset(preset).preset(preset);
  return s;
}

GptBenchReport run_gpt_bench(const GptBenchShape& in, int iters, int warmup, ThreadPool& pool) {
  GptBenchShape shape = in;
  LoadedModel loaded;
  if (!shape.weights.empty()) {  // the model's files, as qkv generate loads them; its spec and dtype
    QKV_CHECK(shape.mode != GptBenchMode::kStep, "weights: a model loaded from its files is timed in a forward or ",
              "decoding; a training step times a preset");
    LoadOptions o;
    o.quantize = shape.quantize;
    loaded = load_model(shape.weights, o);
    shape.spec = loaded.model->spec();
    shape.dtype = shape.spec.attention.dtype;
  }
  DecoderSpec c = shape.spec;
  const int64_t context = c.context_length;
  const bool decode = shape.mode == GptBenchMode::kDecode;
  QKV_CHECK(shape.batch >= 1, "batch ", shape.batch, ": must be at least 1");
  QKV_CHECK(shape.seq_len >= 1 && shape.seq_len <= context, "seq_len ", shape.seq_len, ": must be in [1, ",
            context, "] (", shape.name, "'s context length)");
  QKV_CHECK(!decode || (shape.new_tokens >= 1 && shape.seq_len + shape.new_tokens <= context),
            "new_tokens ", shape.new_tokens, ": must be at least 1, and the prompt (", shape.seq_len,
            ") plus the new tokens at most the context length ", context);
  QKV_CHECK(decode || iters >= 1, "iters ", iters, ": must be at least 1");
  QKV_CHECK(warmup >= 0, "warmup ", warmup, ": must be at least 0");
  QKV_CHECK(&pool == &default_pool(), "run_gpt_bench: the model runs on the default pool; pass default_pool() ",
            "(set_default_thread_count sets its threads), so the ceiling is measured on the same threads");
  QKV_CHECK(shape.dropout == 0.0 || c.shortcut_dropout, "dropout ", shape.dropout, ": the ",
            model_family(c.family).title, " models have no dropout");
  c.attention.dtype = shape.dtype;
  c.attention.dropout = shape.mode == GptBenchMode::kStep ? shape.dropout : 0.0;
  if (shape.dtype == Dtype::kBF16) c.path = AttentionPath::kFused;
  validate_decoder_spec(c, shape.name, model_family(c.family).keys);

  GptBenchReport r;
  r.shape = shape;
  r.threads = pool.num_threads();
  r.simd = kernels::simd_target();
  r.gemm = shape.dtype == Dtype::kBF16 ? gemm_bf16_description() : gemm_description();
  const int64_t B = shape.batch, T = shape.seq_len, L = c.layers, V = c.vocab_size;
  const int64_t H = c.attention.heads, D = c.attention.head_dim;
  r.product_parameters = static_cast<double>(product_parameters(c));
  if (!decode) {
    r.peak_gflops = kernels::measure_fma_peak_gflops(pool);
    if (shape.dtype == Dtype::kBF16) r.bf16_peak_gflops = kernels::measure_bf16_dot_peak_gflops(pool);
  }

  Generator gen(123);
  const std::unique_ptr<LanguageModel> owned = loaded.model ? nullptr : build_model(c, gen);
  LanguageModel& model = loaded.model ? *loaded.model : *owned;
  r.model = loaded.model ? loaded.description : shape.name;
  r.parameters = static_cast<double>(model.bf16_only() ? decoder_parameters(c, "the model's parameters")
                                                       : model.num_parameters());
  const double attention_flops = 4.0 * static_cast<double>(L * B * H * D) * static_cast<double>(T * (T + 1) / 2);
  const double forward_flops = 2.0 * r.product_parameters * static_cast<double>(B * T) + attention_flops;

  if (shape.mode == GptBenchMode::kForward) {
    model.eval();
    const std::vector<int64_t> ids = some_ids(B * T, V, 1);
    for (int i = 0; i < warmup + iters; ++i) {
      const auto t0 = Clock::now();
      const Tensor logits = model.forward(ids, B, T);
      if (i >= warmup) r.times_ms.push_back(ms_since(t0));
    }
    r.flops = forward_flops;
  } else if (shape.mode == GptBenchMode::kStep) {
    model.train();
    const std::vector<int64_t> ids = some_ids(B * T, V, 1), targets = some_ids(B * T, V, 2);
    AdamWOptions o;
    o.weight_decay = 0.1;  // chapter 5's
    AdamW opt(parameters_of(model), 4e-4, o);
    CrossEntropyLoss loss;
    for (int i = 0; i < warmup + iters; ++i) {
      const auto t0 = Clock::now();
      model.zero_grad();
      const Tensor logits = model.forward(ids, B, T);
      loss.forward(logits, targets);
      model.backward(loss.backward());
      opt.step();
      if (i >= warmup) r.times_ms.push_back(ms_since(t0));
    }
    r.flops = 3.0 * forward_flops;
  } else {
    model.eval();
    if (shape.dtype == Dtype::kBF16 && !model.bf16_only() && !model.has_bf16_weights()) model.keep_bf16_weights();
    // the cache generate keeps (bf16 when the products are)
    r.cache_dtype = model.default_cache_dtype();
    kernels::KvCache cache = model.make_cache(B, r.cache_dtype, T + shape.new_tokens + warmup);
    model.forward_cached(some_ids(B * T, V, 1), B, T, cache);  // the prefill, untimed
    const int64_t untimed = std::min<int64_t>(warmup, context - T - shape.new_tokens);
    double read_positions = 0;  // summed over the timed steps
    // The bandwidth through the run: a pass before the steps and one after every 20 timed steps
    // (untimed), their median the limit's yardstick; a shared host's bandwidth moves during a run.
    // One buffer, made once (a new 1 GiB one per pass spent most of such a run's CPU clearing pages).
    r.model_rss_mib = max_rss_mib();  // the model, its cache and its prefill: before the probe's buffer
    kernels::StreamBuffer probe(pool);
    std::vector<double> passes = {kernels::measure_read_bandwidth(probe, pool, 1).gb_s};
    for (int64_t i = 0; i < untimed + shape.new_tokens; ++i) {
      const std::vector<int64_t> next = some_ids(B, V, 3 + i);
      const int64_t before = cache.length();
      const auto t0 = Clock::now();
      const Tensor logits = model.forward_cached(next, B, 1, cache);
      if (i >= untimed) {
        r.times_ms.push_back(ms_since(t0));
        read_positions += static_cast<double>(before + 1);  // the keys and values of every position, the new one's too
      }
      if (i >= untimed && (i - untimed + 1) % 20 == 0) passes.push_back(kernels::measure_read_bandwidth(probe, pool, 1).gb_s);
    }
    r.weight_bytes = static_cast<double>(model.step_weight_bytes());
    // a step's keys and values, per position: every attention layer's, each of B sequences
    const DecoderSpec& ms = model.spec();
    int64_t attending = 0;
    for (int64_t l = 0; l < ms.layers; ++l) attending += ms.kind(l) == LayerKind::kAttention;
    const double per_position = static_cast<double>(attending * B * cache.kv_heads() * (cache.head_dim() + cache.value_dim()) *
                                                    kernels::cache_dtype_bytes(r.cache_dtype));
    r.cache_bytes = per_position * read_positions / static_cast<double>(shape.new_tokens);
    // the linear-attention layers' states (floats), each read and rewritten once a step
    for (int64_t l = 0; l < ms.layers; ++l)
      if (cache.holds_state(l)) r.state_bytes += static_cast<double>(cache.state_size(l)) * sizeof(float);
    r.bandwidth_passes = passes;  // in the order they ran: pass i + 1 follows timed steps [20 i, 20 i + 20)
    std::sort(passes.begin(), passes.end());
    r.bandwidth_gb_s = passes[passes.size() / 2];
  }
  summarize(r);
  if (decode) {
    r.tokens_per_s = static_cast<double>(B) * 1e3 / r.median_ms;
    r.weight_gb_s = r.weight_bytes / (r.median_ms * 1e6);
    r.read_gb_s = (r.weight_bytes + r.cache_bytes + r.state_bytes) / (r.median_ms * 1e6);
  } else {
    r.gflops = r.flops / (r.median_ms * 1e6);
  }
  r.max_rss_mib = max_rss_mib();
  return r;
}

namespace {
const char* mode_name(GptBenchMode m) {
  return m == GptBenchMode::kDecode ? "decode" : m == GptBenchMode::kStep ? "step" : "forward";
}
}  // namespace

std::string report_text(const GptBenchReport& r) {
  const GptBenchShape& s = r.shape;
  const bool decode = s.mode == GptBenchMode::kDecode;
  const char* what = decode ? "decode" : s.mode == GptBenchMode::kStep ? "training step (forward, loss, backward, AdamW)"
                                                                       : "forward";
  std::ostringstream out;
  out << "qkv bench: " << (s.weights.empty() ? s.name : r.model) << " " << what << ", B=" << s.batch << " T=" << s.seq_len
      << (decode ? " new=" + std::to_string(s.new_tokens) : "") << " " << dtype_name(s.dtype) << ", " << r.threads
      << " thread" << (r.threads == 1 ? "" : "s") << ", " << r.simd << ", lines prefetched in bursts into "
      << burst_prefetch_name() << "\n  products: " << r.gemm << "\n";
  out << std::fixed << std::setprecision(2) << "  median " << r.median_ms << " ms  (min " << r.min_ms << ", max "
      << r.max_ms << ", " << r.iters << (decode ? " steps)\n" : " runs)\n");
  if (decode) {
    out << std::setprecision(1) << "  " << r.tokens_per_s << " tokens/s; " << r.weight_bytes / 1e6
        << " MB of weights and " << r.cache_bytes / 1e6 << " MB of " << kernels::cache_dtype_name(r.cache_dtype)
        << " KV cache (a step's mean)";
    if (r.state_bytes > 0) out << " and " << r.state_bytes / 1e6 << " MB of linear-attention states (also rewritten)";
    out << " read per step -> " << r.read_gb_s << " GB/s = " << 100.0 * r.read_gb_s / r.bandwidth_gb_s
        << "% of the measured read bandwidth " << r.bandwidth_gb_s << " GB/s (the memory-bound limit: "
        << static_cast<double>(s.batch) * r.bandwidth_gb_s * 1e9 / (r.weight_bytes + r.cache_bytes + r.state_bytes)
        << " tokens/s)\n";
  } else {
    out << std::setprecision(1) << "  " << r.flops / 1e9 << " GFLOP -> " << r.gflops << " GFLOP/s = "
        << 100.0 * r.gflops / r.peak_gflops << "% of the measured FMA peak " << r.peak_gflops << " GFLOP/s";
    if (r.bf16_peak_gflops > 0)
      out << ", " << 100.0 * r.gflops / r.bf16_peak_gflops << "% of the bf16 dot-product peak " << r.bf16_peak_gflops
          << " GFLOP/s";
    out << "\n";
  }
  out << std::setprecision(0) << "  peak memory (max RSS) ";
  if (decode) {
    out << r.model_rss_mib << " MiB before the bandwidth probe, " << r.max_rss_mib << " MiB with its "
        << kernels::read_bandwidth_buffer_bytes() / (1 << 20) << " MiB buffer\n";
  } else {
    out << r.max_rss_mib << " MiB\n";
  }
  return out.str();
}

nlohmann::json report_json(const GptBenchReport& r) {
  const GptBenchShape& s = r.shape;
  nlohmann::json j = {{"module", "gpt"},           {"preset", s.name},
                      {"mode", mode_name(s.mode)}, {"batch", s.batch},
                      {"seq_len", s.seq_len},      {"new_tokens", s.new_tokens},
                      {"dtype", dtype_name(s.dtype)}, {"dropout", s.dropout},
                      {"threads", r.threads},      {"iters", r.iters},
                      {"median_ms", r.median_ms},  {"min_ms", r.min_ms},
                      {"times_ms", r.times_ms},    {"parameters", r.parameters},
                      {"product_parameters", r.product_parameters}, {"simd", r.simd}, {"prefetch", burst_prefetch_name()},
                      {"gemm", r.gemm},            {"max_rss_mib", r.max_rss_mib},
                      {"model", r.model}};
  if (!s.weights.empty()) j["weights"] = s.weights;
  if (s.mode == GptBenchMode::kDecode) {
    j["tokens_per_s"] = r.tokens_per_s;
    j["weight_bytes"] = r.weight_bytes;
    j["weight_gb_s"] = r.weight_gb_s;
    j["cache_dtype"] = kernels::cache_dtype_name(r.cache_dtype);
    j["cache_bytes"] = r.cache_bytes;
    j["state_bytes"] = r.state_bytes;
    j["model_max_rss_mib"] = r.model_rss_mib;
    j["read_gb_s"] = r.read_gb_s;
    j["bandwidth_gb_s"] = r.bandwidth_gb_s;
    j["bandwidth_passes_gb_s"] = r.bandwidth_passes;
    j["percent_of_bandwidth"] = 100.0 * r.read_gb_s / r.bandwidth_gb_s;
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
  return j;
}

}  // namespace qkv::perf
