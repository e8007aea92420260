// The layer-level backward passes (and RMSNorm's and SwiGLU's forwards) against PyTorch autograd: tests/data/grad_fixtures.json, made by
// tests/pytorch/make_grad_fixtures.py (100 random configurations per module). The attention
// classes are checked end to end by tests/pytorch/test_backward_differential.py through
// `qkv forward --grad-output`; these modules have no command of their own.
//
// Gradients must agree within max|qkv - torch| / max(1, max|torch|) <= 1e-4, and Dropout's mask
// must be PyTorch's (the same seed draws the same mask), so the zeros of dx must be where
// PyTorch's are.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "qkv/core/generator.h"
#include "qkv/core/ops.h"
#include "qkv/io/tensor_json.h"
#include "qkv/modules/feed_forward.h"
#include "qkv/modules/layer_norm.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/sdpa.h"
#include "qkv/train/loss.h"
#include "test_json.h"

namespace qkv {
namespace {

using nlohmann::json;

const json& backward_fixtures() {
  static const json doc = testing_support::load_python_json(std::string(QKV_TEST_DATA_DIR) + "/grad_fixtures.json");
  return doc;
}

constexpr double kTolerance = 1e-4;

// Relative error as the differential tests measure it; records the worst per module.
class Worst {
 public:
  explicit Worst(const char* module) : module_(module) {}
  ~Worst() { std::printf("  vs PyTorch autograd, %s: %d cases, worst relative error %.2g\n", module_, cases_, worst_); }
  void compare(const Tensor& got, const json& want_json, const std::string& what) {
    Tensor want = tensor_from_json(want_json);
    ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << what;
    std::vector<float> g = got.to_vector(), w = want.to_vector();
    double diff = 0.0, scale = 1.0;
    for (size_t i = 0; i < g.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(g[i]) - w[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
    }
    const double rel = diff / scale;
    worst_ = std::max(worst_, rel);
    EXPECT_LE(rel, kTolerance) << what;
  }
  void next_case() { ++cases_; }

 private:
  const char* module_;
  double worst_ = 0.0;
  int cases_ = 0;
};

Tensor T(const json& j) { return tensor_from_json(j); }

TEST(BackwardVsPyTorch, Linear) {
  Worst worst("Linear");
  int i = 0;
  for (const json& c : backward_fixtures()["linear"]) {
    const bool bias = c.contains("bias");
    Tensor w = T(c["weight"]);
    Generator gen(0);
    Linear lin(w.size(1), w.size(0), bias, gen);
    lin.weight.copy_from(w);
    if (bias) lin.bias.copy_from(T(c["bias"]));
    lin.forward(T(c["x"]));
    const std::string at = "linear case " + std::to_string(i++);
    worst.compare(lin.backward(T(c["grad"])), c["dx"], at + " dx");
    worst.compare(lin.dweight, c["dweight"], at + " dweight");
    if (bias) worst.compare(lin.dbias, c["dbias"], at + " dbias");
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
}

TEST(BackwardVsPyTorch, RMSNorm) {
  Worst worst("RMSNorm");
  int i = 0;
  for (const json& c : backward_fixtures()["rms_norm"]) {
    Tensor w = T(c["weight"]);
    RMSNorm norm(w.size(0), c["eps"].get<double>());
    norm.weight.copy_from(w);
    const std::string at = "rms_norm case " + std::to_string(i++);
    worst.compare(norm.forward(T(c["x"])), c["y"], at + " y");
    worst.compare(norm.backward(T(c["grad"])), c["dx"], at + " dx");
    worst.compare(norm.dweight, c["dweight"], at + " dweight");
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
}

TEST(BackwardVsPyTorch, SwiGLUFeedForward) {
  Worst worst("SwiGLUFeedForward");
  int i = 0;
  for (const json& c : backward_fixtures()["swiglu"]) {
    Tensor gate = T(c["gate"]);
    Generator gen(0);
    SwiGLUFeedForward ff(gate.size(1), gate.size(0), gen);
    ff.gate_proj.weight.copy_from(gate);
    ff.up_proj.weight.copy_from(T(c["up"]));
    ff.down_proj.weight.copy_from(T(c["down"]));
    const std::string at = "swiglu case " + std::to_string(i++);
    worst.compare(ff.forward(T(c["x"])), c["y"], at + " y");
    worst.compare(ff.backward(T(c["grad"])), c["dx"], at + " dx");
    worst.compare(ff.gate_proj.dweight, c["dgate"], at + " dgate");
    worst.compare(ff.up_proj.dweight, c["dup"], at + " dup");
    worst.compare(ff.down_proj.dweight, c["ddown"], at + " ddown");
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
}

TEST(BackwardVsPyTorch, EmbeddingAndPositionalEmbedding) {
  Worst worst("Embedding"), pos("PositionalEmbedding");
  int i = 0;
  for (const json& c : backward_fixtures()["embedding"]) {
    Tensor w = T(c["weight"]);
    Generator gen(0);
    Embedding emb(w.size(0), w.size(1), gen);
    emb.weight.copy_from(w);
    emb.forward(c["ids"].get<std::vector<int64_t>>(), c["ids_shape"].get<Shape>());
    emb.backward(T(c["grad"]));
    worst.compare(emb.dweight, c["dweight"], "embedding case " + std::to_string(i++));
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
  i = 0;
  for (const json& c : backward_fixtures()["positional"]) {
    Tensor w = T(c["weight"]);
    Generator gen(0);
    PositionalEmbedding p(w.size(0), w.size(1), gen);
    p.table.weight.copy_from(w);
    p.forward(c["tokens"].get<int64_t>());
    p.backward(T(c["grad"]));
    pos.compare(p.table.dweight, c["dweight"], "positional case " + std::to_string(i++));
    pos.next_case();
  }
  EXPECT_EQ(i, 100);
}

TEST(BackwardVsPyTorch, DropoutDrawsPyTorchsMaskAndUsesItBackward) {
  Worst worst("Dropout");
  int i = 0;
  for (const json& c : backward_fixtures()["dropout"]) {
    Generator gen(c["seed"].get<uint64_t>());  // torch.manual_seed(seed); nn.Dropout(p)
    Dropout d(c["p"].get<double>(), gen);
    d.train();
    const std::string at = "dropout case " + std::to_string(i++);
    worst.compare(d.forward(T(c["x"])), c["y"], at + " forward");
    Tensor dx = d.backward(T(c["grad"]));
    worst.compare(dx, c["dx"], at + " dx");
    std::vector<float> got = dx.to_vector(), want = T(c["dx"]).to_vector();
    for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k] == 0.0f, want[k] == 0.0f) << at << " mask at " << k;
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
}

TEST(BackwardVsPyTorch, Softmax) {
  Worst worst("softmax");
  int i = 0;
  for (const json& c : backward_fixtures()["softmax"]) {
    const int dim = c["dim"].get<int>();
    Tensor y = softmax(T(c["x"]), dim);
    worst.compare(softmax_backward(y, T(c["grad"]), dim), c["dx"], "softmax case " + std::to_string(i++));
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
}

TEST(BackwardVsPyTorch, ScaledDotProductAttentionWithMasks) {
  Worst worst("scaled_dot_product_attention");
  int i = 0;
  std::map<MaskKind, int> kinds;
  for (const json& c : backward_fixtures()["sdpa"]) {
    const std::string kind_name = c["kind"].get<std::string>();
    const MaskKind kind = kind_name == "additive" ? MaskKind::kAdditive
                          : kind_name == "blocked" ? MaskKind::kBlocked
                                                   : MaskKind::kNone;
    ++kinds[kind];
    Tensor q = T(c["q"]), k = T(c["k"]), v = T(c["v"]);
    Tensor mask = c.contains("mask") ? T(c["mask"]) : Tensor();
    const Tensor* m = kind == MaskKind::kNone ? nullptr : &mask;
    SdpaResult r = scaled_dot_product_attention(q, k, v, m, kind);
    const std::string at = "sdpa case " + std::to_string(i++) + " (" + kind_name + ")";
    worst.compare(r.output, c["output"], at + " output");
    SdpaGrads g = scaled_dot_product_attention_backward(T(c["grad"]), q, k, v, r, m, kind);
    worst.compare(g.dq, c["dq"], at + " dq");
    worst.compare(g.dk, c["dk"], at + " dk");
    worst.compare(g.dv, c["dv"], at + " dv");
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
  for (MaskKind kind : {MaskKind::kNone, MaskKind::kAdditive, MaskKind::kBlocked})
    EXPECT_GE(kinds[kind], 20) << "every mask kind is covered";
}

TEST(BackwardVsPyTorch, CrossEntropyWithIgnoreIndex) {
  Worst worst("cross_entropy");
  int i = 0;
  for (const json& c : backward_fixtures()["cross_entropy"]) {
    CrossEntropyLoss ce;
    const float loss = ce.forward(T(c["logits"]), c["targets"].get<std::vector<int64_t>>());
    const std::string at = "cross_entropy case " + std::to_string(i++);
    worst.compare(Tensor::scalar(loss), c["loss"], at + " loss");
    worst.compare(ce.backward(), c["dlogits"], at + " dlogits");
    worst.next_case();
  }
  EXPECT_EQ(i, 100);
}

TEST(CrossEntropy, EveryTargetIgnoredIsNaNAsInPyTorch) {
  CrossEntropyLoss ce;
  EXPECT_TRUE(std::isnan(ce.forward(Tensor::zeros({2, 3}), {-100, -100})));
  EXPECT_EQ(max_abs_diff(ce.backward(), Tensor::zeros({2, 3})), 0.0);
}

}  // namespace
}  // namespace qkv
