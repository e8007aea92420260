// qkv/kernels/rope.h - rotary position embedding (RoPE, Su et al. 2021) on strided (B, H, N, D)
// heads, in place.
//
// Legend: B batch, H heads, N positions, D head dim, R <= D the rotated elements of a row (even;
// R = D but for partial rotary: Qwen3.5 rotates D / 4), i = 0 .. R/2 - 1.
//
//   theta[n, i] = (offset + n) * base^(-2i / R)           (in double, then cos and sin as float;
//                                                          Llama 3 scales the frequencies: RopeScaling)
//   a pair (x_a, x_b) of a row becomes (x_a cos - x_b sin,  x_b cos + x_a sin)
//     kHalf         pairs element i with i + R/2 (Hugging Face's Llama and the book's Llama
//                   bonus code: x * cos + rotate_half(x) * sin)
//     kInterleaved  pairs element 2i with 2i + 1 (GPT-J, Meta's original Llama)
//   elements R .. D - 1 pass unchanged
//
// The rotation R is orthogonal, so the backward of y = R x is dx = R^T dy = the rotation by
// -theta (rope_rotate with inverse = true). O(N R) work; the table is (N, R/2) cos and sin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/kernels/attention.h"

namespace qkv::kernels {

enum class RopeLayout { kNone, kHalf, kInterleaved };
// "none" | "half" | "interleaved"; parse throws qkv::Error naming the text and the known names.
RopeLayout parse_rope_layout(const std::string& name);
const char* rope_layout_name(RopeLayout layout);

// Llama 3's frequency scaling (config.json's rope_scaling, rope_type "llama3"; Llama 3.1 onwards):
// with f_i = base^(-2i / D), its wavelength w = 2 pi / f_i, L = original_max_positions,
//   w > L / low_freq_factor  (long waves)   f_i / factor
//   w < L / high_freq_factor (short waves)  f_i
//   between                                 (1 - s) f_i / factor + s f_i,
//                                           s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor)
struct RopeScaling {
  double factor = 0.0;  // > 0 turns it on (Llama 3.2: 32); 0: none
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // low < high
  int64_t original_max_positions = 8192;
  bool on() const { return factor > 0.0; }
  bool operator==(const RopeScaling&) const = default;
};
// The frequency of pair i of D with `scaling` (checked: factor, the two factors and L in range).
double rope_frequency(int64_t i, int64_t head_dim, double base, const RopeScaling& scaling = {});

struct RopeOptions {
  RopeLayout layout = RopeLayout::kNone;  // kNone: no rotation
  double base = 10000.0;                  // > 0; Llama 2's 10,000
  int64_t position_offset = 0;            // >= 0: row n is at position offset + n (decoding)
  RopeScaling scaling = {};               // Llama 3's, or none
};

// cos and sin of theta[n, i] for positions offset .. offset + N - 1: (N, R/2) each, row-major.
class RopeTable {
 public:
  RopeTable(int64_t positions, int64_t rotary_dim, double base, int64_t position_offset = 0,
            const RopeScaling& scaling = {});
  int64_t positions() const { return positions_; }
  int64_t rotary_dim() const { return dim_; }  // R
  const float* cos_row(int64_t n) const { return cos_.data() + n * (dim_ / 2); }  // (R/2)
  const float* sin_row(int64_t n) const { return sin_.data() + n * (dim_ / 2); }  // (R/2)
  // Whether this is the table those arguments build (a decoding step's layers share one).
  bool is(int64_t positions, int64_t rotary_dim, double base, int64_t position_offset,
          const RopeScaling& scaling) const {
    return positions == positions_ && rotary_dim == dim_ && base == base_ && position_offset == offset_ &&
           scaling == scaling_;
  }
  size_t bytes() const { return (cos_.size() + sin_.size()) * sizeof(float); }

 private:
  int64_t positions_, dim_;
  double base_;
  int64_t offset_;
  RopeScaling scaling_;
  std::vector<float> cos_, sin_;  // (N, D/2)
};

// x (B, H, N, D) <- R x (or R^T x with inverse), row n at the table's position n: each row's first
// R elements (the table's), D >= R. The table must cover N positions. Runs over (b, h) pairs on `pool` (null: default_pool()).
void rope_rotate(MutableHeads x, const RopeTable& table, RopeLayout layout, bool inverse = false,
                 ThreadPool* pool = nullptr);
// The same, building the table from `options` over all of D (a no-op for RopeLayout::kNone). D must be even.
void rope_rotate(MutableHeads x, const RopeOptions& options, bool inverse = false, ThreadPool* pool = nullptr);

}  // namespace qkv::kernels
