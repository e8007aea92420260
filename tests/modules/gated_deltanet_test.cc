// GatedDeltaNet (modules/gated_deltanet.h): its state (names, shapes, the drawn A_log), a state that
// forgets everything (alpha = 0) reduces each token to its own delta, and the bad configs. The
// computation itself against the PyTorch class: tests/pytorch's forward and backward differentials
// (module deltanet; gradients against the class in float64).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/modules/gated_deltanet.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::error_of;

TEST(GatedDeltaNet, ItsStateIsTheBookClasssInPyTorchsOrder) {
  Generator gen(123);
  GatedDeltaNet m(attention_config("deltanet", 5, 8, 6, 0.0, 2, true), gen);
  std::vector<std::string> names;
  for (const StateEntry& e : m.state_dict()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"dt_bias", "A_log", "W_query.weight", "W_query.bias", "W_key.weight",
                                             "W_key.bias", "W_value.weight", "W_value.bias", "W_gate.weight",
                                             "W_beta.weight", "W_alpha.weight", "norm.weight", "out_proj.weight",
                                             "out_proj.bias"}));
  EXPECT_EQ(m.W_alpha.weight.shape(), (Shape{2, 5}));
  EXPECT_EQ(m.norm.weight.shape(), (Shape{4}));
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(m.dt_bias.data()[h], 1.0f);
    EXPECT_LT(m.A_log.data()[h], std::log(16.0f) + 1e-6f);  // log of a uniform(0, 16) draw
  }
}

TEST(GatedDeltaNet, WithNoMemoryEachTokenReadsOnlyItsOwnUpdate) {
  // alpha = exp(-exp(A_log) softplus(...)) -> 0 when A_log is huge: S_t = k_t delta_t^T with
  // delta_t = v_t beta_t, so y_t = (k_t . q_t) v_t beta_t. Then T tokens at once equal T runs of one.
  Generator gen(7);
  GatedDeltaNet m(attention_config("deltanet", 3, 4, 5, 0.0, 2), gen);
  for (int64_t h = 0; h < 2; ++h) m.A_log.data()[h] = 80.0f;
  Generator data(8);
  const Tensor x = randn({1, 5, 3}, data);
  const Tensor all = m.forward(x);
  for (int64_t t = 0; t < 5; ++t) {
    const Tensor one = m.forward(x.slice(1, t, t + 1).contiguous());
    EXPECT_LE(max_abs_diff(all.slice(1, t, t + 1), one), 1e-6) << "token " << t;
  }
  // and with memory, a later token depends on the earlier ones
  m.A_log.data()[0] = m.A_log.data()[1] = 0.0f;
  const Tensor remembered = m.forward(x);
  EXPECT_GT(max_abs_diff(remembered.slice(1, 4, 5), m.forward(x.slice(1, 4, 5).contiguous())), 1e-4);
}

TEST(GatedDeltaNet, BadConfigsAreRefusedNamingTheValue) {
  Generator gen(1);
  AttentionConfig fused = attention_config("deltanet", 4, 8, 6, 0.0, 2);
  fused.path = AttentionPath::kFused;
  EXPECT_NE(error_of([&] { make_attention_module("deltanet", fused, gen); }).find("token-by-token recurrence only"),
            std::string::npos);
  EXPECT_NE(error_of([&] { attention_config("deltanet", 4, 9, 6, 0.0, 2); }).find("d_out (9) must be divisible"),
            std::string::npos);
  AttentionConfig window = attention_config("deltanet", 4, 8, 6, 0.0, 2);
  window.attention.window = 2;
  EXPECT_NE(error_of([&] { make_attention_module("deltanet", window, gen); }).find("takes no variants"),
            std::string::npos);
  GatedDeltaNet m(attention_config("deltanet", 4, 8, 6, 0.0, 2), gen);
  EXPECT_NE(error_of([&] { m.backward(randn({1, 2, 8}, gen)); }).find("backward before forward"), std::string::npos);
  EXPECT_NE(error_of([&] { m.forward(randn({1, 7, 4}, gen)); }).find("context_length is 6"), std::string::npos);
}

}  // namespace
}  // namespace qkv
