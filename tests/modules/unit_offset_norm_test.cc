// Qwen3.5's RMSNorm, y = (1 + weight) * x / rms with the weight zero-initialised (layer_norm.h's
// unit_offset): the same numbers, bit for bit, as the plain RMSNorm holding 1 + weight (rounded to
// float32 as PyTorch rounds `1.0 + self.weight.float()`), forward and both gradients; on the rows
// a cached step normalises (Norm::rows); and as QK-norm in MultiHeadAttention (config
// qk_norm_unit_offset), on the textbook path, the fused path and in cached decoding. The plain
// RMSNorm and QK-norm are checked against PyTorch elsewhere (tests/pytorch).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/modules/multi_head_attention.h"
#include "qkv/modules/norm.h"

namespace qkv {
namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() && std::memcmp(x.data(), y.data(), static_cast<size_t>(x.numel()) * sizeof(float)) == 0;
}

// 1 + w in float32, as PyTorch's `1.0 + weight.float()`.
Tensor one_plus(const Tensor& w) {
  Tensor s = Tensor::empty(w.shape());
  for (int64_t i = 0; i < w.numel(); ++i) s.data()[i] = 1.0f + w.data()[i];
  return s;
}

TEST(UnitOffsetNorm, IsThePlainNormScaledByOnePlusWeightBitForBit) {
  const int64_t E = 24;
  Generator data(11);
  const Tensor x = randn({3, 5, E}, data), dy = randn({3, 5, E}, data);
  RMSNorm offset(E, 1e-6, /*unit_offset=*/true);
  EXPECT_TRUE(bit_equal(offset.weight, Tensor::zeros({E})));  // zero-initialised: the identity scale
  offset.weight.copy_from(mul(randn({E}, data), 0.3f));
  RMSNorm plain(E, 1e-6);
  plain.weight.copy_from(one_plus(offset.weight));
  EXPECT_TRUE(bit_equal(offset.forward(x), plain.forward(x)));
  EXPECT_TRUE(bit_equal(offset.backward(dy), plain.backward(dy)));
  EXPECT_TRUE(bit_equal(offset.dweight, plain.dweight));  // d/dweight of (1 + weight) is d/dscale
  // the weight's change is seen at the next call (the scale is not cached from the first)
  offset.weight.copy_from(mul(offset.weight, 2.0f));
  plain.weight.copy_from(one_plus(offset.weight));
  EXPECT_TRUE(bit_equal(offset.forward(x), plain.forward(x)));
  // the rows of a cached step, through Norm
  Norm norm(NormKind::kRMSNorm, E, 1e-6, /*unit_offset=*/true);
  norm.rms_norm().weight.copy_from(offset.weight);
  Tensor rows = Tensor::empty({15, E});
  norm.rows(x.contiguous().data(), 15, rows.data());
  EXPECT_TRUE(bit_equal(rows.reshape({3, 5, E}), plain.forward(x)));
  // and it is not the plain norm of the weight itself
  RMSNorm unshifted(E, 1e-6);
  unshifted.weight.copy_from(offset.weight);
  EXPECT_GT(max_abs_diff(offset.forward(x), unshifted.forward(x)), 0.5);
}

AttentionConfig qk_config(bool unit_offset, AttentionPath path) {
  AttentionConfig c = attention_config("mha", 10, 32, 16, 0.0, 4, false);
  c.attention.kv_heads = 2;
  c.attention.rope = kernels::RopeLayout::kHalf;
  c.attention.rope_dim = 4;
  c.attention.qk_norm = true;
  c.qk_norm_unit_offset = unit_offset;
  c.out_bias = false;
  c.path = path;
  return c;
}

TEST(UnitOffsetNorm, QkNormWithTheOffsetIsThePlainQkNormOfOnePlusWeight) {
  const int64_t B = 2, T = 7, D = 8;
  Generator data(3);
  const Tensor x = randn({B, T, 10}, data), dy = randn({B, T, 32}, data);
  const Tensor wq = mul(randn({D}, data), 0.4f), wk = mul(randn({D}, data), 0.4f);
  for (AttentionPath path : {AttentionPath::kTextbook, AttentionPath::kFused}) {
    Generator g1(5), g2(5);
    MultiHeadAttention offset(qk_config(true, path), g1), plain(qk_config(false, path), g2);
    EXPECT_TRUE(bit_equal(offset.q_norm.weight, Tensor::zeros({D})));
    offset.q_norm.weight.copy_from(wq);
    offset.k_norm.weight.copy_from(wk);
    plain.q_norm.weight.copy_from(one_plus(wq));
    plain.k_norm.weight.copy_from(one_plus(wk));
    const Tensor y = offset.forward(x);
    EXPECT_LE(max_abs_diff(y, plain.forward(x)), 1e-6);
    EXPECT_LE(max_abs_diff(offset.backward(dy), plain.backward(dy)), 1e-6);
    EXPECT_LE(max_abs_diff(offset.q_norm.dweight, plain.q_norm.dweight), 1e-5);
    EXPECT_LE(max_abs_diff(offset.k_norm.dweight, plain.k_norm.dweight), 1e-5);
    // cached decoding, token by token, gives the whole forward's rows
    offset.eval();
    kernels::KvCache cache(1, B, 2, T, D, D, kernels::CacheDtype::kF32);
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor step = offset.forward_cached(x.slice(1, t, t + 1).contiguous(), cache, 0);
      cache.commit();
      worst = std::max(worst, max_abs_diff(step, y.slice(1, t, t + 1)));
    }
    EXPECT_LE(worst, 1e-5);
  }
}

}  // namespace
}  // namespace qkv
