// The gated delta rule (modules/delta_rule.h): the chunked form against the token-by-token
// recurrence, and the recurrence's backward against central differences of its forward, on shapes
// the book's GatedDeltaNet does not reach (key width != value width, beta per head).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/kernels/delta_rule_step.h"
#include "qkv/modules/delta_rule.h"
#include "qkv/modules/delta_rule_chunked.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing_support::error_of;

// The decays as the chunked form takes them: log alpha, with -200 for an alpha of 0 (a decay that
// leaves nothing of the state in float or double).
std::vector<float> log_of(const std::vector<float>& alpha) {
  std::vector<float> out(alpha.size());
  for (size_t i = 0; i < alpha.size(); ++i) out[i] = alpha[i] > 0 ? std::log(alpha[i]) : -200.0f;
  return out;
}

// Random inputs of a shape: q, k rows of unit length (as after l2norm), beta in (0, 1), alpha in
// (0.5, 1) or, with `forgetful`, some alphas of exactly 0 and some tiny.
struct Inputs {
  std::vector<float> q, k, v, beta, alpha;
  DeltaRuleInputs view() const { return {q.data(), k.data(), v.data(), beta.data(), alpha.data()}; }
};

Inputs random_inputs(const DeltaRuleShape& s, Generator& gen, bool forgetful = false) {
  Inputs in;
  const int64_t rows = s.rows();
  auto draw = [&](std::vector<float>& x, int64_t n) {
    x.resize(static_cast<size_t>(n));
    gen.normal(x.data(), n, 0.0, 1.0);
  };
  draw(in.q, rows * s.key_dim);
  draw(in.k, rows * s.key_dim);
  draw(in.v, rows * s.value_dim);
  for (std::vector<float>* u : {&in.q, &in.k})
    for (int64_t r = 0; r < rows; ++r) {
      float* x = u->data() + r * s.key_dim;
      double n = 0;
      for (int64_t i = 0; i < s.key_dim; ++i) n += static_cast<double>(x[i]) * x[i];
      for (int64_t i = 0; i < s.key_dim; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(n));
    }
  in.beta.resize(static_cast<size_t>(rows * s.beta_width()));
  gen.uniform(in.beta.data(), static_cast<int64_t>(in.beta.size()), 0.05, 0.95);
  in.alpha.resize(static_cast<size_t>(rows));
  gen.uniform(in.alpha.data(), rows, 0.5, 1.0);
  if (forgetful)
    for (size_t i = 0; i < in.alpha.size(); i += 3) in.alpha[i] = i % 2 ? 0.0f : 1e-30f;
  return in;
}

double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// The decay's parameter gradients sum one term per token of a head: over a long sequence a float
// sum rounds at the sum's size at every token. Summed in double, each lands within a few float
// roundings of the sum in double of the same terms (64K tokens of 2 heads; a float sum was off
// by hundreds of ulps). da, one term per token, within an ulp or two.
TEST(DeltaRule, TheDecayGradientsSumTheirTokensInDouble) {
  const int64_t H = 2, n = int64_t{1} << 16;
  std::vector<float> a(static_cast<size_t>(n)), dlog(a.size()), da(a.size());
  for (int64_t i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = 0.37f * static_cast<float>(i % 17) - 3.0f;
    dlog[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 7) % 13) + 0.003f;
  }
  const std::vector<float> A_log = {0.5f, -1.25f};
  std::vector<float> ddt_bias(2, 0.0f), dA_log(2, 0.0f);
  decay_log_backward(a.data(), dlog.data(), A_log.data(), n, H, da.data(), ddt_bias.data(), dA_log.data());
  for (int64_t h = 0; h < H; ++h) {
    double want_a = 0.0, want_bias = 0.0;
    const double e = std::exp(static_cast<double>(A_log[static_cast<size_t>(h)]));
    for (int64_t i = h; i < n; i += H) {
      const double x = a[static_cast<size_t>(i)];
      const double scaled = -static_cast<double>(dlog[static_cast<size_t>(i)]) * e;
      const double dai = scaled / (1.0 + std::exp(-x));
      EXPECT_NEAR(da[static_cast<size_t>(i)], dai, 2e-7 * std::abs(dai)) << i;
      want_a += scaled * std::log1p(std::exp(x));
      want_bias += dai;
    }
    EXPECT_NEAR(dA_log[static_cast<size_t>(h)], want_a, 4e-7 * std::abs(want_a)) << "head " << h;
    EXPECT_NEAR(ddt_bias[static_cast<size_t>(h)], want_bias, 4e-7 * std::abs(want_bias)) << "head " << h;
  }
}

TEST(DeltaRule, TheChunkedFormEqualsTheRecurrenceAcrossChunkBoundaries) {
  Generator gen(11);
  struct Case {
    DeltaRuleShape shape;
    int64_t chunk;
    bool forgetful;
  };
  const Case cases[] = {
      {{1, 1, 1, 4, 4}, 64, false},   {{1, 7, 2, 3, 5}, 1, false},   {{2, 9, 3, 4, 2}, 3, false},
      {{3, 70, 2, 8, 6}, 64, false},  {{1, 130, 1, 16, 16}, 64, false}, {{2, 65, 2, 5, 7}, 16, true},
      {{1, 128, 4, 8, 8}, 64, false}, {{1, 20, 1, 1, 3}, 7, false},
  };
  for (const Case& c : cases) {
    const DeltaRuleShape& s = c.shape;
    const std::string what = "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.tokens) +
                             " H=" + std::to_string(s.heads) + " Dk=" + std::to_string(s.key_dim) +
                             " Dv=" + std::to_string(s.value_dim) + " chunk=" + std::to_string(c.chunk);
    const Inputs in = random_inputs(s, gen, c.forgetful);
    std::vector<float> y(static_cast<size_t>(s.rows() * s.value_dim)), yc(y.size());
    std::vector<double> states, last;
    delta_rule_forward(s, in.view(), states, y.data());
    delta_rule_forward_chunked(s, in.view(), c.chunk, yc.data(), &last);
    double err = 0;
    for (size_t i = 0; i < y.size(); ++i) err = std::max(err, static_cast<double>(std::fabs(y[i] - yc[i])));
    EXPECT_LE(err, 1e-5 * std::max(1.0, max_abs(y))) << what;
    // the state after the last token: the recurrence keeps every token's
    const int64_t KV = s.key_dim * s.value_dim;
    double state_err = 0, state_scale = 1;
    for (int64_t bh = 0; bh < s.batch * s.heads; ++bh)
      for (int64_t i = 0; i < KV; ++i) {
        const double want = states[static_cast<size_t>((bh * s.tokens + s.tokens - 1) * KV + i)];
        state_err = std::max(state_err, std::fabs(want - last[static_cast<size_t>(bh * KV + i)]));
        state_scale = std::max(state_scale, std::fabs(want));
      }
    EXPECT_LE(state_err, 1e-9 * state_scale) << what;  // both in double
  }
}

// The inference form: from zeros it equals the forward; in two runs (the state carried between
// them) it equals one; a state of another size is refused.
TEST(DeltaRule, RunningFromAStateEqualsTheForward) {
  Generator gen(13);
  const DeltaRuleShape s{2, 7, 3, 4, 5, false};
  const Inputs in = random_inputs(s, gen);
  std::vector<float> y(static_cast<size_t>(s.rows() * s.value_dim)), run(y.size());
  std::vector<double> states;
  delta_rule_forward(s, in.view(), states, y.data());
  std::vector<double> state(static_cast<size_t>(2 * 3 * 4 * 5), 0.0);
  delta_rule_run(s, in.view(), state, run.data());
  EXPECT_EQ(y, run);  // the same sums in the same order
  // tokens 0..3, then 4..6, each run on its own rows (B, t, H) of the inputs
  auto rows = [&](const std::vector<float>& x, int64_t width, int64_t t0, int64_t n) {
    std::vector<float> out;
    for (int64_t b = 0; b < 2; ++b)
      out.insert(out.end(), x.begin() + ((b * 7 + t0) * 3) * width, x.begin() + ((b * 7 + t0 + n) * 3) * width);
    return out;
  };
  std::fill(state.begin(), state.end(), 0.0);
  for (const auto& [t0, n] : {std::pair<int64_t, int64_t>{0, 4}, {4, 3}}) {
    const Inputs part{rows(in.q, 4, t0, n), rows(in.k, 4, t0, n), rows(in.v, 5, t0, n), rows(in.beta, 1, t0, n),
                      rows(in.alpha, 1, t0, n)};
    std::vector<float> got(static_cast<size_t>(2 * n * 3 * 5));
    delta_rule_run({2, n, 3, 4, 5, false}, part.view(), state, got.data());
    EXPECT_EQ(got, rows(y, 5, t0, n)) << "tokens from " << t0;
  }
  std::vector<double> wrong(3);
  EXPECT_NE(error_of([&] { delta_rule_run(s, in.view(), wrong, run.data()); }).find("the state holds 3 numbers; expected"),
            std::string::npos);
}

// A state of floats is kept in column blocks of 64 (delta_state_index): widths of several blocks
// and a narrow last one, beta per head and per channel. Each token from the same numbers, once on
// a state of floats in rows, each head stepped whole by the kernel (kernels/delta_rule_step.h),
// and once by delta_rule_run on floats in blocks, each block stepped as its own state: a column's
// step reads only its column and does the same operations in any lane, so each number is the same
// float, where delta_state_index puts it, and y is the same, token after token.
TEST(DeltaRule, AStateOfFloatsIsKeptInColumnBlocks) {
  Generator gen(29);
  for (const int64_t Dv : {5, 64, 65, 130, 200})
    for (const bool per_channel : {false, true}) {
      SCOPED_TRACE(testing::Message() << "Dv " << Dv << (per_channel ? " beta per channel" : ""));
      const int64_t B = 2, H = 2, Dk = 7, KV = Dk * Dv, bw = per_channel ? Dv : 1;
      const DeltaRuleShape s{B, 3, H, Dk, Dv, per_channel}, one{B, 1, H, Dk, Dv, per_channel};
      const Inputs in = random_inputs(s, gen);
      std::vector<float> blocked(static_cast<size_t>(B * H * KV));
      gen.normal(blocked.data(), static_cast<int64_t>(blocked.size()), 0.0, 1.0);
      for (int64_t t = 0; t < 3; ++t) {
        std::vector<float> rows(blocked.size());  // the same numbers, in rows
        for (int64_t bh = 0; bh < B * H; ++bh)
          for (int64_t i = 0; i < Dk; ++i)
            for (int64_t j = 0; j < Dv; ++j)
              rows[bh * KV + i * Dv + j] = blocked[bh * KV + delta_state_index(Dk, Dv, i, j)];
        auto token = [&](const std::vector<float>& x, int64_t width) {  // token t's rows (B, H, width)
          std::vector<float> out;
          for (int64_t b = 0; b < B; ++b)
            out.insert(out.end(), x.begin() + (b * 3 + t) * H * width, x.begin() + (b * 3 + t + 1) * H * width);
          return out;
        };
        const Inputs now{token(in.q, Dk), token(in.k, Dk), token(in.v, Dv), token(in.beta, s.beta_width()),
                         token(in.alpha, 1)};
        std::vector<float> y_rows(static_cast<size_t>(B * H * Dv)), y_blocks(y_rows.size());
        for (int64_t bh = 0; bh < B * H; ++bh)
          kernels::delta_rule_step(&now.q[bh * Dk], &now.k[bh * Dk], &now.v[bh * Dv], now.alpha[bh], &now.beta[bh * bw],
                                   bw, Dk, Dv, &rows[bh * KV], &y_rows[bh * Dv]);
        delta_rule_run(one, now.view(), blocked.data(), y_blocks.data());
        ASSERT_EQ(y_rows, y_blocks) << "token " << t;
        for (int64_t bh = 0; bh < B * H; ++bh)
          for (int64_t i = 0; i < Dk; ++i)
            for (int64_t j = 0; j < Dv; ++j)
              ASSERT_EQ(blocked[bh * KV + delta_state_index(Dk, Dv, i, j)], rows[bh * KV + i * Dv + j])
                  << "token " << t << " head " << bh << " S[" << i << "][" << j << "]";
      }
    }
  // the layout itself: block 0's rows of 64, then block 1's (the last, 6 wide) rows
  EXPECT_EQ(delta_state_index(3, 70, 0, 63), 63);
  EXPECT_EQ(delta_state_index(3, 70, 1, 0), 64);
  EXPECT_EQ(delta_state_index(3, 70, 0, 64), 192);
  EXPECT_EQ(delta_state_index(3, 70, 2, 69), 192 + 2 * 6 + 5);
  EXPECT_EQ(delta_state_index(3, 40, 2, 39), 2 * 40 + 39);  // one block: the rows' layout
}

TEST(DeltaRule, TheChunkedFormTakesBetaPerHeadAndAChunkOfAtLeastOne) {
  Generator gen(3);
  DeltaRuleShape s{1, 4, 1, 2, 2, /*beta_per_channel=*/true};
  const Inputs in = random_inputs(s, gen);
  std::vector<float> y(8);
  EXPECT_NE(error_of([&] { delta_rule_forward_chunked(s, in.view(), 2, y.data()); }).find("beta per head only"),
            std::string::npos);
  s.beta_per_channel = false;
  EXPECT_NE(error_of([&] { delta_rule_forward_chunked(s, in.view(), 0, y.data()); }).find("chunk must be at least 1, got 0"),
            std::string::npos);
}

// L = sum(y * w) for fixed random w: the backward's gradients against central differences of the
// forward (the recurrence in double; y rounded to float, so steps of 3e-3 and a 1e-3 tolerance).
TEST(DeltaRule, TheBackwardMatchesCentralDifferences) {
  Generator gen(5);
  for (const bool per_channel : {false, true}) {
    const DeltaRuleShape s{2, 5, 2, 3, 4, per_channel};
    Inputs in = random_inputs(s, gen);
    std::vector<float> w(static_cast<size_t>(s.rows() * s.value_dim));
    gen.normal(w.data(), static_cast<int64_t>(w.size()), 0.0, 1.0);
    auto loss = [&] {
      std::vector<float> y(w.size());
      std::vector<double> states;
      delta_rule_forward(s, in.view(), states, y.data());
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * w[i];
      return l;
    };
    std::vector<float> y(w.size());
    std::vector<double> states;
    delta_rule_forward(s, in.view(), states, y.data());
    Inputs grad = in;
    delta_rule_backward(s, in.view(), states, w.data(),
                        {grad.q.data(), grad.k.data(), grad.v.data(), grad.beta.data(), grad.alpha.data()});
    const std::pair<const char*, std::pair<std::vector<float>*, std::vector<float>*>> tensors[] = {
        {"q", {&in.q, &grad.q}},          {"k", {&in.k, &grad.k}},       {"v", {&in.v, &grad.v}},
        {"beta", {&in.beta, &grad.beta}}, {"alpha", {&in.alpha, &grad.alpha}}};
    for (const auto& [name, pair] : tensors) {
      std::vector<float>& x = *pair.first;
      const std::vector<float>& g = *pair.second;
      const double scale = std::max(1.0, max_abs(g));
      for (size_t i = 0; i < x.size(); ++i) {
        const float keep = x[i], h = 3e-3f;
        x[i] = keep + h;
        const double up = loss();
        x[i] = keep - h;
        const double down = loss();
        x[i] = keep;
        const double numeric = (up - down) / (static_cast<double>(keep + h) - static_cast<double>(keep - h));
        EXPECT_NEAR(g[i], numeric, 1e-3 * scale) << name << "[" << i << "] beta per channel " << per_channel;
      }
    }
  }
}


// The fast chunked form (float32 products) against the recurrence in double: across chunk
// boundaries, mild decays (one exp per token) and strong ones (one per pair), from a given state
// and from zeros; the state after the last token too.
TEST(DeltaRuleChunked, TheForwardEqualsTheRecurrence) {
  Generator gen(17);
  struct Case {
    DeltaRuleShape shape;
    bool forgetful, from_state;
  };
  const Case cases[] = {
      {{1, 1, 1, 4, 4}, false, false},     {{2, 63, 3, 8, 5}, false, true},   {{1, 64, 2, 16, 16}, false, false},
      {{3, 65, 2, 8, 6}, true, false},     {{1, 130, 1, 32, 16}, false, true}, {{2, 200, 2, 12, 20}, true, true},
      {{1, 129, 4, 8, 8}, false, false},   {{1, 70, 2, 8, 72}, false, true},
  };
  for (const Case& c : cases) {
    const DeltaRuleShape& s = c.shape;
    const std::string what = "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.tokens) +
                             " H=" + std::to_string(s.heads) + " Dk=" + std::to_string(s.key_dim) +
                             " Dv=" + std::to_string(s.value_dim) + (c.forgetful ? " forgetful" : "");
    const Inputs in = random_inputs(s, gen, c.forgetful);
    const std::vector<float> log_alpha = log_of(in.alpha);
    const int64_t KV = s.key_dim * s.value_dim;
    std::vector<float> start(static_cast<size_t>(s.batch * s.heads * KV), 0.0f);  // in rows
    if (c.from_state) gen.normal(start.data(), static_cast<int64_t>(start.size()), 0.0, 1.0);
    std::vector<float> y(static_cast<size_t>(s.rows() * s.value_dim)), yc(y.size());
    std::vector<double> state(start.begin(), start.end());
    delta_rule_run(s, in.view(), state, y.data());
    // the chunked form's state: a decoding state of floats, in column blocks
    auto blocked = [&](int64_t at) {
      const int64_t head = at / KV, i = at % KV / s.value_dim, j = at % s.value_dim;
      return static_cast<size_t>(head * KV + delta_state_index(s.key_dim, s.value_dim, i, j));
    };
    std::vector<float> fstate(start.size());
    for (size_t i = 0; i < start.size(); ++i) fstate[blocked(static_cast<int64_t>(i))] = start[i];
    delta_rule_chunked_forward(s, {in.q.data(), in.k.data(), in.v.data(), in.beta.data(), log_alpha.data()}, yc.data(),
                               fstate.data());
    double err = 0;
    for (size_t i = 0; i < y.size(); ++i) err = std::max(err, static_cast<double>(std::fabs(y[i] - yc[i])));
    EXPECT_LE(err, 1e-5 * std::max(1.0, max_abs(y))) << what;
    EXPECT_GT(max_abs(y), 0.1) << what;
    double state_err = 0, state_scale = 1;
    for (size_t i = 0; i < state.size(); ++i) {
      state_err = std::max(state_err, std::fabs(state[i] - fstate[blocked(static_cast<int64_t>(i))]));
      state_scale = std::max(state_scale, std::fabs(state[i]));
    }
    EXPECT_LE(state_err, 1e-5 * state_scale) << what;
  }
}


// The chunked backward against the recurrence's (log alpha's gradient = alpha's times alpha), on
// the same cases' kinds: every gradient within 1e-4 of the tensor's scale.
TEST(DeltaRuleChunked, TheBackwardEqualsTheRecurrences) {
  Generator gen(19);
  const std::pair<DeltaRuleShape, bool> cases[] = {
      {{1, 1, 1, 4, 4}, false}, {{2, 63, 3, 8, 5}, false}, {{3, 65, 2, 8, 6}, true},
      {{1, 130, 1, 32, 16}, false}, {{2, 200, 2, 12, 20}, true}, {{1, 129, 4, 8, 8}, false},
  };
  for (const auto& [s, forgetful] : cases) {
    const std::string what = "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.tokens) +
                             " H=" + std::to_string(s.heads) + " Dk=" + std::to_string(s.key_dim) +
                             " Dv=" + std::to_string(s.value_dim) + (forgetful ? " forgetful" : "");
    Inputs in = random_inputs(s, gen, forgetful);
    if (forgetful)  // alpha's gradient at alpha = 0 has no log alpha's counterpart
      for (float& a : in.alpha) a = std::max(a, 1e-30f);
    const std::vector<float> log_alpha = log_of(in.alpha);
    std::vector<float> dy(static_cast<size_t>(s.rows() * s.value_dim)), y(dy.size());
    gen.normal(dy.data(), static_cast<int64_t>(dy.size()), 0.0, 1.0);
    std::vector<double> states;
    delta_rule_forward(s, in.view(), states, y.data());
    Inputs want = in;
    delta_rule_backward(s, in.view(), states, dy.data(),
                        {want.q.data(), want.k.data(), want.v.data(), want.beta.data(), want.alpha.data()});
    for (size_t i = 0; i < want.alpha.size(); ++i) want.alpha[i] *= in.alpha[i];  // d/d log alpha
    const DeltaRuleLogInputs log_in{in.q.data(), in.k.data(), in.v.data(), in.beta.data(), log_alpha.data()};
    std::vector<float> chunk_states;
    delta_rule_chunked_forward(s, log_in, y.data(), nullptr, &chunk_states);
    EXPECT_EQ(chunk_states.size(), static_cast<size_t>(s.batch * s.heads * delta_rule_chunks(s.tokens) * s.key_dim *
                                                       s.value_dim));
    Inputs got = in;
    delta_rule_chunked_backward(s, log_in, chunk_states, dy.data(),
                                {got.q.data(), got.k.data(), got.v.data(), got.beta.data(), got.alpha.data()});
    const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>> grads[] = {
        {"q", {&want.q, &got.q}},          {"k", {&want.k, &got.k}},       {"v", {&want.v, &got.v}},
        {"beta", {&want.beta, &got.beta}}, {"log alpha", {&want.alpha, &got.alpha}}};
    double largest = 0;
    for (const auto& [name, pair] : grads) largest = std::max(largest, max_abs(*pair.first));
    for (const auto& [name, pair] : grads) {
      const std::vector<float>& a = *pair.first;
      const std::vector<float>& b = *pair.second;
      double err = 0;
      for (size_t i = 0; i < a.size(); ++i) err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
      // one token: alpha multiplies a state of zeros, its gradient is 0 (judged against the others')
      const bool zero = s.tokens == 1 && std::string(name) == "log alpha";
      EXPECT_EQ(zero, max_abs(a) == 0) << name << " " << what;
      EXPECT_LE(err, 1e-4 * (zero ? largest : max_abs(a))) << name << " " << what;
    }
  }
  std::vector<float> none;
  const DeltaRuleShape s{1, 3, 1, 2, 2, false};
  std::vector<float> x(12), g(12);
  EXPECT_NE(error_of([&] {
              delta_rule_chunked_backward(s, {x.data(), x.data(), x.data(), x.data(), x.data()}, none, x.data(),
                                          {g.data(), g.data(), g.data(), g.data(), g.data()});
            }).find("0 chunk-state numbers; expected batch x heads x chunks x Dk x Dv = 4"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
