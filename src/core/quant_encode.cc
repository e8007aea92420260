// Floats into ggml's blocks (the writer's side of core/quant_blocks.h). The formats define only how a
// block is read; how its numbers are chosen is each writer's: these are qkv's, each a scale from the
// block's largest magnitude and the nearest integer per value, round-tripped through dequantize() in
// tests/core/quant_blocks_test.cc.
#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/quant_blocks.h"

namespace qkv {

uint16_t float_to_f16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: infinity
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half, man * 2^-24, to nearest even
    const float magnitude = std::bit_cast<float>(abs);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f)));
  }
  // Normal: drop 13 mantissa bits, to nearest even (a carry into the exponent is right).
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
float stored(float d) { return f16_to_float(float_to_f16(d)); }  // the scale as the block holds it

// Q8_0: d = max|x| / 127, q = round(x / d).
void q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put16(b, float_to_f16(d));
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[i] * id)));
}

// Q4_0: the value of largest magnitude is -8 d; q = round(x / d) + 8 in 0..15.
void q4_0(const float* x, uint8_t* b) {
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  const float d = max / -8.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put16(b, float_to_f16(d));
  for (int j = 0; j < 16; ++j) {
    const int lo = std::clamp(static_cast<int>(std::lround(x[j] * id)) + 8, 0, 15);
    const int hi = std::clamp(static_cast<int>(std::lround(x[j + 16] * id)) + 8, 0, 15);
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Q4_K: per sub-block of 32, x ~ s q - m with q in 0..15 (m = -min(x, 0), s = (max - min) / 15);
// the eight s and m as 6-bit multiples of the super-block's d and dmin.
void q4_k(const float* x, uint8_t* b) {
  float scale[8], min[8], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float lo = 0, hi = 0;
    for (int i = 0; i < 32; ++i) lo = std::min(lo, x[32 * j + i]), hi = std::max(hi, x[32 * j + i]);
    scale[j] = (hi - lo) / 15.0f;
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  const float d = stored(max_scale / 63.0f), dmin = stored(max_min / 63.0f);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? std::clamp(static_cast<int>(std::lround(scale[j] / d)), 0, 63) : 0;
    mn[j] = dmin > 0 ? std::clamp(static_cast<int>(std::lround(min[j] / dmin)), 0, 63) : 0;
  }
  put16(b, float_to_f16(d));
  put16(b + 2, float_to_f16(dmin));
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  uint8_t q[256];
  for (int j = 0; j < 8; ++j) {
    const float step = d * static_cast<float>(sc[j]), offset = dmin * static_cast<float>(mn[j]);
    for (int i = 0; i < 32; ++i) {
      const float v = step > 0 ? (x[32 * j + i] + offset) / step : 0.0f;
      q[32 * j + i] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::lround(v)), 0, 15));
    }
  }
  uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

// Q6_K: per 16 values, x ~ d sc (q - 32), q - 32 in -32..31 (the sub-block's scale max|x| / 31),
// the sixteen sc as int8 multiples of d = max scale / 127.
void q6_k(const float* x, uint8_t* b) {
  float scale[16], max_scale = 0;
  for (int j = 0; j < 16; ++j) {
    float amax = 0;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * j + i]));
    scale[j] = amax / 31.0f;
    max_scale = std::max(max_scale, scale[j]);
  }
  const float d = stored(max_scale / 127.0f);
  uint8_t q[256];
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int j = 0; j < 16; ++j) {
    const int s = d > 0 ? std::clamp(static_cast<int>(std::lround(scale[j] / d)), 0, 127) : 0;
    sc[j] = static_cast<int8_t>(s);
    const float step = d * static_cast<float>(s);
    for (int i = 0; i < 16; ++i) {
      const int v = step > 0 ? static_cast<int>(std::lround(x[16 * j + i] / step)) : 0;
      q[16 * j + i] = static_cast<uint8_t>(std::clamp(v, -32, 31) + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = q + 128 * n + l;
      ql[64 * n + l] = static_cast<uint8_t>((v[0] & 15) | ((v[64] & 15) << 4));
      ql[64 * n + l + 32] = static_cast<uint8_t>((v[32] & 15) | ((v[96] & 15) << 4));
      qh[32 * n + l] = static_cast<uint8_t>((v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
    }
  put16(b + 208, float_to_f16(d));
}

}  // namespace

const std::vector<std::string>& writable_quant_types() {
  static const std::vector<std::string> names = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"};
  return names;
}

namespace {
// The first value of x[0, n) that is not finite, or n.
int64_t first_not_finite(const float* x, int64_t n) {
  int64_t i = 0;
  while (i < n && std::isfinite(x[i])) ++i;
  return i;
}

// quantize's work on values already checked finite
void write_blocks(const QuantType& t, const float* x, int64_t n, uint8_t* out) {
  QKV_CHECK(n % t.block == 0, n, " values are not whole blocks of ", t.block, " (", t.name, ")");
  const std::string name = t.name;
  const int64_t blocks = n / t.block;
  if (name == "F32") {
    std::memcpy(out, x, static_cast<size_t>(n) * 4);
  } else if (name == "F16") {
    for (int64_t i = 0; i < n; ++i) put16(out + 2 * i, float_to_f16(x[i]));
  } else if (name == "BF16") {
    for (int64_t i = 0; i < n; ++i) put16(out + 2 * i, float_to_bf16(x[i]));
  } else {
    void (*block)(const float*, uint8_t*) = name == "Q8_0" ? q8_0 : name == "Q4_0" ? q4_0 : name == "Q4_K" ? q4_k
                                            : name == "Q6_K" ? q6_k : nullptr;
    QKV_CHECK(block != nullptr, "qkv does not write ", name, " blocks; it writes F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K");
    for (int64_t i = 0; i < blocks; ++i) block(x + i * t.block, out + i * t.block_bytes);
  }
}

}  // namespace

void quantize(const QuantType& t, const float* x, int64_t n, uint8_t* out, const std::string& what) {
  const int64_t bad = first_not_finite(x, n);
  QKV_CHECK(bad == n, what, " holds ", x[bad < n ? bad : 0], " at value ", bad, "; only finite values can be written as ",
            t.name);
  write_blocks(t, x, n, out);
}

const std::vector<std::string>& product_quant_names() {
  static const std::vector<std::string> names = {"q8_0", "q6_k", "q4_k", "q4_0"};
  return names;
}

const QuantType& product_quant_type(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::vector<std::string>& names = product_quant_names();
  if (std::find(names.begin(), names.end(), lower) == names.end()) {
    std::string expected;
    for (size_t i = 0; i < names.size(); ++i)
      expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    fail("quantize: ", name, " is not a type the integer products read; expected ", expected);
  }
  return quant_type_named(name);
}

QuantMatrix quantize_matrix(const QuantType& t, int64_t rows, int64_t cols,
                            const std::function<void(int64_t, float*)>& row, const std::string& what) {
  const int64_t row_bytes = quant_bytes(t, cols, "a row to quantize");
  QuantMatrix q;
  q.type = &t;
  q.blocks.resize(static_cast<size_t>(rows * row_bytes));
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    row(r, x.data());
    const int64_t bad = first_not_finite(x.data(), cols);
    QKV_CHECK(bad == cols, what, " holds ", x[static_cast<size_t>(bad < cols ? bad : 0)], " at row ", r, ", column ", bad,
              "; only finite values can be quantized (to ", t.name, ")");
    write_blocks(t, x.data(), cols, q.blocks.data() + r * row_bytes);
  }
  return q;
}

const QuantType& fitting_quant_type(const QuantType& want, int64_t cols) {
  if (cols % want.block == 0) return want;
  const QuantType& q8 = quant_type_named("Q8_0");
  return cols % q8.block == 0 ? q8 : quant_type_named("F16");
}

}  // namespace qkv
