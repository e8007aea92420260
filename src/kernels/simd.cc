// Highway's target selection, behind a plain interface. See include/qkv/kernels/simd.h.
#include "qkv/kernels/simd.h"

#include "hwy/targets.h"

namespace qkv::kernels {

std::vector<int64_t> available_simd_targets() { return hwy::SupportedAndGeneratedTargets(); }

std::string simd_target() {
  const std::vector<int64_t> targets = available_simd_targets();
  return targets.empty() ? "none" : hwy::TargetName(targets.front());
}

std::string simd_target_name(int64_t target) { return hwy::TargetName(target); }

void force_simd_target(int64_t target) { hwy::SetSupportedTargetsForTest(target); }

}  // namespace qkv::kernels
