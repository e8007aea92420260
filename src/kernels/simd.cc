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

int simd_target_vector_bits(int64_t target) {
  const std::string name = simd_target_name(target);
  if (name.rfind("AVX3", 0) == 0) return 512;  // AVX3, AVX3_DL, AVX3_ZEN4, ...
  if (name == "AVX2") return 256;
  return 128;
}

int simd_vector_bits() {
  const std::vector<int64_t> targets = available_simd_targets();
  return targets.empty() ? 128 : simd_target_vector_bits(targets.front());
}

void force_simd_target(int64_t target) { hwy::SetSupportedTargetsForTest(target); }

}  // namespace qkv::kernels
