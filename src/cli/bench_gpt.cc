// qkv bench --module gpt --preset NAME --batch B --seq-len T [--backward | --new-tokens N]
//   [--dtype f32|bf16] [--dropout P] [--threads N] [--iters N] [--json]
//
// The whole GPT model: a forward of (B, T) tokens, a training step (--backward: forward, loss,
// backward, AdamW), or decoding (--new-tokens N: B sequences of a T-token prompt, N steps over the
// KV cache). See qkv/perf/gpt_bench.h for what is counted.
#include "bench_gpt.h"

#include <iostream>


#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
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
    std::cout << perf::report_text(r);
    if (f.json) std::cout << perf::report_json(r).dump() << "\n";
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
