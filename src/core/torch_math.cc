// PyTorch-exact element functions. See include/qkv/core/torch_math.h.
#include "qkv/core/torch_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
// SLEEF's AVX2 logf and expf (libsleef; sleef.h declares them only when the file is compiled for
// AVX, which this one is not: only the functions below, which run on AVX2 CPUs alone, are)
extern "C" __attribute__((target("avx2,fma"))) __m256 Sleef_logf8_u10avx2(__m256 x);
extern "C" __attribute__((target("avx2,fma"))) __m256 Sleef_expf8_u10avx2(__m256 x);
#endif

namespace qkv {
namespace {

#if defined(__x86_64__)
// SLEEF's expf_u10 (exp) or logf_u10 on x[0, n) into y: whole groups of 8 as they are, the last
// partial group through a padded copy (padded with a value both take without trouble).
__attribute__((target("avx2,fma"))) inline __m256 sleef8(bool exp, __m256 v) {
  return exp ? Sleef_expf8_u10avx2(v) : Sleef_logf8_u10avx2(v);
}
__attribute__((target("avx2,fma"))) void sleef_avx2(bool exp, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, sleef8(exp, _mm256_loadu_ps(x + i)));
  if (i == n) return;
  float in[8], out[8];
  for (int64_t j = 0; j < 8; ++j) in[j] = i + j < n ? x[i + j] : 1.0f;
  _mm256_storeu_ps(out, sleef8(exp, _mm256_loadu_ps(in)));
  for (int64_t j = 0; i + j < n; ++j) y[i + j] = out[j];
}

bool has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

// exp (exp = true) or log on x[0, n) into y, as torch.exp / torch.log compute them on this CPU
void elementwise(bool exp, const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (has_avx2_fma()) {
    sleef_avx2(exp, x, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = exp ? std::exp(x[i]) : std::log(x[i]);
}

}  // namespace

void torch_log(const float* x, float* y, int64_t n) { elementwise(false, x, y, n); }
void torch_exp(const float* x, float* y, int64_t n) { elementwise(true, x, y, n); }

void torch_softmax(float* x, int64_t n) {
  // the largest value: eight running maxima (any order gives the same value), NaN kept
  float mx[8];
  std::fill(mx, mx + 8, x[0]);
  bool nan = false;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      nan |= x[i + l] != x[i + l];
      mx[l] = x[i + l] > mx[l] ? x[i + l] : mx[l];
    }
  for (; i < n; ++i) {
    nan |= x[i] != x[i];
    mx[0] = x[i] > mx[0] ? x[i] : mx[0];
  }
  float m = mx[0];
  for (int l = 1; l < 8; ++l) m = mx[l] > m ? mx[l] : m;
  if (nan || std::isinf(m)) {  // exp(x - m) is NaN somewhere: every weight NaN, as torch.softmax's
    std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  for (i = 0; i < n; ++i) x[i] -= m;
  torch_exp(x, x, n);
  float s = 0.0f;
  if (n < 8) {
    s = x[0];
    for (i = 1; i < n; ++i) s += x[i];
  } else {
    float acc[8];
    std::copy(x, x + 8, acc);
    for (i = 8; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; ++l) acc[l] += x[i + l];
    for (int l = 0; i + l < n; ++l) acc[l] += x[i + l];
    s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  }
  const float inv = 1.0f / s;
  for (i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace qkv
