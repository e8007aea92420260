// qkv/core/bf16.h - bfloat16 values (the top 16 bits of a float32, stored as uint16_t bits) and
// whether this CPU multiplies them natively.
//
//   uint16_t b = float_to_bf16(x);     round to nearest even; a NaN stays a quiet NaN; +-inf exact
//   float y = bf16_to_float(b);        exact (bf16 is a float32 with a 7-bit mantissa)
//   floats_to_bf16(x, b, n);           the same, n values at a time
//
// bf16 mode: weights, activations and the K/V operands in bf16, every product
// accumulated in float32. The kernels use AVX512_BF16's dot product (vdpbf16ps: two bf16 products
// added into each float32 lane, twice the float32 FMA's work per instruction) where the CPU has it
// and bf16_dot_allowed() says so (by default where it is faster), and otherwise widen bf16 to float32 (exact) and use FMAs: the
// same results up to the order of float32 additions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace qkv {

// What a computation multiplies in: float32, or bf16 mode (operands bf16, sums float32).
enum class Dtype { kF32, kBF16 };
const char* dtype_name(Dtype dtype);  // "f32" | "bf16"
// "f32" or "bf16"; anything else: qkv::Error "unknown dtype 'x': expected f32 or bf16".
Dtype parse_dtype(const std::string& name);

inline uint16_t float_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t x) {
  const uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE 754 binary16 (a safetensors F16, a GGUF F16 tensor or a quantized block's scale) to float32:
// exact for every value, subnormals, infinities and NaNs included.
float f16_to_float(uint16_t bits);
// An IEEE half of x, rounded to nearest even (beyond 65504: infinity; NaN stays NaN).
uint16_t float_to_f16(float x);

// n values; src and dst may not overlap.
void floats_to_bf16(const float* src, uint16_t* dst, size_t n);
void bf16_to_floats(const uint16_t* src, float* dst, size_t n);

// Whether the CPU has AVX512_BF16 (cpuid leaf 7, subleaf 1, EAX bit 5) and the OS saves the
// AVX-512 registers; read once.
bool cpu_has_bf16_dot();
// cpu_has_bf16_dot() where the instruction pays: by default on AMD's CPUs only (Intel's Xeons run
// it at half the FMAs' rate, so widening is faster there; src/core/bf16.cc). QKV_BF16_DOT=on or
// off in the environment, or set_bf16_dot_allowed(), overrides (tests and benchmarks force either
// path this way); any other value is a qkv::Error at the first call.
bool bf16_dot_allowed();
// Returns the previous setting. Process-wide; not for use while kernels run.
bool set_bf16_dot_allowed(bool allowed);

}  // namespace qkv
