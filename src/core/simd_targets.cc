// The SIMD targets, read once. See include/qkv/core/simd_targets.h.
#include "qkv/core/simd_targets.h"

#include <atomic>

#include "hwy/targets.h"

namespace qkv {

namespace {
std::atomic<int64_t>& cached() {
  static std::atomic<int64_t> targets{hwy::SupportedTargets()};
  return targets;
}
}  // namespace

int64_t supported_simd_targets() { return cached().load(std::memory_order_relaxed); }

void refresh_supported_simd_targets() { cached().store(hwy::SupportedTargets(), std::memory_order_relaxed); }

}  // namespace qkv
