// See sampling_flags.h.
#include "sampling_flags.h"

#include "flags.h"

namespace qkv::cli {

void add_sampling_flags(CLI::App* sub, SamplingFlags& f) {
  add_number_with_default(sub, "--temperature", f.temperature,
                          "Softmax temperature; 0 (or one so small that logits / T overflows) picks the most likely token",
                          non_negative<double>());
  add_number(sub, "--top-k", f.top_k, "Sample only among the k most likely tokens, k in [1, vocabulary] (default: all)",
             positive<int64_t>());
}

void apply_sampling_flags(const SamplingFlags& f, int64_t vocab, SamplingOptions& options) {
  options.temperature = f.temperature;
  if (f.top_k) {
    if (*f.top_k > vocab) bad_flag("--top-k", *f.top_k, " is not in [1, ", vocab, "] (the model's vocabulary)");
    options.top_k = *f.top_k;
  }
}

}  // namespace qkv::cli
