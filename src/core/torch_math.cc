// PyTorch-exact element functions. See include/qkv/core/torch_math.h.
#include "qkv/core/torch_math.h"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
// SLEEF's AVX2 logf (libsleef; sleef.h declares it only when the file is compiled for AVX, which this
// one is not: only the function below, which runs on AVX2 CPUs alone, is)
extern "C" __attribute__((target("avx2,fma"))) __m256 Sleef_logf8_u10avx2(__m256 x);
#endif

namespace qkv {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void log_avx2(const float* x, float* y, int64_t n) {
  float in[8], out[8];
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = n - i < 8 ? n - i : 8;
    for (int64_t j = 0; j < 8; ++j) in[j] = j < m ? x[i + j] : 1.0f;
    _mm256_storeu_ps(out, Sleef_logf8_u10avx2(_mm256_loadu_ps(in)));
    for (int64_t j = 0; j < m; ++j) y[i + j] = out[j];
  }
}

bool has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

}  // namespace

void torch_log(const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (has_avx2_fma()) {
    log_avx2(x, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
}

}  // namespace qkv
