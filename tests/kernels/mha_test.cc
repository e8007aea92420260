// The fast multi-head attention pipeline (fused QKV GEMM -> fused attention -> out_proj) against
// the book's MultiHeadAttention module (forward) and against the same pipeline built from the
// naive references (forward and backward, every gradient).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/gemm.h"
#include "qkv/kernels/mha.h"
#include "qkv/modules/multi_head_attention.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {

using testing_support::normal_vector;

testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  if (got.size() != want.size()) return testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i]))))
      return testing::AssertionFailure() << "[" << i << "] got " << got[i] << " want " << want[i];
  return testing::AssertionSuccess();
}

// y (M, N) = x (M, K) W^T + b, with the reference product.
void linear_reference(const float* x, int64_t M, int64_t K, const float* W, const float* b, int64_t N, float* y) {
  sgemm_reference(gemm_args(false, true, M, N, K, x, K, W, K, y, N));
  if (b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] += b[n];
}

// The pipeline's shape for the book's MultiHeadAttention(d_in, d_out, ..., num_heads): causal,
// H heads of d_out / H.
MhaShape shape_of(int64_t B, int64_t T, int64_t d_in, int64_t d_out, int64_t H) {
  MhaShape s;
  s.batch = B;
  s.tokens = T;
  s.d_in = d_in;
  s.attention.heads = H;
  s.attention.head_dim = d_out / H;
  return s;
}

TEST(MhaPipeline, ForwardMatchesTheBookModule) {
  struct Config { int64_t B, T, d_in, d_out, H; bool bias; };
  for (const Config& c : {Config{2, 6, 3, 2, 2, false}, Config{2, 37, 24, 32, 4, true}, Config{1, 70, 64, 128, 2, false}}) {
    SCOPED_TRACE(str("B=", c.B, " T=", c.T, " d_in=", c.d_in, " d_out=", c.d_out, " H=", c.H));
    Generator gen(123);
    AttentionConfig config = attention_config("mha", c.d_in, c.d_out, c.T, 0.0, c.H, c.bias);
    config.path = AttentionPath::kTextbook;  // the book's computation, not the module's fast path
    MultiHeadAttention m(config, gen);
    std::mt19937 rng(1);
    const std::vector<float> x = normal_vector(static_cast<size_t>(c.B * c.T * c.d_in), rng);
    const Tensor want = m.forward(Tensor::from({c.B, c.T, c.d_in}, x));

    std::vector<float> w_qkv, b_qkv;
    for (const Linear* l : {&m.W_query, &m.W_key, &m.W_value}) {
      const std::vector<float> w = l->weight.to_vector();
      w_qkv.insert(w_qkv.end(), w.begin(), w.end());
      if (c.bias) {
        const std::vector<float> b = l->bias.to_vector();
        b_qkv.insert(b_qkv.end(), b.begin(), b.end());
      }
    }
    const std::vector<float> w_out = m.out_proj.weight.to_vector(), b_out = m.out_proj.bias.to_vector();
    const MhaShape s = shape_of(c.B, c.T, c.d_in, c.d_out, c.H);
    MhaWeights w{w_qkv.data(), c.bias ? b_qkv.data() : nullptr, w_out.data(), b_out.data()};
    MhaSaved saved;
    MhaWorkspace ws;
    std::vector<float> y(static_cast<size_t>(c.B * c.T * c.d_out));
    mha_forward(s, w, x.data(), y.data(), saved, ws, MhaCall{});
    EXPECT_TRUE(close(y, want.to_vector(), 1e-5));
  }
}

TEST(MhaPipeline, ForwardAndBackwardMatchTheReferencePipeline) {
  struct Config { int64_t B, T, d_in, d_out, H; bool bias, out_proj; float dropout; };
  for (const Config& c : {Config{2, 19, 12, 16, 4, true, true, 0.0f}, Config{1, 70, 64, 128, 2, false, true, 0.2f},
                          Config{3, 33, 10, 24, 1, false, false, 0.0f}}) {
    SCOPED_TRACE(str("B=", c.B, " T=", c.T, " d_in=", c.d_in, " d_out=", c.d_out, " H=", c.H, " p=", c.dropout));
    std::mt19937 rng(2);
    const int64_t rows = c.B * c.T, C = c.d_out, D = C / c.H;
    const auto x = normal_vector(static_cast<size_t>(rows * c.d_in), rng);
    const auto dy = normal_vector(static_cast<size_t>(rows * C), rng);
    // Weights on nn.Linear's scale (1/sqrt(fan_in)), so activations stay O(1) as in a real model.
    auto weights = [&](size_t n, int64_t fan_in) {
      std::vector<float> w = normal_vector(n, rng);
      for (float& e : w) e /= std::sqrt(static_cast<float>(fan_in));
      return w;
    };
    const auto w_qkv = weights(static_cast<size_t>(3 * C * c.d_in), c.d_in);
    const auto b_qkv = weights(static_cast<size_t>(3 * C), c.d_in);
    const auto w_out = weights(static_cast<size_t>(C * C), C);
    const auto b_out = weights(static_cast<size_t>(C), C);
    MhaShape s = shape_of(c.B, c.T, c.d_in, c.d_out, c.H);
    s.attention.dropout = c.dropout;
    MhaWeights w{w_qkv.data(), c.bias ? b_qkv.data() : nullptr, c.out_proj ? w_out.data() : nullptr,
                 c.out_proj ? b_out.data() : nullptr};
    ThreadPool pool(2);
    MhaCall call;
    call.dropout = c.dropout > 0.0f;
    call.dropout_seed = 99;
    call.pool = &pool;
    const AttentionOptions opt = mha_options(s, call);  // the references' options: the pipeline's

    MhaSaved saved;
    MhaWorkspace ws;
    std::vector<float> y(static_cast<size_t>(rows * C)), dx(static_cast<size_t>(rows * c.d_in));
    std::vector<float> dw_qkv(w_qkv.size()), db_qkv(b_qkv.size()), dw_out(w_out.size()), db_out(b_out.size());
    mha_forward(s, w, x.data(), y.data(), saved, ws, call);
    mha_backward(s, w, x.data(), dy.data(), dx.data(),
                 {dw_qkv.data(), c.bias ? db_qkv.data() : nullptr, c.out_proj ? dw_out.data() : nullptr,
                  c.out_proj ? db_out.data() : nullptr},
                 saved, saved.id(), ws, call);

    // The same steps with the references.
    std::vector<float> qkv(static_cast<size_t>(rows * 3 * C)), ctx(static_cast<size_t>(rows * C)),
        lse(static_cast<size_t>(c.B * c.H * c.T)), y_ref(y.size());
    linear_reference(x.data(), rows, c.d_in, w_qkv.data(), w.b_qkv, 3 * C, qkv.data());
    auto part = [&](std::vector<float>& buf, int64_t which) {
      return MutableHeads::interleaved(buf.data() + which * C, c.B, c.H, c.T, D, 3 * C);
    };
    auto in = [](MutableHeads m) { return ConstHeads{m.data, m.batch, m.heads, m.tokens, m.dim, m.stride_b, m.stride_h, m.stride_n, m.stride_d}; };
    const MutableHeads ctx_heads = MutableHeads::interleaved(ctx.data(), c.B, c.H, c.T, D, C);
    attention_forward_reference(in(part(qkv, 0)), in(part(qkv, 1)), in(part(qkv, 2)), ctx_heads, lse.data(), opt);
    std::vector<float> dctx = dy;
    if (c.out_proj) {
      linear_reference(ctx.data(), rows, C, w_out.data(), b_out.data(), C, y_ref.data());
      sgemm_reference(gemm_args(false, false, rows, C, C, dy.data(), C, w_out.data(), C, dctx.data(), C));  // dy W_out
      std::vector<float> dw_ref(w_out.size());
      sgemm_reference(gemm_args(true, false, C, C, rows, dy.data(), C, ctx.data(), C, dw_ref.data(), C));  // dy^T ctx
      EXPECT_TRUE(close(dw_out, dw_ref, 1e-4)) << "dw_out";
      std::vector<float> db_ref(static_cast<size_t>(C), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < C; ++n) db_ref[static_cast<size_t>(n)] += dy[static_cast<size_t>(r * C + n)];
      EXPECT_TRUE(close(db_out, db_ref, 1e-4)) << "db_out";
    } else {
      y_ref = ctx;
    }
    EXPECT_TRUE(close(y, y_ref, 1e-5)) << "y";

    std::vector<float> dqkv(qkv.size());
    attention_backward_reference(in(part(qkv, 0)), in(part(qkv, 1)), in(part(qkv, 2)),
                                 ConstHeads::interleaved(dctx.data(), c.B, c.H, c.T, D, C), part(dqkv, 0),
                                 part(dqkv, 1), part(dqkv, 2), opt);
    std::vector<float> dw_qkv_ref(w_qkv.size()), dx_ref(dx.size());
    // dW_qkv = dqkv^T x, dx = dqkv W_qkv
    sgemm_reference(gemm_args(true, false, 3 * C, c.d_in, rows, dqkv.data(), 3 * C, x.data(), c.d_in,
                              dw_qkv_ref.data(), c.d_in));
    sgemm_reference(gemm_args(false, false, rows, c.d_in, 3 * C, dqkv.data(), 3 * C, w_qkv.data(), c.d_in,
                              dx_ref.data(), c.d_in));
    // Gradients sum over B*T rows: compare with a tolerance scaled for that many float terms.
    EXPECT_TRUE(close(dw_qkv, dw_qkv_ref, 1e-4)) << "dw_qkv";
    EXPECT_TRUE(close(dx, dx_ref, 1e-4)) << "dx";
    if (c.bias) {
      std::vector<float> db_ref(static_cast<size_t>(3 * C), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < 3 * C; ++n) db_ref[static_cast<size_t>(n)] += dqkv[static_cast<size_t>(r * 3 * C + n)];
      EXPECT_TRUE(close(db_qkv, db_ref, 1e-4)) << "db_qkv";
    }
  }
}

// No token (B = 0 or T = 0): every weight gradient is zero, written unless added to (they were left
// as the memory held them: qkv.torch's MultiHeadAttention handed PyTorch garbage gradients).
TEST(MhaPipeline, NoTokensWriteZeroWeightGradients) {
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{0, 5}, {2, 0}}) {
    const int64_t d_in = 6, C = 8, H = 2;
    const std::vector<float> w_qkv(3 * C * d_in, 0.5f), b_qkv(3 * C, 0.5f), w_out(C * C, 0.5f), b_out(C, 0.5f);
    const MhaShape s = shape_of(B, T, d_in, C, H);
    const MhaWeights w{w_qkv.data(), b_qkv.data(), w_out.data(), b_out.data()};
    MhaSaved saved;
    MhaWorkspace ws;
    float x = 0, y = 0, dy = 0, dx = 0;  // (no element is read or written)
    mha_forward(s, w, &x, &y, saved, ws, MhaCall{});
    for (const bool accumulate : {false, true}) {
      const float nan = std::numeric_limits<float>::quiet_NaN(), before = accumulate ? 3.0f : nan;
      std::vector<float> dw_qkv(w_qkv.size(), before), db_qkv(b_qkv.size(), before), dw_out(w_out.size(), before),
          db_out(b_out.size(), before);
      MhaGradients g{dw_qkv.data(), db_qkv.data(), dw_out.data(), db_out.data()};
      g.accumulate = accumulate;
      mha_backward(s, w, &x, &dy, &dx, g, saved, saved.id(), ws, MhaCall{});
      for (const std::vector<float>* v : {&dw_qkv, &db_qkv, &dw_out, &db_out})
        for (float e : *v) ASSERT_EQ(e, accumulate ? 3.0f : 0.0f) << "B=" << B << " T=" << T;
    }
  }
}

TEST(MhaPipeline, FlopCountsAreTheProjectionsPlusTheCausalAttention) {
  // GPT-2 small, B=8, T=1024: 29.0 + 9.7 GFLOP of projections, 12.9 of causal attention.
  const MhaShape s = shape_of(8, 1024, 768, 768, 12);
  const double f = mha_forward_flops(s, true);
  EXPECT_NEAR(f / 1e9, 29.0 + 9.66 + 12.9, 0.1);
}

}  // namespace
}  // namespace qkv::kernels
