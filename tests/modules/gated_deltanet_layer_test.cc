// Qwen3.5's linear-attention layer (modules/gated_deltanet_layer.h): its state in Hugging Face's
// names and order, every gradient against central differences of the forward, key heads shared by
// value heads equal to the same keys written out per value head, causality, and the bad configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/core/random_tensor.h"
#include "qkv/core/thread_pool.h"
#include "qkv/modules/gated_deltanet_layer.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::error_of;

// d_model 6, 4 value heads of 2, 2 key heads of 3, kernel 3
AttentionConfig small_config(int64_t key_heads = 2) { return gated_deltanet_config(6, 4, key_heads, 3, 2, 3, 16); }

TEST(GatedDeltaNetLayer, ItsStateIsHuggingFacesInItsOrder) {
  Generator gen(1);
  GatedDeltaNetLayer m(small_config(), gen);
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const StateEntry& e : m.state_dict()) {
    names.push_back(e.name);
    shapes.push_back(e.tensor->shape());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"dt_bias", "A_log", "conv1d.weight", "norm.weight", "out_proj.weight",
                                             "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
                                             "in_proj_a.weight"}));
  // conv channels 2 Kd + Vd = 2 * 6 + 8 = 20
  EXPECT_EQ(shapes, (std::vector<Shape>{{4}, {4}, {20, 1, 3}, {2}, {6, 8}, {20, 6}, {8, 6}, {4, 6}, {4, 6}}));
  for (float w : m.conv_weight.to_vector()) EXPECT_LE(std::fabs(w), 1.0f / std::sqrt(3.0f));  // nn.Conv1d's bound
}

// L = sum(out * g): every parameter's gradient and the input's against central differences.
TEST(GatedDeltaNetLayer, EveryGradientMatchesCentralDifferences) {
  Generator gen(2);
  GatedDeltaNetLayer m(small_config(), gen);
  for (const StateEntry& e : m.state_dict())  // weights of order 1, so that every path carries gradient
    if (e.name != "A_log") {
      Generator g(static_cast<uint64_t>(e.name.size()));
      const Tensor r = randn(e.tensor->shape(), g);
      for (int64_t i = 0; i < e.tensor->numel(); ++i) e.tensor->data()[i] += 0.5f * r.data()[i];
    }
  Generator data(3);
  Tensor x = randn({2, 5, 6}, data);
  const Tensor g = randn({2, 5, 6}, data);
  auto loss = [&] {
    const Tensor y = m.forward(x);
    double l = 0;
    for (int64_t i = 0; i < y.numel(); ++i) l += static_cast<double>(y.data()[i]) * g.data()[i];
    return l;
  };
  loss();
  const Tensor dx = m.backward(g);
  std::vector<std::pair<std::string, std::pair<Tensor*, const Tensor*>>> tensors = {{"input", {&x, &dx}}};
  for (const StateEntry& e : m.state_dict()) tensors.push_back({e.name, {e.tensor, e.grad}});
  for (const auto& [name, pair] : tensors) {
    Tensor& t = *pair.first;
    const Tensor& grad = *pair.second;
    double scale = 1;
    for (int64_t i = 0; i < grad.numel(); ++i) scale = std::max(scale, static_cast<double>(std::fabs(grad.data()[i])));
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float keep = t.data()[i], h = 2e-3f;
      t.data()[i] = keep + h;
      const double up = loss();
      t.data()[i] = keep - h;
      const double down = loss();
      t.data()[i] = keep;
      const double numeric = (up - down) / (static_cast<double>(keep + h) - static_cast<double>(keep - h));
      EXPECT_NEAR(grad.data()[i], numeric, 2e-3 * scale) << name << "[" << i << "]";
    }
  }
}

// Two key heads each shared by two value heads equal four key heads holding the same rows twice
// (in_proj_qkv's and conv1d's q and k channels copied per value head).
TEST(GatedDeltaNetLayer, SharedKeyHeadsEqualTheirCopiesPerValueHead) {
  Generator gen(4);
  GatedDeltaNetLayer shared(small_config(2), gen);
  GatedDeltaNetLayer copied(small_config(4), gen);
  for (const std::string name : {"dt_bias", "A_log", "norm.weight", "out_proj.weight", "in_proj_z.weight",
                                 "in_proj_b.weight", "in_proj_a.weight"}) {
    const auto find = [&](GatedDeltaNetLayer& m) {
      for (const StateEntry& e : m.state_dict())
        if (e.name == name) return e.tensor;
      return static_cast<Tensor*>(nullptr);
    };
    *find(copied) = find(shared)->clone();
  }
  // channels: shared q (2 heads x 3), k (2 x 3), v (8): 20; copied q (4 x 3), k (4 x 3), v (8): 32
  auto channel_of = [](int64_t c) {  // copied's channel -> shared's: head h of q or k is head h / 2's
    if (c < 12) return (c / 3 / 2) * 3 + c % 3;
    if (c < 24) return 6 + ((c - 12) / 3 / 2) * 3 + (c - 12) % 3;
    return c - 12;
  };
  for (int64_t c = 0; c < 32; ++c) {
    for (int64_t j = 0; j < 6; ++j)
      copied.in_proj_qkv.weight.data()[c * 6 + j] = shared.in_proj_qkv.weight.data()[channel_of(c) * 6 + j];
    for (int64_t i = 0; i < 3; ++i) copied.conv_weight.data()[c * 3 + i] = shared.conv_weight.data()[channel_of(c) * 3 + i];
  }
  Generator data(5);
  const Tensor x = randn({2, 7, 6}, data);
  EXPECT_LE(max_abs_diff(shared.forward(x), copied.forward(x)), 1e-6);
}

// The trace's weights are the recurrence's exact linear map on the values: y_t = sum_s A[t][s] v_s
// per head, A lower-triangular; and A is not the softmax of the scores (rows need not sum to 1).
TEST(GatedDeltaNetLayer, ItsTraceWeightsAreTheExactMapFromValuesToTheContext) {
  Generator gen(8);
  for (const int64_t key_heads : {int64_t{1}, int64_t{2}}) {
    GatedDeltaNetLayer m(small_config(key_heads), gen);
    Generator data(4);
    AttentionTrace trace;
    m.forward(randn({2, 7, 6}, data), &trace);
    const Tensor& A = trace.weights;  // (B, Hv, T, T)
    ASSERT_EQ(A.shape(), (Shape{2, 4, 7, 7}));
    const Tensor y = matmul(A, trace.values);  // (B, Hv, T, Dv)
    const double scale = max_abs_diff(trace.context, Tensor::zeros(trace.context.shape()));
    EXPECT_LE(max_abs_diff(y, trace.context), 1e-5 * std::max(1.0, scale));
    double above = 0, row_sum_gap = 0;
    for (int64_t t = 0; t < 7; ++t)
      for (int64_t s = t + 1; s < 7; ++s) above = std::max(above, static_cast<double>(std::fabs(A.at({1, 2, t, s}))));
    for (int64_t t = 0; t < 7; ++t) {
      double sum = 0;
      for (int64_t s = 0; s <= t; ++s) sum += A.at({0, 1, t, s});
      row_sum_gap = std::max(row_sum_gap, std::fabs(sum - 1.0));
    }
    EXPECT_EQ(above, 0.0);
    EXPECT_GT(row_sum_gap, 1e-3);
  }
}

TEST(GatedDeltaNetLayer, AnOutputDependsOnItsPastOnly) {
  Generator gen(6);
  GatedDeltaNetLayer m(small_config(), gen);
  Generator data(7);
  Tensor x = randn({1, 6, 6}, data);
  const Tensor before = m.forward(x).clone();
  for (int64_t j = 0; j < 6; ++j) x.data()[4 * 6 + j] += 1.0f;  // token 4 changes
  const Tensor after = m.forward(x);
  EXPECT_EQ(max_abs_diff(before.slice(1, 0, 4), after.slice(1, 0, 4)), 0.0);
  EXPECT_GT(max_abs_diff(before.slice(1, 4, 6), after.slice(1, 4, 6)), 1e-4);
}

// A prompt in pieces, then token by token, through the cache (its convolution inputs and state)
// equals one forward over the whole sequence: the pieces shorter and longer than the kernel.
TEST(GatedDeltaNetLayer, TheCachedFormInPiecesEqualsTheWholeForward) {
  Generator gen(8);
  // the last: value heads of 70, a state of two column blocks (64 and 6) in the cache
  for (const AttentionConfig& config : {small_config(1), small_config(2), gated_deltanet_config(6, 2, 1, 3, 70, 3, 16)}) {
    GatedDeltaNetLayer m(config, gen);
    const int64_t Hv = config.attention.heads, Dk = config.attention.head_dim, Dv = config.linear.value_dim;
    // decays near 1 (A_log = log(uniform(0, 16)) forgets most of a state in a token), so that what
    // the cache carries from one piece to the next shows in the output
    for (int64_t h = 0; h < Hv; ++h) m.A_log.data()[h] = -6.0f;
    Generator data(9);
    const Tensor x = randn({2, 9, 6}, data);
    const Tensor whole = m.forward(x).clone();
    GatedDeltaNetCache cache = m.new_cache(2);
    int64_t t = 0;
    for (const int64_t n : {4, 1, 2, 1, 1}) {
      const Tensor part = m.forward_cached(x.slice(1, t, t + n).contiguous(), cache);
      EXPECT_LE(max_abs_diff(part, whole.slice(1, t, t + n)), 1e-6) << "tokens " << t << ".." << t + n;
      t += n;
    }
    EXPECT_EQ(t, 9);
    EXPECT_EQ(cache.state.size(), static_cast<size_t>(2 * Hv * Dk * Dv));  // B Hv Dk Dv, whatever the length
  }
}

// The same on raw rows with the cache in the caller's floats (a hybrid model's KvCache state
// layer): the recurrence's state, then the convolution's last K - 1 inputs, zeros at the start.
TEST(GatedDeltaNetLayer, TheCachedFormOnACallersFloatsEqualsTheWholeForward) {
  Generator gen(8);
  GatedDeltaNetLayer m(small_config(2), gen);
  Generator data(9);
  const Tensor x = randn({2, 9, 6}, data);
  const Tensor whole = m.forward(x).clone();
  std::vector<float> cache(static_cast<size_t>(m.cache_floats(2)), 0.0f);
  EXPECT_EQ(m.cache_floats(2), 2 * 4 * 3 * 2 + 2 * (m.config.linear.conv_kernel - 1) * (2 * m.key_width() + m.value_width()));
  int64_t t = 0;
  for (const int64_t n : {4, 1, 2, 1, 1}) {
    const Tensor piece = x.slice(1, t, t + n).contiguous();
    std::vector<float> y(static_cast<size_t>(2 * n * 6));
    m.forward_cached(piece.data(), 2, n, y.data(), cache.data());
    EXPECT_LE(max_abs_diff(Tensor::from({2, n, 6}, y), whole.slice(1, t, t + n)), 1e-6) << "tokens " << t << ".." << t + n;
    t += n;
  }
}

// Two layers sharing their cached calls' working rows (as a model's do), prompts and steps
// interleaved, give the bits each gives working in its own, and the rows are the shared set's.
TEST(GatedDeltaNetLayer, LayersSharingTheirWorkingRowsGiveTheirOwnBits) {
  Generator gen(8);
  GatedDeltaNetLayer a(small_config(2), gen), b(small_config(1), gen);
  GatedDeltaNetLayer a_alone = a, b_alone = b;
  auto work = std::make_shared<GatedDeltaNetLayer::CachedWork>();
  a.share_cached_work(work);
  b.share_cached_work(work);
  Generator data(9);
  const Tensor x = randn({2, 9, 6}, data);
  std::vector<float> ca(static_cast<size_t>(a.cache_floats(2))), cb(static_cast<size_t>(b.cache_floats(2)));
  std::vector<float> ca_alone = ca, cb_alone = cb;
  int64_t t = 0;
  for (const int64_t n : {5, 1, 2, 1}) {
    const Tensor piece = x.slice(1, t, t + n).contiguous();
    std::vector<float> ya(static_cast<size_t>(2 * n * 6)), yb(ya.size()), ya_alone(ya.size()), yb_alone(ya.size());
    a.forward_cached(piece.data(), 2, n, ya.data(), ca.data());
    b.forward_cached(ya.data(), 2, n, yb.data(), cb.data());  // b reads a's output, as the next layer
    a_alone.forward_cached(piece.data(), 2, n, ya_alone.data(), ca_alone.data());
    b_alone.forward_cached(ya_alone.data(), 2, n, yb_alone.data(), cb_alone.data());
    EXPECT_EQ(ya, ya_alone) << t;
    EXPECT_EQ(yb, yb_alone) << t;
    EXPECT_EQ(ca, ca_alone) << t;
    EXPECT_EQ(cb, cb_alone) << t;
    t += n;
  }
  size_t held = 0;  // the shared rows hold the last call's (b's)
  for (const std::vector<float>& r : work->rows) held += r.size();
  EXPECT_GT(held, 0u);
}

// The layer splits its rows over the default pool (the convolution, SiLU, the norms): a prompt
// and steps after it give the same bits on one thread or three.
TEST(GatedDeltaNetLayer, OneThreadOrThreeGiveTheSameBits) {
  Generator gen(8);
  const GatedDeltaNetLayer m(gated_deltanet_config(6, 4, 1, 3, 2, 3, 64), gen);  // small_config's, 64 tokens
  Generator data(9);
  const Tensor x = randn({2, 23, 6}, data);  // 46 rows: several of the rows' tasks, and a short last one
  auto run = [&](int threads) {
    set_default_thread_count(threads);
    GatedDeltaNetLayer layer = m;
    std::vector<float> out = layer.forward(x).to_vector();
    GatedDeltaNetCache cache = layer.new_cache(2);
    for (const auto& [t, n] : {std::pair<int64_t, int64_t>{0, 21}, {21, 1}, {22, 1}}) {
      const std::vector<float> y = layer.forward_cached(x.slice(1, t, t + n).contiguous(), cache).to_vector();
      out.insert(out.end(), y.begin(), y.end());
    }
    return out;
  };
  const std::vector<float> one = run(1), three = run(3);
  set_default_thread_count(default_thread_count());
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], three[i]) << i;
}

TEST(GatedDeltaNetLayer, ACacheOfAnotherShapeAndABackwardAfterItAreRefused) {
  Generator gen(10);
  GatedDeltaNetLayer m(small_config(), gen);
  GatedDeltaNetLayer other(gated_deltanet_config(6, 4, 2, 3, 3, 3, 16), gen);
  GatedDeltaNetCache cache = other.new_cache(1);
  EXPECT_NE(error_of([&] { m.forward_cached(randn({1, 2, 6}, gen), cache); }).find("this layer's take"),
            std::string::npos);
  cache = m.new_cache(1);
  EXPECT_NE(error_of([&] { m.forward_cached(randn({2, 2, 6}, gen), cache); }).find("takes (1, T, 6)"),
            std::string::npos);
  m.forward(randn({1, 3, 6}, gen));
  m.forward_cached(randn({1, 2, 6}, gen), cache);
  EXPECT_NE(error_of([&] { m.backward(randn({1, 2, 6}, gen)); }).find("backward before forward"), std::string::npos);
  EXPECT_NE(error_of([&] { m.new_cache(0); }).find("at least 1, got 0"), std::string::npos);
  // token by token: the width and a token at least, before any cache is made
  EXPECT_NE(error_of([&] { m.forward_token_by_token(randn({1, 2, 5}, gen)); }).find("d_in = 6), got tensor (1, 2, 5)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m.forward_token_by_token(Tensor::zeros({0, 2, 6})); }).find("got tensor (0, 2, 6)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m.forward_token_by_token(randn({1, 0, 6}, gen)); }).find("T >= 1"), std::string::npos);
}

TEST(GatedDeltaNetLayer, BadConfigsAreRefusedNamingTheValue) {
  EXPECT_NE(error_of([] { gated_deltanet_config(6, 4, 3, 3, 2, 3, 16); })
                .find("the value heads (4) must be a multiple of the key heads (3)"),
            std::string::npos);
  EXPECT_NE(error_of([] { gated_deltanet_config(6, 4, 2, 3, 2, 0, 16); }).find("conv kernel 0"), std::string::npos);
  EXPECT_NE(error_of([] { gated_deltanet_config(6, 4, 2, 3, 0, 3, 16); }).find("value width 0"), std::string::npos);
  EXPECT_NE(error_of([] { gated_deltanet_config(6, 4, 2, 3, 2, 3, 0); }).find("context_length (0) must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([] { attention_config("gated-deltanet", 6, 8); }).find("use gated_deltanet_config"),
            std::string::npos);
  Generator gen(1);
  EXPECT_NE(error_of([&] { make_attention_module("mha", small_config(), gen); }).find("has no convolution"),
            std::string::npos);
  GatedDeltaNetLayer m(small_config(), gen);
  EXPECT_NE(error_of([&] { m.backward(randn({1, 2, 6}, gen)); }).find("backward before forward"), std::string::npos);
  EXPECT_NE(error_of([&] { m.forward(randn({1, 17, 6}, gen)); }).find("context_length is 16"), std::string::npos);
  EXPECT_NE(error_of([&] { m.forward(randn({1, 3, 5}, gen)); }).find("6"), std::string::npos);
}


// The layer in chunks (auto) and by the recurrence (textbook), drawn alike, over 70 tokens (two
// chunks): the same outputs within 1e-5 and every gradient within 1e-4 of its scale; and a prompt
// of 70 cached in chunks then one token by the recurrence, as the whole forward.
TEST(GatedDeltaNetLayer, TheChunkedFormEqualsTheRecurrenceInTheLayer) {
  AttentionConfig textbook = gated_deltanet_config(16, 4, 2, 8, 6, 3, 128);
  textbook.path = AttentionPath::kTextbook;
  AttentionConfig chunked = textbook;
  chunked.path = AttentionPath::kAuto;
  Generator g1(7), g2(7);
  GatedDeltaNetLayer a(chunked, g1), b(textbook, g2);
  Generator data(8);
  const Tensor x = randn({2, 71, 16}, data), dy = randn({2, 71, 16}, data);
  const Tensor ya = a.forward(x), yb = b.forward(x);
  EXPECT_LE(testing_support::relative_error(ya, yb), 1e-5);
  const Tensor dxa = a.backward(dy), dxb = b.backward(dy);
  auto check = [](const std::string& name, const Tensor& got, const Tensor& want) {
    const Tensor w = want.contiguous();
    double scale = 0;
    for (int64_t i = 0; i < w.numel(); ++i) scale = std::max(scale, static_cast<double>(std::fabs(w.data()[i])));
    EXPECT_GT(scale, 1e-3) << name;
    EXPECT_LE(max_abs_diff(got, want), 1e-4 * scale) << name;
  };
  check("input", dxa, dxb);
  const std::vector<StateEntry> ea = a.state_dict(), eb = b.state_dict();
  for (size_t i = 0; i < ea.size(); ++i) check(ea[i].name, *ea[i].grad, *eb[i].grad);
  GatedDeltaNetCache cache = a.new_cache(2);
  const Tensor prompt = a.forward_cached(x.slice(1, 0, 70).contiguous(), cache);
  const Tensor step = a.forward_cached(x.slice(1, 70, 71).contiguous(), cache);
  EXPECT_LE(testing_support::relative_error(prompt, yb.slice(1, 0, 70)), 1e-5);
  EXPECT_LE(testing_support::relative_error(step, yb.slice(1, 70, 71)), 1e-5);
}


// bf16 decoding: each of the five products read from its own bf16 copy. Against the same layer with
// its float weights rounded to those bf16 values (the products then differ by the activations'
// rounding only): within 1e-2 of the outputs' scale, where a copy in another product's place (b's
// and a's, both (Hv, M)) is far off; and the copies are read (the float weights moved after the
// copies were made change nothing).
TEST(GatedDeltaNetLayer, Bf16CopiesServeTheirOwnProducts) {
  Generator gen(4);
  GatedDeltaNetLayer m(gated_deltanet_config(16, 4, 2, 8, 6, 3, 64), gen);
  for (const StateEntry& e : m.state_dict())  // weights of order 1, so that every product matters
    if (e.name != "A_log") {
      Generator g(std::hash<std::string>{}(e.name));  // (in_proj_a's and in_proj_b's differ)
      const Tensor r = randn(e.tensor->shape(), g);
      for (int64_t i = 0; i < e.tensor->numel(); ++i) e.tensor->data()[i] = 0.5f * r.data()[i];
    }
  std::vector<std::vector<uint16_t>> copies;
  for (const Linear* p : m.products()) {
    std::vector<uint16_t> c(static_cast<size_t>(p->weight.numel()));
    for (size_t i = 0; i < c.size(); ++i) c[i] = float_to_bf16(p->weight.data()[i]);
    copies.push_back(c);
  }
  const std::vector<const Linear*> products = m.products();
  for (size_t k = 0; k < products.size(); ++k)  // the float weights become the copies' values
    for (int64_t i = 0; i < products[k]->weight.numel(); ++i)
      const_cast<float*>(products[k]->weight.data())[i] = bf16_to_float(copies[k][static_cast<size_t>(i)]);
  Generator data(9);
  const Tensor x = randn({2, 5, 16}, data);
  auto run = [&](const GatedDeltaNetLayer::Weights16* w16) {
    std::vector<float> cache(static_cast<size_t>(m.cache_floats(2)), 0.0f);
    std::vector<float> y(2 * 5 * 16);
    m.forward_cached(x.data(), 2, 5, y.data(), cache.data(), w16);
    return Tensor::from({2, 5, 16}, y);
  };
  const Tensor want = run(nullptr);
  const GatedDeltaNetLayer::Weights16 w16{copies[0].data(), copies[1].data(), copies[2].data(), copies[3].data(),
                                          copies[4].data()};
  EXPECT_LE(testing_support::relative_error(run(&w16), want), 1e-2);
  const GatedDeltaNetLayer::Weights16 swapped{copies[0].data(), copies[1].data(), copies[3].data(), copies[2].data(),
                                              copies[4].data()};
  EXPECT_GT(testing_support::relative_error(run(&swapped), want), 5e-2);
  for (const Linear* p : products) const_cast<float*>(p->weight.data())[0] += 1.0f;
  const Tensor moved = run(nullptr);
  EXPECT_GT(testing_support::relative_error(moved, want), 1e-3);
  EXPECT_LE(testing_support::relative_error(run(&w16), want), 1e-2);
}

}  // namespace
}  // namespace qkv
