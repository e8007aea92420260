// Highway's target selection, behind a plain interface. See include/qkv/kernels/simd.h.
#include "qkv/kernels/simd.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "hwy/targets.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/quant_matvec.h"
#include "qkv/core/simd_targets.h"

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

void force_simd_target(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);
  refresh_supported_simd_targets();  // the core's copy of the mask (qkv/core/simd_targets.h)
}

std::string apply_simd_environment() {
  const char* v = std::getenv("QKV_SIMD");
  return apply_simd_target(v == nullptr ? "" : v, "QKV_SIMD");
}

std::string apply_simd_target(const std::string& v, const std::string& what) {
  force_simd_target(0);  // the CPU's own targets, whatever was capped before
  if (v.empty()) return "";
  std::string want = v;
  std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::toupper(c); });
  if (want == "AVX512") want = "AVX3";
  // Every target some kernel was built for that this CPU runs (quant_matvec's list adds AVX3_DL).
  int64_t runs = 0;
  for (int64_t t : available_simd_targets()) runs |= t;
  for (int64_t t : quant_matvec_simd_targets()) runs |= t;
  std::string names;
  for (int64_t bits = runs; bits != 0; bits &= bits - 1) {
    const int64_t t = bits & -bits;
    const std::string name = simd_target_name(t);
    if (name == want) {
      // This target and every worse one the CPU runs (x86's worse targets have higher bits): each
      // kernel then picks its best among them, as it would on a CPU whose best is this one.
      force_simd_target(hwy::SupportedTargets() & ~(t - 1));
      return name;
    }
    names += (names.empty() ? "" : ", ") + name;
  }
  fail(what, " is ", excerpt(v), "; this CPU and build run ", names, " (or none: the best)");
}

}  // namespace qkv::kernels
