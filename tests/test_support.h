// Small helpers the GoogleTest suites share.
#pragma once

#include <stdlib.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/ops.h"
#include "qkv/core/quant_matvec.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/simd.h"

namespace qkv {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace qkv

namespace qkv::testing_support {

// v's 8 bytes, least significant first (the files' little-endian integers).
inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// The floats' bytes as a little-endian file stores them.
inline std::string f32_bytes(const std::vector<float>& values) {
  std::string s;
  for (float f : values) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  return s;
}

// n draws of N(0, 1) from rng.
inline std::vector<float> normal_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// The message of the qkv::Error that f throws, or "(no error)".
// A fresh directory under the system's temporary one ("<prefix>XXXXXX"); the caller removes it.
inline std::string temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// max|a - b| / max(1, max|b|): a tensor's distance from the one it should equal, relative to that
// one's scale (and absolute below 1). Shapes must match.
inline double relative_error(const Tensor& a, const Tensor& b) {
  QKV_CHECK(a.shape() == b.shape(), "relative_error: shapes ", a.describe(), " and ", b.describe(), " differ");
  double scale = 1.0;
  const Tensor bc = b.contiguous();
  for (int64_t i = 0; i < bc.numel(); ++i) scale = std::max(scale, static_cast<double>(std::abs(bc.data()[i])));
  return max_abs_diff(a, b) / scale;
}

// The fused attention tests' options for a case of T queries and head dim D: scale 1 / sqrt(D),
// the mask (additive or boolean: values with row stride mask_stride), dropout p seeded by T.
inline kernels::AttentionOptions case_attention_options(int64_t T, int64_t D, kernels::MaskKind mask,
                                                        const float* mask_values, int64_t mask_stride, float dropout,
                                                        ThreadPool* pool) {
  kernels::AttentionOptions o;
  o.scale = 1.0f / std::sqrt(static_cast<float>(D));
  if (mask == kernels::MaskKind::kCausal) o.mask = kernels::AttentionMask::causal();
  if (mask == kernels::MaskKind::kAdditive) o.mask = kernels::AttentionMask::additive(mask_values, mask_stride);
  if (mask == kernels::MaskKind::kBlocked) o.mask = kernels::AttentionMask::blocked(mask_values, mask_stride);
  o.dropout_p = dropout;
  o.dropout_seed = 0xfeedbeef12345ULL + static_cast<uint64_t>(T);
  o.pool = pool;
  return o;
}

// The limits in force when it was made, put back when it goes out of scope; with an argument,
// those limits are set for the scope.
class ScopedLimits {
 public:
  ScopedLimits() : saved_(limits()) {}
  explicit ScopedLimits(const Limits& l) : saved_(limits()) { set_limits(l); }
  ~ScopedLimits() { set_limits(saved_); }
  ScopedLimits(const ScopedLimits&) = delete;
  ScopedLimits& operator=(const ScopedLimits&) = delete;

 private:
  Limits saved_;
};

// fn(target name) once on every SIMD target the quantized products were compiled for that this
// CPU runs, each forced in turn (then the CPU's best again).
template <typename Fn>
void for_each_quant_target(Fn&& fn) {
  const std::vector<int64_t> targets = quant_matvec_simd_targets();
  if (targets.empty()) throw std::runtime_error("no SIMD target for the quantized products");
  for (int64_t target : targets) {
    kernels::force_simd_target(target);
    fn(kernels::simd_target_name(target));
  }
  kernels::force_simd_target(0);
}

}  // namespace qkv::testing_support
