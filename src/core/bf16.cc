// bfloat16 conversions and the CPU's bf16 dot product. See include/qkv/core/bf16.h.
#include "qkv/core/bf16.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "hwy/targets.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/simd_targets.h"

namespace qkv {

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exactly representable as a (normal) float.
    float magnitude = std::ldexp(static_cast<float>(man), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf / NaN
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

const char* dtype_name(Dtype dtype) { return dtype == Dtype::kBF16 ? "bf16" : "f32"; }

Dtype parse_dtype(const std::string& name) {
  if (name == "f32") return Dtype::kF32;
  if (name == "bf16") return Dtype::kBF16;
  fail("unknown dtype '", name, "': expected f32 or bf16");
}

// floats_to_bf16 is bf16_convert.cc's (Highway, the CPU's vector width).

void bf16_to_floats(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

bool cpu_has_bf16_dot() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's check includes the OS's XSAVE support of the AVX-512 state.
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

namespace {
// Whether vdpbf16ps outruns widening to float32 and FMAs on this CPU, by vendor (a fixed rule, not a
// timing: the choice changes the order of float32 additions, and a run's bits must not depend on
// how busy the machine was). AMD's Zen 4 and Zen 5 issue it as fast as an FMA, so it does twice
// the work; Intel's Xeons (Cooper Lake to Emerald Rapids) issue it on one port, and measured there
// (an Emerald Rapids-class Xeon, 2 cores) its peak is half the FMAs': 170 against 334 GFLOP/s, a
// Qwen3-0.6B bf16 forward of 512 tokens 1.4-2x slower than widened.
bool bf16_dot_pays() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}

std::atomic<bool>& allowed_flag() {
  static std::atomic<bool> allowed{[] {
    const char* v = std::getenv("QKV_BF16_DOT");
    if (v == nullptr) return bf16_dot_pays();
    if (std::strcmp(v, "on") == 0) return true;
    if (std::strcmp(v, "off") == 0) return false;
    fail("QKV_BF16_DOT: ", excerpt(v), " is not on or off");
  }()};
  return allowed;
}

// The kernels' SIMD target is an AVX-512 one: the dot paths are AVX-512 code, kept off when
// $QKV_SIMD (kernels/simd.h) or a test caps the kernels below it.
bool avx512_target() {
#if defined(__x86_64__)
  return (supported_simd_targets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0;
#else
  return false;
#endif
}

}  // namespace

bool bf16_dot_allowed() {
  return cpu_has_bf16_dot() && allowed_flag().load(std::memory_order_relaxed) && avx512_target();
}

bool set_bf16_dot_allowed(bool allowed) { return allowed_flag().exchange(allowed); }

}  // namespace qkv
