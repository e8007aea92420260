// Timing the GPT model. See include/qkv/perf/gpt_bench.h.
#include "qkv/perf/gpt_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/gemm.h"
#include "qkv/core/generator.h"
#include "qkv/kernels/fma_peak.h"
#include "qkv/kernels/memory_bandwidth.h"
#include "qkv/kernels/simd.h"
#include "qkv/models/gpt.h"
#include "qkv/models/llama.h"
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
  for (const std::string& n : llama_preset_names())
    if (n == preset) {
      s.llama = llama_preset(preset);
      return s;
    }
  for (const std::string& n : gpt_preset_names())
    if (n == preset) {
      s.config = gpt_preset(preset);
      return s;
    }
  std::string known;
  for (const auto* names : {&gpt_preset_names(), &llama_preset_names()})
    for (const std::string& n : *names) known += (known.empty() ? "" : ", ") + n;
  fail("unknown preset ", excerpt(preset), "; expected one of: ", known);
}

GptBenchReport run_gpt_bench(const GptBenchShape& shape, int iters, int warmup, ThreadPool& pool) {
  GPTConfig c = shape.config;
  std::optional<LlamaConfig> lc = shape.llama;
  const int64_t context = lc ? lc->max_position_embeddings : c.context_length;
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
  c.attention.dtype = shape.dtype;
  c.attention.dropout = shape.mode == GptBenchMode::kStep ? shape.dropout : 0.0;
  if (shape.dtype == Dtype::kBF16) c.path = AttentionPath::kFused;
  validate_gpt_config(c);
  if (lc) {
    lc->dtype = shape.dtype;
    lc->path = AttentionPath::kFused;
    QKV_CHECK(shape.dropout == 0.0, "dropout ", shape.dropout, ": the Llama and Qwen3 models have no dropout");
  }

  GptBenchReport r;
  r.shape = shape;
  r.threads = pool.num_threads();
  r.simd = kernels::simd_target();
  r.gemm = gemm_description();
  const int64_t B = shape.batch, T = shape.seq_len, E = lc ? lc->hidden_size : c.emb_dim;
  const int64_t L = lc ? lc->num_hidden_layers : c.n_layers, V = lc ? lc->vocab_size : c.vocab_size;
  const int64_t H = lc ? lc->num_attention_heads : c.attention.heads, D = lc ? lc->head_dim : c.attention.head_dim;
  if (lc) {
    const int64_t G = lc->num_key_value_heads, F = lc->intermediate_size;
    r.product_parameters = static_cast<double>(L * (E * (H + 2 * G) * D + H * D * E + 3 * E * F) + V * E);
  } else {
    r.product_parameters = static_cast<double>(L * (3 * E * E + E * E + 8 * E * E) + V * E);
  }
  if (!decode) {
    r.peak_gflops = kernels::measure_fma_peak_gflops(pool);
    if (shape.dtype == Dtype::kBF16) r.bf16_peak_gflops = kernels::measure_bf16_dot_peak_gflops(pool);
  }

  Generator gen(123);
  std::unique_ptr<LanguageModel> owned;
  if (lc) owned = std::make_unique<LlamaModel>(*lc, gen);
  else owned = std::make_unique<GPTModel>(c, gen);
  LanguageModel& model = *owned;
  r.parameters = static_cast<double>(model.num_parameters());
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
    if (shape.dtype == Dtype::kBF16) {
      if (auto* gpt = dynamic_cast<GPTModel*>(&model)) gpt->keep_bf16_weights();
      if (auto* llama = dynamic_cast<LlamaModel*>(&model)) llama->keep_bf16_weights();
    }
    kernels::KvCache cache = model.make_cache(B, kernels::CacheDtype::kF32, T + shape.new_tokens + warmup);
    model.forward_cached(some_ids(B * T, V, 1), B, T, cache);  // the prefill, untimed
    const int64_t untimed = std::min<int64_t>(warmup, context - T - shape.new_tokens);
    // The bandwidth through the run: a pass before the steps and one after every 20 timed steps
    // (untimed), their median the limit's yardstick; a shared host's bandwidth moves during a run.
    std::vector<double> passes = {kernels::measure_read_bandwidth(pool, 1).gb_s};
    for (int64_t i = 0; i < untimed + shape.new_tokens; ++i) {
      const std::vector<int64_t> next = some_ids(B, V, 3 + i);
      const auto t0 = Clock::now();
      const Tensor logits = model.forward_cached(next, B, 1, cache);
      if (i >= untimed) r.times_ms.push_back(ms_since(t0));
      if (i >= untimed && (i - untimed + 1) % 20 == 0) passes.push_back(kernels::measure_read_bandwidth(pool, 1).gb_s);
    }
    r.weight_bytes = r.product_parameters * (shape.dtype == Dtype::kBF16 ? 2.0 : 4.0);
    std::sort(passes.begin(), passes.end());
    r.bandwidth_gb_s = passes[passes.size() / 2];
    r.bandwidth_passes = passes;
  }
  summarize(r);
  if (decode) {
    r.tokens_per_s = static_cast<double>(B) * 1e3 / r.median_ms;
    r.weight_gb_s = r.weight_bytes / (r.median_ms * 1e6);
  } else {
    r.gflops = r.flops / (r.median_ms * 1e6);
  }
  r.max_rss_mib = max_rss_mib();
  return r;
}

}  // namespace qkv::perf
