// The causal modules' two representations (issue: modules reach the kernel's lengths): the mask
// buffer is held symbolically and is still PyTorch's `mask` in a state dict, and W_query, W_key
// and W_value are views of one (3 d_out, d_in) weight that the fused path reads in place.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/modules/causal_attention.h"
#include "qkv/modules/multi_head_attention.h"

namespace qkv {
namespace {

AttentionConfig config(int64_t context_length, int64_t heads = 2) {
  return attention_config("mha", 6, 4, context_length, 0.0, heads);
}

std::map<std::string, Tensor> saved(Module& m) {
  std::map<std::string, Tensor> out;
  for (const StateEntry& e : m.state_dict()) out[e.name] = e.value().clone();
  return out;
}

TEST(MaskBuffer, AContextFarBeyondMemoryCostsNothingUntilAsked) {
  // (2^20)^2 floats would be 4 TiB: the module and a forward exist without that buffer.
  Generator gen(1);
  MultiHeadAttention mha(config(int64_t{1} << 20), gen);
  EXPECT_TRUE(mha.mask.is_causal());
  EXPECT_EQ(mha.mask.shape(), Shape({int64_t{1} << 20, int64_t{1} << 20}));
  Tensor x = Tensor::ones({1, 5, 6});
  Tensor y = mha.forward(x);
  EXPECT_EQ(y.shape(), Shape({1, 5, 4}));
}

TEST(MaskBuffer, StateDictWritesTheBooksTriangleAndReadsItBackSymbolic) {
  Generator gen(2);
  CausalAttention ca(config(5, 1), gen);
  std::map<std::string, Tensor> sd = saved(ca);
  ASSERT_TRUE(sd.count("mask"));
  const Tensor& m = sd.at("mask");
  ASSERT_EQ(m.shape(), Shape({5, 5}));
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(m.at({i, j}), j > i ? 1.0f : 0.0f) << i << "," << j;
  Generator gen2(3);
  CausalAttention other(config(5, 1), gen2);
  other.load_state_dict(sd);
  EXPECT_TRUE(other.mask.is_causal());
  EXPECT_EQ(other.W_query.weight.to_vector(), ca.W_query.weight.to_vector());
}

TEST(MaskBuffer, AnotherMaskStaysDenseAndRoundTrips) {
  Generator gen(4);
  MultiHeadAttention mha(config(4), gen);
  std::map<std::string, Tensor> sd = saved(mha);
  Tensor tril_bug = tril(Tensor::ones({4, 4}));  // notebook 004's mask: blocks the diagonal and below
  sd["mask"] = tril_bug;
  mha.load_state_dict(sd);
  EXPECT_FALSE(mha.mask.is_causal());
  EXPECT_EQ(saved(mha).at("mask").to_vector(), tril_bug.to_vector());
  // and back to the triangle: symbolic again
  sd["mask"] = triu(Tensor::ones({4, 4}), 1);
  mha.load_state_dict(sd);
  EXPECT_TRUE(mha.mask.is_causal());
}

TEST(MaskBuffer, AMaskOfAnotherSizeIsRefusedNamingBothShapes) {
  Generator gen(5);
  CausalAttention ca(config(4, 1), gen);
  std::map<std::string, Tensor> sd = saved(ca);
  sd["mask"] = triu(Tensor::ones({5, 5}), 1);
  try {
    ca.load_state_dict(sd);
    FAIL() << "a (5, 5) mask loaded into a (4, 4) buffer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(5, 5)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(4, 4)"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(ca.mask.is_causal());
}

TEST(QkvWeights, TheThreeProjectionsViewOneWeightInPytorchsDrawOrder) {
  // The fused (3 d_out, d_in) weight holds W_query, W_key, W_value as nn.Linear drew them.
  Generator g1(123), g2(123);
  AttentionConfig c = config(6);
  c.qkv_bias = true;
  MultiHeadAttention mha(c, g1);
  Linear q(6, 4, true, g2), k(6, 4, true, g2), v(6, 4, true, g2);
  EXPECT_EQ(mha.W_query.weight.to_vector(), q.weight.to_vector());
  EXPECT_EQ(mha.W_key.bias.to_vector(), k.bias.to_vector());
  EXPECT_EQ(mha.W_value.weight.to_vector(), v.weight.to_vector());
  EXPECT_TRUE(mha.W_query.weight.shares_storage(mha.W_value.weight));
  EXPECT_TRUE(mha.W_key.dweight.shares_storage(mha.W_query.dweight));
}

TEST(QkvWeights, AWeightChangedInPlaceIsWhatTheFusedPathReads) {
  Generator gen(7);
  AttentionConfig c = config(6);
  c.path = AttentionPath::kFused;
  MultiHeadAttention mha(c, gen);
  Tensor x = Tensor::ones({1, 3, 6});
  const std::vector<float> before = mha.forward(x).to_vector();
  mha.W_value.weight.data()[0] += 1.0f;  // as an optimiser step does, through the state dict's pointer
  EXPECT_NE(mha.forward(x).to_vector(), before);
}

TEST(QkvWeights, AReplacedMemberIsAClearErrorNotAStaleWeight) {
  Generator gen(8);
  AttentionConfig c = config(6);
  c.path = AttentionPath::kFused;
  MultiHeadAttention mha(c, gen);
  mha.W_key.weight = Tensor::zeros({4, 6});  // no longer a view of the fused weight
  try {
    mha.forward(Tensor::ones({1, 2, 6}));
    FAIL() << "the fused path read a weight the module no longer has";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("W_key"), std::string::npos) << e.what();
  }
}

TEST(QkvWeights, GradientsOfTwoBackwardsAddUpInTheLinears) {
  Generator gen(9);
  AttentionConfig c = config(6);
  c.path = AttentionPath::kFused;
  c.qkv_bias = true;
  MultiHeadAttention mha(c, gen);
  Tensor x = mul(Tensor::arange(36).view({2, 3, 6}), 0.1f);    // distinct tokens, so dk != 0
  Tensor dy = sub(mul(Tensor::arange(24).view({2, 3, 4}), 0.05f), Tensor::scalar(0.5f));
  mha.forward(x);
  mha.backward(dy);
  const std::vector<float> once = mha.W_key.dweight.to_vector(), once_b = mha.W_value.dbias.to_vector();
  mha.forward(x);
  mha.backward(dy);
  const std::vector<float> twice = mha.W_key.dweight.to_vector(), twice_b = mha.W_value.dbias.to_vector();
  bool nonzero = false;
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_FLOAT_EQ(twice[i], 2.0f * once[i]) << i;
    nonzero = nonzero || once[i] != 0.0f;
  }
  for (size_t i = 0; i < once_b.size(); ++i) EXPECT_FLOAT_EQ(twice_b[i], 2.0f * once_b[i]) << i;
  EXPECT_TRUE(nonzero);
}

}  // namespace
}  // namespace qkv
