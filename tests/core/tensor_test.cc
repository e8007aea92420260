// The tensor core: views share storage, ops agree with PyTorch (tests/data/op_fixtures.json, made
// by tests/pytorch/make_op_fixtures.py), tensors print as PyTorch prints them, and misuse throws
// an Error that says what was expected.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/core/print.h"
#include "qkv/io/tensor_json.h"
#include "test_support.h"
#include "test_json.h"

namespace qkv {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const json& op_fixtures() {
  static const json doc = testing_support::load_python_json(std::string(QKV_TEST_DATA_DIR) + "/op_fixtures.json");
  return doc;
}

using testing_support::error_of;

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << what;
  std::vector<float> g = got.to_vector(), w = want.to_vector();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " [" << i << "]";
    } else if (std::isinf(w[i])) {
      EXPECT_EQ(g[i], w[i]) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(g[i], w[i], tol * std::max(1.0f, std::fabs(w[i]))) << what << " [" << i << "]";
    }
  }
}

TEST(TensorPrint, MatchesPyTorchForEveryFixture) {
  int n = 0;
  for (const json& p : op_fixtures()["prints"]) {
    Tensor t = tensor_from_json(p["tensor"]);
    EXPECT_EQ(to_string(t), p["str"].get<std::string>()) << "shape " << shape_str(t.shape());
    ++n;
  }
  EXPECT_GE(n, 20);
}

TEST(TensorOps, MatchPyTorchForEveryFixture) {
  int n = 0;
  for (const json& c : op_fixtures()["ops"]) {
    std::vector<Tensor> in;
    for (const json& t : c["inputs"]) in.push_back(tensor_from_json(t));
    Tensor want = tensor_from_json(c["output"]);
    const std::string op = c["op"];
    const int dim = c.contains("dim") ? c["dim"].get<int>() : 0;
    Tensor got;
    if (op == "matmul") got = matmul(in[0], in[1]);
    else if (op == "add") got = in[0] + in[1];
    else if (op == "sub") got = in[0] - in[1];
    else if (op == "mul") got = in[0] * in[1];
    else if (op == "div") got = in[0] / in[1];
    else if (op == "softmax") got = softmax(in[0], dim);
    else if (op == "sum") got = sum(in[0], dim);
    else if (op == "sum_keepdim") got = sum(in[0], dim, true);
    else if (op == "max") got = max(in[0], dim);
    else if (op == "mean") got = mean(in[0], dim);
    else if (op == "tril") got = tril(in[0], c["diagonal"].get<int64_t>());
    else if (op == "triu") got = triu(in[0], c["diagonal"].get<int64_t>());
    else if (op == "masked_fill") got = masked_fill(in[0], in[1], -std::numeric_limits<float>::infinity());
    else if (op == "cat") got = cat(in, dim);
    else if (op == "stack") got = stack(in, dim);
    else if (op == "cosine") got = cosine_similarity(in[0], in[1]);
    else if (op == "exp") got = exp(in[0]);
    else if (op == "neg") got = neg(in[0]);
    else FAIL() << "unknown op in fixtures: " << op;
    expect_close(got, want, 2e-6, op + " case " + std::to_string(n));
    ++n;
  }
  EXPECT_GE(n, 90);
}

TEST(TensorViews, TransposeSelectSliceShareStorage) {
  Tensor a = Tensor::from({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor t = a.transpose(0, 1);
  EXPECT_TRUE(t.shares_storage(a));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.at({2, 1}), 6.0f);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  a.at({1, 2}) = 60.0f;
  EXPECT_EQ(t.at({2, 1}), 60.0f);  // a view sees writes through its base
  Tensor row = a.select(0, 1);
  EXPECT_EQ(row.to_vector(), (std::vector<float>{4, 5, 60}));
  Tensor cols = a.slice(1, 1, 3);
  EXPECT_EQ(cols.to_vector(), (std::vector<float>{2, 3, 5, 60}));
  EXPECT_EQ(a.slice(1, -2, 100).to_vector(), cols.to_vector());  // clamped like Python
  EXPECT_EQ(a.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(a.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(a.view({3, -1}).shape(), (Shape{3, 2}));
  Tensor c = t.contiguous();
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(c.to_vector(), t.to_vector());
}

TEST(TensorViews, ViewOutlivesTemporaryBase) {
  Tensor v = Tensor::from({2, 2}, {1, 2, 3, 4}).transpose(0, 1).select(0, 1);
  EXPECT_EQ(v.to_vector(), (std::vector<float>{2, 4}));
}

TEST(TensorViews, HeadSplitIsAView) {
  // (B, T, d_out) -> (B, T, H, D) -> (B, H, T, D), as MultiHeadAttention splits heads.
  Tensor x = Tensor::arange(2 * 3 * 4).view({2, 3, 4});
  Tensor heads = x.view({2, 3, 2, 2}).transpose(1, 2);
  EXPECT_TRUE(heads.shares_storage(x));
  EXPECT_EQ(heads.shape(), (Shape{2, 2, 3, 2}));
  EXPECT_EQ(heads.at({1, 1, 2, 0}), x.at({1, 2, 2}));
  EXPECT_EQ(heads.transpose(1, 2).reshape({2, 3, 4}).to_vector(), x.to_vector());
}

TEST(TensorErrors, SayWhatWasExpected) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  EXPECT_THAT(error_of([&] { matmul(a, b); }), HasSubstr("(2, 3) and (4, 5) cannot be multiplied"));
  EXPECT_THAT(error_of([&] { add(a, b); }), HasSubstr("(2, 3) and (4, 5) cannot be broadcast"));
  EXPECT_THAT(error_of([&] { a.transpose(0, 1).view({6}); }), HasSubstr("not contiguous"));
  EXPECT_THAT(error_of([&] { a.view({4, 2}); }), HasSubstr("cannot view"));
  EXPECT_THAT(error_of([&] { a.select(0, 2); }), HasSubstr("index 2 out of range"));
  EXPECT_THAT(error_of([&] { a.transpose(0, 2); }), HasSubstr("dimension 2 is out of range"));
  EXPECT_THAT(error_of([&] { Tensor::from({2, 2}, {1, 2, 3}); }), HasSubstr("needs 4 values, got 3"));
  EXPECT_THAT(error_of([&] { cat({a, b}, 0); }), HasSubstr("does not match"));
  EXPECT_THAT(error_of([&] { stack({a, b}, 0); }), HasSubstr("does not match"));
  EXPECT_THAT(error_of([&] { a.item(); }), HasSubstr("has 6 elements, expected 1"));
  EXPECT_THAT(error_of([&] { Tensor::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}); }), HasSubstr("at most 8 dimensions"));
}

TEST(Shape, ReadsLikeAVectorHeldInline) {
  Shape s{2, 3};
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(sizeof(Shape), sizeof(int64_t) * kMaxRank + 8);  // inline: no pointer to a heap block
  s.push_back(4);
  s.insert(s.begin(), 1);                   // (1, 2, 3, 4)
  s.insert(s.end() - 1, {7, 8});            // (1, 2, 3, 7, 8, 4)
  EXPECT_EQ(s, (Shape{1, 2, 3, 7, 8, 4}));
  s.erase(s.begin() + 3);
  EXPECT_EQ(s, (Shape{1, 2, 3, 8, 4}));
  EXPECT_EQ(s.back(), 4);
  EXPECT_NE(s, (Shape{1, 2, 3, 8}));
  EXPECT_EQ(Shape(std::vector<int64_t>{5, 6}), (Shape{5, 6}));
  EXPECT_EQ(Shape(3), (Shape{0, 0, 0}));  // a count, as std::vector(3)
  EXPECT_EQ(Shape(s.begin() + 1, s.end() - 1), (Shape{2, 3, 8}));
  EXPECT_EQ(s.to_vector(), (std::vector<int64_t>{1, 2, 3, 8, 4}));
  EXPECT_TRUE(Shape().empty());
}

TEST(Shape, RankAboveTheMaximumIsAnErrorNamingTheRank) {
  Shape s(static_cast<size_t>(kMaxRank), 1);
  EXPECT_THAT(error_of([&] { s.push_back(1); }), HasSubstr("would have rank 9"));
  EXPECT_THAT(error_of([&] { s.insert(s.begin(), {1, 1}); }), HasSubstr("would have rank 10"));
  EXPECT_THAT(error_of([] { Shape(std::vector<int64_t>(12, 1)); }), HasSubstr("would have rank 12"));
  EXPECT_THAT(error_of([] { Tensor::zeros({1, 1}).unsqueeze(0).view({1, 1, 1, 1, 1, 1, 1, 1, 1}); }),
              HasSubstr("at most 8 dimensions"));
  EXPECT_EQ(s.size(), static_cast<size_t>(kMaxRank));  // unchanged by the failed growth
}

TEST(UndefinedTensor, IsAbsentAndDistinctFromAnEmptyTensor) {
  const Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_EQ(u.data(), nullptr);
  EXPECT_EQ(u.numel(), 0);
  EXPECT_EQ(u.dim(), 1);
  EXPECT_EQ(u.shape(), (Shape{0}));
  EXPECT_EQ(u.describe(), "undefined tensor (0)");
  EXPECT_EQ(to_string(u), "tensor(undefined)");
  EXPECT_FALSE(u.shares_storage(Tensor()));
  // A defined tensor with no elements (a batch of B = 0 or T = 0) is a tensor like any other.
  const Tensor e = Tensor::zeros({0, 3});
  EXPECT_TRUE(e.defined());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.transpose(0, 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(matmul(e, Tensor::zeros({3, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(e.to_vector(), std::vector<float>{});
  EXPECT_EQ(to_string(e), "tensor([], size=(0, 3))");
}

TEST(UndefinedTensor, WhatNeedsDataSaysTheTensorIsUndefined) {
  Tensor u;
  u.set_name("bias");
  const Tensor x = Tensor::zeros({2, 3});
  for (const auto& [what, f] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"transpose", [&] { u.transpose(0, 0); }},
           {"T", [&] { u.T(); }},
           {"select", [&] { u.select(0, 0); }},
           {"slice", [&] { u.slice(0, 0, 0); }},
           {"unsqueeze", [&] { u.unsqueeze(0); }},
           {"view", [&] { u.view({0}); }},
           {"expand", [&] { u.expand({2, 0}); }},
           {"contiguous", [&] { u.contiguous(); }},
           {"clone", [&] { u.clone(); }},
           {"item", [&] { u.item(); }},
           {"to_vector", [&] { u.to_vector(); }},
           {"add", [&] { add(x, u); }},
           {"matmul", [&] { matmul(u, x); }},
           {"masked_fill", [&] { masked_fill(x, u, 0.0f); }},
           {"cat", [&] { cat({u, u}, 0); }},
           {"copy_from", [&] { Tensor::zeros({0}).copy_from(u); }}}) {
    EXPECT_THAT(error_of(f), HasSubstr(what + ": the tensor 'bias' is undefined")) << what;
  }
  EXPECT_THAT(error_of([&] { sum(Tensor(), 0); }), HasSubstr("sum: the tensor is undefined"));
}

TEST(UndefinedTensor, JsonSaysNullBothWays) {
  EXPECT_TRUE(tensor_to_json(Tensor()).is_null());
  EXPECT_FALSE(tensor_from_json(nullptr).defined());
  EXPECT_EQ(tensor_to_json(Tensor::zeros({0})).dump(), R"({"data":[],"shape":[0]})");
  EXPECT_TRUE(tensor_from_json(tensor_to_json(Tensor::zeros({0}))).defined());
}

TEST(UndefinedTensor, MaxAbsDiffTreatsTwoAbsentTensorsAsEqual) {
  EXPECT_EQ(max_abs_diff(Tensor(), Tensor()), 0.0);
  EXPECT_TRUE(std::isnan(max_abs_diff(Tensor(), Tensor::zeros({0}))));
}

TEST(TensorName, ViewsShareItAndRenamingAViewLeavesTheBase) {
  Tensor a = Tensor::zeros({2, 3});
  a.set_name("a name longer than the small-string buffer");
  const Tensor v = a.transpose(0, 1);
  EXPECT_EQ(&v.name(), &a.name());  // the same string, not a copy
  EXPECT_EQ(v.describe(), "tensor 'a name longer than the small-string buffer' (3, 2)");
  Tensor w = a.select(0, 0);
  w.set_name("row");
  EXPECT_EQ(w.describe(), "tensor 'row' (3)");
  EXPECT_EQ(a.name(), "a name longer than the small-string buffer");
  EXPECT_EQ(a.clone().name(), a.name());
  EXPECT_EQ(Tensor::zeros({1}).describe(), "tensor (1)");
}


TEST(Softmax, FullyMaskedRowGivesZerosNotNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor s = Tensor::from({2, 3}, {-inf, -inf, -inf, 0.0f, -inf, 1.0f});
  Tensor w = softmax(s, -1);
  EXPECT_EQ(w.to_vector()[0], 0.0f);
  EXPECT_EQ(w.to_vector()[1], 0.0f);
  EXPECT_EQ(w.to_vector()[2], 0.0f);
  EXPECT_NEAR(w.at({1, 0}) + w.at({1, 2}), 1.0f, 1e-6);
  EXPECT_EQ(w.at({1, 1}), 0.0f);
}

// A NaN anywhere in a row makes the row NaN, as torch.softmax: not passed over by the max, and a
// row of NaN and -inf not taken for a masked one (zeros). A model with a NaN weight then has NaN
// logits, which generation refuses, rather than finite ones.
TEST(Softmax, ANaNMakesItsRowNaNAsPyTorch) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  Tensor s = Tensor::from({4, 3}, {nan, -inf, -inf, -inf, nan, -inf, 1.0f, nan, 0.5f, 0.0f, 1.0f, 2.0f});
  const std::vector<float> w = softmax(s, -1).to_vector();
  for (size_t i = 0; i < 9; ++i) EXPECT_TRUE(std::isnan(w[i])) << "entry " << i;
  for (size_t i = 9; i < 12; ++i) EXPECT_TRUE(std::isfinite(w[i])) << "entry " << i << " of the row without NaN";
}

TEST(Softmax, StableWhereNaiveOverflows) {
  Tensor s = Tensor::from({3}, {1000.0f, 1000.0f, 0.0f});
  EXPECT_NEAR(softmax(s, 0).at({0}), 0.5f, 1e-6);
  EXPECT_TRUE(std::isnan(softmax_naive(s, 0).at({0})));  // inf / inf, as exp(x)/exp(x).sum() gives
}

// A saturated row: one weight near 1 and 40 small ones. Summed in float, each small weight added
// to the 1 rounds at 1's size (here about half an ulp each time, 40 times); the weights then carry
// that error, and a backward through them amplifies it. Each weight within 2 ulps of the row's
// softmax in double.
TEST(Softmax, ASaturatedRowIsRoundedOnceNotOncePerWeight) {
  std::vector<float> row(41, -11.84f);  // e^-11.84: about 60.5 ulps of 1
  row[0] = 0.0f;
  const Tensor y = softmax(Tensor::from({41}, row), 0);
  double total = 0.0;
  for (float x : row) total += std::exp(static_cast<double>(x));
  for (size_t j = 0; j < row.size(); ++j) {
    const double want = std::exp(static_cast<double>(row[j])) / total;
    EXPECT_LE(std::abs(y.at({static_cast<int64_t>(j)}) - want), 0x1p-22 * want) << j;
  }
}

// dx = y (dy - sum(y dy)) on a saturated row: there dy_0 and the sum are nearly equal, and their
// difference is what the gradient is made of. Each dx within 2 roundings of its own size of the
// formula in double on the same y and dy (a float sum, rounded at dy's size, is off by ~1%).
TEST(Softmax, BackwardOnASaturatedRowKeepsTheDifferenceExact) {
  std::vector<float> row(41, -11.84f), dy(41);
  row[0] = 0.0f;
  for (size_t j = 0; j < dy.size(); ++j) dy[j] = 50.0f - 0.37f * static_cast<float>(j);
  const Tensor y = softmax(Tensor::from({41}, row), 0);
  const Tensor dx = softmax_backward(y, Tensor::from({41}, dy), 0);
  double dot = 0.0;
  for (int64_t j = 0; j < 41; ++j) dot += static_cast<double>(y.at({j})) * dy[static_cast<size_t>(j)];
  for (int64_t j = 0; j < 41; ++j) {
    const double want = y.at({j}) * (dy[static_cast<size_t>(j)] - dot);
    EXPECT_LE(std::abs(dx.at({j}) - want), 0x1p-22 * std::abs(want)) << j;
  }
}

// Storage of 1 MiB and more is kept when freed and handed out again for the same rounded size;
// smaller storage and Tensor::zeros never come from it; the limit bounds what is kept.
TEST(TensorBlockCache, AFreedBlockServesTheNextRequestOfItsSize) {
  release_tensor_block_cache();
  set_tensor_block_cache_limit(size_t{64} << 20);
  const Shape big{512, 1024};  // 2 MiB
  const float* first = nullptr;
  {
    Tensor t = Tensor::full(big, 7.0f);
    first = t.data();
    EXPECT_EQ(tensor_block_cache_bytes(), 0u);
  }
  EXPECT_EQ(tensor_block_cache_bytes(), size_t{2} << 20);
  {
    Tensor other = Tensor::empty({300, 1024});  // another rounded size: not this block
    EXPECT_NE(other.data(), first);
    EXPECT_EQ(tensor_block_cache_bytes(), size_t{2} << 20);
    Tensor z = Tensor::zeros(big);  // zeros are fresh pages, whatever is kept
    EXPECT_NE(z.data(), first);
    for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.data()[i], 0.0f) << i;
    Tensor again = Tensor::empty({1024, 512});  // same bytes, another shape: the kept block
    EXPECT_EQ(again.data(), first);
    EXPECT_EQ(tensor_block_cache_bytes(), 0u);
  }
  // Both kept now: 2 MiB, and (300, 1024) floats (1,200 KiB) rounded up to 19 x 64 KiB.
  EXPECT_EQ(tensor_block_cache_bytes(), (size_t{2048} + 1216) << 10);
  // A limit below what is kept frees it all; nothing is kept past the limit.
  set_tensor_block_cache_limit(size_t{1} << 20);
  EXPECT_EQ(tensor_block_cache_bytes(), 0u);
  { Tensor t = Tensor::empty(big); }
  EXPECT_EQ(tensor_block_cache_bytes(), 0u);
  { Tensor small = Tensor::empty({100, 100}); }  // 40 KB: plain malloc, never kept
  EXPECT_EQ(tensor_block_cache_bytes(), 0u);
  set_tensor_block_cache_limit(size_t{1} << 30);
  release_tensor_block_cache();
}

}  // namespace
}  // namespace qkv
