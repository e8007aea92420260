// The fused kernels on blocks of a sequence placed by query_offset and key_offset: attention over
// every key equals the log-sum-exp merge of its key blocks' (o, lse), and the backward's dq is the
// sum of the blocks' shares, dk and dv the blocks' own - causal or not, with dropout (keyed by
// positions, so each block draws the whole sequence's mask) and block edges off multiples of 4
// (the Philox call that serves 4 keys then straddles two blocks). This is what ring attention
// (src/mpi/ring_attention.cc) relies on; here the merge is the test's own, in double.
//
// Legend: B batch, H heads, T = S positions, D head dim (Dv = D).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/kernels/attention.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {


// A contiguous (B, H, N, D) array.
struct KeyArray {
  int64_t B = 0, H = 0, N = 0, D = 0;
  std::vector<float> x;
  KeyArray(int64_t b, int64_t h, int64_t n, int64_t d, std::mt19937* rng)
      : B(b), H(h), N(n), D(d), x(static_cast<size_t>(std::max<int64_t>(b * h * n * d, 1)), 0.0f) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    if (rng)
      for (float& e : x) e = normal(*rng);
  }
  MutableHeads all() { return MutableHeads::contiguous(x.data(), B, H, N, D); }
  // Positions [n0, n1) of every head, as a strided view of the same memory.
  MutableHeads rows(int64_t n0, int64_t n1) {
    MutableHeads v = all();
    v.data += n0 * v.stride_n;
    v.tokens = n1 - n0;
    return v;
  }
  float at(int64_t b, int64_t h, int64_t n, int64_t d) const { return x[static_cast<size_t>(((b * H + h) * N + n) * D + d)]; }
};

// max |got - want| / max(1, max |want|) over the arrays. The tests allow 2e-6: float32 sums of the
// same terms in two orders (the whole sequence's blocks, the test's merge) differ by about 1e-6
// of the largest element; a wrong mask, offset or dropout key differs by far more.
double relative_error(const std::vector<double>& got, const KeyArray& want) {
  double diff = 0.0, scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - static_cast<double>(want.x[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(want.x[i])));
  }
  return diff / scale;
}

struct KeyBlockCase {
  int64_t T = 1, D = 64;
  bool causal = true;
  float dropout = 0.0f;
  std::vector<int64_t> cuts;  // block edges inside (0, T), increasing
  std::string name() const {
    std::string c;
    for (int64_t x : cuts) c += str(" ", x);
    return str("T=", T, " D=", D, causal ? " causal" : " no mask", " p=", dropout, " cuts:", c);
  }
};

void check_blocks(const KeyBlockCase& c) {
  SCOPED_TRACE(c.name());
  const int64_t B = 2, H = 3, T = c.T, D = c.D;
  std::mt19937 rng(static_cast<uint32_t>(T * 7 + D));
  KeyArray q(B, H, T, D, &rng), k(B, H, T, D, &rng), v(B, H, T, D, &rng), d_o(B, H, T, D, &rng);
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = c.causal ? AttentionMask::causal() : AttentionMask::none();
  opt.dropout_p = c.dropout;
  opt.dropout_seed = 0x5eed0123456789ULL;

  // The whole sequence in one call.
  KeyArray o(B, H, T, D, nullptr), dq(B, H, T, D, nullptr), dk(B, H, T, D, nullptr), dv(B, H, T, D, nullptr);
  KeyArray lse(B, H, T, 1, nullptr);
  attention_forward(q.all(), k.all(), v.all(), o.all(), lse.x.data(), opt);
  attention_backward(q.all(), k.all(), v.all(), o.all(), d_o.all(), lse.x.data(), dq.all(), dk.all(), dv.all(), opt);

  std::vector<int64_t> edges{0};
  edges.insert(edges.end(), c.cuts.begin(), c.cuts.end());
  edges.push_back(T);
  const auto n = static_cast<size_t>(B * H * T * D);
  std::vector<double> o_sum(n, 0.0), dq_sum(n, 0.0), dk_got(n, 0.0), dv_got(n, 0.0);
  std::vector<double> lse_merged(static_cast<size_t>(B * H * T), -std::numeric_limits<double>::infinity());
  // Forward: each query block against each key block, merged by the log-sum-exp rule in double.
  for (size_t qi = 0; qi + 1 < edges.size(); ++qi)
    for (size_t kj = 0; kj + 1 < edges.size(); ++kj) {
      const int64_t q0 = edges[qi], q1 = edges[qi + 1], k0 = edges[kj], k1 = edges[kj + 1];
      AttentionOptions part = opt;
      part.query_offset = q0;
      part.key_offset = k0;
      KeyArray o_p(B, H, q1 - q0, D, nullptr), lse_p(B, H, q1 - q0, 1, nullptr);
      attention_forward(q.rows(q0, q1), k.rows(k0, k1), v.rows(k0, k1), o_p.all(), lse_p.x.data(), part);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = q0; i < q1; ++i) {
            const double l = lse_p.at(b, h, i - q0, 0);
            if (l == -kInf) continue;
            double& m = lse_merged[static_cast<size_t>((b * H + h) * T + i)];
            const double merged = m == -kInf ? l : std::max(m, l) + std::log1p(std::exp(-std::fabs(m - l)));
            const double keep = m == -kInf ? 0.0 : std::exp(m - merged), add = std::exp(l - merged);
            for (int64_t d = 0; d < D; ++d) {
              double& acc = o_sum[static_cast<size_t>(((b * H + h) * T + i) * D + d)];
              acc = acc * keep + add * o_p.at(b, h, i - q0, d);
            }
            m = merged;
          }
    }
  double lse_err = 0.0;
  for (size_t r = 0; r < lse_merged.size(); ++r) {
    if (lse.x[r] == -kInf) {
      EXPECT_EQ(lse_merged[r], -std::numeric_limits<double>::infinity()) << "row " << r;
      continue;
    }
    lse_err = std::max(lse_err, std::fabs(lse_merged[r] - lse.x[r]) / std::max(1.0, std::fabs(static_cast<double>(lse.x[r]))));
  }
  EXPECT_LE(lse_err, 2e-6) << "lse";
  EXPECT_LE(relative_error(o_sum, o), 2e-6) << "o";

  // Backward: each pair with the whole sequence's o and lse; dq adds over key blocks, dk and dv
  // over query blocks.
  for (size_t qi = 0; qi + 1 < edges.size(); ++qi)
    for (size_t kj = 0; kj + 1 < edges.size(); ++kj) {
      const int64_t q0 = edges[qi], q1 = edges[qi + 1], k0 = edges[kj], k1 = edges[kj + 1];
      AttentionOptions part = opt;
      part.query_offset = q0;
      part.key_offset = k0;
      KeyArray lse_p(B, H, q1 - q0, 1, nullptr);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = q0; i < q1; ++i) lse_p.x[static_cast<size_t>((b * H + h) * (q1 - q0) + i - q0)] = lse.at(b, h, i, 0);
      KeyArray dq_p(B, H, q1 - q0, D, nullptr), dk_p(B, H, k1 - k0, D, nullptr), dv_p(B, H, k1 - k0, D, nullptr);
      attention_backward(q.rows(q0, q1), k.rows(k0, k1), v.rows(k0, k1), o.rows(q0, q1), d_o.rows(q0, q1),
                         lse_p.x.data(), dq_p.all(), dk_p.all(), dv_p.all(), part);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            for (int64_t i = q0; i < q1; ++i) dq_sum[static_cast<size_t>(((b * H + h) * T + i) * D + d)] += dq_p.at(b, h, i - q0, d);
            for (int64_t j = k0; j < k1; ++j) {
              dk_got[static_cast<size_t>(((b * H + h) * T + j) * D + d)] += dk_p.at(b, h, j - k0, d);
              dv_got[static_cast<size_t>(((b * H + h) * T + j) * D + d)] += dv_p.at(b, h, j - k0, d);
            }
          }
    }
  EXPECT_LE(relative_error(dq_sum, dq), 2e-6) << "dq";
  EXPECT_LE(relative_error(dk_got, dk), 2e-6) << "dk";
  EXPECT_LE(relative_error(dv_got, dv), 2e-6) << "dv";
}

TEST(AttentionKeyBlocks, MergedBlocksEqualTheWholeSequence) {
  std::vector<KeyBlockCase> cases;
  for (bool causal : {true, false})
    for (float p : {0.0f, 0.3f})
      for (int64_t D : {64, 9}) {
        cases.push_back({1, D, causal, p, {}});
        cases.push_back({2, D, causal, p, {1}});
        cases.push_back({7, D, causal, p, {1, 2, 5}});
        cases.push_back({77, D, causal, p, {13, 38, 39}});        // off multiples of 4
        cases.push_back({130, D, causal, p, {4, 64, 101}});
        cases.push_back({200, D, causal, p, {25, 50, 150, 175}});  // a zigzag-like split of 4 blocks
      }
  for (const KeyBlockCase& c : cases) check_blocks(c);
}

// A key block wholly after a causal query block: every row sees no key (o = 0, lse = -inf) and
// the backward gives zero gradients, not NaN.
TEST(AttentionKeyBlocks, KeysAfterEveryQueryGiveEmptyRows) {
  std::mt19937 rng(5);
  KeyArray q(1, 2, 5, 8, &rng), k(1, 2, 6, 8, &rng), v(1, 2, 6, 8, &rng), o(1, 2, 5, 8, nullptr);
  std::vector<float> lse(10, 0.0f);
  AttentionOptions opt;
  opt.mask = AttentionMask::causal();
  opt.query_offset = 3;
  opt.key_offset = 8;  // queries at 3..7, keys at 8..13
  attention_forward(q.all(), k.all(), v.all(), o.all(), lse.data(), opt);
  for (float l : lse) EXPECT_EQ(l, -kInf);
  for (float x : o.x) EXPECT_EQ(x, 0.0f);
  std::vector<float> finite_lse(10, 1.5f);
  KeyArray dq(1, 2, 5, 8, nullptr), dk(1, 2, 6, 8, nullptr), dv(1, 2, 6, 8, nullptr), d_o(1, 2, 5, 8, &rng);
  for (float& x : dq.x) x = kInf;
  attention_backward(q.all(), k.all(), v.all(), o.all(), d_o.all(), finite_lse.data(), dq.all(), dk.all(), dv.all(), opt);
  for (const KeyArray* a : {&dq, &dk, &dv})
    for (float x : a->x) EXPECT_EQ(x, 0.0f);
}

// A call on heads [1, 3) of 3 with head_offset = 1 draws the whole layer's dropout mask: its
// outputs and gradients are those heads' of the whole call, bit for bit.
TEST(AttentionKeyBlocks, HeadSlicesDrawTheLayersDropoutMask) {
  std::mt19937 rng(9);
  const int64_t B = 2, H = 3, T = 37, D = 16;
  KeyArray q(B, H, T, D, &rng), k(B, H, T, D, &rng), v(B, H, T, D, &rng), d_o(B, H, T, D, &rng);
  AttentionOptions opt;
  opt.mask = AttentionMask::causal();
  opt.dropout_p = 0.4f;
  opt.dropout_seed = 77;
  KeyArray o(B, H, T, D, nullptr), dq(B, H, T, D, nullptr), dk(B, H, T, D, nullptr), dv(B, H, T, D, nullptr);
  KeyArray lse(B, H, T, 1, nullptr);
  attention_forward(q.all(), k.all(), v.all(), o.all(), lse.x.data(), opt);
  attention_backward(q.all(), k.all(), v.all(), o.all(), d_o.all(), lse.x.data(), dq.all(), dk.all(), dv.all(), opt);
  const auto heads = [](KeyArray& a, int64_t h0) {  // heads [h0, H) of a
    MutableHeads x = a.all();
    x.data += h0 * x.stride_h;
    x.heads -= h0;
    return x;
  };
  AttentionOptions part = opt;
  part.head_offset = 1;
  KeyArray o2(B, H, T, D, nullptr), dq2(B, H, T, D, nullptr), dk2(B, H, T, D, nullptr), dv2(B, H, T, D, nullptr);
  std::vector<float> lse2(static_cast<size_t>(B * 2 * T));
  attention_forward(heads(q, 1), heads(k, 1), heads(v, 1), heads(o2, 1), lse2.data(), part);
  attention_backward(heads(q, 1), heads(k, 1), heads(v, 1), heads(o2, 1), heads(d_o, 1), lse2.data(), heads(dq2, 1),
                     heads(dk2, 1), heads(dv2, 1), part);
  int differ = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 1; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          differ += o2.at(b, h, i, d) != o.at(b, h, i, d);
          differ += dq2.at(b, h, i, d) != dq.at(b, h, i, d);
          differ += dk2.at(b, h, i, d) != dk.at(b, h, i, d);
          differ += dv2.at(b, h, i, d) != dv.at(b, h, i, d);
        }
  EXPECT_EQ(differ, 0);
  // Without the offset the slice draws head 0's mask for head 1: a different result.
  part.head_offset = 0;
  attention_forward(heads(q, 1), heads(k, 1), heads(v, 1), heads(o2, 1), lse2.data(), part);
  EXPECT_NE(o2.at(0, 1, T - 1, 0), o.at(0, 1, T - 1, 0));
}

}  // namespace
}  // namespace qkv::kernels
