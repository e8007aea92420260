// bf16 mode of the multi-head attention pipeline (qkv/kernels/mha.h, MhaShape::dtype): against
// the float32 pipeline on the same inputs (the error bf16 rounding brings, bounded), against
// itself with the textbook attention (the naive reference on the same bf16 heads), with the
// AVX512_BF16 dot product forced off (the widening fallback: the same math, float32 sums in
// another order), and with the weights given in bf16 (the same bits as rounding them).
//
// Error measure: norm-wise relative error |got - want|_2 / |want|_2 over a whole tensor, the
// figure the README quotes per module. bf16 keeps 8 significant bits: one rounding is at most
// 2^-9 = 0.2% relative, and the pipeline rounds x, the weights, q, k, v, P, ctx (and in the
// backward dy, d_ctx, dS) - each error a few tenths of a percent, adding as independent terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/kernels/mha.h"
#include "kernels/mha_testing.h"
#include "qkv/kernels/simd.h"

namespace qkv::kernels {
namespace {

std::vector<float> random_vector(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = scale * normal(rng);
  return v;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Bf16Config {
  int64_t B, T, d_in, d_out, H, G;
  bool bias;
  float dropout;
  RopeLayout rope;
  int64_t window;
  bool alibi;
  float softcap;
};

std::string describe(const Bf16Config& c) {
  return str("B=", c.B, " T=", c.T, " d_in=", c.d_in, " d_out=", c.d_out, " H=", c.H, " G=", c.G, " p=", c.dropout,
             " rope=", static_cast<int>(c.rope), " window=", c.window, " alibi=", c.alibi, " softcap=", c.softcap);
}

// What mha_forward + mha_backward produce.
struct LayerRun {
  std::vector<float> y, dx, dw_qkv, db_qkv, dw_out, db_out;
};

// One layer's inputs and weights (nn.Linear's scale), random.
struct Layer {
  Bf16Config c;
  MhaShape s;
  std::vector<float> x, dy, w_qkv, b_qkv, w_out, b_out, slopes;
  std::vector<uint16_t> w_qkv16, w_out16;

  explicit Layer(const Bf16Config& config) : c(config) {
    std::mt19937 rng(7);
    s.batch = c.B;
    s.tokens = c.T;
    s.d_in = c.d_in;
    s.attention.heads = c.H;
    s.attention.head_dim = c.d_out / c.H;
    s.attention.kv_heads = c.G;
    s.attention.rope = c.rope;
    s.attention.dropout = c.dropout;
    s.attention.window = c.window;
    s.attention.alibi = c.alibi;
    s.attention.softcap = c.softcap;
    const int64_t rows = c.B * c.T, C = c.d_out, Q = s.qkv_width();
    x = random_vector(static_cast<size_t>(rows * c.d_in), rng);
    dy = random_vector(static_cast<size_t>(rows * C), rng);
    w_qkv = random_vector(static_cast<size_t>(Q * c.d_in), rng, 1.0f / std::sqrt(static_cast<float>(c.d_in)));
    b_qkv = random_vector(static_cast<size_t>(Q), rng, 0.1f);
    w_out = random_vector(static_cast<size_t>(C * C), rng, 1.0f / std::sqrt(static_cast<float>(C)));
    b_out = random_vector(static_cast<size_t>(C), rng, 0.1f);
    w_qkv16.resize(w_qkv.size());
    w_out16.resize(w_out.size());
    floats_to_bf16(w_qkv.data(), w_qkv16.data(), w_qkv.size());
    floats_to_bf16(w_out.data(), w_out16.data(), w_out.size());
    slopes.resize(static_cast<size_t>(c.H));
    alibi_default_slopes(c.H, slopes.data());
  }

  LayerRun run(Dtype dtype, bool bf16_weights = false) const {
    MhaShape shape = s;
    shape.attention.dtype = dtype;
    MhaWeights w{w_qkv.data(), c.bias ? b_qkv.data() : nullptr, w_out.data(), b_out.data()};
    if (bf16_weights) {
      w.w_qkv16 = w_qkv16.data();
      w.w_out16 = w_out16.data();
    }
    ThreadPool pool(2);
    MhaCall call;
    call.dropout = c.dropout > 0.0f;
    call.dropout_seed = 5;
    call.pool = &pool;
    call.alibi_slopes = c.alibi ? slopes.data() : nullptr;
    LayerRun r;
    r.y.resize(dy.size());
    r.dx.resize(x.size());
    r.dw_qkv.resize(w_qkv.size());
    r.db_qkv.resize(b_qkv.size());
    r.dw_out.resize(w_out.size());
    r.db_out.resize(b_out.size());
    MhaSaved saved;
    MhaWorkspace ws;
    mha_forward(shape, w, x.data(), r.y.data(), saved, ws, call);
    mha_backward(shape, w, x.data(), dy.data(), r.dx.data(),
                 {r.dw_qkv.data(), c.bias ? r.db_qkv.data() : nullptr, r.dw_out.data(), r.db_out.data()}, saved,
                 saved.id(), ws, call);
    return r;
  }
};

// Every output's norm-wise relative error against want, each under its bound; returns the worst.
double expect_close(const LayerRun& got, const LayerRun& want, double y_bound, double grad_bound, const std::string& what) {
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>> outputs[] = {
      {"y", {&got.y, &want.y}},           {"dx", {&got.dx, &want.dx}},         {"dw_qkv", {&got.dw_qkv, &want.dw_qkv}},
      {"db_qkv", {&got.db_qkv, &want.db_qkv}}, {"dw_out", {&got.dw_out, &want.dw_out}}, {"db_out", {&got.db_out, &want.db_out}}};
  double worst = 0;
  for (const auto& [name, pair] : outputs) {
    const double e = relative_error(*pair.first, *pair.second);
    worst = std::max(worst, e);
    EXPECT_LE(e, name == std::string("y") ? y_bound : grad_bound) << what << ": " << name;
  }
  return worst;
}

const Bf16Config kConfigs[] = {
    {2, 37, 24, 32, 4, 0, true, 0.0f, RopeLayout::kNone, 0, false, 0.0f},
    {1, 130, 64, 128, 2, 0, false, 0.1f, RopeLayout::kNone, 0, false, 0.0f},
    {2, 70, 48, 96, 6, 2, true, 0.0f, RopeLayout::kHalf, 0, false, 0.0f},
    {1, 90, 32, 64, 4, 1, false, 0.0f, RopeLayout::kInterleaved, 16, true, 20.0f},
    {3, 1, 16, 16, 2, 0, true, 0.0f, RopeLayout::kNone, 0, false, 0.0f},
};

TEST(MhaBf16, MatchesTheFloatPipelineWithinBf16Rounding) {
  for (const Bf16Config& c : kConfigs) {
    const Layer layer(c);
    const double worst = expect_close(layer.run(Dtype::kBF16), layer.run(Dtype::kF32), 1e-2, 1.5e-2, describe(c));
    std::printf("bf16 vs f32, %s: worst norm-wise relative error %.2e\n", describe(c).c_str(), worst);
  }
}

// The fused bf16 attention against the naive reference attention on the same bf16 heads: they
// differ by the rounding of P (and dS, d_o) to bf16 and the float32 sums' order.
TEST(MhaBf16, FusedAttentionMatchesTheTextbookAttentionOnTheSameHeads) {
  for (const Bf16Config& c : kConfigs) {
    const Layer layer(c);
    const LayerRun fused = layer.run(Dtype::kBF16);
    const bool was = mha_use_reference_attention(true);
    const LayerRun textbook = layer.run(Dtype::kBF16);
    mha_use_reference_attention(was);
    const double worst = expect_close(fused, textbook, 6e-3, 1e-2, describe(c));
    std::printf("fused vs textbook in bf16, %s: worst %.2e\n", describe(c).c_str(), worst);
  }
}

// Without the dot product (forced off, and on every SIMD target) the math is the same: the float32
// sums differ only in order. Not bit for bit, though: a float32 value that comes out an ulp
// apart (q, k, v, ctx, after sums in another order) can round to the neighbouring bf16 value,
// 2^-8 relative on that element. Measured: up to 7.4e-5 norm-wise (printed); the bound,
// 2e-4, is still 25x below bf16's own error against float32 (5e-3), which a wrong pairing or
// a skipped rounding point would show.
TEST(MhaBf16, WideningFallbackGivesTheDotProductsResults) {
  for (const Bf16Config& c : kConfigs) {
    const Layer layer(c);
    const LayerRun dot = layer.run(Dtype::kBF16);
    const bool was = set_bf16_dot_allowed(false);
    double worst = 0;
    for (int64_t target : available_simd_targets()) {
      force_simd_target(target);
      worst = std::max(worst, expect_close(layer.run(Dtype::kBF16), dot, 2e-4, 2e-4, describe(c) + " " + simd_target_name(target)));
    }
    std::printf("widened fallback vs the dot product, %s: worst norm-wise relative difference %.2e\n", describe(c).c_str(), worst);
    force_simd_target(0);
    set_bf16_dot_allowed(was);
  }
}

// Weights given in bf16 (as a bf16 model holds them) are the same values as rounding the float
// weights in the products: the results are the same bits.
TEST(MhaBf16, Bf16WeightsAreTheRoundedFloatWeights) {
  const Layer layer(kConfigs[2]);
  const LayerRun rounded = layer.run(Dtype::kBF16), given = layer.run(Dtype::kBF16, true);
  EXPECT_EQ(rounded.y, given.y);
  EXPECT_EQ(rounded.dx, given.dx);
  EXPECT_EQ(rounded.dw_qkv, given.dw_qkv);
}

}  // namespace
}  // namespace qkv::kernels
