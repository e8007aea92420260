// Qwen3.5's output gate packed in the query projection (AttentionConfig::gate_in_query): one
// parameter (2 d_out, d_in) holds each head's D query rows then its D gate rows, drawn as one
// Linear where W_query is drawn (the book's Qwen3.5 class). Checked against the gated module with
// a separate W_gate holding the same rows: forward on both paths, the packed gradient (each row
// block where it belongs, accumulating over backward calls), a change to the packed weight seen
// by the next forward, cached decoding; and the draws seed for seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/modules/multi_head_attention.h"
#include "test_support.h"

namespace qkv {
namespace {

constexpr int64_t kGateE = 6, kGateH = 4, kGateD = 3, kGateG = 2;

AttentionConfig gated_config(bool packed, AttentionPath path) {
  AttentionConfig c = attention_config("gated-mha", kGateE, kGateH * kGateD, 16, 0.0, kGateH, false);
  c.attention.kv_heads = kGateG;
  c.attention.rope = kernels::RopeLayout::kHalf;
  c.attention.rope_dim = 2;
  c.attention.qk_norm = true;
  c.gate_in_query = packed;
  c.out_bias = false;
  c.path = path;
  return c;
}

// Row r of head h's block in the packed (2 H D, E) weight: its query rows, then its gate rows.
Tensor packed_rows(const Tensor& packed, bool gate) {
  Tensor out = Tensor::empty({kGateH * kGateD, packed.size(1)});
  for (int64_t h = 0; h < kGateH; ++h)
    for (int64_t r = 0; r < kGateD; ++r)
      for (int64_t c = 0; c < packed.size(1); ++c)
        out.at({h * kGateD + r, c}) = packed.at({(2 * h + (gate ? 1 : 0)) * kGateD + r, c});
  return out;
}

TEST(PackedGateMha, DrawsThePackedRowsAsOneLinearSeedForSeed) {
  Generator g1(7), g2(7);
  MultiHeadAttention m(gated_config(true, AttentionPath::kAuto), g1);
  const Linear packed(kGateE, 2 * kGateH * kGateD, false, g2), key(kGateE, kGateG * kGateD, false, g2), value(kGateE, kGateG * kGateD, false, g2);
  ASSERT_TRUE(m.q_and_gate.has_value());
  EXPECT_EQ(max_abs_diff(m.q_and_gate->weight, packed.weight), 0.0);
  EXPECT_EQ(max_abs_diff(m.W_key.weight, key.weight), 0.0);
  EXPECT_EQ(max_abs_diff(m.W_value.weight, value.weight), 0.0);
  EXPECT_EQ(max_abs_diff(m.W_query.weight, packed_rows(packed.weight, false)), 0.0);  // unpacked when drawn
  EXPECT_EQ(max_abs_diff(m.W_gate->weight, packed_rows(packed.weight, true)), 0.0);
  std::vector<std::string> names;
  for (const StateEntry& e : m.state_dict()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mask", "W_query.weight", "W_key.weight", "W_value.weight",
                                             "out_proj.weight", "q_norm.weight", "k_norm.weight"}));
}

TEST(PackedGateMha, EqualsTheSeparateGateForwardBackwardAndDecoding) {
  const int64_t B = 2, T = 8;
  Generator data(3);
  const Tensor x = randn({B, T, kGateE}, data), dy = randn({B, T, kGateH * kGateD}, data);
  for (AttentionPath path : {AttentionPath::kTextbook, AttentionPath::kFused}) {
    Generator g1(5), g2(5);
    MultiHeadAttention packed(gated_config(true, path), g1), separate(gated_config(false, path), g2);
    separate.W_query.weight.copy_from(packed_rows(packed.q_and_gate->weight, false));
    separate.W_gate->weight.copy_from(packed_rows(packed.q_and_gate->weight, true));
    for (Linear* l : {&separate.W_key, &separate.W_value, &separate.out_proj}) {
      const Linear& p = l == &separate.W_key ? packed.W_key : l == &separate.W_value ? packed.W_value : packed.out_proj;
      l->weight.copy_from(p.weight);
    }
    const Tensor y = packed.forward(x);
    EXPECT_LE(max_abs_diff(y, separate.forward(x)), 1e-6);
    EXPECT_LE(max_abs_diff(packed.backward(dy), separate.backward(dy)), 1e-6);
    const Tensor dq = packed_rows(packed.q_and_gate->dweight, false), dg = packed_rows(packed.q_and_gate->dweight, true);
    EXPECT_LE(max_abs_diff(dq, separate.W_query.dweight), 1e-6);
    EXPECT_LE(max_abs_diff(dg, separate.W_gate->dweight), 1e-6);
    EXPECT_GT(max_abs_diff(dg, Tensor::zeros(dg.shape())), 1e-3);
    // a second backward adds the same again (PyTorch's .grad), no more
    packed.forward(x);
    packed.backward(dy);
    EXPECT_LE(max_abs_diff(packed_rows(packed.q_and_gate->dweight, true), mul(dg, 2.0f)), 1e-5);
    // a change to the packed parameter (a loaded state, an optimizer's step) is what the next forward reads
    packed.q_and_gate->weight.copy_from(mul(packed.q_and_gate->weight, 0.5f));
    separate.W_query.weight.copy_from(mul(separate.W_query.weight, 0.5f));
    separate.W_gate->weight.copy_from(mul(separate.W_gate->weight, 0.5f));
    const Tensor halved = packed.forward(x);
    EXPECT_LE(max_abs_diff(halved, separate.forward(x)), 1e-6);
    EXPECT_GT(max_abs_diff(halved, y), 1e-3);
    // cached decoding: a prompt of 3, then one token at a time
    packed.eval();
    kernels::KvCache cache(1, B, kGateG, T, kGateD, kGateD, kernels::CacheDtype::kF32);
    double worst = 0;
    for (int64_t t = 0; t < T; t += t == 0 ? 3 : 1) {
      const int64_t n = t == 0 ? 3 : 1;
      const Tensor step = packed.forward_cached(x.slice(1, t, t + n).contiguous(), cache, 0);
      cache.commit();
      worst = std::max(worst, max_abs_diff(step, halved.slice(1, t, t + n)));
    }
    EXPECT_LE(worst, 1e-5);
  }
}

TEST(PackedGateMha, APackedGateWithoutAGateIsRefused) {
  AttentionConfig c = attention_config("mha", kGateE, kGateH * kGateD, 16, 0.0, kGateH, false);
  c.gate_in_query = true;
  Generator gen(1);
  EXPECT_NE(testing_support::error_of([&] { MultiHeadAttention m(c, gen); })
                .find("gate_in_query packs the output gate's rows with the queries', but the config has no output gate"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
