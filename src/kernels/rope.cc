// Rotary position embedding. See include/qkv/kernels/rope.h.
#include "qkv/kernels/rope.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

namespace qkv::kernels {

RopeLayout parse_rope_layout(const std::string& name) {
  if (name == "none") return RopeLayout::kNone;
  if (name == "half") return RopeLayout::kHalf;
  if (name == "interleaved") return RopeLayout::kInterleaved;
  fail("unknown RoPE layout ", excerpt(name), "; expected one of: none, half, interleaved");
}

const char* rope_layout_name(RopeLayout layout) {
  switch (layout) {
    case RopeLayout::kNone: return "none";
    case RopeLayout::kHalf: return "half";
    case RopeLayout::kInterleaved: return "interleaved";
  }
  return "?";
}

double rope_frequency(int64_t i, int64_t head_dim, double base, const RopeScaling& s) {
  const double f = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  if (!s.on()) return f;
  QKV_CHECK(std::isfinite(s.factor) && s.factor >= 1.0, "RoPE scaling: factor (", s.factor,
            ") must be at least 1 (0: no scaling)");
  QKV_CHECK(std::isfinite(s.low_freq_factor) && std::isfinite(s.high_freq_factor) && s.low_freq_factor > 0.0 &&
                s.low_freq_factor < s.high_freq_factor,
            "RoPE scaling: low_freq_factor (", s.low_freq_factor, ") must be positive and below high_freq_factor (",
            s.high_freq_factor, ")");
  QKV_CHECK(s.original_max_positions > 0, "RoPE scaling: original_max_position_embeddings (",
            s.original_max_positions, ") must be positive");
  const double L = static_cast<double>(s.original_max_positions), wavelength = 2.0 * M_PI / f;
  if (wavelength > L / s.low_freq_factor) return f / s.factor;
  if (wavelength < L / s.high_freq_factor) return f;
  const double smooth = (L / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

RopeTable::RopeTable(int64_t positions, int64_t rotary_dim, double base, int64_t position_offset,
                     const RopeScaling& scaling)
    : positions_(positions), dim_(rotary_dim), base_(base), offset_(position_offset), scaling_(scaling) {
  QKV_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, "RoPE: the rotated dims R (", rotary_dim,
            ") must be even (RoPE rotates pairs of elements)");
  QKV_CHECK(std::isfinite(base) && base > 0.0, "RoPE: the base must be positive, got ", base);
  QKV_CHECK(positions >= 0 && position_offset >= 0, "RoPE: positions (", positions, ") and the position offset (",
            position_offset, ") must not be negative");
  const int64_t half = rotary_dim / 2;
  cos_.resize(static_cast<size_t>(positions * half));
  sin_.resize(static_cast<size_t>(positions * half));
  for (int64_t i = 0; i < half; ++i) {
    const double freq = rope_frequency(i, rotary_dim, base, scaling);
    for (int64_t n = 0; n < positions; ++n) {
      const double theta = static_cast<double>(position_offset + n) * freq;
      cos_[static_cast<size_t>(n * half + i)] = static_cast<float>(std::cos(theta));
      sin_[static_cast<size_t>(n * half + i)] = static_cast<float>(std::sin(theta));
    }
  }
}

void rope_rotate(MutableHeads x, const RopeTable& table, RopeLayout layout, bool inverse, ThreadPool* pool) {
  if (layout == RopeLayout::kNone) return;
  QKV_CHECK(x.dim >= table.rotary_dim() && x.tokens <= table.positions(), "RoPE: heads (", x.batch, ", ", x.heads,
            ", ", x.tokens, ", ", x.dim, ") do not fit a table of ", table.positions(), " positions and R = ",
            table.rotary_dim());
  const int64_t half = table.rotary_dim() / 2;
  // the pair (a, b) of element i: (i, i + R/2) or (2i, 2i + 1), in strides of d
  const int64_t a_step = layout == RopeLayout::kHalf ? 1 : 2;
  const int64_t b_offset = layout == RopeLayout::kHalf ? half : 1;
  const float sign = inverse ? -1.0f : 1.0f;  // R^T: the rotation by -theta
  auto rotate_head = [&](int64_t task, int) {
    const int64_t b = task / x.heads, h = task % x.heads;
    for (int64_t n = 0; n < x.tokens; ++n) {
      float* row = x.row(b, h, n);
      const float* c = table.cos_row(n);
      const float* s = table.sin_row(n);
      for (int64_t i = 0; i < half; ++i) {
        float& xa = row[i * a_step * x.stride_d];
        float& xb = row[(i * a_step + b_offset) * x.stride_d];
        const float a = xa, bv = xb, sn = sign * s[i];
        xa = a * c[i] - bv * sn;
        xb = bv * c[i] + a * sn;
      }
    }
  };
  // A decoding step's few rows are rotated on this thread: waking the pool would cost more.
  const int64_t heads = x.batch * x.heads;
  if (heads * x.tokens * table.rotary_dim() < 65536) {
    for (int64_t t = 0; t < heads; ++t) rotate_head(t, 0);
    return;
  }
  (pool ? *pool : default_pool()).parallel_for(heads, rotate_head);
}

void rope_rotate(MutableHeads x, const RopeOptions& options, bool inverse, ThreadPool* pool) {
  if (options.layout == RopeLayout::kNone) return;
  const RopeTable table(x.tokens, x.dim, options.base, options.position_offset, options.scaling);
  rope_rotate(x, table, options.layout, inverse, pool);
}

}  // namespace qkv::kernels
