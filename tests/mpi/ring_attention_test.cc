// Ring attention against the single-process fused kernel, run by ctest under
// `mpirun --oversubscribe -np N` for N = 2, 3 and 4 (tests/CMakeLists.txt). Every rank makes the
// whole sequence's inputs from the same seed, runs the fused kernel on all of it, then ring
// attention on its own positions, and compares its share: o, lse, dq, dk, dv within 1e-6 relative
// (||ring - fused|| / ||fused||, per tensor; element-wise within 4e-6 of the largest), for both splits, causal and not, with dropout,
// grouped-query heads, T from 1 (fewer tokens than ranks) up and T not divisible by N.
//
// Legend: B batch, H query heads, G key/value heads, T positions, Tr this rank's, D head dim.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/kernels/attention.h"
#include "qkv/mpi/communicator.h"
#include "qkv/mpi/ring_attention.h"
#include "qkv/mpi/sequence_split.h"

namespace qkv::mpi {
namespace {

using kernels::ConstHeads;
using kernels::MutableHeads;
constexpr float kInf = std::numeric_limits<float>::infinity();

const Communicator& world() {
  static const Communicator comm;
  return comm;
}

// A contiguous (B, H, N, D) array.
struct Array {
  int64_t B = 0, H = 0, N = 0, D = 0;
  std::vector<float> x;
  Array(int64_t b, int64_t h, int64_t n, int64_t d, float fill = 0.0f)
      : B(b), H(h), N(n), D(d), x(static_cast<size_t>(std::max<int64_t>(b * h * n * d, 1)), fill) {}
  MutableHeads view() { return MutableHeads::contiguous(x.data(), B, H, N, D); }
  ConstHeads in() const { return ConstHeads::contiguous(x.data(), B, H, N, D); }
  float& at(int64_t b, int64_t h, int64_t n, int64_t d) { return x[static_cast<size_t>(((b * H + h) * N + n) * D + d)]; }
  float at(int64_t b, int64_t h, int64_t n, int64_t d) const {
    return x[static_cast<size_t>(((b * H + h) * N + n) * D + d)];
  }
};

Array random_array(int64_t B, int64_t H, int64_t N, int64_t D, std::mt19937& rng) {
  Array a(B, H, N, D);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& e : a.x) e = normal(rng);
  return a;
}

// This rank's positions of a whole-sequence array: its runs, concatenated.
Array local_part(const Array& whole, const SequenceSplit& split, int rank) {
  Array a(whole.B, whole.H, split.tokens(rank), whole.D);
  int64_t at = 0;
  for (const Run& r : split.runs(rank))
    for (int64_t n = 0; n < r.length; ++n, ++at)
      for (int64_t b = 0; b < whole.B; ++b)
        for (int64_t h = 0; h < whole.H; ++h)
          for (int64_t d = 0; d < whole.D; ++d) a.at(b, h, at, d) = whole.at(b, h, r.begin + n, d);
  return a;
}

// How far got is from want: the norm-wise relative error ||got - want||_2 / ||want||_2 (the
// target's "1e-6 relative") and the element-wise max |got - want| / max |want| (0 / 0 = 0);
// infinities must match exactly (else both are 1).
struct Error2 {
  double l2 = 0.0, max = 0.0;
};
Error2 relative_error(const Array& got, const Array& want) {
  double diff2 = 0.0, norm2 = 0.0, diff = 0.0, scale = 0.0;
  const auto n = static_cast<size_t>(want.B * want.H * want.N * want.D);  // not the padding of empty arrays
  for (size_t i = 0; i < n; ++i) {
    if (std::isinf(want.x[i])) {
      if (got.x[i] != want.x[i]) return {1.0, 1.0};
      continue;
    }
    const double d = std::fabs(static_cast<double>(got.x[i]) - want.x[i]), w = std::fabs(static_cast<double>(want.x[i]));
    diff2 += d * d;
    norm2 += w * w;
    diff = std::max(diff, d);
    scale = std::max(scale, w);
  }
  if (!std::isfinite(diff2)) return {1.0, 1.0};
  return {norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2), scale > 0 ? diff / scale : diff};
}

struct Case {
  int64_t B = 2, H = 4, G = 2, T = 1, D = 16;
  SplitKind split = SplitKind::kContiguous;
  bool causal = true;
  float dropout = 0.0f;
  int64_t block_bytes = int64_t{32} << 20;
  std::string name() const {
    return str("B=", B, " H=", H, " G=", G, " T=", T, " D=", D, " split=", split_name(split),
               causal ? " causal" : " no mask", " p=", dropout, " block_bytes=", block_bytes);
  }
};

double worst_l2 = 0.0, worst_max = 0.0;  // over every case and tensor, this rank's

void check_case(const Case& c) {
  SCOPED_TRACE(c.name());
  const Communicator& comm = world();
  std::mt19937 rng(static_cast<uint32_t>(c.T * 131 + c.D));
  const Array q = random_array(c.B, c.H, c.T, c.D, rng), k = random_array(c.B, c.G, c.T, c.D, rng),
              v = random_array(c.B, c.G, c.T, c.D, rng), d_o = random_array(c.B, c.H, c.T, c.D, rng);
  kernels::AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  opt.mask = c.causal ? kernels::AttentionMask::causal() : kernels::AttentionMask::none();
  opt.dropout_p = c.dropout;
  opt.dropout_seed = 0xabcdef0123ULL;
  // The single-process fused kernel on the whole sequence.
  Array o(c.B, c.H, c.T, c.D), lse(c.B, c.H, c.T, 1), dq(c.B, c.H, c.T, c.D), dk(c.B, c.G, c.T, c.D),
      dv(c.B, c.G, c.T, c.D);
  kernels::attention_forward(q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
  kernels::attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.x.data(), dq.view(), dk.view(), dv.view(),
                              opt);
  // The ring on this rank's positions.
  const SequenceSplit split(c.split, c.T, comm.size());
  const int me = comm.rank();
  const int64_t Tr = split.tokens(me);
  const Array ql = local_part(q, split, me), kl = local_part(k, split, me), vl = local_part(v, split, me),
              dol = local_part(d_o, split, me);
  Array ro(c.B, c.H, Tr, c.D, kInf), rlse(c.B, c.H, Tr, 1, kInf), rdq(c.B, c.H, Tr, c.D, kInf),
      rdk(c.B, c.G, Tr, c.D, kInf), rdv(c.B, c.G, Tr, c.D, kInf);
  RingAttentionOptions ring;
  ring.seq_len = c.T;
  ring.split = c.split;
  ring.attention = opt;
  ring.max_block_bytes = c.block_bytes;
  ring_attention_forward(comm, ql.in(), kl.in(), vl.in(), ro.view(), rlse.x.data(), ring);
  ring_attention_backward(comm, ql.in(), kl.in(), vl.in(), ro.in(), dol.in(), rlse.x.data(), rdq.view(), rdk.view(),
                          rdv.view(), ring);
  const std::pair<const char*, Error2> errors[] = {
      {"o", relative_error(ro, local_part(o, split, me))},   {"lse", relative_error(rlse, local_part(lse, split, me))},
      {"dq", relative_error(rdq, local_part(dq, split, me))}, {"dk", relative_error(rdk, local_part(dk, split, me))},
      {"dv", relative_error(rdv, local_part(dv, split, me))}};
  for (const auto& [name, e] : errors) {
    EXPECT_LE(e.l2, 1e-6) << name << " on rank " << me << " (norm-wise)";
    // Element by element, float32's rounding in two summation orders (the fused kernel's over all
    // keys, the ring's block by block) reaches about 1.5e-6 of the largest element at T = 301; a
    // wrong element or row would be far beyond this.
    EXPECT_LE(e.max, 4e-6) << name << " on rank " << me << " (element-wise, of the largest)";
    worst_l2 = std::max(worst_l2, e.l2);
    worst_max = std::max(worst_max, e.max);
  }
}

TEST(SequenceSplit, EveryPositionOnceInOrderAndZigzagBalanced) {
  for (SplitKind kind : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (int n : {1, 2, 3, 4, 7})
      for (int64_t T : {0, 1, 2, 5, 8, 13, 100}) {
        const SequenceSplit s(kind, T, n);
        std::vector<int> seen(static_cast<size_t>(T), 0);
        int64_t most = 0, least = T;
        for (int r = 0; r < n; ++r) {
          int64_t last = -1;
          for (const qkv::mpi::Run& run : s.runs(r)) {
            if (run.length == 0) continue;
            EXPECT_GT(run.begin, last) << "runs out of order, T=" << T << " n=" << n;
            last = run.begin + run.length - 1;
            for (int64_t p = run.begin; p < run.begin + run.length; ++p) ++seen[static_cast<size_t>(p)];
          }
          most = std::max(most, s.tokens(r));
          least = std::min(least, s.tokens(r));
        }
        for (int64_t p = 0; p < T; ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], 1) << "position " << p;
        EXPECT_LE(most - least, kind == SplitKind::kZigzag ? 2 : 1) << "T=" << T << " n=" << n;
      }
  // Zigzag pairs run r with run 2N - 1 - r: rank 0 holds the first and the last.
  const SequenceSplit z(SplitKind::kZigzag, 16, 4);
  EXPECT_EQ(z.runs(0)[0].begin, 0);
  EXPECT_EQ(z.runs(0)[1].begin, 14);
  EXPECT_EQ(z.runs(3)[0].begin, 6);
  EXPECT_EQ(z.runs(3)[1].begin, 8);
  std::string message;
  try {
    parse_split("striped");
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "split 'striped': expected contiguous or zigzag");
}

TEST(RingAttention, EqualsTheFusedKernel) {
  std::vector<Case> cases;
  for (SplitKind split : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (bool causal : {true, false})
      for (float p : {0.0f, 0.3f})
        for (int64_t T : {1, 2, 3, 5, 7, 10, 33, 67}) {
          Case c;
          c.T = T;
          c.split = split;
          c.causal = causal;
          c.dropout = p;
          cases.push_back(c);
        }
  for (const Case& c : cases) check_case(c);
}

// D = 64 (the kernel's unrolled path), one key/value head per block in flight (head groups, with
// the dropout mask keyed by the layer's head), longer sequences that span several kernel blocks.
TEST(RingAttention, HeadGroupsAndLongerSequencesEqualTheFusedKernel) {
  for (SplitKind split : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (bool causal : {true, false}) {
      Case c;
      c.B = 1;
      c.H = 6;
      c.G = 3;
      c.T = 301;
      c.D = 64;
      c.split = split;
      c.causal = causal;
      c.dropout = 0.2f;
      c.block_bytes = 1;  // one head per group
      check_case(c);
    }
}

TEST(RingAttention, RanksThatDisagreeAllThrowTheSameError) {
  const Communicator& comm = world();
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int last = comm.size() - 1;
  Array q(1, 2, 3, 4), k(1, 2, 3, 4), v(1, 2, 3, 4), o(1, 2, 3, 4), lse(1, 2, 3, 1);
  // Every rank holds 3 tokens of T = 3N (contiguous) - except the last, which says T = 3N + 1.
  RingAttentionOptions opt;
  opt.seq_len = 3 * comm.size() + (comm.rank() == last ? 1 : 0);
  std::string message;
  try {
    ring_attention_forward(comm, q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
  } catch (const AgreementError& e) {
    message = e.what();
  }
  const std::string n = std::to_string(comm.size());
  const std::string expected = "ring_attention_forward: rank " + std::to_string(last) + " of " + n +
                               " was started with a configuration different from rank 0's: rank 0 has {B=1 H=2 G=2 "
                               "D=4 Dv=4 T=" + std::to_string(3 * comm.size()) + " ";
  EXPECT_EQ(message.substr(0, expected.size()), expected);
  EXPECT_NE(message.find("T=" + std::to_string(3 * comm.size() + 1)), std::string::npos) << message;
  // One rank's shapes wrong: every rank throws, naming that rank and the shape.
  opt.seq_len = 3 * comm.size();
  Array q_short(1, 2, 2, 4);
  message.clear();
  try {
    ring_attention_forward(comm, comm.rank() == 1 ? q_short.in() : q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
  } catch (const AgreementError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "ring_attention_forward: rank 1 of " + n + ": q (1, 2, 2, 4) should be (1, 2, 3, 4) (rank 1 holds 3 of T = " +
                         std::to_string(3 * comm.size()) + ", split contiguous over " + n + " ranks)");
  // Options the ring cannot run: every rank says so.
  opt.attention.window = 4;
  message.clear();
  try {
    ring_attention_forward(comm, q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
  } catch (const AgreementError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "ring_attention_forward: rank 0 of " + n +
                         ": windows, ALiBi and softcapping are not supported by ring attention yet");
}

}  // namespace
}  // namespace qkv::mpi

int main(int argc, char** argv) {
  qkv::mpi::Session session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const qkv::mpi::Communicator& comm = qkv::mpi::world();
  if (comm.rank() != 0) GTEST_FLAG_SET(brief, true);  // the other ranks print their failures only
  const int failed = RUN_ALL_TESTS();
  if (comm.rank() == 0)
    std::cout << "rank 0's worst relative error: norm-wise " << qkv::mpi::worst_l2 << ", element-wise (of the largest) "
              << qkv::mpi::worst_max << "\n";
  // Every rank's verdict: the test fails if any rank's did (each rank's exit status also counts).
  int any = failed, all = 0;
  MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return all != 0 ? 1 : 0;
}
