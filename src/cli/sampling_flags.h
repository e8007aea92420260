// The flags that pick each new token, declared once for `qkv generate` and `qkv explore
// --generate`: --temperature and --top-k (the seed is each command's own --seed, which with
// --model also draws the preset's weights).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>

#include "qkv/models/generation.h"

namespace qkv::cli {

struct SamplingFlags {
  double temperature = SamplingOptions{}.temperature;
  std::optional<int64_t> top_k;
};

void add_sampling_flags(CLI::App* sub, SamplingFlags& f);

// The flags into `options`; --top-k beyond the model's vocabulary is a usage error naming it.
void apply_sampling_flags(const SamplingFlags& f, int64_t vocab, SamplingOptions& options);

}  // namespace qkv::cli
