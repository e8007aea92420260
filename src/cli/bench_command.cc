// qkv bench --module {mha|causal-attention|attention-core} --batch B --seq-len T ...
// qkv bench --module decode --kv-len S ...
// qkv bench --module gpt --preset NAME --batch B --seq-len T [--backward | --new-tokens N] ...
// qkv bench --module gpt --weights PATH [--quantize T] --seq-len T [--new-tokens N]   (a model's files)
// qkv bench --module accuracy --weights PATH --text FILE [--quantize T] [--seq-len N]
// mpirun -np N qkv bench --module ring-attention --seq-len T ... (bench_ring.cc, with MPI)
//
// Times the fast path on random inputs: median milliseconds over --iters runs after --warmup
// runs, GFLOP/s counting only the work causal attention needs (projections + the visible half of
// the scores), and the share of the FMA peak this machine reaches on the same threads (measured
// here, first). --module accuracy measures instead how far quantized weights move the model's
// next-token distributions (qkv/perf/accuracy_bench.h). With --json the last line is one JSON
// object for machines.
#include <iostream>
#include <memory>

#include "bench_flags.h"
#include "commands.h"
#include "flags.h"
#include "qkv/core/checked.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/read_file.h"
#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/simd.h"
#include "qkv/modules/attention_module.h"
#include "qkv/perf/accuracy_bench.h"
#include "qkv/perf/attention_bench.h"
#include "qkv/perf/cache_memory_bench.h"
#include "qkv/perf/decode_bench.h"
#include "qkv/perf/deltanet_bench.h"
#include "qkv/perf/gpt_bench.h"

namespace qkv::cli {
namespace {

// --module gpt: the model's own flags; the attention-layer ones are refused by name.
int run_gpt(const BenchFlags& f, const CLI::App& sub) {
  for (const char* flag : {"--kv-len", "--cache-dtype", "--d-model", "--num-heads", "--head-dim", "--no-mask",
                           "--num-kv-heads", "--window", "--alibi", "--softcap", "--rope", "--gemm", "--split"})
    check_flags(sub.count(flag) == 0, flag, " is not a flag of --module gpt (the preset or --weights sets the model's shape)");
  check_flags(f.weights.empty() || sub.count("--preset") == 0, "--preset and --weights: time a preset's drawn weights or a ",
            "model's files, not both");
  check_flags(!f.weights.empty() || sub.count("--quantize") == 0, "--quantize quantizes --weights' float weights at load: ",
            "give --weights");
  check_flags(f.weights.empty() || !f.backward, "--backward with --weights: a model's files are timed in a forward or ",
            "decoding (--new-tokens); a training step times a --preset");
  check_flags(f.weights.empty() || sub.count("--dtype") == 0, "--dtype with --weights: the model computes as its files ",
            "load (f32 for F32 weights, else bf16; --quantize for blocks)");
  check_flags(sub.count("--text") == 0, "--text is a flag of --module accuracy, not gpt");
  check_flags(sub.count("--seq-len") == 1, "--seq-len is required for --module gpt (with --new-tokens: the prompt's)");
  check_flags(sub.count("--new-tokens") == 0 || f.new_tokens >= 1, "--new-tokens ", f.new_tokens,
            ": must be at least 1 (the decoding steps timed)");
  check_flags(sub.count("--new-tokens") == 0 || sub.count("--iters") == 0,
            "--iters: decoding times each of the --new-tokens steps; give one or the other");
  check_flags(!(f.backward && f.new_tokens > 0), "--backward and --new-tokens: a training step or decoding, not both");
  check_flags(f.attention.dropout == 0.0 || f.backward, "--dropout ", f.attention.dropout,
            ": dropout acts in a training step (--backward)");
  check_flags(f.batch >= 1, "--batch ", f.batch, ": must be at least 1");
  check_flags(f.seq_len >= 1, "--seq-len ", f.seq_len, ": must be at least 1 (decode: the prompt's tokens)");
  check_threads(f.threads);
  if (f.threads > 0) set_default_thread_count(f.threads);
  perf::GptBenchShape s;
  try {
    if (f.weights.empty()) s = perf::bench_shape_of_preset(f.preset);  // names the presets when unknown
  } catch (const Error& e) {
    bad_flag("--preset", e.what());
  }
  s.weights = f.weights;
  s.quantize = f.quantize;
  if (!f.weights.empty()) s.name = f.weights;
  s.batch = f.batch;
  s.seq_len = f.seq_len;
  s.new_tokens = f.new_tokens;
  s.dtype = f.attention.dtype;
  s.dropout = f.attention.dropout;
  s.mode = f.new_tokens > 0 ? perf::GptBenchMode::kDecode : f.backward ? perf::GptBenchMode::kStep
                                                                       : perf::GptBenchMode::kForward;
  try {
    const perf::GptBenchReport r = perf::run_gpt_bench(s, f.iters, f.warmup, default_pool());
    std::cout << perf::report_text(r);
    if (f.json) std::cout << perf::report_json(r).dump() << "\n";
  } catch (const Error& e) {  // the harness names its fields; the user typed flags
    std::string m = e.what();
    for (const auto& [field, flag] : {std::pair{"seq_len ", "--seq-len "}, {"new_tokens ", "--new-tokens "},
                                      {"iters ", "--iters "}, {"warmup ", "--warmup "}, {"batch ", "--batch "}})
      if (m.rfind(field, 0) == 0) {
        m = flag + m.substr(std::string(field).size());
        throw CLI::ValidationError(m);  // a value out of its range: bad usage
      }
    fail(m);
  }
  return 0;
}

// --module accuracy: a model's weights, the text and the types; the timing flags are refused by name.
int run_accuracy(const BenchFlags& f, const CLI::App& sub) {
  for (const char* flag : {"--preset", "--new-tokens", "--batch", "--kv-len", "--cache-dtype", "--d-model",
                           "--num-heads", "--head-dim", "--backward", "--no-mask", "--dropout", "--iters", "--warmup",
                           "--num-kv-heads", "--window", "--alibi", "--softcap", "--rope", "--dtype", "--gemm", "--split"})
    check_flags(sub.count(flag) == 0, flag, " is not a flag of --module accuracy (it runs a model's weights over a "
              "text: --weights, --text, --quantize, --seq-len, --threads)");
  check_flags(!f.weights.empty(), "--module accuracy needs --weights PATH: a GGUF file or a Hugging Face folder");
  check_flags(!f.text.empty(), "--module accuracy needs --text FILE, the text both models read (qkv installs none; "
            "docs/gguf.md uses the source tree's tests/data/the-verdict.txt)");
  check_threads(f.threads);
  if (f.threads > 0) set_default_thread_count(f.threads);
  perf::AccuracyBenchOptions o;
  o.weights = f.weights;
  o.quantize = f.quantize;
  o.text = read_file(f.text);
  o.text_name = f.text;
  if (sub.count("--seq-len") > 0) o.seq_len = f.seq_len;
  try {
    const perf::AccuracyBenchReport r = perf::run_accuracy_bench(o);
    std::cout << perf::report_text(r);
    if (f.json) std::cout << perf::report_json(r).dump() << "\n";
  } catch (const Error& e) {  // the harness names its fields; the user typed flags
    std::string m = e.what();
    if (m.rfind("seq_len ", 0) == 0) throw CLI::ValidationError("--seq-len " + m.substr(8));  // out of its range
    if (m.rfind("text ", 0) == 0) m = "--text " + m.substr(5);  // (the file's contents: not a usage error)
    fail(m);
  }
  return 0;
}

// --module gated-deltanet: the rule's sizes; a prompt in chunks (--seq-len) or decoding steps
// (--new-tokens, through --num-layers layers' states); the attention's flags are refused by name.
int run_deltanet(BenchFlags& f, const CLI::App& sub) {
  for (const char* flag : {"--kv-len", "--cache-dtype", "--no-mask", "--dropout", "--window", "--alibi", "--softcap",
                           "--rope", "--num-kv-heads", "--dtype", "--gemm", "--d-model", "--latent-dim", "--weights",
                           "--quantize", "--text", "--preset", "--split"})
    check_flags(sub.count(flag) == 0, flag, " is not a flag of --module gated-deltanet (it times the gated delta rule "
              "alone: --batch, --num-heads, --head-dim, and --seq-len [--backward] for a prompt in chunks or "
              "--new-tokens [--num-layers] for decoding steps)");
  check_threads(f.threads);
  if (f.threads > 0) set_default_thread_count(f.threads);
  const int64_t heads = sub.count("--num-heads") ? f.attention.heads : 16;
  const int64_t head_dim = f.attention.head_dim > 0 ? f.attention.head_dim : 128;
  if (sub.count("--new-tokens")) {
    for (const char* flag : {"--seq-len", "--backward", "--iters", "--warmup"})
      check_flags(sub.count(flag) == 0, flag, " and --new-tokens: decoding times each of the --new-tokens steps, one "
                "token each (--seq-len and --backward time a prompt in chunks)");
    check_flags(f.new_tokens >= 1, "--new-tokens ", f.new_tokens, ": must be at least 1 (the decoding steps timed)");
    perf::DeltaNetDecodeShape s;
    s.batch = f.batch;
    s.heads = heads;
    s.head_dim = head_dim;
    if (sub.count("--num-layers")) s.layers = f.layers;
    s.steps = f.new_tokens;
    const perf::DeltaNetDecodeReport r = perf::run_deltanet_decode_bench(s, default_pool());
    std::cout << perf::report_text(r);
    if (f.json) std::cout << perf::report_json(r).dump() << "\n";
    return 0;
  }
  check_flags(sub.count("--num-layers") == 0, "--num-layers is a flag of --module gated-deltanet's decoding steps "
            "(--new-tokens), not of a prompt in chunks");
  check_flags(sub.count("--seq-len") == 1, "--seq-len is required for --module gated-deltanet (or --new-tokens: "
            "decoding steps)");
  perf::DeltaNetBenchShape s;
  s.batch = f.batch;
  s.tokens = f.seq_len;
  s.heads = heads;
  s.head_dim = head_dim;
  s.backward = f.backward;
  const perf::DeltaNetBenchReport r = perf::run_deltanet_bench(s, f.iters, f.warmup, default_pool());
  std::cout << perf::report_text(r);
  if (f.json) std::cout << perf::report_json(r).dump() << "\n";
  return 0;
}

// --module cache-memory: sizes only, nothing timed; the book's MLA estimator's sizes by default.
int run_cache_memory(BenchFlags& f, const CLI::App& sub) {
  for (const char* flag : {"--kv-len", "--no-mask", "--dropout", "--window", "--alibi", "--softcap", "--rope", "--dtype",
                           "--gemm", "--head-dim", "--backward", "--iters", "--warmup", "--threads", "--weights",
                           "--quantize", "--text", "--new-tokens", "--split"})
    check_flags(sub.count(flag) == 0, flag, " is not a flag of --module cache-memory (it sizes caches: --preset or "
              "--d-model, --num-heads, --num-kv-heads, --num-layers, --latent-dim; --seq-len, --batch, --cache-dtype)");
  perf::CacheMemoryShape s;
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  if (given("--preset")) {
    for (const char* flag : {"--d-model", "--num-heads", "--num-kv-heads", "--num-layers", "--latent-dim"})
      check_flags(!given(flag), flag, " and --preset: the preset sets the model's sizes");
    s.preset = f.preset;
  }
  s.batch = f.batch;
  if (given("--seq-len")) s.tokens = f.seq_len;
  if (given("--d-model")) s.d_model = f.d_model;
  if (given("--num-heads")) s.heads = f.attention.heads;
  if (given("--num-kv-heads")) s.kv_heads = f.attention.kv_heads;
  if (given("--num-layers")) s.layers = f.layers;
  if (given("--latent-dim")) s.latent_dim = f.latent_dim;
  if (given("--cache-dtype"))
    s.dtype = f.cache_dtype == "f32" ? kernels::CacheDtype::kF32 : kernels::CacheDtype::kBF16;
  check_flags(f.cache_dtype == "f32" || f.cache_dtype == "bf16", "--cache-dtype '", f.cache_dtype,
            "': expected f32 or bf16");
  const perf::CacheMemoryReport r = perf::run_cache_memory_bench(s);
  std::cout << perf::report_text(r);
  if (f.json) std::cout << perf::report_json(r).dump() << "\n";
  return 0;
}

// --module ring-attention: the ring's own flags; the others are refused by name.
int run_ring(const BenchFlags& f, const CLI::App& sub) {
  for (const char* flag : {"--kv-len", "--cache-dtype", "--rope", "--d-model"})
    check_flags(sub.count(flag) == 0, flag, " is not a flag of --module ring-attention");
  check_flags(f.attention.dtype == Dtype::kF32, "--dtype bf16: --module ring-attention runs in f32 only");
  check_flags(sub.count("--seq-len") == 1, "--seq-len is required for --module ring-attention");
  check_threads(f.threads);
#ifdef QKV_HAVE_MPI
  return run_ring_bench(f);
#else
  fail("--module ring-attention: this qkv was built without MPI (apt install libopenmpi-dev openmpi-bin, then "
       "reconfigure; see the README's MPI section)");
#endif
}

// The flags, checked and named in errors; the harness (qkv/perf/attention_bench.h) does the rest.
int run_bench(BenchFlags& f, const CLI::App& sub) {
  check_flags(f.threads >= 0, "--threads ", f.threads, ": must be at least 1 (or 0: the default)");
  if (sub.count("--simd")) {  // a target this CPU or build does not run is a usage error
    try {
      kernels::apply_simd_target(f.simd, "--simd");
    } catch (const Error& e) {
      bad_flag("--simd", std::string(e.what()).substr(std::string("--simd is ").size()));
    }
  }
  check_flags(sub.count("--head-dim") == 0 || f.attention.head_dim >= 1, "--head-dim (", f.attention.head_dim,
              ") must be at least 1 (leave the flag out for its default)");
  check_flags(sub.count("--softcap") == 0 || f.attention.softcap > 0, "--softcap (", f.attention.softcap,
              ") must be positive (leave the flag out for no softcap)");
  if (f.module == "cache-memory") return run_cache_memory(f, sub);
  if (f.module == "gated-deltanet") return run_deltanet(f, sub);
  check_flags(sub.count("--num-layers") == 0, "--num-layers is a flag of --module cache-memory or gated-deltanet, not ",
            f.module);
  check_flags(sub.count("--latent-dim") == 0 || f.module == "decode", "--latent-dim is a flag of --module cache-memory "
            "or decode, not ", f.module);
  if (f.module == "accuracy") return run_accuracy(f, sub);
  if (f.module == "gpt") return run_gpt(f, sub);
  for (const char* flag : {"--weights", "--quantize", "--text"})
    check_flags(sub.count(flag) == 0, flag, " is a flag of --module accuracy or gpt, not ", f.module);
  if (f.module == "ring-attention") return run_ring(f, sub);
  for (const char* flag : {"--preset", "--new-tokens"})
    check_flags(sub.count(flag) == 0, flag, " is a flag of --module gpt, not ", f.module);
  check_flags(sub.count("--split") == 0, "--split is a flag of --module ring-attention, not ", f.module);
  if (f.module == "decode") {
    for (const char* flag : {"--seq-len", "--backward", "--no-mask", "--dropout", "--window", "--alibi", "--softcap", "--rope"})
      check_flags(sub.count(flag) == 0, flag, " is not a flag of --module decode (it times one causal query per head "
                "over --kv-len cached positions)");
    check_flags(sub.count("--dtype") == 0, "--dtype is not a flag of --module decode: its cache's element type is "
              "--cache-dtype f32|bf16");
    check_threads(f.threads);
    if (f.threads > 0) set_default_thread_count(f.threads);
    check_flags(f.iters >= 1, "--iters ", f.iters, ": must be at least 1");
    check_flags(f.warmup >= 0, "--warmup ", f.warmup, ": must be at least 0");
    check_flags(f.batch >= 1, "--batch ", f.batch, ": must be at least 1");
    check_flags(f.kv_len >= 1, "--kv-len ", f.kv_len, ": must be at least 1 (the cached positions --module decode reads)");
    check_flags(f.attention.heads >= 1, "--num-heads ", f.attention.heads, ": must be at least 1");
    check_flags(f.cache_dtype == "f32" || f.cache_dtype == "bf16", "--cache-dtype '", f.cache_dtype,
              "': expected f32 or bf16");
    check_flags(sub.count("--latent-dim") == 0 || f.latent_dim >= 1, "--latent-dim ", f.latent_dim,
              ": must be at least 1 (the latent numbers each cached position keeps)");
    check_flags(sub.count("--latent-dim") == 0 || (sub.count("--cache-dtype") == 0 && sub.count("--num-kv-heads") == 0),
              "--latent-dim with --cache-dtype or --num-kv-heads: latent attention's cache is one f32 latent per "
              "position, read by every head");
    perf::DecodeBenchShape s;
    if (sub.count("--latent-dim")) s.latent_dim = f.latent_dim;
    s.batch = f.batch;
    s.attention = f.attention;
    if (s.attention.head_dim == 0) s.attention.head_dim = f.d_model / f.attention.heads;
    check_attention_flags(s.attention, bench_flag_name);
    s.kv_len = f.kv_len;
    s.dtype = f.cache_dtype == "bf16" ? kernels::CacheDtype::kBF16 : kernels::CacheDtype::kF32;
    const perf::DecodeBenchReport r = perf::run_decode_bench(s, f.iters, f.warmup, default_pool());
    std::cout << perf::report_text(r);
    if (f.json) std::cout << perf::report_json(r).dump() << "\n";
    return 0;
  }
  for (const char* flag : {"--kv-len", "--cache-dtype"})
    check_flags(sub.count(flag) == 0, flag, " is a flag of --module decode, not ", f.module);
  check_flags(sub.count("--seq-len") == 1, "--seq-len is required for --module ", f.module);
  const perf::BenchTarget target = perf::parse_bench_target(f.module);
  const bool core = target == perf::BenchTarget::kAttentionCore;
  check_flags(f.batch >= 1, "--batch ", f.batch, ": must be at least 1");
  check_flags(f.seq_len >= 1, "--seq-len ", f.seq_len, ": must be at least 1 (a benchmark of no work)");
  check_flags(f.iters >= 1, "--iters ", f.iters, ": must be at least 1");
  check_flags(f.warmup >= 0, "--warmup ", f.warmup, ": must be at least 0");
  check_flags(f.threads >= 0, "--threads ", f.threads, ": must be at least 1 (or 0: the default)");
  check_threads(f.threads);
  if (f.threads > 0) set_default_thread_count(f.threads);
  if (!f.gemm.empty()) set_gemm_backend(parse_gemm_backend(f.gemm));
  ThreadPool& pool = default_pool();
  kernels::AttentionSpec& a = f.attention;
  if (!core && !attention_module_info(f.module).multi_head) {  // --num-heads' default is not for it
    check_flags(sub.count("--num-heads") == 0 || a.heads == 1, "--num-heads ", a.heads, ": --module ", f.module,
              " has one head");
    a.heads = 1;
  }
  check_flags(a.heads >= 1, "--num-heads ", a.heads, ": must be at least 1");
  if (core) {
    check_flags(a.rope == kernels::RopeLayout::kNone, "--rope ", kernels::rope_layout_name(a.rope),
              ": RoPE rotates q and k in the mha pipeline, outside the attention kernel; time it with --module mha");
  } else {
    check_flags(f.module == "mha" || !a.has_variants(),
              "--num-kv-heads, --rope, --window, --alibi and --softcap are for --module mha and attention-core");
    check_flags(f.d_model >= 1, "--d-model ", f.d_model, ": must be at least 1");
    check_flags(f.d_model % a.heads == 0, "--d-model (", f.d_model, ") must be divisible by --num-heads (", a.heads,
              ")");
    check_flags(sub.count("--head-dim") == 0 || a.head_dim == f.d_model / a.heads,
              "--head-dim must be d_model / num_heads for --module ", f.module);
  }
  perf::AttentionBenchShape shape;
  shape.target = target;
  shape.batch = f.batch;
  shape.seq_len = f.seq_len;
  shape.d_model = f.d_model;
  shape.backward = f.backward;
  shape.attention = a;
  try {  // head_dim derived, the spec checked: its errors name the flags
    shape = perf::normalized(shape, bench_flag_name, "");
  } catch (const kernels::AttentionSpecError& e) {
    throw CLI::ValidationError(e.what());
  }
  // Sizes the flags multiply must not wrap before the harness weighs them against the machine's
  // memory: the (B, T, C) activations with Q, K, V and the output in bytes, and the weights.
  (void)checked_product({5 * 4, f.batch, f.seq_len, shape.attention.width()},
                        "the activations (--batch x --seq-len x --d-model)");
  if (!core) (void)checked_product({4 * 4, f.d_model, f.d_model}, "the weights (--d-model squared)");
  const perf::AttentionBenchReport r = perf::run_attention_bench(shape, f.iters, f.warmup, pool);

  std::cout << perf::report_text(r, f.module);
  if (f.json) std::cout << perf::report_json(r, f.module).dump() << "\n";
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand("bench", "Time qkv on random inputs: the fused attention kernels and modules, decoding over a KV cache, whole models; or measure what quantized weights change (--module accuracy)");
  sub->add_option("--module", f->module,
                  "mha (fused QKV GEMM -> fused attention -> out_proj) | causal-attention (one head, no "
                  "out_proj) | attention-core (the fused kernel alone on (B, H, T, D)) | decode (one query per "
                  "head over a KV cache of --kv-len positions, against the memory bandwidth) | ring-attention (the "
                  "fused kernel's ring across MPI ranks: mpirun -np N qkv bench ...) | gpt (the whole GPT model of --preset: "
                  "a forward, a training step with --backward, or decoding with --new-tokens) | accuracy (quantized "
                  "weights against the float ones on --text: KL divergence, top-1 agreement, perplexities) | "
                  "gated-deltanet (the gated delta rule of Qwen3.5's linear layers in chunks, --num-heads heads of "
                  "--head-dim, against the FMA peak and the token-by-token recurrence; with --new-tokens, decoding "
                  "steps on each layer's state against the read bandwidth) | cache-memory (what a "
                  "generation's cache holds: MHA, GQA and MLA as the book's estimator sizes them, or --preset's model "
                  "over --seq-len tokens)")
      ->required()
      ->check(CLI::IsMember({"mha", "causal-attention", "attention-core", "decode", "ring-attention", "gpt", "accuracy",
                             "gated-deltanet", "cache-memory"}));
  sub->add_option("--preset", f->preset, "gpt, cache-memory: the model's sizes, " + preset_list())
      ->default_val("gpt2-small");
  sub->add_option("--weights", f->weights,
                  "accuracy: a model's files, a GGUF file (llama.cpp's) or a Hugging Face folder; a "
                  "quantized file is compared with itself decoded to f32, a float model with --quantize T (or, "
                  "without it, every type). gpt: a model's files (any qkv generate reads) timed instead of --preset, "
                  "loaded as generate loads them");
  add_quantize_flag(sub, f->quantize);
  sub->add_option("--text", f->text, "accuracy: the text both models read (the first --seq-len tokens, default 1000)");
  add_number(sub, "--new-tokens", f->new_tokens,
             "gpt: decode --new-tokens steps after a --seq-len prompt, each timed (tokens/s against the read bandwidth); "
             "gated-deltanet: --new-tokens decoding steps through --num-layers layers' states");
  add_number_with_default(sub, "--batch", f->batch, "Batch size B");
  add_number(sub, "--seq-len", f->seq_len, "Tokens T (every module but decode; accuracy: the text's first T, default 1000)");
  add_number(sub, "--kv-len", f->kv_len, "decode: cached positions S the query attends to");
  add_number(sub, "--num-layers", f->layers, "cache-memory: layers L (default 48, the book's MLA estimator's); gated-deltanet --new-tokens: "
             "layers L (default 18, Qwen3.5-0.8B's linear ones)");
  add_number(sub, "--latent-dim", f->latent_dim, "cache-memory: MLA's latent numbers per token and layer (default 1024); decode: time latent attention's "
             "absorbed step over --kv-len cached latents of this size instead of a KV cache");
  sub->add_option("--cache-dtype", f->cache_dtype,
                  "decode, cache-memory: the KV cache's element type (cache-memory's default: bf16, the book's)")
      ->default_val("f32")
      ->check(CLI::IsMember({"f32", "bf16"}));
  add_number_with_default(sub, "--d-model", f->d_model, "Channels C = d_in = d_out");
  add_number_with_default(sub, "--num-heads", f->attention.heads, "Heads H (gated-deltanet: default 16)");
  add_number(sub, "--head-dim", f->attention.head_dim,
             "Head dim D (attention-core; default d_model / num_heads; gated-deltanet: Dk = Dv, default 128)");
  sub->add_flag("--backward", f->backward, "Time forward + backward (one training step of the layer)");
  sub->add_flag_function("--no-mask", [f](int64_t) { f->attention.causal = false; },
                         "No causal mask (FLOPs then count every score)");
  add_number_with_default(sub, "--dropout", f->attention.dropout,
                          "Dropout on the weights, in [0, 1) (the fused kernel's Philox mask)");
  add_number(sub, "--threads", f->threads, "Threads (default: QKV_NUM_THREADS, else the cores)");
  sub->add_option("--simd", f->simd, "The best SIMD target the kernels may use, as QKV_SIMD says it (avx2, avx3, "
                                     "avx3_dl, scalar; default: QKV_SIMD, else the CPU's best): each path measured on "
                                     "one machine, against that target's own peak")
      ->type_name("TARGET");
  add_number_with_default(sub, "--iters", f->iters, "Timed runs; the median is reported");
  add_number_with_default(sub, "--warmup", f->warmup, "Untimed runs first");
  add_number(sub, "--num-kv-heads", f->attention.kv_heads,
             "Key/value heads G dividing H (decode, mha, attention-core; default H)");
  add_number(sub, "--window", f->attention.window,
             "Sliding window w (mha, attention-core, ring-attention; FLOPs count only its pairs)");
  sub->add_flag("--alibi", f->attention.alibi, "ALiBi with the paper's slopes (mha, attention-core, ring-attention)");
  add_number(sub, "--softcap", f->attention.softcap, "Logit softcap, > 0 (mha, attention-core, ring-attention)");
  sub->add_option_function<std::string>(
         "--rope", [f](const std::string& s) { f->attention.rope = kernels::parse_rope_layout(s); },
         "RoPE on q and k (mha): none | half | interleaved")
      ->default_str("none")
      ->check(CLI::IsMember({"none", "half", "interleaved"}));
  add_dtype_flag(sub, "--dtype", [f](Dtype d) { f->attention.dtype = d; },
                 "f32 | bf16: bf16 mode (weights, activations, q, k, v in bf16, sums and softmax in fp32; mha, "
                 "causal-attention, attention-core)")
      ->default_str("f32");
  sub->add_option("--gemm", f->gemm,
                  "The projections' matrix product: qkv (its own, at this CPU's vector width) | openblas "
                  "(default: $QKV_GEMM, else qkv)")
      ->check(CLI::IsMember({"qkv", "openblas"}));
  sub->add_option("--split", f->split, "ring-attention: how the sequence is split over the ranks")
      ->default_val("contiguous")
      ->check(CLI::IsMember({"contiguous", "zigzag"}));
  sub->add_flag("--json", f->json, "Also print one JSON object as the last line");
  sub->footer("GFLOP/s count matrix-product FLOPs: 2 B T C 3C (QKV) + 2 B T C C (out_proj) + the attention's\n"
              "two products over the (i, j) pairs the causal mask leaves visible; backward: twice the projections'\n"
              "and the attention's five products. The peak is measured first with the same threads.\n"
              "decode: GB/s of the cache's keys and values read per call (B G S (D + Dv) x 4 or 2 bytes) against the\n"
              "streaming read bandwidth, measured first with the same threads.\n"
              "gpt: 2 FLOPs per product weight per token plus the attention's (a training step: 3 times that); decode:\n"
              "every product weight read once per step (4 bytes, 2 with --dtype bf16) against the read bandwidth.");
  return {sub, [f, sub]() { return run_bench(*f, *sub); }};
}

}  // namespace qkv::cli
