// The quantized product (qkv/core/quant_matvec.h) on every SIMD target this CPU runs: the fast
// kernel against the naive reference (the same integer block sums, so only the float combination's
// rounding may differ), and the reference against the float product with the dequantized weights
// (only the activations' quantization may differ, bounded by their block scales). Every weight type,
// N not a multiple of any vector width, K of 1, 2 and several blocks, M = 1, 3 (the row kernel), 16
// and 17 (the packed panels); a row's bits independent of the rows beside it; edge blocks: all zeros, zero scales, the extreme quants and scales, a row of x
// of equal values, x spanning 60 orders of magnitude; the same bits whatever the thread count; the
// errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/quant_matvec.h"
#include "qkv/kernels/simd.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;
using testing_support::for_each_quant_target;
using testing_support::normal_vector;

constexpr double kU = 0x1p-24;  // float's unit roundoff
const char* const kTypes[] = {"Q8_0", "Q4_0", "Q4_K", "Q6_K"};

// Offsets of a block's f16 scales (d, and Q4_K's dmin).
std::vector<int> scale_offsets(const QuantType& t) {
  if (t.id == 12) return {0, 2};
  if (t.id == 14) return {208};
  return {0};
}

// N rows of K values of type t: every byte random (any bit pattern is a valid block), then the f16
// scales set to `scale` times a random factor in [0.5, 1] (or exactly `scale` if exact_scale). With
// fill >= 0, every quant byte is `fill` instead.
std::vector<uint8_t> random_weights(const QuantType& t, int64_t N, int64_t K, std::mt19937& rng, float scale,
                                    int fill = -1, bool exact_scale = false) {
  std::vector<uint8_t> W(static_cast<size_t>(N * quant_bytes(t, K, "W")));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> factor(0.5f, 1.0f);
  for (uint8_t& b : W) b = static_cast<uint8_t>(fill >= 0 ? fill : byte(rng));
  for (size_t b = 0; b < W.size(); b += static_cast<size_t>(t.block_bytes))
    for (int offset : scale_offsets(t)) {
      const uint16_t h = float_to_f16(exact_scale ? scale : scale * factor(rng));
      W[b + static_cast<size_t>(offset)] = static_cast<uint8_t>(h);
      W[b + static_cast<size_t>(offset) + 1] = static_cast<uint8_t>(h >> 8);
    }
  return W;
}

// The activation scale of every value of a row of x (K values), as quant_matvec quantizes it.
std::vector<double> activation_scales(const QuantType& t, const float* x, int64_t K) {
  std::vector<double> d(static_cast<size_t>(K));
  if (t.block == 256) {
    std::vector<BlockQ8K> q(static_cast<size_t>(K / 256));
    quantize_activations_q8_k(x, K, q.data());
    for (int64_t i = 0; i < K; ++i) d[static_cast<size_t>(i)] = q[static_cast<size_t>(i / 256)].d;
  } else {
    std::vector<BlockQ8> q(static_cast<size_t>(K / 32));
    quantize_activations_q8(x, K, q.data());
    for (int64_t i = 0; i < K; ++i) d[static_cast<size_t>(i)] = q[static_cast<size_t>(i / 32)].d;
  }
  return d;
}

// Runs quant_matvec on (W, x) and checks it against the reference and the reference against the
// dequantized product; returns the number of outputs checked (-1 after the first failure).
int64_t check(const QuantType& t, const std::vector<uint8_t>& W, int64_t N, int64_t K, const std::vector<float>& x,
              int64_t M, ThreadPool& pool, const std::string& label) {
  std::vector<float> y(static_cast<size_t>(M * N), NAN), ref(y.size()), magnitude(y.size());
  quant_matvec(t, W.data(), N, K, x.data(), M, y.data(), &pool);
  quant_matvec_reference(t, W.data(), N, K, x.data(), M, ref.data(), magnitude.data());
  // The dequantized weights w, and the parts their float rounding is relative to: |w| (d s q or
  // d q, rounded once or twice: 2u |w|), or for Q4_K |d s q| + |dmin m| (the two terms of w,
  // which may cancel): found by dequantizing a copy with dmin = 0.
  std::vector<float> w(static_cast<size_t>(N * K)), parts(w.size());
  dequantize(t, W.data(), N * K, w.data());
  if (t.id == 12) {
    std::vector<uint8_t> no_min = W;
    for (size_t b = 0; b < no_min.size(); b += 144) no_min[b + 2] = no_min[b + 3] = 0;
    std::vector<float> p(w.size());
    dequantize(t, no_min.data(), N * K, p.data());
    for (size_t i = 0; i < w.size(); ++i) parts[i] = std::fabs(p[i]) + std::fabs(p[i] - w[i]);
  } else {
    for (size_t i = 0; i < w.size(); ++i) parts[i] = std::fabs(w[i]);
  }
  const double nb = static_cast<double>(K / t.block);
  int64_t checked = 0;
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x.data() + m * K;
    const std::vector<double> dx = activation_scales(t, xm, K);
    for (int64_t n = 0; n < N; ++n) {
      const size_t o = static_cast<size_t>(m * N + n);
      // Fast against reference: the same exact integer sums per block; each adds nb float terms
      // (a few roundings each) in its own order, the fast one in 8 lanes then a tree of 3 (4 with
      // Q4_K's mins): at most (nb + 5) u of the terms' magnitude each, so (2 nb + 10) u between them.
      const double fast_tol = (2 * nb + 10) * kU * magnitude[o];
      if (!(std::fabs(static_cast<double>(y[o]) - ref[o]) <= fast_tol)) {
        ADD_FAILURE() << label << ": fast " << y[o] << " reference " << ref[o] << " (tolerance " << fast_tol
                      << ") at m " << m << " n " << n;
        return -1;
      }
      // Reference against x w^T in double: the activations' rounding |x_i - dx q_i| <= dx (1/2 + 2^-16)
      // (q = round(x 127 / max|x|), clamped; dx = max|x| / 127 rounded: 128 u of dx more at most),
      // against each exact weight (the dequantized one within 4 u of its parts); plus the dequantized
      // weights' own rounding (3 u of parts |x|) and the reference's float combination ((nb + 4) u of
      // the magnitude).
      double exact = 0, quant_bound = 0, dequant_bound = 0;
      for (int64_t k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>(n * K + k);
        exact += static_cast<double>(w[i]) * xm[k];
        quant_bound += (std::fabs(w[i]) + 4 * kU * parts[i]) * dx[static_cast<size_t>(k)] * (0.5 + 0x1p-16);
        dequant_bound += 3 * kU * parts[i] * std::fabs(xm[k]);
      }
      const double bound = quant_bound + dequant_bound + (nb + 4) * kU * magnitude[o];
      if (!(std::fabs(ref[o] - exact) <= bound)) {
        ADD_FAILURE() << label << ": reference " << ref[o] << " exact " << exact << " (bound " << bound << ") at m "
                      << m << " n " << n;
        return -1;
      }
      ++checked;
    }
  }
  return checked;
}

TEST(QuantMatvec, EveryTypeAndShapeMatchesTheReferenceAndTheDequantizedProductOnEveryTarget) {
  ThreadPool pool(2);
  for_each_quant_target([&](const std::string& target) {
    for (const char* name : kTypes) {
      const QuantType& t = quant_type_named(name);
      std::mt19937 rng(11);
      int64_t checked = 0, expected = 0;
      for (int64_t blocks : {1, 2, 5})
        for (int64_t N : {1, 5, 37})
          for (int64_t M : {1, 3, 8, 17}) {
            const int64_t K = blocks * t.block;
            const auto W = random_weights(t, N, K, rng, 0.05f);
            const auto x = normal_vector(static_cast<size_t>(M * K), rng);
            checked += check(t, W, N, K, x, M, pool,
                             target + " " + name + " K " + std::to_string(K) + " N " + std::to_string(N) + " M " +
                                 std::to_string(M));
            expected += M * N;
          }
      EXPECT_EQ(checked, expected) << target << " " << name;
    }
  });
}

TEST(QuantMatvec, WeightsQuantizedFromFloatsOnDecodeShapes) {
  // quantize()'s blocks of normal weights (the realistic case), a wider N, and K = 1024.
  ThreadPool pool(2);
  std::mt19937 rng(5);
  for_each_quant_target([&](const std::string& target) {
    for (const char* name : kTypes) {
      const QuantType& t = quant_type_named(name);
      const int64_t N = 133, K = 1024, M = 1;
      const auto wf = normal_vector(static_cast<size_t>(N * K), rng);
      std::vector<uint8_t> W(static_cast<size_t>(N * quant_bytes(t, K, "W")));
      quantize(t, wf.data(), N * K, W.data());
      const auto x = normal_vector(static_cast<size_t>(M * K), rng);
      EXPECT_EQ(check(t, W, N, K, x, M, pool, target + " " + name), N * M);
    }
  });
}

TEST(QuantMatvec, EdgeBlocks) {
  ThreadPool pool(2);
  for_each_quant_target([&](const std::string& target) {
    for (const char* name : kTypes) {
      const QuantType& t = quant_type_named(name);
      std::mt19937 rng(3);
      const int64_t K = 2 * t.block, N = 19, M = 9;  // M: three of each row below; past kGemmMinRows
      const std::string label = target + " " + name;
      // All zeros: weights and x.
      const std::vector<uint8_t> zeros(static_cast<size_t>(N * quant_bytes(t, K, "W")), 0);
      const std::vector<float> x0(static_cast<size_t>(M * K), 0.0f);
      std::vector<float> y(static_cast<size_t>(M * N), NAN);
      quant_matvec(t, zeros.data(), N, K, x0.data(), M, y.data(), &pool);
      EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f)) << label;
      // Zero scales over random quants: nothing but zeros.
      const auto x = normal_vector(static_cast<size_t>(M * K), rng);
      const auto unscaled = random_weights(t, N, K, rng, 0.0f);
      quant_matvec(t, unscaled.data(), N, K, x.data(), M, y.data(), &pool);
      EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f)) << label;
      // Every quant byte at its extremes (0x00: the smallest quants, Q6_K's scales 0; 0xFF: the largest,
      // Q6_K's scales -1; 0x80: Q8_0's -128, vpmaddubsw's largest |w|, Q6_K's scales -128; 0x7F),
      // the largest f16 scale that keeps the sums finite, and x with a row of equal values, a row
      // spanning 1e-30 to 1e30 (the small ones quantize to 0) and a normal row.
      std::vector<float> xe(static_cast<size_t>(M * K));
      for (int64_t m = 0; m < M; m += 3)
        for (int64_t k = 0; k < K; ++k) {
          xe[static_cast<size_t>(m * K + k)] = 0.75f;
          xe[static_cast<size_t>((m + 1) * K + k)] =
              (k % 2 ? -1.0f : 1.0f) * std::pow(10.0f, static_cast<float>(k % 61 - 30));
          xe[static_cast<size_t>((m + 2) * K + k)] = x[static_cast<size_t>(m * K + k)];
        }
      for (int fill : {0x00, 0xFF, 0x80, 0x7F})
        for (float scale : {1.0f, 1000.0f})
          EXPECT_EQ(check(t, random_weights(t, N, K, rng, scale, fill, true), N, K, xe, M, pool,
                          label + " fill " + std::to_string(fill) + " scale " + std::to_string(scale)),
                    N * M);
    }
  });
}

TEST(QuantMatvec, KnownAnswers) {
  // Q8_0, d = 1: rows of q = 1..32 against x = 1..32 (max 32: dx = 32 / 127, qx = round(127 i / 32)).
  // The integer sum is exact and the answer is dx sum_i i round(127 i / 32).
  const QuantType& t = quant_type_named("Q8_0");
  std::vector<uint8_t> W(34);
  const uint16_t one = float_to_f16(1.0f);
  W[0] = static_cast<uint8_t>(one), W[1] = static_cast<uint8_t>(one >> 8);
  std::vector<float> x(32);
  int64_t sum = 0;
  for (int i = 1; i <= 32; ++i) {
    W[static_cast<size_t>(1 + i)] = static_cast<uint8_t>(i);
    x[static_cast<size_t>(i - 1)] = static_cast<float>(i);
    sum += i * std::lround(127.0 * i / 32.0);
  }
  float y = NAN;
  quant_matvec(t, W.data(), 1, 32, x.data(), 1, &y);
  EXPECT_FLOAT_EQ(y, (32.0f / 127.0f) * static_cast<float>(sum));  // the fast kernel's lanes: a few ulps
  // Q4_0 with every nibble 0 is -8 d everywhere: x of ones gives -8 d 32 per block.
  const QuantType& t4 = quant_type_named("Q4_0");
  std::vector<uint8_t> W4(18, 0);
  W4[0] = static_cast<uint8_t>(one), W4[1] = static_cast<uint8_t>(one >> 8);
  std::vector<float> ones(32, 1.0f);
  quant_matvec(t4, W4.data(), 1, 32, ones.data(), 1, &y);
  EXPECT_FLOAT_EQ(y, -256.0f);
}

TEST(QuantMatvec, TheThreadCountDoesNotChangeABit) {
  std::mt19937 rng(9);
  for (const char* name : kTypes)
    for (int64_t M : {3, 20}) {  // the row kernel, and the packed panels from kGemmMinRows rows on
      const QuantType& t = quant_type_named(name);
      const int64_t K = 4 * t.block, N = 1001;
      const auto W = random_weights(t, N, K, rng, 0.1f);
      const auto x = normal_vector(static_cast<size_t>(M * K), rng);
      std::vector<float> one(static_cast<size_t>(M * N)), three(one.size());
      ThreadPool p1(1), p3(3);
      quant_matvec(t, W.data(), N, K, x.data(), M, one.data(), &p1);
      quant_matvec(t, W.data(), N, K, x.data(), M, three.data(), &p3);
      EXPECT_EQ(one, three) << name << " M " << M;
    }
}

TEST(QuantMatvec, ARowHasTheSameBitsWhateverTheRowsBesideIt) {
  // A prompt's rows (the packed panels) and a decoding step's one row (the row kernel) give a row
  // the same bits: a cached step equals the full forward's last row. N past whole panels and whole
  // groups of 8; every target.
  ThreadPool pool(2);
  for_each_quant_target([&](const std::string& target) {
    for (const char* name : kTypes) {
      const QuantType& t = quant_type_named(name);
      std::mt19937 rng(21);
      const int64_t M = 23, K = 3 * t.block, N = 45;
      const auto W = random_weights(t, N, K, rng, 0.05f);
      const auto x = normal_vector(static_cast<size_t>(M * K), rng);
      std::vector<float> all(static_cast<size_t>(M * N)), alone(static_cast<size_t>(N));
      quant_matvec(t, W.data(), N, K, x.data(), M, all.data(), &pool);
      for (int64_t m = 0; m < M; ++m) {
        quant_matvec(t, W.data(), N, K, x.data() + m * K, 1, alone.data(), &pool);
        EXPECT_EQ(std::memcmp(alone.data(), all.data() + m * N, alone.size() * sizeof(float)), 0)
            << target << " " << name << " row " << m;
      }
    }
  });
}

TEST(QuantMatvec, ActivationsAreQuantizedAsLlamaCppDoes) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 32) - 12.7f;
  std::vector<BlockQ8> q8(8);
  quantize_activations_q8(x.data(), 256, q8.data());
  // Block 0 holds -12.7 .. 18.3: d = 18.3 / 127, 18.3 -> 127, -12.7 -> round(-88.14) = -88, 0.3 -> 2.
  EXPECT_FLOAT_EQ(q8[0].d, (31.0f - 12.7f) / 127.0f);
  EXPECT_EQ(q8[0].q[31], 127);
  EXPECT_EQ(q8[0].q[0], -88);
  EXPECT_EQ(q8[0].q[13], 2);
  std::vector<BlockQ8K> q8k(1);
  quantize_activations_q8_k(x.data(), 256, q8k.data());
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += q8k[0].q[16 * g + i];
    EXPECT_EQ(q8k[0].bsums[g], s);
  }
  for (int i = 0; i < 256; ++i) EXPECT_LE(std::abs(q8k[0].q[i]), 127);
}

TEST(QuantMatvec, EveryTargetQuantizesActivationsByTheDefinition) {
  // d = max|x| / 127 (float), q = round(x 127 / max|x|) computed in double, halves away from zero,
  // written here from the definition; rows of normal values at several scales, halves exactly
  // (max 127: x 127 / max|x| = x), tiny and zero rows.
  std::mt19937 rng(31);
  std::vector<float> x;
  for (float scale : {1.0f, 1e-3f, 1e30f, 1e-38f}) {
    const auto row = normal_vector(256, rng);
    for (float v : row) x.push_back(v * scale);
  }
  for (int i = 0; i < 256; ++i) x.push_back(i % 32 == 0 ? 127.0f : static_cast<float>(i % 127 - 63) + 0.5f);
  for (int i = 0; i < 256; ++i) x.push_back(0.0f);
  const int64_t K = static_cast<int64_t>(x.size());
  // The definition's scales and quants of every value, in blocks of `block`.
  auto expected = [&](int64_t block, std::vector<float>& d, std::vector<int>& q) {
    d.assign(static_cast<size_t>(K), 0.0f);
    q.assign(static_cast<size_t>(K), 0);
    for (int64_t b = 0; b < K / block; ++b) {
      float amax = 0;
      for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * block + i)]));
      for (int64_t i = 0; i < block; ++i) {
        const size_t at = static_cast<size_t>(b * block + i);
        const double v = amax > 0 ? static_cast<double>(x[at]) * (127.0 / amax) : 0.0;
        const double r = v < 0 ? -std::floor(-v + 0.5) : std::floor(v + 0.5);  // valid for |v| <= 127.5
        q[at] = static_cast<int>(std::clamp(r, -127.0, 127.0));
        d[at] = amax / 127.0f;
      }
    }
  };
  std::vector<float> d32, d256;
  std::vector<int> q32, q256;
  expected(32, d32, q32);
  expected(256, d256, q256);
  EXPECT_EQ(q32[static_cast<size_t>(4 * 256 + 1)], -62);  // x = -61.5 with max 127: away from zero
  EXPECT_EQ(q32[static_cast<size_t>(4 * 256 + 126)], 64);  // x = 63.5
  for_each_quant_target([&](const std::string& target) {
    std::vector<BlockQ8> q8(static_cast<size_t>(K / 32));
    std::vector<BlockQ8K> q8k(static_cast<size_t>(K / 256));
    quantize_activations_q8(x.data(), K, q8.data());
    quantize_activations_q8_k(x.data(), K, q8k.data());
    std::vector<int> got32(static_cast<size_t>(K)), got256(static_cast<size_t>(K));
    for (int64_t i = 0; i < K; ++i) {
      const size_t at = static_cast<size_t>(i);
      EXPECT_EQ(q8[at / 32].d, d32[at]) << target << " at " << i;
      EXPECT_EQ(q8k[at / 256].d, d256[at]) << target << " at " << i;
      got32[at] = q8[at / 32].q[i % 32];
      got256[at] = q8k[at / 256].q[i % 256];
    }
    EXPECT_EQ(got32, q32) << target;
    EXPECT_EQ(got256, q256) << target;
  });
}

TEST(QuantMatvec, BadInputsAreErrorsNamingThem) {
  const std::vector<uint8_t> W(1024);
  const std::vector<float> x(512);
  std::vector<float> y(4);
  EXPECT_THAT(error_of([&] { quant_matvec(quant_type_named("Q8_0"), W.data(), 1, 48, x.data(), 1, y.data()); }),
              HasSubstr("quant_matvec: K (48) must be a positive multiple of Q8_0's block of 32"));
  EXPECT_THAT(error_of([&] { quant_matvec(quant_type_named("Q4_K"), W.data(), 1, 320, x.data(), 1, y.data()); }),
              HasSubstr("K (320) must be a positive multiple of Q4_K's block of 256"));
  EXPECT_THAT(error_of([&] { quant_matvec(quant_type_named("Q5_K"), W.data(), 1, 256, x.data(), 1, y.data()); }),
              HasSubstr("weights of type Q5_K are not supported; it multiplies Q8_0, Q4_0, Q4_K, Q6_K"));
  EXPECT_THAT(error_of([&] { quant_matvec(quant_type_named("Q8_0"), W.data(), 1, 32, x.data(), 0, y.data()); }),
              HasSubstr("M must be at least 1"));
  std::vector<BlockQ8> q(2);
  EXPECT_THAT(error_of([&] { quantize_activations_q8(x.data(), 33, q.data()); }),
              HasSubstr("K (33) must be a multiple of 32"));
}

}  // namespace
}  // namespace qkv
