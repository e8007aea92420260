// perf/counter_hash.h (private) - the benchmarks' random inputs: a value per (seed, index) from a
// counter hash (SplitMix64's finaliser), so a buffer fills in any order or in parallel, the same
// numbers every run.
#pragma once

#include <cstdint>

namespace qkv::perf {

// Uniform in [-1, 1): the top 24 bits of the hash of seed + i * the golden ratio.
inline float counter_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + i * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace qkv::perf
