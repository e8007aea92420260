// qkv/core/generator.cc - MT19937 and PyTorch 1.13's CPU sampling kernels (see the header for
// the exact arithmetic of each path).
#include "qkv/core/generator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "qkv/core/error.h"

namespace qkv {

namespace {

constexpr int kN = Generator::kStateWords;
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpper = 0x80000000u;
constexpr uint32_t kLower = 0x7fffffffu;
constexpr double kPi = 3.14159265358979323846;

constexpr char kMagic[4] = {'Q', 'R', 'N', 'G'};
constexpr uint32_t kLayoutVersion = 1;

// The float loops below call std::fmaf dozens of times per element. fmaf's result is defined
// exactly (one rounding), so any implementation gives the same bits; on x86 without the FMA
// extension in the baseline it is a call into libm per use, so the loops are also compiled for
// x86-64-v3 (FMA, AVX2), where it is one instruction, and the loader picks the clone.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QKV_FMA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define QKV_FMA_CLONES
#endif

inline float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
inline uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- the float math of PyTorch's AVX2 normal_fill (avx_mathfun.h), one lane at a time -------
// Each fmaf below is a multiply-add that GCC contracted in the AVX2 build; each separate
// multiply and add is one that it did not (the result feeds a multiply, or is an explicit step).

// Natural log, Cephes single-precision polynomial (log256_ps).
inline float lane_log(float x) {
  const bool invalid = x <= 0.0f;  // ordered compare: NaN is not "invalid" here
  const float min_normal = std::numeric_limits<float>::min();
  x = x > min_normal ? x : min_normal;  // max_ps(x, min_normal): NaN -> min_normal
  uint32_t bits = to_bits(x);
  const int32_t exponent = static_cast<int32_t>(bits >> 23) - 0x7f;
  bits = (bits & ~0x7f800000u) | to_bits(0.5f);  // mantissa scaled into [0.5, 1)
  const float m = from_bits(bits);
  float e = static_cast<float>(exponent) + 1.0f;
  const bool below = m < 0.707106781186547524f;  // sqrt(1/2)
  float t = m - 1.0f;
  if (below) {
    e = e - 1.0f;
    t = t + m;  // 2m - 1, exact
  }
  const float z = t * t;
  static constexpr float kP[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                                  -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                                  2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  float y = kP[0];
  for (int k = 1; k < 9; ++k) y = std::fmaf(y, t, kP[k]);
  y = y * t;
  const float q1_term = e * -2.12194440e-4f;
  y = std::fmaf(y, z, q1_term);
  y = y - z * 0.5f;  // z * 0.5 is exact: fused or not makes no difference
  float result = t + y;
  result = std::fmaf(e, 0.693359375f, result);
  if (invalid) return from_bits(0xffffffffu);  // or-ed with an all-ones mask: NaN
  return result;
}

// Sine and cosine together, Cephes single-precision polynomials (sincos256_ps).
inline void lane_sincos(float x, float* sin_out, float* cos_out) {
  uint32_t sign_sin = to_bits(x) & 0x80000000u;
  x = std::fabs(x);
  float y = x * 1.27323954473516f;  // 4 / pi
  // cvttps: truncation; out of range (or NaN) gives INT32_MIN.
  int32_t j = (y < 2147483648.0f) ? static_cast<int32_t>(y) : std::numeric_limits<int32_t>::min();
  j = static_cast<int32_t>((static_cast<uint32_t>(j) + 1u) & ~1u);
  y = static_cast<float>(j);
  const uint32_t swap_sign_sin = (static_cast<uint32_t>(j) & 4u) << 29;
  const bool first_poly_is_cos = (static_cast<uint32_t>(j) & 2u) == 0;
  // Extended-precision reduction x - y * pi/4 in three parts, each contracted to an FMA.
  x = std::fmaf(y, -0.78515625f, x);
  x = std::fmaf(y, -2.4187564849853515625e-4f, x);
  x = std::fmaf(y, -3.77489497744594108e-8f, x);
  const uint32_t sign_cos = (~(static_cast<uint32_t>(j) - 2u) & 4u) << 29;
  sign_sin ^= swap_sign_sin;

  const float z = x * x;
  float c = std::fmaf(2.443315711809948E-005f, z, -1.388731625493765E-003f);
  c = std::fmaf(c, z, 4.166664568298827E-002f);
  c = c * z;
  c = std::fmaf(c, z, -(z * 0.5f));
  c = c + 1.0f;

  float s = std::fmaf(-1.9515295891E-4f, z, 8.3321608736E-3f);
  s = std::fmaf(s, z, -1.6666654611E-1f);
  s = s * z;
  s = std::fmaf(s, x, x);

  // Select between the two polynomials with masks, as the vector code does (so +0 / -0 come
  // out the same way).
  const float sin_from_s = first_poly_is_cos ? s : 0.0f;
  const float sin_from_c = first_poly_is_cos ? 0.0f : c;
  const float s_rest = s - sin_from_s;
  const float c_rest = c - sin_from_c;
  const float sin_v = sin_from_c + sin_from_s;
  const float cos_v = c_rest + s_rest;
  *sin_out = from_bits(to_bits(sin_v) ^ sign_sin);
  *cos_out = from_bits(to_bits(cos_v) ^ sign_cos);
}

// One block of 16 uniforms in place -> 16 normals (normal_fill_16_AVX2).
inline void normal_block16(float* d, float mean, float std) {
  const float two_pi = static_cast<float>(2.0 * kPi);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * lane_log(u1));
    const float theta = two_pi * u2;
    float sin_t = 0.0f;
    float cos_t = 0.0f;
    lane_sincos(theta, &sin_t, &cos_t);
    const float n1 = radius * cos_t;
    const float n2 = radius * sin_t;
    d[j] = std::fmaf(n1, std, mean);
    d[j + 8] = std::fmaf(n2, std, mean);
  }
}

// Every whole block of 16 of d[0, n) (normal_block16 over each).
QKV_FMA_CLONES void normal_blocks16(float* d, int64_t n, float mean, float std) {
  for (int64_t i = 0; i + 16 <= n; i += 16) normal_block16(d + i, mean, std);
}

// MT19937's output function.
inline uint32_t temper(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

// out[i] = fmaf((u[i] & 0xffffff) * 2^-24, width, from): uniform_float01 of each word, scaled.
QKV_FMA_CLONES void uniform_floats(const uint32_t* u, float* out, int64_t n, float width, float from) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::fmaf(static_cast<float>(u[i] & 0xffffffu) * (1.0f / 16777216.0f), width, from);
  }
}

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void check_out(const float* out, int64_t n, const char* what) {
  QKV_CHECK(n >= 0, what, ": n must be >= 0, got ", n);
  QKV_CHECK(n == 0 || out != nullptr, what, ": output buffer is null for n = ", n);
}

}  // namespace

Generator::Generator(uint64_t seed) { manual_seed(seed); }

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  mt_[0] = static_cast<uint32_t>(seed);  // only the low 32 bits seed the engine
  for (int i = 1; i < kN; ++i) {
    const uint32_t prev = mt_[i - 1];
    mt_[i] = 1812433253u * (prev ^ (prev >> 30)) + static_cast<uint32_t>(i);
  }
  index_ = kN;  // regenerate the block on the first draw
  cached_normal_.reset();
}

void Generator::twist() {
  // In place and in order, as for (i = 0; i < kN; ++i) mt[i] = mt[(i + kM) % kN] ^ f(mt[i],
  // mt[(i + 1) % kN]): the three ranges where those indices do not wrap (later words read the
  // ones already replaced, as there).
  const auto f = [](uint32_t word, uint32_t next) {
    const uint32_t mixed = (word & kUpper) | (next & kLower);
    return (mixed >> 1) ^ ((next & 1u) ? kMatrixA : 0u);
  };
  uint32_t* mt = mt_.data();
  int i = 0;
  for (; i < kN - kM; ++i) mt[i] = mt[i + kM] ^ f(mt[i], mt[i + 1]);
  for (; i < kN - 1; ++i) mt[i] = mt[i + kM - kN] ^ f(mt[i], mt[i + 1]);
  mt[kN - 1] = mt[kM - 1] ^ f(mt[kN - 1], mt[0]);
  index_ = 0;
}

uint32_t Generator::random() {
  if (index_ >= kN) twist();
  return temper(mt_[index_++]);
}

void Generator::random(uint32_t* out, int64_t n) {
  while (n > 0) {
    if (index_ >= kN) twist();
    const int take = static_cast<int>(std::min<int64_t>(n, kN - index_));
    const uint32_t* words = mt_.data() + index_;
    for (int i = 0; i < take; ++i) out[i] = temper(words[i]);
    index_ += take;
    out += take;
    n -= take;
  }
}

uint64_t Generator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

void Generator::discard(uint64_t draws) {
  while (draws > 0) {  // tempering is per output: skipping words of the block is enough
    if (index_ >= kN) twist();
    const uint64_t take = std::min<uint64_t>(draws, static_cast<uint64_t>(kN - index_));
    index_ += static_cast<int>(take);
    draws -= take;
  }
}

double Generator::uniform_double01() {
  return static_cast<double>(random64() & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

void Generator::uniform(float* out, int64_t n, double from, double to) {
  check_out(out, n, "uniform");
  const double lowest = std::numeric_limits<float>::lowest();
  const double highest = std::numeric_limits<float>::max();
  QKV_CHECK(from >= lowest && from <= highest, "uniform: from (", from,
            ") is outside the float range");
  QKV_CHECK(to >= lowest && to <= highest, "uniform: to (", to, ") is outside the float range");
  QKV_CHECK(from <= to, "uniform: expects a [from, to) range, but from (", from, ") > to (", to,
            ")");
  QKV_CHECK(to - from <= highest, "uniform: to - from (", to - from,
            ") exceeds the largest float");
  const float f_from = static_cast<float>(from);
  const float f_to = static_cast<float>(to);
  const float width = f_to - f_from;
  uniform_fill(out, n, width, f_from);
}

void Generator::uniform_fill(float* out, int64_t n, float width, float from) {
  constexpr int64_t kChunk = 1024;  // draws at a time, on the stack
  uint32_t u[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    random(u, m);
    uniform_floats(u, out + i, m, width, from);
  }
}

void Generator::normal(float* out, int64_t n, double mean, double std) {
  check_out(out, n, "normal");
  QKV_CHECK(std >= 0.0, "normal: expects std >= 0, got ", std);
  if (n >= 16) {
    normal_vectorised(out, n, static_cast<float>(mean), static_cast<float>(std));
  } else {
    normal_serial(out, n, mean, std);
  }
}

void Generator::normal_serial(float* out, int64_t n, double mean, double std) {
  for (int64_t i = 0; i < n; ++i) {
    double value = 0.0;
    if (cached_normal_) {
      value = *cached_normal_;
      cached_normal_.reset();
    } else {
      const double u1 = uniform_double01();
      const double u2 = uniform_double01();
      const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
      const double theta = 2.0 * kPi * u1;
      cached_normal_ = r * std::sin(theta);
      value = r * std::cos(theta);
    }
    out[i] = static_cast<float>(std::fma(value, std, mean));
  }
}

void Generator::normal_vectorised(float* out, int64_t n, float mean, float std) {
  uniform_fill(out, n, 1.0f, 0.0f);  // fmaf(x, 1, 0) = x: uniform_float01's values
  normal_blocks16(out, n, mean, std);
  if (n % 16 != 0) {
    float* tail = out + n - 16;
    uniform_fill(tail, 16, 1.0f, 0.0f);
    normal_blocks16(tail, 16, mean, std);
  }
}

void Generator::bernoulli(float* out, int64_t n, double p) {
  check_out(out, n, "bernoulli");
  QKV_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: expects 0 <= p <= 1, got ", p);
  for (int64_t i = 0; i < n; ++i) out[i] = uniform_double01() < p ? 1.0f : 0.0f;
}

void Generator::linear_init(float* weight, float* bias, int64_t out_features,
                            int64_t in_features) {
  QKV_CHECK(out_features >= 0 && in_features >= 0, "linear_init: features must be >= 0, got (",
            out_features, ", ", in_features, ")");
  const int64_t weight_n = out_features * in_features;
  check_out(weight, weight_n, "linear_init weight");
  if (!init_draws_) return;  // the caller loads every value
  // kaiming_uniform_(weight, a=math.sqrt(5)); a zero-element weight is left alone.
  if (weight_n > 0) {
    const double a = std::sqrt(5.0);
    const double gain = std::sqrt(2.0 / (1.0 + std::pow(a, 2.0)));  // calculate_gain
    const double std_dev = gain / std::sqrt(static_cast<double>(in_features));
    const double bound = std::sqrt(3.0) * std_dev;
    uniform(weight, weight_n, -bound, bound);
  }
  if (bias != nullptr) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    uniform(bias, out_features, -bound, bound);
  }
}

void Generator::embedding_init(float* weight, int64_t num, int64_t dim) {
  QKV_CHECK(num >= 0 && dim >= 0, "embedding_init: sizes must be >= 0, got (", num, ", ", dim,
            ")");
  if (!init_draws_) return;
  normal(weight, num * dim, 0.0, 1.0);
}

std::vector<uint8_t> Generator::get_state() const {
  std::vector<uint8_t> bytes(kStateBytes, 0);
  std::memcpy(bytes.data(), kMagic, 4);
  put_u32(bytes.data() + 4, kLayoutVersion);
  put_u64(bytes.data() + 8, seed_);
  put_u32(bytes.data() + 16, static_cast<uint32_t>(index_));
  put_u32(bytes.data() + 20, cached_normal_ ? 1u : 0u);
  put_u64(bytes.data() + 24, cached_normal_ ? std::bit_cast<uint64_t>(*cached_normal_) : 0u);
  for (int i = 0; i < kN; ++i) put_u32(bytes.data() + 32 + 4 * i, mt_[i]);
  return bytes;
}

void Generator::set_state(const std::vector<uint8_t>& state) {
  QKV_CHECK(state.size() == kStateBytes, "Generator::set_state: expected ", kStateBytes,
            " bytes, got ", state.size());
  const uint8_t* p = state.data();
  QKV_CHECK(std::memcmp(p, kMagic, 4) == 0,
            "Generator::set_state: bad magic (expected \"QRNG\" at byte 0)");
  const uint32_t version = get_u32(p + 4);
  QKV_CHECK(version == kLayoutVersion, "Generator::set_state: unsupported layout version ",
            version, " (expected ", kLayoutVersion, ")");
  const uint32_t index = get_u32(p + 16);
  QKV_CHECK(index <= static_cast<uint32_t>(kN), "Generator::set_state: index ", index,
            " is out of range [0, ", kN, "]");
  const uint32_t flags = get_u32(p + 20);
  QKV_CHECK((flags & ~1u) == 0, "Generator::set_state: unknown flag bits in flags word ", flags);
  const double cached = std::bit_cast<double>(get_u64(p + 24));
  const bool has_cached = (flags & 1u) != 0;
  QKV_CHECK(!has_cached || std::isfinite(cached),
            "Generator::set_state: cached normal sample is not finite");
  QKV_CHECK(has_cached || get_u64(p + 24) == 0,
            "Generator::set_state: cached normal sample is set but its flag is not");
  std::array<uint32_t, kN> words{};
  bool any_nonzero = false;
  for (int i = 0; i < kN; ++i) {
    words[i] = get_u32(p + 32 + 4 * i);
    any_nonzero = any_nonzero || words[i] != 0;
  }
  QKV_CHECK(any_nonzero, "Generator::set_state: MT19937 state is all zero");
  mt_ = words;
  index_ = static_cast<int>(index);
  seed_ = get_u64(p + 8);
  if (has_cached) {
    cached_normal_ = cached;
  } else {
    cached_normal_.reset();
  }
}

}  // namespace qkv
